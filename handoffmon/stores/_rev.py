"""The revision of a stored conversation state blob, read as the compare-and-set scripts do."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

_PREFIX = re.compile(rb'^\{"rev":(\d+)[,}]')


def stored_rev(raw: bytes | str | None) -> int:
    """The ``rev`` of a stored state blob: read from its start when it is the first key (as
    ``ConversationState.to_mapping`` writes it), else from the decoded mapping; 0 when the
    blob is missing, unreadable or has none (:func:`rev_of` the decoded mapping)."""
    if raw is None:
        return 0
    data = raw.encode() if isinstance(raw, str) else raw
    match = _PREFIX.match(data)
    if match is not None:
        return int(match.group(1))
    try:
        value = json.loads(data)
    except ValueError:
        return 0
    return rev_of(value)


def rev_of(data: object) -> int:
    """The revision of a state mapping: its ``rev`` when a non-negative int, else 0 (no
    mapping, or one written before revisions were kept); ``stores.redis.CAS_SCRIPT`` reads
    it the same way."""
    rev = data.get("rev") if isinstance(data, Mapping) else None
    return rev if type(rev) is int and rev >= 0 else 0
