"""Redis attribution store: O(1)-round-trip batches, an atomic merge script, key TTLs; failures
raised as ``StoreError``."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from handoffmon._extras import requires_extra
from handoffmon.config import StoreConfig
from handoffmon.errors import CorruptValue, StoreError, StoreTimeout
from handoffmon.protocols import Authorship, Merge, merge_authorship, merge_by_read_write
from handoffmon.stores._rev import stored_rev
from handoffmon.stores._text import is_utf8

with requires_extra("redis", "the Redis store"):
    import redis
    import redis.asyncio as aredis
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry

_FAILURES: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
T = TypeVar("T")

MERGE_SCRIPT = """
-- protocols.merge_authorship on the server, atomically, for every key of the batch.
-- ARGV[1]: TTL in ms; ARGV[2]: n, the number of attribution keys; KEYS[i] (i <= n): an
-- attribution key, ARGV[i + 2] its new value as encode_authorship writes it:
-- [authors, depth, created_at, conversation_id]. KEYS[n + 1], if given: a conversation's
-- state key, read after the merge. Returns {how many stored values were unreadable (each
-- overwritten with its new value), the state or false}.
local ttl = ARGV[1]
local n = tonumber(ARGV[2])
local corrupt = 0
local function num(x) return string.format('%.17g', x) end
local function strings(t)
  if type(t) ~= 'table' then return false end
  local count = 0
  for k, v in pairs(t) do
    if type(k) ~= 'number' or type(v) ~= 'string' then return false end
    count = count + 1
  end
  return count == #t
end
for i = 1, n do
  local key = KEYS[i]
  local raw = ARGV[i + 2]
  local out = raw
  local stored = redis.call('GET', key)
  if stored then
    local ok, old = pcall(cjson.decode, stored)
    if not ok or type(old) ~= 'table' or not strings(old[1])
        or type(old[2]) ~= 'number' or type(old[3]) ~= 'number' then
      corrupt = corrupt + 1
    else
      -- a new value cjson cannot read (a lone surrogate escape) is written as it is
      local ok_new, new = pcall(cjson.decode, raw)
      if ok_new then
        local a, b = old[1], new[1]
        local same = #a > 0 and #a == #b
        if same then
          for j = 1, #b do
            if a[j] ~= b[j] then same = false break end
          end
        end
        if not same then
          out = '[[],0,' .. num(new[3]) .. ',""]'
        else
          local oc, nc = old[4], new[4]
          if oc == nil then oc = '' end
          if nc == nil then nc = '' end
          local same_depth, same_conv = old[2] == new[2], oc == nc
          if not (same_depth and same_conv) then
            out = '[' .. cjson.encode(b) .. ',' .. (same_depth and num(new[2]) or '0') .. ','
              .. num(new[3]) .. ',' .. (same_conv and cjson.encode(nc) or '""') .. ']'
          end
        end
      end
    end
  end
  redis.call('SET', key, out, 'PX', ttl)
end
local state = false
if #KEYS > n then state = redis.call('GET', KEYS[n + 1]) end
return {corrupt, state}
"""
"""``merge_many`` with ``merge_authorship`` as one script call: one round trip instead of a read
and a write, and atomic, so replicas recording the same key at once cannot lose a collision.
``merge_many_get_state`` reads the conversation's state in the same call."""


CAS_SCRIPT = """
-- Compare-and-set of one conversation's state. KEYS[1]: the state key; ARGV[1]: TTL in ms;
-- ARGV[2]: the revision the writer folded from; ARGV[3]: the new state (its revision
-- ARGV[2] + 1). Writes only while the stored revision is ARGV[2] (a missing, unreadable or
-- revision-less state has revision 0). Returns 0 when written, else the stored state
-- ('' when missing) for the writer to fold again.
local stored = redis.call('GET', KEYS[1])
local rev = 0
if stored then
  local r = string.match(stored, '^{"rev":(%d+)[,}]')
  if r then
    rev = tonumber(r)
  else
    local ok, t = pcall(cjson.decode, stored)
    if ok and type(t) == 'table' then
      local v = t['rev']
      if type(v) == 'number' and v >= 0 and v == math.floor(v) then rev = v end
    end
  end
end
if rev ~= tonumber(ARGV[2]) then
  return stored or ''
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
return 0
"""
"""``put_states_if``: write a state only while the stored one has the revision it was folded
from (``stores._rev.rev_of`` reads it the same way; ``encode_state`` keeps ``rev``
first, so the script rarely decodes the whole blob)."""


