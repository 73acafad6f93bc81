"""The Attributor: who wrote each earlier assistant message, the turn's depth, prefix and id."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from xxhash import xxh3_64_intdigest

from handoffmon.attribution.conversation import (
    PENDING_PREFIX,
    derived_conversation_id,
    pending_conversation_id,
)
from handoffmon.attribution.fingerprint import (
    ASSISTANT_SALT,
    CHAIN_SEED,
    DEFAULT_MIN_CONTENT_CHARS,
    RESPONSE_AUTHORS,
    UNCHAINED_ROLES,
    USER_SALT,
    PrefixCache,
    TextCache,
    chain_key,
    content_fingerprint,
    content_key,
    continuation_seed,
    conversation_head_key,
    conversation_seed,
    raw_digest,
    response_key,
    role_salt,
)
from handoffmon.attribution.fingerprint import ROLE_SALTS as _SALTS
from handoffmon.attribution.names import ModelNames
from handoffmon.attribution.normalize import text_only
from handoffmon.attribution.pending import PendingOverlay, merge_authorship
from handoffmon.errors import StoreError
from handoffmon.protocols import AttributionStore, Authorship, merge_by_read_write
from handoffmon.types import (
    NO_PREFIX,
    UNKNOWN_MODEL,
    AttributionMethod,
    Message,
    MessageAttribution,
    TurnContext,
)

OnError = Callable[[str, BaseException], None]
_UNKNOWN_AUTHORS = (UNKNOWN_MODEL,)
_MADE_MAX = 65_536
_DICT_ONLY = {dict}


@dataclass(frozen=True, slots=True)
class RecordedReply:
    """A reply's fingerprints, ready to persist (``Attributor.persist``).

    Attributes:
        conversation_id: the conversation's final id (a depth-1 derived id is fixed here,
            from the reply's chained fingerprint).
        fingerprint: chain key of the reply.
        items: store keys and values to persist (chain key, and content key if enabled).
        seq: overlay sequence number, so ``persist`` drops only its own overlay entries.
        head: the new head of the provider ``conversation`` object the reply continued.
    """

    conversation_id: str
    fingerprint: str
    items: tuple[tuple[str, Authorship], ...]
    seq: int = 0
    head: tuple[str, Authorship] | None = None
    """A provider conversation's new head: its key and value (``put_many``, overwritten; ADR 0011)."""
    chars: int = 0
    """The reply's normalized characters, counted as ``TurnContext.history_chars`` counts a
    message: the size a later call continuing this reply's stored response does not send."""


@dataclass(slots=True)
class _Scan:
    """One pass over the history (internal, mutable on purpose: built in the hot loop)."""

    fingerprint: int
    chars: int
    tail: int
    indices: list[int]  # of the assistant messages
    chains: list[int]  # their chained fingerprints
    contents: list[int]  # their content-only fingerprints
    prefill: bool = False
    """The last message is an assistant message marked ``prefix: true`` (a prefill the reply
    continues, as DeepSeek, Mistral and LiteLLM spell it): not an earlier turn."""


PREFILL_MAX_CHARS = 1024
"""A trailing assistant message longer than this is not taken for a prefill."""

PREFILL_MAX_KEPT = 1024
"""Prefills kept for their replies (cleared when full: a turn never recorded leaves one)."""


class _Prefill(NamedTuple):
    """A prefill (a history's trailing assistant message) and the chain before it."""

    text: str
    at: int
    """Its index in the history."""
    before: int
    """Chain fingerprint of the history before the prefill."""
    tail: int
    """Context digest of the message before the prefill (binds a short merged reply)."""
    marked: bool
    """Marked ``prefix: true``: left out of the context's attributions already."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A history scanned, and the store's answer for its keys, ahead of ``Attributor.attribute``
    (``Attributor.prepare``: one store call for a batch of histories)."""

    scan: _Scan
    found: Mapping[str, Authorship | None]
    """Store values of the keys asked for (``None``: not in the store)."""
    ok: bool
    """The store answered (else lookups fail open to the overlay, as when it fails alone)."""


