"""Redis attribution store: pipelined O(1)-round-trip batches, TTL on keys, fail-open with recovery."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handoffmon._extras import requires_extra
from handoffmon.config import StoreConfig
from handoffmon.errors import StoreError
from handoffmon.protocols import Authorship

with requires_extra("redis", "the Redis store"):
    import redis
    import redis.asyncio as aredis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

OPS = ("get", "put", "get_state", "put_state")
"""Operations whose failures are counted (``RedisStore.stats()`` keys ``<op>_errors``)."""

_FAILURES: tuple[type[BaseException], ...] = (redis.RedisError, OSError, ValueError)


def encode_authorship(value: Authorship) -> str:
    """Compact JSON ``[authors, depth, created_at, conversation_id]`` (an attribution key's value)."""
    fields = [list(value.authors), value.depth, value.created_at, value.conversation_id]
    return json.dumps(fields, separators=(",", ":"))


def decode_authorship(raw: bytes | str | None) -> Authorship | None:
    """Inverse of :func:`encode_authorship`; ``None`` for a missing or unreadable value."""
    if raw is None:
        return None
    try:
        authors, depth, created_at, *rest = json.loads(raw)
        conversation_id = str(rest[0]) if rest else ""
        return Authorship(tuple(str(a) for a in authors), int(depth), float(created_at), conversation_id)
    except (ValueError, TypeError):
        return None


def decode_state(raw: bytes | str | None) -> Mapping[str, object] | None:
    """A conversation's state blob, or ``None`` when missing or unreadable."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _Breaker:
    """After ``trip_after`` consecutive failures, skip Redis for ``retry_after_s``.

    One slow reply (a busy host) costs one lookup, not a second of attribution; a dead or
    hung Redis costs at most ``trip_after`` failed calls per pause. The first call after
    the pause probes Redis again; any success closes the breaker.
    """

    def __init__(self, retry_after_s: float, trip_after: int, clock: Callable[[], float]) -> None:
        self._retry_after_s = retry_after_s
        self._trip_after = max(1, trip_after)
        self._clock = clock
        self._open_until = 0.0
        self._failures = 0

    def allows(self) -> bool:
        return self._clock() >= self._open_until

    def trip(self) -> None:
        self._failures += 1
        if self._failures >= self._trip_after:
            self._failures = 0
            self._open_until = self._clock() + self._retry_after_s

    def reset(self) -> None:
        self._failures = 0
        self._open_until = 0.0


class _Stats:
    """Thread-safe failure counters, read by ``stats()`` (and the proxy's metrics)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {f"{op}_{kind}": 0 for op in OPS for kind in ("errors", "skipped")}

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class _Keys:
    """Key layout shared by the sync and async stores."""

    def __init__(self, prefix: str, ttl_s: float) -> None:
        self.prefix = prefix
        self.ttl_ms = max(1, round(ttl_s * 1000))

    def attribution(self, fingerprint: str) -> str:
        return f"{self.prefix}a:{fingerprint}"

    def state(self, conversation_id: str) -> str:
        return f"{self.prefix}s:{conversation_id}"


class _Guard:
    """Breaker plus counters: decides whether to call Redis and records the outcome."""

    def __init__(self, retry_after_s: float, trip_after: int, clock: Callable[[], float]) -> None:
        self.breaker = _Breaker(retry_after_s, trip_after, clock)
        self.stats = _Stats()

    def allows(self, op: str) -> bool:
        if self.breaker.allows():
            return True
        self.stats.add(f"{op}_skipped")
        return False

    def failed(self, op: str) -> None:
        self.breaker.trip()
        self.stats.add(f"{op}_errors")

    def succeeded(self) -> None:
        self.breaker.reset()


def _from_url(cls: Any, config: StoreConfig) -> Any:
    """A client with short timeouts and no silent retries (fail open at once instead)."""
    try:
        return cls.from_url(
            config.url,
            socket_timeout=config.timeout_s,
            socket_connect_timeout=config.timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
    except ValueError as exc:
        raise StoreError(f"invalid Redis URL for store.url: {exc}") from exc


class RedisStore:
    """Attribution store on Redis, shared by many ``handoffmon serve`` replicas.

    Every batch is one round trip (``MGET`` or a non-transactional pipeline of
    ``SET … PX``). Keys expire ``ttl_s`` after their last write. The store never raises
    on the request path: when Redis is unreachable or slow (past ``timeout_s``),
    ``get_many`` returns all-``None`` (the monitor then counts those messages as
    ``unknown``), writes are dropped, and every failure is counted in :meth:`stats`.
    After ``trip_after`` consecutive failures Redis is skipped for ``retry_after_s`` (also
    counted), then probed again, so attribution resumes by itself when Redis comes back.

    Args:
        config: the ``store`` section (``url``, ``ttl_s``, ``key_prefix``, ``timeout_s``).
        client: an existing ``redis.Redis`` to use instead of one built from ``url``.
        retry_after_s: how long to skip Redis once the breaker trips.
        trip_after: consecutive failures that trip the breaker.
        clock: monotonic time source (tests pass a fake).
    """

    def __init__(
        self,
        config: StoreConfig | None = None,
        *,
        client: redis.Redis | None = None,
        retry_after_s: float = 1.0,
        trip_after: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        cfg = config or StoreConfig(backend="redis")
        self._keys = _Keys(cfg.key_prefix, cfg.ttl_s)
        self._client = client or _from_url(redis.Redis, cfg)
        self._guard = _Guard(retry_after_s, trip_after, clock)

    def _run(self, op: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        if not self._guard.allows(op):
            return False, None
        try:
            result = call()
        except _FAILURES:
            self._guard.failed(op)
            return False, None
        self._guard.succeeded()
        return True, result

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up fingerprints in one ``MGET``; all ``None`` when Redis is unavailable."""
        if not keys:
            return []
        ok, raw = self._run("get", lambda: self._client.mget([self._keys.attribution(k) for k in keys]))
        if not ok:
            return [None] * len(keys)
        return [decode_authorship(r) for r in raw]

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Record fingerprints (overwriting, TTL refreshed) in one pipelined round trip."""
        if not items:
            return

        def call() -> None:
            pipe = self._client.pipeline(transaction=False)
            for key, value in items:
                pipe.set(self._keys.attribution(key), encode_authorship(value), px=self._keys.ttl_ms)
            pipe.execute()

        self._run("put", call)

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """A conversation's state, or ``None`` (also when Redis is unavailable)."""
        _, raw = self._run("get_state", lambda: self._client.get(self._keys.state(conversation_id)))
        return decode_state(raw)

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace a conversation's state (JSON), TTL refreshed; dropped when Redis is down."""
        payload = json.dumps(state, separators=(",", ":"), default=str)
        key = self._keys.state(conversation_id)
        self._run("put_state", lambda: self._client.set(key, payload, px=self._keys.ttl_ms))

    def stats(self) -> dict[str, int]:
        """Failure counters: ``<op>_errors`` (Redis failed) and ``<op>_skipped`` (breaker open)."""
        return self._guard.stats.snapshot()

    @property
    def available(self) -> bool:
        """False while the store is skipping Redis after a failure."""
        return self._guard.breaker.allows()

    def ping(self) -> bool:
        """Whether Redis answers now (for readiness probes); never raises."""
        try:
            return bool(self._client.ping())
        except _FAILURES:
            return False

    def close(self) -> None:
        """Release the connection pool."""
        with contextlib.suppress(*_FAILURES):
            self._client.close()


class AsyncRedisStore:
    """The same store for asyncio code (``redis.asyncio``): same keys, semantics and counters.

    Both stores read and write the same keys, so a sync and an async process can share
    attribution. Methods are coroutines; they never raise on Redis failures.
    """

    def __init__(
        self,
        config: StoreConfig | None = None,
        *,
        client: aredis.Redis | None = None,
        retry_after_s: float = 1.0,
        trip_after: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        cfg = config or StoreConfig(backend="redis")
        self._keys = _Keys(cfg.key_prefix, cfg.ttl_s)
        self._client = client or _from_url(aredis.Redis, cfg)
        self._guard = _Guard(retry_after_s, trip_after, clock)

    async def _run(self, op: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        if not self._guard.allows(op):
            return False, None
        try:
            result = await call()
        except _FAILURES:
            self._guard.failed(op)
            return False, None
        self._guard.succeeded()
        return True, result

    async def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """See :meth:`RedisStore.get_many`."""
        if not keys:
            return []
        ok, raw = await self._run("get", lambda: self._client.mget([self._keys.attribution(k) for k in keys]))
        if not ok:
            return [None] * len(keys)
        return [decode_authorship(r) for r in raw]

    async def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """See :meth:`RedisStore.put_many`."""
        if not items:
            return

        async def call() -> None:
            pipe = self._client.pipeline(transaction=False)
            for key, value in items:
                pipe.set(self._keys.attribution(key), encode_authorship(value), px=self._keys.ttl_ms)
            await pipe.execute()

        await self._run("put", call)

    async def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """See :meth:`RedisStore.get_state`."""
        _, raw = await self._run("get_state", lambda: self._client.get(self._keys.state(conversation_id)))
        return decode_state(raw)

    async def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """See :meth:`RedisStore.put_state`."""
        payload = json.dumps(state, separators=(",", ":"), default=str)
        key = self._keys.state(conversation_id)
        await self._run("put_state", lambda: self._client.set(key, payload, px=self._keys.ttl_ms))

    def stats(self) -> dict[str, int]:
        """See :meth:`RedisStore.stats`."""
        return self._guard.stats.snapshot()

    async def close(self) -> None:
        """Release the connection pool."""
        with contextlib.suppress(*_FAILURES):
            await self._client.aclose()