def _json(value: object, default: Callable[[object], object] | None = None) -> str:
    """Compact JSON with non-ASCII text as UTF-8, not ``\\u`` escapes (a 4-byte character
    took 12 bytes); escaped when the text holds a lone surrogate, which is not UTF-8."""
    out = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)
    if not out.isascii():
        try:
            out.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(value, separators=(",", ":"), default=default)
    return out


def encode_authorship(value: Authorship) -> str:
    """Compact JSON ``[authors, depth, created_at, conversation_id]`` (an attribution key's value)."""
    return _json([list(value.authors), value.depth, value.created_at, value.conversation_id])


def decode_authorship(raw: bytes | str) -> Authorship:
    """Inverse of :func:`encode_authorship`.

    Raises:
        ValueError: the value is not one ``encode_authorship`` wrote.
    """
    try:
        authors, depth, created_at, *rest = json.loads(raw)
        conversation_id = str(rest[0]) if rest else ""
        if not isinstance(authors, list):
            raise ValueError("authors is not a list")
        return Authorship(tuple(str(a) for a in authors), int(depth), float(created_at), conversation_id)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an attribution value: {exc}") from exc


def decode_many(raws: Sequence[bytes | str | None]) -> list[Authorship | None]:
    """Decode an ``MGET`` answer.

    Raises:
        CorruptValue: some values are unreadable (``partial`` holds the rest, those as ``None``).
    """
    out: list[Authorship | None] = []
    bad = 0
    for raw in raws:
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(decode_authorship(raw))
        except ValueError:
            out.append(None)
            bad += 1
    if bad:
        raise CorruptValue(f"Redis store: {bad} unreadable attribution values", partial=out)
    return out


def encode_state(state: Mapping[str, object]) -> str:
    """A conversation's state as stored: compact JSON (``default=str`` for odd values)."""
    return _json(state, default=str)


def decode_state(raw: bytes | str | None) -> Mapping[str, object] | None:
    """A conversation's state blob, or ``None`` when missing.

    Raises:
        CorruptValue: the blob is not a JSON mapping.
    """
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise CorruptValue("Redis store: unreadable conversation state") from exc
    if not isinstance(value, dict):
        raise CorruptValue("Redis store: conversation state is not a mapping")
    return value


def translate(op: str, exc: BaseException) -> StoreError:
    """A redis-py failure as the ``StoreError`` the store guard counts (timeouts apart)."""
    message = f"Redis {op} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, (redis.TimeoutError, TimeoutError)):
        return StoreTimeout(message)
    return StoreError(message)


class _Keys:
    """Key layout shared by the sync and async stores: ``<prefix>a:<fingerprint key>``,
    ``<prefix>s:<conversation id>``, and ``<prefix>s#<BLAKE2b-128 hex>`` for a conversation
    id containing ``:`` or NUL, so no caller id makes a key name that reads as another kind
    of key or a longer prefix (``a:b:s:x``), and ids stored before keep their keys; also for
    an id holding a lone surrogate, which no key name can carry (redis-py raised
    ``UnicodeEncodeError``: every state call of such a conversation failed, three in a row
    paused the store for every conversation)."""

    def __init__(self, prefix: str, ttl_s: float) -> None:
        self.prefix = prefix
        self.ttl_ms = max(1, round(ttl_s * 1000))

    def attribution(self, fingerprint: str) -> str:
        return f"{self.prefix}a:{fingerprint}"

    def state(self, conversation_id: str) -> str:
        if ":" in conversation_id or "\x00" in conversation_id or not is_utf8(conversation_id):
            digest = hashlib.blake2b(conversation_id.encode("utf-8", "surrogatepass"), digest_size=16)
            return f"{self.prefix}s#{digest.hexdigest()}"
        return f"{self.prefix}s:{conversation_id}"


