"""Attribution stores behind ``protocols.AttributionStore``: memory (default), SQLite, Redis; the guard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from handoffmon.config import StoreConfig
from handoffmon.protocols import AttributionStore
from handoffmon.stores.guard import GuardedStore

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.stores.memory import MemoryStore
    from handoffmon.stores.sqlite import SQLiteStore

__all__ = ["AttributionStore", "GuardedStore", "MemoryStore", "SQLiteStore", "make_store"]


def make_store(config: StoreConfig) -> AttributionStore:
    """Build the store ``config.backend`` names (heavy clients imported only when chosen).

    Raises:
        StoreError: the backend could not be opened.
    """
    if config.backend == "sqlite":
        from handoffmon.stores.sqlite import SQLiteStore

        return SQLiteStore(config.path, ttl_s=config.ttl_s)
    if config.backend == "redis":
        from handoffmon.stores.redis import RedisStore

        return RedisStore(config)
    from handoffmon.stores.memory import MemoryStore

    return MemoryStore(
        max_conversations=config.max_conversations,
        max_keys_per_conversation=config.max_keys_per_conversation,
        max_keys=config.max_keys,
        ttl_s=config.ttl_s,
        max_state_bytes=config.max_state_bytes,
    )


def __getattr__(name: str) -> object:
    if name == "MemoryStore":
        from handoffmon.stores.memory import MemoryStore

        return MemoryStore
    if name == "SQLiteStore":
        from handoffmon.stores.sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module 'handoffmon.stores' has no attribute {name!r}")
