"""A request's fallback list in litellm's two shapes: the groups to order, and the list rewritten.

litellm accepts ``fallbacks`` as a list of ``{group: [fallback groups]}`` entries (the
router's configured shape; a ``"*"`` key applies to every group) or, per request, as a
plain list of group names tried in order for whatever group was asked for. Both are
plain data, so this module needs no litellm: ``handoffmon serve`` uses it on the
forwarded body, the adapters of a running router on the per-request list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def is_plain(fallbacks: Any) -> bool:
    """A non-empty list of group names (litellm's client-side shape: tried in order for any group)."""
    return isinstance(fallbacks, list) and bool(fallbacks) and all(type(x) is str for x in fallbacks)


def entry_groups(fallbacks: Any, group: str) -> tuple[str, ...]:
    """The fallback groups for ``group`` in either shape: a plain list itself; else the group's
    own entry, else the ``"*"`` entry; ``()`` when there is none or the list is of another shape
    (parameter dicts), which the policy leaves alone.

    litellm also matches provider-prefixed and stripped names; adapters with litellm at
    hand use its lookup (``integrations.router_routing.fallback_groups``) instead.
    """
    if is_plain(fallbacks):
        return tuple(fallbacks)
    if not isinstance(fallbacks, Sequence) or isinstance(fallbacks, (str, bytes)):
        return ()
    generic: Any = None
    for entry in fallbacks:
        if not isinstance(entry, Mapping) or len(entry) != 1:
            return ()
        ((key, value),) = entry.items()
        if not isinstance(value, list):
            return ()
        if key == group:
            return tuple(g for g in value if type(g) is str)
        if key == "*" and generic is None:
            generic = value
    return tuple(g for g in generic or () if type(g) is str)


def reordered(fallbacks: Any, group: str, order: Sequence[str]) -> list[Any]:
    """``fallbacks`` with ``group``'s candidates in ``order`` (a new list; the input is not changed).

    A plain list becomes ``order``. Otherwise ``{group: order}`` goes first (litellm takes
    the first exact match) and the group's old entry is dropped, so every other group's
    fallbacks — and nested fallback hops — stay as they were. The entry dropped is the one litellm
    reads for the group: the first whose *first* key is the group (litellm reads only an entry's
    first key, so a dict naming the group as a later key — a YAML list item holding two groups —
    is another group's entry, kept; a later duplicate entry is kept too, as litellm's provider-
    prefixed and stripped-name matches of other groups take the last one).
    """
    if is_plain(fallbacks):
        return list(order)
    rest = list(fallbacks or ())
    own = next(
        (i for i, e in enumerate(rest) if isinstance(e, Mapping) and e and next(iter(e)) == group), None
    )
    if own is not None:
        del rest[own]
    return [{group: list(order)}, *rest]