def _from_url(cls: Any, config: StoreConfig, retry: Any) -> Any:
    """A client with short timeouts and no silent retries (fail at once; the guard backs off);
    ``retry`` is the client's own ``Retry`` class (redis-py 8 warns on a sync one in asyncio)."""
    try:
        return cls.from_url(
            config.url,
            socket_timeout=config.timeout_s,
            socket_connect_timeout=config.timeout_s,
            retry=retry(NoBackoff(), 0),
            health_check_interval=0,
        )
    except ValueError as exc:
        raise StoreError(f"invalid Redis URL for store.url: {exc}") from exc


MGET_CHUNK = 5000
"""Keys per ``MGET``. A history of hundreds of thousands of messages (a 10 MiB body holds
~300,000) made one ``MGET`` that Redis answered only after ``store.timeout_s`` (200,000 keys:
0.59 s, a ``StoreTimeout`` that also failed every turn looked up in the same batch, while
Redis served no other client); even pipelined, the request alone outlasted the timeout to
send. Longer histories are looked up one ``MGET`` of this many keys after another (each
well inside the timeout); up to this many keys, one round trip as before."""


def _chunks(names: list[str]) -> list[list[str]]:
    return [names[i : i + MGET_CHUNK] for i in range(0, len(names), MGET_CHUNK)]


_OVERWRITTEN = "Redis store: unreadable attribution values overwritten"


def _script_input(
    keys: _Keys, items: Sequence[tuple[str, Authorship]], conversation_id: str | None
) -> tuple[list[str], list[str | int]]:
    """:data:`MERGE_SCRIPT`'s KEYS and ARGV for a batch (and a state key to read after it)."""
    names = [keys.attribution(k) for k, _ in items]
    if conversation_id is not None:
        names.append(keys.state(conversation_id))
    return names, [keys.ttl_ms, len(items), *[encode_authorship(v) for _, v in items]]


def _merged_state(bad: int, raw: bytes | None) -> Mapping[str, object] | None:
    """The state in a :data:`MERGE_SCRIPT` answer (``bad`` unreadable values overwritten).

    Raises:
        CorruptValue: the state is unreadable (``op="get_state"``, ``partial=None``), or
            ``bad`` > 0 (``partial`` = the state).
    """
    try:
        state = decode_state(raw)
    except CorruptValue as exc:
        raise CorruptValue(str(exc), partial=None, op="get_state") from exc
    if bad:
        raise CorruptValue(_OVERWRITTEN, partial=state)
    return state


