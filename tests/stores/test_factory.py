"""Pins make_store: the configured backend is built, heavy clients only when chosen."""

from __future__ import annotations

from pathlib import Path

from handoffmon.config import StoreConfig
from handoffmon.stores import make_store
from handoffmon.stores.memory import MemoryStore
from handoffmon.stores.sqlite import SQLiteStore


def test_memory_is_the_default_with_configured_bounds() -> None:
    """The default backend is the memory store, with the configured cap and TTL."""
    config = StoreConfig(
        max_conversations=7, max_keys_per_conversation=9, max_keys=11, max_state_bytes=13, ttl_s=30
    )
    store = make_store(config)
    assert isinstance(store, MemoryStore) and store.max_state_bytes == 13
    assert (store.max_conversations, store.max_keys_per_conversation, store.max_keys, store.ttl_s) == (
        7,
        9,
        11,
        30,
    )


def test_sqlite_backend_uses_the_configured_path(tmp_path: Path) -> None:
    """backend sqlite opens (and creates) the configured file, in a directory that exists."""
    path = tmp_path / "h.db"
    store = make_store(StoreConfig(backend="sqlite", path=str(path), ttl_s=60))
    assert isinstance(store, SQLiteStore) and store.ttl_s == 60
    assert path.exists()
    store.close()
