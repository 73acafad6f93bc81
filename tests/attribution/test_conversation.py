"""Pins the derived conversation id's shape, unkeyed and keyed."""

from __future__ import annotations

import re

import pytest

from handoffmon.attribution import Attributor, derived_conversation_id
from handoffmon.attribution.conversation import PENDING_PREFIX
from handoffmon.stores.memory import MemoryStore
from tests.attribution.chat import Chat


def test_derived_id_shape() -> None:
    """Derived ids are `h-` plus the 16-hex-digit chained fingerprint."""
    assert derived_conversation_id(0xABC) == "h-0000000000000abc"


def _opened(attributor: Attributor) -> list[str]:
    """The ids of one conversation's turns: a short, guessable opening, then a second turn."""
    chat = Chat(attributor)
    chat.turn("hi", "Hello! How can I help you today?", "gpt-4o")
    ids = [c.conversation_id for c in chat.contexts] + [r.conversation_id for r in chat.recorded]
    ids.append(chat.ask("and then?").conversation_id)
    return ids


KEY = "k" * 16


def test_a_key_makes_derived_ids_unconfirmable_without_it_and_stable_with_it() -> None:
    """Unkeyed, a derived id is the public xxh3 chain of the opening (anyone can recompute it
    from a guess); with ``attribution.conversation_id_key`` it is BLAKE2b under the key: the same
    for every attributor holding the key (replicas, restarts), another without it, the same shape."""
    plain = _opened(Attributor(MemoryStore()))
    keyed = _opened(Attributor(MemoryStore(), conversation_id_key=KEY))
    again = _opened(Attributor(MemoryStore(), conversation_id_key=KEY))
    other = _opened(Attributor(MemoryStore(), conversation_id_key="x" * 16))
    assert plain[-1] == derived_conversation_id(int(plain[-1][2:], 16))  # the unkeyed chain itself
    assert keyed == again and keyed[-1] == keyed[-2]  # stable: the turn after reads it back
    assert keyed[0].startswith(PENDING_PREFIX) and not set(keyed) & set(plain)
    assert keyed[-1] != other[-1]
    assert re.fullmatch(r"h-[0-9a-f]{16}", keyed[-1])


def test_the_key_reaches_the_attributor_from_config() -> None:
    """``HANDOFFMON_ATTRIBUTION__CONVERSATION_ID_KEY`` / the config key keys the monitor's ids;
    a key shorter than 16 characters is refused, naming it."""
    from handoffmon.config import config_from_mapping
    from handoffmon.errors import ConfigError
    from handoffmon.testing import RecordingExporter
    from tests.pipeline.helpers import monitor, run_conversation

    ids = {}
    for key in (None, KEY):
        exp = RecordingExporter()
        cfg = config_from_mapping({"attribution": {"conversation_id_key": key}} if key else {})
        with monitor(cfg, exporters=[exp]) as m:
            run_conversation(m, ["a", "b"], user="hi")
            assert m.flush(10)
        ids[key] = {r.context.conversation_id for r in exp.results}
    assert len(ids[None]) == len(ids[KEY]) == 1 and ids[None] != ids[KEY]
    with pytest.raises(ConfigError, match="conversation_id_key"):
        config_from_mapping({"attribution": {"conversation_id_key": "short"}})