class RedisStore:
    """Attribution store on Redis, shared by many replicas.

    Every batch is one round trip (``MGET`` or a non-transactional pipeline of
    ``SET … PX``). Keys expire ``ttl_s`` after their last write. When Redis is
    unreachable, slow (past ``store.timeout_s``) or answers with values it cannot decode,
    the store raises ``StoreError`` (``StoreTimeout``, ``CorruptValue``); the pipeline runs
    every store behind ``GuardedStore``, which counts, backs off and fails open.

    Args:
        config: the ``store`` section (``url``, ``ttl_s``, ``key_prefix``, ``timeout_s``).
        client: an existing ``redis.Redis`` to use instead of one built from ``url``.
    """

    def __init__(self, config: StoreConfig | None = None, *, client: redis.Redis | None = None) -> None:
        cfg = config or StoreConfig(backend="redis")
        self._keys = _Keys(cfg.key_prefix, cfg.ttl_s)
        self._client = client or _from_url(redis.Redis, cfg, Retry)
        self._merge = self._client.register_script(MERGE_SCRIPT)
        self._cas = self._client.register_script(CAS_SCRIPT)
        self.ping_error: str | None = None
        """Why the last :meth:`ping` failed (redis-py's message: refused connection, timeout,
        ``DB index is out of range``, a rejected password; never the URL), ``None`` after one
        that answered."""

    @staticmethod
    def _run(op: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except _FAILURES as exc:
            raise translate(op, exc) from exc

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up fingerprints in one ``MGET`` (one per :data:`MGET_CHUNK` keys of a longer
        history, one after the other: see there)."""
        if not keys:
            return []
        names = [self._keys.attribution(k) for k in keys]
        raw: list[Any] = []
        for chunk in _chunks(names):
            raw += self._run("get", partial(self._client.mget, chunk))
        return decode_many(raw)

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

    native_merge = True
    """``merge_many`` is this store's own (``GuardedStore`` calls it instead of a read and a write)."""

    native_merge_state = True
    """``merge_many_get_state`` is one call (``GuardedStore`` calls it instead of two)."""

    def merge_many(self, items: Sequence[tuple[str, Authorship]], merge: Merge) -> None:
        """Record ``merge(stored, new)`` per key, TTL refreshed: for the attributor's
        ``merge_authorship``, one atomic :data:`MERGE_SCRIPT` call (one round trip); for any
        other merge, ``get_many`` then ``put_many``.

        Raises:
            CorruptValue: some stored values were unreadable (overwritten with the new ones).
        """
        if not items:
            return
        if merge is not merge_authorship:
            merge_by_read_write(self, items, merge)
            return
        bad, _ = self._merge_script(items, None)
        if bad:
            raise CorruptValue(_OVERWRITTEN, partial=None)

    def merge_many_get_state(
        self, items: Sequence[tuple[str, Authorship]], merge: Merge, conversation_id: str
    ) -> Mapping[str, object] | None:
        """:meth:`merge_many`, then :meth:`get_state`: one script call (one round trip) for
        ``merge_authorship``, the state read right after the keys are written.

        Raises:
            CorruptValue: the state is unreadable (``op="get_state"``, ``partial=None``), or
                some stored attribution values were (``partial`` = the state).
        """
        if not items or merge is not merge_authorship:
            self.merge_many(items, merge)
            return self.get_state(conversation_id)
        return _merged_state(*self._merge_script(items, conversation_id))

    def _merge_script(
        self, items: Sequence[tuple[str, Authorship]], conversation_id: str | None
    ) -> tuple[int, bytes | None]:
        keys, args = _script_input(self._keys, items, conversation_id)
        bad, raw = self._run("merge", lambda: self._merge(keys=keys, args=args))
        return int(bad), raw

    native_batches = True
    """``merge_get_states`` and ``put_states`` are one round trip each (the check stage
    handles the turns queued at once as one batch)."""

    def merge_get_states(
        self, requests: Sequence[tuple[Sequence[tuple[str, Authorship]], str | None]], merge: Merge
    ) -> list[Mapping[str, object] | None]:
        """:meth:`merge_many_get_state` of many turns in one pipelined round trip, in order:
        per request, one :data:`MERGE_SCRIPT` call (its reply's keys merged, then its
        conversation's state read; ``None`` for a ``None`` id), or a ``GET`` of the state when
        it has no keys. Each script call is atomic on its own, not the batch.

        Raises:
            CorruptValue: some states were unreadable (``op="get_state"``; ``partial`` = the
                states, ``None`` for those), or some stored attribution values were
                (``partial`` = the states); counted once per batch.
        """
        if not requests:
            return []
        if merge is not merge_authorship:
            out: list[Mapping[str, object] | None] = []
            for items, conversation_id in requests:
                self.merge_many(items, merge)
                out.append(self.get_state(conversation_id) if conversation_id is not None else None)
            return out
        sha = self._merge.sha

        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for items, conversation_id in requests:
                if items:
                    keys, args = _script_input(self._keys, items, conversation_id)
                    pipe.evalsha(sha, len(keys), *keys, *args)
                elif conversation_id is not None:
                    pipe.get(self._keys.state(conversation_id))
                else:
                    pipe.echo(b"")  # keeps one answer per request
            answers: list[Any] = pipe.execute(raise_on_error=False)
            return answers

        def call() -> list[Any]:
            answers = run()
            if any(isinstance(a, redis.exceptions.NoScriptError) for a in answers):
                # Redis restarted or its script cache was flushed: load the script and run the
                # batch again (merging the same values twice is the same merge)
                self._client.script_load(MERGE_SCRIPT)
                answers = run()
            for a in answers:
                if isinstance(a, Exception):
                    raise a
            return answers

        answers = self._run("merge", call)
        states: list[Mapping[str, object] | None] = []
        bad = unreadable = 0
        for (items, conversation_id), answer in zip(requests, answers, strict=True):
            if items:
                corrupt, raw = answer
                bad += int(corrupt)
            else:
                raw = answer if conversation_id is not None else None
            try:
                states.append(decode_state(raw))
            except CorruptValue:
                unreadable += 1
                states.append(None)
        if unreadable:
            raise CorruptValue("Redis store: unreadable conversation state", partial=states, op="get_state")
        if bad:
            raise CorruptValue(_OVERWRITTEN, partial=states)
        return states

    def put_states(self, states: Sequence[tuple[str, Mapping[str, object]]]) -> None:
        """:meth:`put_state` of many conversations in one pipelined round trip."""
        if not states:
            return

        def call() -> None:
            pipe = self._client.pipeline(transaction=False)
            for conversation_id, state in states:
                pipe.set(self._keys.state(conversation_id), encode_state(state), px=self._keys.ttl_ms)
            pipe.execute()

        self._run("put_state", call)

    native_cas = True
    """``put_states_if`` writes states compare-and-set (the check stage folds again on conflict)."""

    def put_states_if(
        self, states: Sequence[tuple[str, Mapping[str, object], int]]
    ) -> dict[str, Mapping[str, object] | None]:
        """Write each ``(conversation_id, state, rev)`` only while the stored state still has
        revision ``rev`` (``state`` carries ``rev + 1``): one :data:`CAS_SCRIPT` call per
        state, all in one pipelined round trip, each atomic on its own.

        Returns:
            The conversations not written, with the state stored now (``None``: missing or
            unreadable) for the caller to fold its turns on again.
        """
        if not states:
            return {}
        ttl = self._keys.ttl_ms

        def run(indices: Sequence[int]) -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for i in indices:
                conversation_id, state, rev = states[i]
                pipe.evalsha(
                    self._cas.sha, 1, self._keys.state(conversation_id), ttl, rev, encode_state(state)
                )
            answers: list[Any] = pipe.execute(raise_on_error=False)
            return answers

        def call() -> list[Any]:
            if len(states) == 1:  # no pipeline (the script object loads itself when missing)
                conversation_id, state, rev = states[0]
                key = self._keys.state(conversation_id)
                return [self._cas(keys=[key], args=[ttl, rev, encode_state(state)])]
            answers = run(range(len(states)))
            missing = [i for i, a in enumerate(answers) if isinstance(a, redis.exceptions.NoScriptError)]
            if missing:
                # script cache flushed: load it and run again the calls it refused (only
                # those: a written state run again would report a conflict with itself)
                self._client.script_load(CAS_SCRIPT)
                for i, a in zip(missing, run(missing), strict=True):
                    answers[i] = a
            for a in answers:
                if isinstance(a, Exception):
                    raise a
            return answers

        conflicts: dict[str, Mapping[str, object] | None] = {}
        for (conversation_id, _, _), answer in zip(states, self._run("put_state", call), strict=True):
            if answer == 0:
                continue
            try:
                conflicts[conversation_id] = decode_state(answer or None)
            except CorruptValue:  # folded again on an empty state with the revision it has
                conflicts[conversation_id] = {"rev": stored_rev(answer)}
        return conflicts

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """A conversation's state, or ``None``."""
        return decode_state(
            self._run("get_state", lambda: self._client.get(self._keys.state(conversation_id)))
        )

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace a conversation's state (JSON), TTL refreshed."""
        payload = encode_state(state)
        key = self._keys.state(conversation_id)
        self._run("put_state", lambda: self._client.set(key, payload, px=self._keys.ttl_ms))

    def ping(self) -> bool:
        """Whether Redis answers now (for readiness probes); never raises. Why not is kept in
        :attr:`ping_error`."""
        try:
            ok = bool(self._client.ping())
        except _FAILURES as exc:
            self.ping_error = f"{type(exc).__name__}: {exc}"
            return False
        self.ping_error = None
        return ok

    def close(self) -> None:
        """Release the connection pool."""
        with contextlib.suppress(*_FAILURES):
            self._client.close()


class AsyncRedisStore:
    """The same store for asyncio code (``redis.asyncio``): same keys, same ``StoreError`` failures.

    Both stores read and write the same keys, so a sync and an async process can share
    attribution. Methods are coroutines. handoffmon's own pipeline uses ``RedisStore``.
    """

    def __init__(self, config: StoreConfig | None = None, *, client: aredis.Redis | None = None) -> None:
        cfg = config or StoreConfig(backend="redis")
        self._keys = _Keys(cfg.key_prefix, cfg.ttl_s)
        self._client = client or _from_url(aredis.Redis, cfg, AsyncRetry)
        self._merge = self._client.register_script(MERGE_SCRIPT)

    @staticmethod
    async def _run(op: str, call: Callable[[], Any]) -> Any:
        try:
            return await call()
        except _FAILURES as exc:
            raise translate(op, exc) from exc

    async def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """See :meth:`RedisStore.get_many`."""
        if not keys:
            return []
        names = [self._keys.attribution(k) for k in keys]
        raw: list[Any] = []
        for chunk in _chunks(names):
            raw += await self._run("get", partial(self._client.mget, chunk))
        return decode_many(raw)

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

    async def merge_many(self, items: Sequence[tuple[str, Authorship]], merge: Merge) -> None:
        """See :meth:`RedisStore.merge_many`: the same atomic script for ``merge_authorship``
        (a sync and an async writer of the same key cannot lose a collision), else a read
        and a write.

        Raises:
            CorruptValue: some stored values were unreadable (overwritten with the new ones).
        """
        if not items:
            return
        if merge is not merge_authorship:
            await self._merge_by_read_write(items, merge)
            return
        bad, _ = await self._merge_script(items, None)
        if bad:
            raise CorruptValue(_OVERWRITTEN, partial=None)

    async def merge_many_get_state(
        self, items: Sequence[tuple[str, Authorship]], merge: Merge, conversation_id: str
    ) -> Mapping[str, object] | None:
        """See :meth:`RedisStore.merge_many_get_state` (one round trip for ``merge_authorship``)."""
        if not items or merge is not merge_authorship:
            await self.merge_many(items, merge)
            return await self.get_state(conversation_id)
        return _merged_state(*await self._merge_script(items, conversation_id))

    async def _merge_script(
        self, items: Sequence[tuple[str, Authorship]], conversation_id: str | None
    ) -> tuple[int, bytes | None]:
        keys, args = _script_input(self._keys, items, conversation_id)
        bad, raw = await self._run("merge", lambda: self._merge(keys=keys, args=args))
        return int(bad), raw

    async def _merge_by_read_write(self, items: Sequence[tuple[str, Authorship]], merge: Merge) -> None:
        """``protocols.merge_by_read_write``, awaited: unreadable values are merged as absent,
        written, then reported (``CorruptValue``)."""
        try:
            existing = await self.get_many([k for k, _ in items])
            unreadable = None
        except CorruptValue as exc:  # the readable part, unreadable values as None
            existing, unreadable = exc.partial, exc  # type: ignore[assignment]
        await self.put_many([(k, merge(old, new)) for (k, new), old in zip(items, existing, strict=True)])
        if unreadable is not None:
            raise CorruptValue(f"{unreadable} (merged as absent and overwritten)", partial=None)

    async def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """See :meth:`RedisStore.get_state`."""
        raw = await self._run("get_state", lambda: self._client.get(self._keys.state(conversation_id)))
        return decode_state(raw)

    async def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """See :meth:`RedisStore.put_state`."""
        payload = encode_state(state)
        key = self._keys.state(conversation_id)
        await self._run("put_state", lambda: self._client.set(key, payload, px=self._keys.ttl_ms))

    async def ping(self) -> bool:
        """See :meth:`RedisStore.ping`; never raises."""
        try:
            return bool(await self._client.ping())
        except _FAILURES:
            return False

    async def close(self) -> None:
        """Release the connection pool."""
        with contextlib.suppress(*_FAILURES):
            await self._client.aclose()