class Attributor:
    """Attributes request histories and records replies (see docs/concepts/attribution.md).

    Args:
        store: where fingerprints live.
        names: canonical model names; ``record`` passes authors through them (names that
            are already canonical map to themselves unless the mapping says otherwise).
        content_fallback: also key replies by content, for when the chain breaks.
        clock: wall clock for ``Authorship.created_at``.
        pending_max: bound of the in-process overlay of not-yet-persisted replies.
        on_error: called with (stage, exception) when the store fails in ``attribute``
            or attribution fails as a whole; ``errors`` counts the same events.
        min_content_chars: shorter replies get a content key bound to the preceding message.
        text_cache_bytes: estimated memory bound of the folded-text cache and the cache of
            recent histories' scan states together (three quarters and one quarter).
        monotonic: clock for ``TurnContext.started_at``.
    """

    def __init__(
        self,
        store: AttributionStore,
        *,
        names: ModelNames | None = None,
        content_fallback: bool = True,
        clock: Callable[[], float] = time.time,
        pending_max: int = 100_000,
        on_error: OnError | None = None,
        min_content_chars: int = DEFAULT_MIN_CONTENT_CHARS,
        text_cache_bytes: int = 16_000_000,
        monotonic: Callable[[], float] = time.monotonic,
        conversation_id_key: str | None = None,
    ) -> None:
        self.store = store
        self._id_key = conversation_id_key.encode() if conversation_id_key else None
        """Key of derived conversation ids (``attribution.conversation_id_key``)."""
        self.names = names if names is not None else ModelNames()
        self.content_fallback = content_fallback
        self.min_content_chars = min_content_chars
        self.errors = 0
        self._clock = clock
        self._monotonic = monotonic
        self._on_error = on_error
        self._pending = PendingOverlay(pending_max)
        self._texts = TextCache(text_cache_bytes - text_cache_bytes // 4)
        # Interned MessageAttribution records: constructing a frozen dataclass costs ~0.5 µs,
        # and every request re-attributes the same prefix. Values are immutable, so sharing is safe.
        self._made: dict[tuple[object, ...], MessageAttribution] = {}
        # Chain fingerprints of replies recorded here after a fully chained history: a
        # request ending in one of them needs only chain keys (see _lookup).
        self._verified: dict[int, None] = {}
        self._verified_max = pending_max
        # Scan states of recent histories of {role, content: str} dicts: the next turn of
        # a conversation resumes from its predecessor's instead of re-reading the history.
        self._prefixes = PrefixCache(text_cache_bytes // 4)
        # Heads of provider conversation objects recorded here and not yet persisted, by state
        # id (bounded, oldest dropped): the next call finds one before it is in the store.
        self._heads: dict[str, Authorship] = {}
        self._heads_lock = threading.Lock()
        # Histories ending in a short assistant message no key attributes (a prefill: the reply
        # continues it), by history fingerprint: record() also keys prefill + reply (_Prefill).
        self._prefills: dict[int, _Prefill] = {}

    # -- hot path ---------------------------------------------------------------------

    def attribute(
        self,
        messages: Sequence[Any],
        *,
        conversation_id: str | None = None,
        requested_model: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        started_at: float | None = None,
        prepared: Prepared | None = None,
        previous_response_id: str | None = None,
        provider_conversation: str | None = None,
    ) -> TurnContext:
        """Attribute every assistant message of a request history. Never raises.

        O(history) hashing and one ``store.get_many``. If the store fails, messages are
        ``unknown`` (except replies still pending in this process); if anything else
        fails, the context is ``degraded``. Both are reported through ``on_error``.

        Args:
            messages: the request's messages (dicts or OpenAI/LiteLLM objects).
            conversation_id: the caller's id (``ingress.caller_conversation_id``), if any.
            requested_model: the model or group the application asked for.
            metadata: request metadata, carried on the context.
            started_at: monotonic time the call started (default: now); set when the
                history is attributed after the call, in the background.
            prepared: ``messages`` as :meth:`prepare` scanned and looked them up.
            previous_response_id: the stored response a Responses API call continues: its
                history is the provider's, and ``messages`` only the new input (ADR 0011).
                The hidden messages are attributed from the response's key (``response_id``;
                one ``unknown`` message when it is not known here), and ``messages`` chain
                from a seed of their own (``prepared`` is ignored).
            provider_conversation: the provider ``conversation`` object a Responses API call
                continues: as ``previous_response_id``, from the conversation's head (none
                yet: the call opens it); the caller's id, else the conversation's, names it.
        """
        started = self._monotonic() if started_at is None else started_at
        meta: Mapping[str, object] = dict(metadata) if metadata else {}  # the app may mutate its dict
        try:
            if previous_response_id is not None:
                return self._continued(
                    messages, previous_response_id, conversation_id, requested_model, meta, started
                )
            if provider_conversation is not None:
                return self._in_conversation(
                    messages, provider_conversation, conversation_id, requested_model, meta, started
                )
            scan = self._scan(messages) if prepared is None else prepared.scan
            found = self._lookup(scan, prepared)
            return self._context(scan, found, conversation_id, requested_model, meta, started)
        except Exception as exc:
            self._fail("attribution", exc)
            return degraded_context(
                messages,
                conversation_id=conversation_id,
                requested_model=requested_model,
                metadata=meta,
                started_at=started,
            )

    def _scan(self, messages: Sequence[Any], seed: int = CHAIN_SEED) -> _Scan:
        # The hot loop. {role, content: str} dicts take the inlined path: a cached text
        # digest and one xxh3 call; any other shape goes through raw_digest. A history that
        # extends a recent one by two messages, or repeats it, resumes from its state (_resume).
        # Another seed (a continued response's input) neither resumes nor is remembered.
        resumed = self._resume(messages) if type(messages) is list and seed == CHAIN_SEED else None
        if resumed is None:
            start, h, chars, held, prev_role, prev_bytes = 0, seed, 0, 0, None, b""
            indices: list[int] = []
            chains: list[int] = []
            contents: list[int] = []
            # copied only when the cache could keep it: every message costs at least its overhead
            keepable = seed == CHAIN_SEED and self._prefixes.could_keep(len(messages))
            snapshot: list[dict[str, str]] | None = [] if keepable else None
        else:
            start, h, chars, held, prev_role, prev_bytes, indices, chains, contents, snapshot = resumed
        min_chars = self.min_content_chars
        text = self._texts.text
        cached = self._texts.entries.get
        add_index, add_chain, add_content = indices.append, chains.append, contents.append
        role: Any
        for i, raw in enumerate(messages[start:] if start else messages, start):
            if (
                type(raw) is dict
                and len(raw) == 2
                and type(content := raw.get("content")) is str
                and type(role := raw.get("role")) is str  # a list/dict role: raw_digest's str()
                and role
            ):
                d, n, b = cached(content) or text(content)
                if snapshot is not None:  # copied: the client may change its dict later
                    snapshot.append({"role": role, "content": content})
                    held += len(content)
            else:
                role, d, n = raw_digest(raw, self._texts)
                b = d.to_bytes(8, "little")
                snapshot = None
            chars += n
            if role == "assistant":
                h = xxh3_64_intdigest(b, h ^ ASSISTANT_SALT)
                add_index(i)
                add_chain(h)
                if n >= min_chars:
                    add_content(d)
                else:  # = content_fingerprint(d, n, context_digest(prev_role, prev_digest), min_chars)
                    ctx = xxh3_64_intdigest(prev_bytes, _salt_of(prev_role)) if prev_role is not None else 0
                    add_content(xxh3_64_intdigest(b, ctx))
            elif role == "user":
                h = xxh3_64_intdigest(b, h ^ USER_SALT)
            elif role in UNCHAINED_ROLES:
                continue
            else:
                h = xxh3_64_intdigest(b, h ^ role_salt(role))
            prev_role, prev_bytes = role, b
        if snapshot:
            state = (h, chars, held, prev_role, prev_bytes, indices, chains, contents)
            self._prefixes.remember(snapshot, held, state)
        tail = xxh3_64_intdigest(prev_bytes, _salt_of(prev_role)) if prev_role is not None else 0
        prefill = prev_role == "assistant" and self._note_prefill(messages, indices, chains, seed, h)
        return _Scan(h, chars, tail, indices, chains, contents, prefill)

    def _note_prefill(
        self, messages: Sequence[Any], indices: list[int], chains: list[int], seed: int, h: int
    ) -> bool:
        """Keep what :meth:`record` needs to key a prefill and its reply as one message.

        A history ending in an assistant message asks the model to continue it (Anthropic's
        prefill, ``prefix: true`` elsewhere), and the application then sends the two back as
        one message. Kept: the prefill (a text of at most ``PREFILL_MAX_CHARS``), its index,
        and the chain and context digest of the history before it, re-chained from the
        previous assistant message (the hot loop keeps neither). Returns whether the message
        is marked ``prefix: true``."""
        last = messages[indices[-1]]
        text = last.get("content") if isinstance(last, Mapping) else None
        marked = isinstance(last, Mapping) and last.get("prefix") is True
        if type(text) is not str or len(text) > PREFILL_MAX_CHARS:
            return marked
        if len(indices) > 1:
            before, start = chains[-2], indices[-2] + 1
            prev_role, prev_bytes = (
                "assistant",
                raw_digest(messages[indices[-2]], self._texts)[1].to_bytes(8, "little"),
            )
        else:
            before, start, prev_role, prev_bytes = seed, 0, None, b""
        for raw in messages[start : indices[-1]]:
            role, d, _ = raw_digest(raw, self._texts)
            if role in UNCHAINED_ROLES:
                continue
            prev_role, prev_bytes = role, d.to_bytes(8, "little")
            before = xxh3_64_intdigest(prev_bytes, before ^ role_salt(role))
        tail = xxh3_64_intdigest(prev_bytes, _salt_of(prev_role)) if prev_role is not None else 0
        if len(self._prefills) >= PREFILL_MAX_KEPT:
            self._prefills.clear()
        self._prefills[h] = _Prefill(text, indices[-1], before, tail, marked)
        return marked

    def _resume(self, messages: list[Any]) -> tuple[Any, ...] | None:
        """The scan state of ``messages[:-2]`` (the next turn: reply and new message) or of
        ``messages`` (the same history again: a retry) when a recent history was exactly
        that (compared in full, by value: a client may edit its history), else ``None``."""
        n = len(messages)
        for k in (n - 2, n):
            if k < 1:
                continue
            last = messages[k - 1]
            if type(last) is not dict or type(content := last.get("content")) is not str:
                continue
            hit = self._prefixes.take(content, k)
            if hit is None:
                continue
            snapshot, (h, chars, held, prev_role, prev_bytes, indices, chains, contents) = hit
            prefix = messages[:k]
            # plain dicts only: an equal object of another type could be read differently
            if prefix != snapshot or set(map(type, prefix)) != _DICT_ONLY:
                return None
            # the lists are copied: the remembered ones are shared with an earlier _Scan
            return k, h, chars, held, prev_role, prev_bytes, [*indices], [*chains], [*contents], snapshot
        return None

    def prepare(self, histories: Sequence[Sequence[Any] | None]) -> list[Prepared | None]:
        """Scan histories and look up every key their attribution can ask for (chain and
        content keys), all in one store call, for :meth:`attribute` to take in order.

        For a store that costs a round trip per call (Redis): a batch of queued turns is one
        round trip instead of one per turn. Each turn is still attributed after the previous
        one's reply was recorded: the overlay of recorded replies is read first at
        :meth:`attribute` time, and a key not asked for here (a cleared ``_verified``) costs
        its own call. Never raises: a history that cannot be scanned (or is ``None``) gets
        ``None``, and :meth:`attribute` then works on it alone; a store failure is counted
        once for the batch, and its turns fail open to the overlay.
        """
        scans: list[_Scan | None] = []
        wanted: dict[str, None] = {}
        for messages in histories:
            scan = None
            if messages is not None:
                with contextlib.suppress(Exception):  # attribute() meets it again and reports it
                    scan = self._scan(messages)
            scans.append(scan)
            if scan is not None and scan.chains:
                for h in scan.chains:
                    wanted["c:" + hex(h)] = None
                if self.content_fallback:
                    for c in scan.contents:
                        wanted["k:" + hex(c)] = None
        keys = list(wanted)
        found: Mapping[str, Authorship | None] = {}
        ok = True
        if keys:
            try:
                found = dict(zip(keys, self.store.get_many(keys), strict=True))
            except StoreError:  # counted by the store guard
                ok = False
            except Exception as exc:  # a store that does not translate its errors
                self._fail("attribution", exc)
                ok = False
        return [Prepared(scan, found, ok) if scan is not None else None for scan in scans]

    def _lookup(self, scan: _Scan, prepared: Prepared | None = None) -> list[Authorship | None]:
        """Authorships of the chain keys, then of the content keys, of every assistant message.

        One store call. When the last assistant message is a reply this process recorded
        after a fully chain-attributed history (``_verified``), its whole prefix is known
        to chain, so only chain keys are asked for; a chain key that misses anyway
        (expired, evicted, collided) costs a second call for its content key.
        """
        chains = scan.chains
        if not chains:
            return []
        keys = ["c:" + hex(h) for h in chains]  # = chain_key(h), inlined for speed
        if not self.content_fallback:
            return self._fetch(keys, prepared)[0]
        n = len(keys)
        if chains[-1] not in self._verified:
            keys += ["k:" + hex(c) for c in scan.contents]  # = content_key(c)
            return self._fetch(keys, prepared)[0]
        found, ok = self._fetch(keys, prepared)
        found += [None] * n
        missing = [j for j in range(n) if found[j] is None or not found[j].authors]  # type: ignore[union-attr]
        if missing and ok:
            extra = self._fetch(["k:" + hex(scan.contents[j]) for j in missing], prepared)[0]
            for j, auth in zip(missing, extra, strict=True):
                found[n + j] = auth
        return found

    def lookup(self, keys: list[str]) -> list[Authorship | None]:
        """Authorships of store keys: replies pending in this process first, then one store
        call; ``None`` where unknown or when the store fails (fail-open, counted by its guard).

        For request-time readers (the routing policy's prefix lookup); thread-safe.
        """
        return self._fetch(keys)[0]

    def stored_history(self, previous: str | None, conversation: str | None) -> Authorship | None:
        """What is recorded of a history the provider keeps: the stored response ``previous``
        (its key) or, without one, the head of provider ``conversation``; ``None`` when
        unknown here. ``authors`` lists its assistant messages' authors, oldest first (the last
        ``RESPONSE_AUTHORS``), ``depth`` its length. For request-time readers (routing), like
        :meth:`lookup`; thread-safe."""
        if previous is not None:
            head = self._fetch([response_key(previous)])[0][0]
        elif conversation is not None:
            head = self._conversation_head(conversation)
        else:
            return None
        return head if head is not None and head.authors else None  # no authors: a collision marker

    def _fetch(
        self, keys: list[str], prepared: Prepared | None = None
    ) -> tuple[list[Authorship | None], bool]:
        """Overlay first, then one ``get_many`` for the rest; (values, store answered)."""
        if prepared is not None:
            return self._fetch_prepared(keys, prepared)
        pending = self._pending
        if not len(pending):
            return self._get_many(keys, [None] * len(keys), keys)
        found = pending.get_many(keys)
        missing = [k for k, v in zip(keys, found, strict=True) if v is None]
        return self._get_many(missing, found, keys) if missing else (found, True)

    def _fetch_prepared(self, keys: list[str], prepared: Prepared) -> tuple[list[Authorship | None], bool]:
        """:meth:`_fetch` with the store's answers from :meth:`prepare`: overlay first, then
        those answers, then one ``get_many`` for keys it did not ask for."""
        pending = self._pending
        found: list[Authorship | None] = pending.get_many(keys) if len(pending) else [None] * len(keys)
        if not prepared.ok:
            return found, False
        got = prepared.found
        missing = []
        for i, key in enumerate(keys):
            if found[i] is None:
                if key in got:
                    found[i] = got[key]
                else:
                    missing.append(key)
        if not missing:
            return found, True
        extra, ok = self._get_many(missing, [None] * len(missing), missing)
        fill = dict(zip(missing, extra, strict=True))
        return [fill.get(k, v) for k, v in zip(keys, found, strict=True)], ok

    def _get_many(
        self, missing: list[str], found: list[Authorship | None], keys: list[str]
    ) -> tuple[list[Authorship | None], bool]:
        try:
            got = self.store.get_many(missing)
        except StoreError:  # counted by the store guard: fail open to what the overlay knows
            return found, False
        except Exception as exc:  # a store that does not translate its errors
            self._fail("attribution", exc)
            return found, False
        if len(missing) == len(keys):
            return list(got), True
        it = iter(got)
        return [v if v is not None else next(it) for v in found], True

    def _continued(
        self,
        messages: Sequence[Any],
        previous: str,
        conversation_id: str | None,
        requested_model: str | None,
        metadata: Mapping[str, object],
        started: float,
    ) -> TurnContext:
        """The context of a call continuing stored response ``previous``: the hidden history
        from the response's key (one store call, the overlay first), then the new input."""
        seed = continuation_seed(previous)
        scan = self._scan(messages, seed)
        found = self._lookup(scan)
        head = self.stored_history(previous, None)
        hidden = self._hidden(head)
        if not conversation_id and head is None:  # one id for the rest of an unknown chain
            conversation_id, source = derived_conversation_id(seed, self._id_key), "derived"
        else:
            source = None
        ctx = self._context(scan, found, conversation_id, requested_model, metadata, started, (hidden, head))
        if source is not None:
            object.__setattr__(ctx, "conversation_id_source", source)
        return ctx

    def _in_conversation(
        self,
        messages: Sequence[Any],
        conversation: str,
        conversation_id: str | None,
        requested_model: str | None,
        metadata: Mapping[str, object],
        started: float,
    ) -> TurnContext:
        """The context of a call continuing provider conversation ``conversation``: the hidden
        history from its head (no head: the call opens it), then the new input."""
        head = self._conversation_head(conversation)
        scan = self._scan(messages, conversation_seed(conversation, head.depth if head is not None else 0))
        found = self._lookup(scan)
        hidden = None if head is None else (self._hidden(head), head)
        return self._context(
            scan, found, conversation_id or conversation, requested_model, metadata, started, hidden
        )

    def _conversation_head(self, conversation: str) -> Authorship | None:
        """The head of a provider conversation: the store's (another replica may have moved
        it on), or the one recorded here when that is deeper (not persisted yet)."""
        key = conversation_head_key(conversation)
        local = self._heads.get(key)
        stored: Authorship | None = None
        try:
            stored = _head_of(self.store.get_many([key])[0])
        except StoreError:  # counted by the store guard: fail open to what this process knows
            pass
        except Exception as exc:
            self._fail("attribution", exc)
        if stored is None or (local is not None and local.depth > stored.depth):
            return local
        return stored

    def _hidden(self, head: Authorship | None) -> list[MessageAttribution]:
        """The attributions of a continued response's history, oldest first (index -1: the
        response): one per author its key lists, or one ``unknown`` message when the key is
        not known here (the depth is then a lower bound)."""
        if head is None:
            return [_attribution(-1, "unknown", None)]
        names, depth, made = head.authors, head.depth, self._made
        n = len(names)
        out = []
        for j, name in enumerate(names):
            behind = n - 1 - j
            at = depth - behind if depth > behind else 0
            key = (j - n, "response_id" if name != UNKNOWN_MODEL else "unknown", name, at)
            attribution = made.get(key)
            if attribution is None:
                if name == UNKNOWN_MODEL:
                    attribution = MessageAttribution(
                        j - n, UNKNOWN_MODEL, _UNKNOWN_AUTHORS, at or None, "unknown"
                    )
                else:
                    attribution = MessageAttribution(j - n, name, (name,), at or None, "response_id")
                if len(made) >= _MADE_MAX:
                    made.clear()
                made[key] = attribution
            out.append(attribution)
        return out

    def _context(
        self,
        scan: _Scan,
        found: list[Authorship | None],
        conversation_id: str | None,
        requested_model: str | None,
        metadata: Mapping[str, object],
        started: float,
        hidden: tuple[list[MessageAttribution], Authorship | None] | None = None,
    ) -> TurnContext:
        attributions, stored = self._attributions(scan, found)
        if scan.prefill:  # the reply continues it: no earlier turn
            attributions, stored = attributions[:-1], stored[:-1]
        if hidden is not None:  # a continued response's history comes first
            attributions = hidden[0] + attributions
            stored = [hidden[1], *stored]
        n = len(attributions)
        if n:
            prefix = attributions[-1].author
            purity = [a.author for a in attributions].count(prefix) / n
            known = {x for a in stored if a is not None for x in a.authors}
            known.discard(UNKNOWN_MODEL)
        else:
            prefix, purity, known = NO_PREFIX, 1.0, set()
        if conversation_id:
            cid, source = conversation_id, "caller"
        else:
            cid, source = self._derived_id(scan, stored), "derived"
        return TurnContext(
            conversation_id=cid,
            conversation_id_source=source,  # type: ignore[arg-type]
            depth=_depth(attributions),
            history_chars=scan.chars,
            history_tokens=(scan.chars + 3) // 4,
            prefix_model=prefix,
            prefix_purity=purity,
            prefix_authors=len(known),
            attributions=tuple(attributions),
            history_fingerprint=scan.fingerprint,
            requested_model=requested_model,
            metadata=metadata,
            started_at=started,
            tail_fingerprint=scan.tail,
        )

    def _attributions(
        self, scan: _Scan, found: list[Authorship | None]
    ) -> tuple[list[MessageAttribution], list[Authorship | None]]:
        n = len(scan.indices)
        fallback = found[n:] if self.content_fallback else [None] * n
        out: list[MessageAttribution] = []
        stored: list[Authorship | None] = []
        made = self._made
        for index, auth, other in zip(scan.indices, found, fallback, strict=False):
            method: AttributionMethod = "chain"
            if auth is None or not auth.authors:
                auth, method = other, "content"
                if auth is None or not auth.authors:
                    auth, method = None, "unknown"
            stored.append(auth)
            key = (index, method, auth.authors, auth.depth) if auth is not None else (index,)
            attribution = made.get(key)
            if attribution is None:
                attribution = _attribution(index, method, auth)
                if len(made) >= _MADE_MAX:
                    made.clear()
                made[key] = attribution
            out.append(attribution)
        return out, stored

    def _derived_id(self, scan: _Scan, stored: list[Authorship | None]) -> str:
        """Stored id of the earliest attributed message, else from the first assistant's chain."""
        for auth in stored:
            if auth is not None and auth.conversation_id:
                return auth.conversation_id
        if scan.chains:
            return derived_conversation_id(scan.chains[0], self._id_key)
        return pending_conversation_id(scan.fingerprint, self._id_key)

    # -- after the reply ----------------------------------------------------------------

    def record(
        self,
        ctx: TurnContext,
        reply: Message | Mapping[str, Any] | str,
        authors: Sequence[str],
        response_id: str | None = None,
        conversation: str | None = None,
        alternatives: Sequence[Message | Mapping[str, Any]] = (),
    ) -> RecordedReply:
        """Fingerprint a reply and make it attributable at once in this process.

        Cheap (two hashes and a dict insert). ``authors`` in order (two for a mid-stream
        fallback), canonical or raw (they go through ``names``). Nothing is recorded for a
        degraded context or when every author is ``unknown``. ``response_id``: the id of a
        Responses API response the provider stores; the reply is also recorded under it, with
        the authors of its history (``response_key``), so a call continuing it is attributed.
        ``conversation``: the provider conversation object the call continued; the reply is
        its new head (``RecordedReply.head``). ``alternatives``: the other choices of an
        ``n > 1`` completion, recorded with the same authorship, so the next turn is attributed
        whichever choice the application kept. A reply of several parts is also recorded as its
        text alone, concatenated (``normalize.text_only``): what an application sends back
        when it keeps the SDK's ``output_text`` or joins the text blocks.

        Returns:
            What ``persist`` writes, and the conversation's final id.
        """
        if (
            type(reply) is dict
            and len(reply) == 2
            and type(content := reply.get("content")) is str
            and "role" in reply
        ):  # {role, content: str}: raw_digest's result, through the text cache directly
            d, n, b = self._texts.entries.get(content) or self._texts.text(content)
        else:
            d, n = raw_digest(_as_reply(reply), self._texts)[1:]
            b = d.to_bytes(8, "little")
        h = xxh3_64_intdigest(b, seed=ctx.history_fingerprint ^ ASSISTANT_SALT)
        cid = ctx.conversation_id
        if ctx.conversation_id_source == "derived" and cid.startswith(PENDING_PREFIX):
            cid = derived_conversation_id(h, self._id_key)
        canon = self.names.canonical_all(authors)
        if ctx.degraded or canon.count(UNKNOWN_MODEL) == len(canon):
            return RecordedReply(cid, chain_key(h), (), chars=n)
        auth = Authorship(canon, ctx.depth, self._clock(), cid)
        items = [(chain_key(h), auth)]
        if self.content_fallback:
            fp = content_fingerprint(d, n, ctx.tail_fingerprint, self.min_content_chars)
            items.append((content_key(fp), auth))
        joined = text_only(reply)
        if joined is not None:
            alternatives = (*alternatives, joined)
        for alternative in alternatives:
            da, na = raw_digest(_as_reply(alternative), self._texts)[1:]
            if da == d:  # the same message as the first choice: already recorded
                continue
            ha = xxh3_64_intdigest(da.to_bytes(8, "little"), seed=ctx.history_fingerprint ^ ASSISTANT_SALT)
            items.append((chain_key(ha), auth))
            if self.content_fallback:
                fa = content_fingerprint(da, na, ctx.tail_fingerprint, self.min_content_chars)
                items.append((content_key(fa), auth))
        prefill = self._prefills.pop(ctx.history_fingerprint, None) if self._prefills else None
        if prefill is not None:
            items += self._with_prefill(prefill, ctx, reply, auth)
        head = None
        if response_id or conversation:
            earlier = ctx.attributions[max(0, len(ctx.attributions) - RESPONSE_AUTHORS + 1) :]
            history = Authorship((*[a.author for a in earlier], canon[-1]), ctx.depth, auth.created_at, cid)
            if response_id:
                items.append((response_key(response_id), history))
            if conversation:
                head = (conversation_head_key(conversation), history)
                self._remember_head(head[0], history)
        seq = self._pending.add(items)
        for a in ctx.attributions:
            if a.method != "chain":
                break
        else:
            self._verify(h)
        return RecordedReply(cid, items[0][0], tuple(items), seq, head, n)

    def _with_prefill(
        self, prefill: _Prefill, ctx: TurnContext, reply: Any, auth: Authorship
    ) -> list[tuple[str, Authorship]]:
        """The keys of a prefill and its reply sent back as one message (see
        :meth:`_note_prefill`): chained from the history before the prefill, one turn less
        deep than the context when that counted the prefill as an earlier turn. Only for a
        prefill marked ``prefix: true`` or one no key attributed (a model's earlier message is a
        turn, not a prefill), and a reply of text alone."""
        last = ctx.attributions[-1] if ctx.attributions else None
        unmarked = not prefill.marked
        if unmarked and (last is None or last.index != prefill.at or last.method != "unknown"):
            return []
        text = reply if isinstance(reply, str) else reply.get("content") if type(reply) is dict else None
        if type(text) is not str or (type(reply) is dict and reply.get("tool_calls")):
            return []
        d, n, b = self._texts.text(prefill.text + text)
        depth = max(ctx.depth - unmarked, 1)  # an unmarked prefill was counted as a turn
        merged = Authorship(auth.authors, depth, auth.created_at, auth.conversation_id)
        items = [(chain_key(xxh3_64_intdigest(b, prefill.before ^ ASSISTANT_SALT)), merged)]
        if self.content_fallback:
            fp = content_fingerprint(d, n, prefill.tail, self.min_content_chars)
            items.append((content_key(fp), merged))
        return items

    def _remember_head(self, key: str, head: Authorship) -> None:
        """Keep a conversation's head recorded here until it is persisted (bounded like the
        overlay; oldest dropped)."""
        with self._heads_lock:
            heads = self._heads
            heads.pop(key, None)
            heads[key] = head
            while len(heads) > self._verified_max:
                del heads[next(iter(heads))]

    def _verify(self, fingerprint: int) -> None:
        """Remember a reply whose whole history chained (bounded; cleared when full)."""
        verified = self._verified
        if len(verified) >= self._verified_max:
            verified.clear()
        verified[fingerprint] = None

    def persist(self, recorded: RecordedReply) -> None:
        """Write a recorded reply to the store (background worker), merging collisions.

        Reads the keys first so a key recorded for different authors becomes a collision
        marker (see ``merge_authorship``); then drops the overlay entries.

        Raises:
            StoreError: the store failed (the overlay keeps the entries meanwhile).
        """
        if not recorded.items:
            return
        merge_many = getattr(self.store, "merge_many", None)
        if merge_many is not None:  # the guard, or the memory store: one locked pass where native
            merge_many(recorded.items, merge_authorship)
        else:
            merge_by_read_write(self.store, recorded.items, merge_authorship)
        self._pending.drop([k for k, _ in recorded.items], recorded.seq)
        self._put_head(recorded)

    def _put_head(self, recorded: RecordedReply) -> None:
        """Write a provider conversation's new head (one more store call, conversation calls
        only), then forget it here unless a later reply replaced it meanwhile.

        Raises:
            StoreError: the store failed (the in-process head stays meanwhile).
        """
        if recorded.head is None:
            return
        key, head = recorded.head
        self.store.put_many([(key, head)])
        with self._heads_lock:
            mine = self._heads.get(key)
            if mine is not None and mine.depth == head.depth and mine.authors == head.authors:
                del self._heads[key]

    def persist_and_get_state(
        self, recorded: RecordedReply, conversation_id: str
    ) -> Mapping[str, object] | None:
        """:meth:`persist`, then the conversation's state from the store: one store call where
        the store does both (``GuardedStore.merge_many_get_state``: one Redis round trip).

        Raises:
            StoreError: the store failed; neither the write nor the read happened for sure
                (the overlay keeps the entries meanwhile).
        """
        both = getattr(self.store, "merge_many_get_state", None)
        if both is None:  # a bare store (the pipeline always passes the guard, which has it)
            self.persist(recorded)
            return self.store.get_state(conversation_id)
        state: Mapping[str, object] | None = both(recorded.items, merge_authorship, conversation_id)
        if recorded.items:
            self._pending.drop([k for k, _ in recorded.items], recorded.seq)
        self._put_head(recorded)
        return state

    def persist_and_get_states(
        self, batch: Sequence[tuple[RecordedReply | None, str | None]]
    ) -> list[Mapping[str, object] | None]:
        """:meth:`persist_and_get_state` of many turns, in order, in one store call
        (``GuardedStore.merge_get_states``): per turn its recorded reply (``None``: nothing
        to write) and its conversation (``None``: no state to read, ``None`` returned).

        Raises:
            StoreError: the store failed; no write or read of the batch happened for sure
                (the overlay keeps the entries meanwhile).
        """
        requests = [(r.items if r is not None else (), cid) for r, cid in batch]
        states: list[Mapping[str, object] | None] = self.store.merge_get_states(  # type: ignore[attr-defined]
            requests, merge_authorship
        )
        for recorded, _ in batch:
            if recorded is not None and recorded.items:
                self._pending.drop([k for k, _ in recorded.items], recorded.seq)
        for recorded, _ in batch:
            if recorded is not None:
                self._put_head(recorded)
        return states

    @property
    def pending(self) -> int:
        """Replies' keys recorded but not yet persisted."""
        return len(self._pending)

    def _fail(self, stage: str, exc: BaseException) -> None:
        self.errors += 1
        if self._on_error is not None:
            # an error hook must not turn fail-open into fail-closed
            with contextlib.suppress(Exception):
                self._on_error(stage, exc)


def _salt_of(role: object) -> int:
    """``role_salt`` with the usual roles' salts looked up inline."""
    salt = _SALTS.get(role) if type(role) is str else None
    return salt if salt is not None else role_salt(role)


def _attribution(index: int, method: AttributionMethod, auth: Authorship | None) -> MessageAttribution:
    if auth is None:
        return MessageAttribution(index, UNKNOWN_MODEL, _UNKNOWN_AUTHORS, None, "unknown")
    return MessageAttribution(index, auth.authors[-1], auth.authors, auth.depth or None, method)


def _depth(attributions: Sequence[MessageAttribution]) -> int:
    """Depth of the new turn: from the latest message with a stored depth, else by counting."""
    n = len(attributions)
    for q in range(n - 1, -1, -1):
        d = attributions[q].depth
        if d:
            return d + (n - q)
    return n + 1


def degraded_context(
    messages: Any,
    *,
    conversation_id: str | None = None,
    requested_model: str | None = None,
    metadata: Mapping[str, object] | None = None,
    started_at: float = 0.0,
) -> TurnContext:
    """The fail-open placeholder context: depth by counting, prefix ``unknown``, ``degraded``.

    Never raises (an unreadable history counts as depth 1). Its replies are not recorded.
    """
    try:
        depth = 1 + sum(1 for m in messages if _role_of(m) == "assistant")
    except Exception:  # the history is not even iterable: depth unknown, call it 1
        depth = 1
    return TurnContext(
        conversation_id=conversation_id or pending_conversation_id(0),
        conversation_id_source="caller" if conversation_id else "derived",
        depth=depth,
        history_chars=0,
        history_tokens=0,
        prefix_model=NO_PREFIX if depth == 1 else UNKNOWN_MODEL,
        prefix_purity=1.0 if depth == 1 else 0.0,
        prefix_authors=0,
        attributions=(),
        history_fingerprint=0,
        requested_model=requested_model,
        metadata=metadata if metadata is not None else {},
        started_at=started_at,
        degraded=True,
    )


def _role_of(message: Any) -> object:
    if isinstance(message, Mapping):
        return message.get("role")
    return getattr(message, "role", None)


def _as_reply(reply: Any) -> Any:
    """Replies are assistant messages whatever role (or none) they carry."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    return reply


def _head_of(stored: Authorship | None) -> Authorship | None:
    """A conversation head as stored; ``None`` when absent or not a head (no authors: a
    collision marker or another writer's value; depth below 1)."""
    if stored is None or not stored.authors or stored.depth < 1:
        return None
    return Authorship(stored.authors[-RESPONSE_AUTHORS:], stored.depth, 0.0, stored.conversation_id)
