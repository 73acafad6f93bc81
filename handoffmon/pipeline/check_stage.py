"""The check stage: persist authorship, run the rules, fold conversation state, count, export.

Runs on the worker threads behind the bounded, conversation-sharded queue; every step
fails open and is counted in the shared ``ErrorSink`` under its stage.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from handoffmon.checkers.base import LIMIT_REASONS, CheckContext
from handoffmon.config import RuleConfig
from handoffmon.depth import DepthBuckets
from handoffmon.errors import RuleError, StoreError
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.errors import ErrorSink
from handoffmon.pipeline.records import Attributed
from handoffmon.pipeline.state import ConversationState
from handoffmon.protocols import AttributionStore
from handoffmon.shadow.turns import NO_VERDICT, ShadowTurn
from handoffmon.stores._rev import rev_of
from handoffmon.stores.guard import GuardedStore
from handoffmon.stores.memory import MemoryStore
from handoffmon.types import (
    CheckResult,
    ClusterStep,
    Transition,
    TurnContent,
    TurnContext,
    TurnRecord,
    TurnResult,
)

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.attribution import Attributor
    from handoffmon.checkers import RuleSet


_CTX_FIELDS = tuple(f.name for f in dataclasses.fields(TurnContext))
_ctx_values = operator.attrgetter(*_CTX_FIELDS)
_set = object.__setattr__
# the slots' own setters: no attribute-name lookup through the frozen class per field
_CTX_SETTERS = tuple(TurnContext.__dict__[name].__set__ for name in _CTX_FIELDS)
assert not hasattr(TurnContext, "__post_init__")  # _ctx_with copies without calling __init__


def _ctx_with(ctx: TurnContext, **changes: object) -> TurnContext:
    """``dataclasses.replace(ctx, **changes)`` at about a third of its cost (once or twice per turn)."""
    new = object.__new__(TurnContext)
    for setter, value in zip(_CTX_SETTERS, _ctx_values(ctx), strict=True):
        setter(new, value)
    for name, value in changes.items():
        _set(new, name, value)
    return new


TOOL_CALLS = "tool_calls"
"""The ``not_applicable`` reason of every rule on a reply that only calls tools (no text)."""

INCOMPLETE = "incomplete"
"""The ``not_applicable`` reason of every rule on a stream cut off before its finish reason
(``Outcome.complete`` false): the turn counts, its half reply is not judged."""


class Evaluate(Protocol):
    """A turn's rules with its context: ``evaluate(text)`` checks a reply's text;
    ``evaluate(text, reason)`` gives every rule in scope ``not_applicable`` with ``reason``."""

    def __call__(self, text: str, skip: str | None = None, /) -> tuple[CheckResult, ...]: ...


CAS_RETRIES = 3
"""Times a conversation's turns are folded again on the state another writer stored since it
was read (compare-and-set conflicts: replicas folding the same conversation at once)."""

STATE_CACHE = 1024
"""Conversation states the check stage keeps built (cleared when full): those in flight."""


def _continued(ctx: TurnContext, state: ConversationState) -> TurnContext:
    """The context of a call continuing a stored response, with the size of the history it
    did not send: when the response it continues is the conversation's deepest turn, the
    history is what that turn left (``state.chars``) plus the new input; otherwise (a branch
    from an earlier response, or that turn not checked yet) the new input only, a lower bound."""
    previous = next(a for a in reversed(ctx.attributions) if a.index < 0)  # index -1
    if ctx.degraded or previous.depth != state.depth:
        return ctx
    chars = state.chars + ctx.history_chars
    return _ctx_with(ctx, history_chars=chars, history_tokens=(chars + 3) // 4)


def _stored(state: ConversationState) -> dict[str, object]:
    """A state as a compare-and-set write stores it: the next revision of the one it was folded from."""
    mapping = state.to_mapping()
    mapping["rev"] = state.rev + 1
    return mapping


def _str_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()


class CheckStage:
    """Turns an ``Attributed`` turn into a ``TurnResult``: persist, state, rules, checks, counts.

    Args:
        attributor: persists recorded authorship.
        store: per-conversation state (behind the store guard, which counts its failures).
        rules: the configured rule set.
        aggregates: counters to update.
        buckets: depth buckets.
        emit: hands the finished ``TurnResult`` to the exporters.
        errors: the pipeline's error sink.
        capture_content: carry the message text to ``TurnResult.content`` (opt-in).
    """

    def __init__(
        self,
        *,
        attributor: Attributor,
        store: AttributionStore,
        rules: RuleSet,
        aggregates: Aggregates,
        buckets: DepthBuckets,
        emit: Callable[[TurnResult], None],
        errors: ErrorSink,
        capture_content: bool = False,
        release: Callable[[int], object] = lambda n: None,
    ) -> None:
        self._release = release
        self._attributor = attributor
        self._store = store
        self._rules = rules
        self._aggregates = aggregates
        self._buckets = buckets
        self._emit = emit
        self._errors = errors
        self._capture_content = capture_content
        # The memory store (behind the guard, as the monitor builds it) keeps state marshal-ed;
        # the last state this stage wrote per conversation is kept built, and reused while
        # the store still holds exactly what was written (identity of the stored object).
        self._stored = isinstance(store, GuardedStore) and type(store.inner) is MemoryStore
        # a store that merges a reply's keys and reads the state in one call (Redis: one round trip)
        self._combined = (
            isinstance(store, GuardedStore)
            and bool(getattr(store.inner, "native_merge_state", False))
            and attributor.store is store
        )
        # a store that does that for many turns in one call: the turns queued at once are one
        # batch (process_batch), two round trips in all
        self.batched = self._combined and bool(getattr(store, "native_batches", False))
        """``process_batch`` costs two store calls per batch (else it processes turn by turn)."""
        # a shared store that writes states compare-and-set (Redis, SQLite): a turn is counted
        # and exported once the state it leaves is stored; on a conflict (another replica or
        # process wrote the conversation since it was read) its turns are folded again
        self._cas = isinstance(store, GuardedStore) and store.native_cas
        self._states: dict[str, tuple[object, ConversationState]] = {}
        self.shadow: Callable[[ShadowTurn], None] | None = None
        """Receives checked turns that carry a shadow offer (``Monitor.set_shadow``)."""

    def process(self, turn: Attributed) -> None:
        """Process one turn end to end, then report the stage overheads; give back the
        queued bytes it held."""
        try:
            t0 = time.perf_counter()
            self._process(turn)
            self._observe(turn, time.perf_counter() - t0)
        finally:
            if turn.weight:
                self._release(turn.weight)

    def _observe(self, turn: Attributed, background_s: float) -> None:
        self._errors.observe_many(
            (
                ("begin", turn.begin_s),
                ("attribution", turn.ctx.attribution_s),
                ("finish", turn.finish_s),
                ("background", background_s),
            )
        )

    def process_batch(self, turns: list[Attributed]) -> None:
        """Process turns in order as :meth:`process` does, with two store calls for the batch
        (when ``batched``): every reply's keys merged and every conversation's state read in
        one, the states written back in one after all turns are checked.

        A conversation with several turns in the batch is read once: its later turns fold
        into the state its earlier turns left, and only the last state is written. A store
        failure fails every turn of the batch open alike (fresh states, replies kept in the
        overlay), as it would one by one; a turn that fails otherwise is counted and the
        batch goes on. Each turn's ``background`` overhead is its own work plus an equal share
        of the round trips.
        """
        if not self.batched or len(turns) == 1:
            for turn in turns:
                self.process(turn)
            return
        held = sum(turn.weight for turn in turns)
        try:
            self._process_batch(turns)
        finally:
            if held:
                self._release(held)

    def _process_batch(self, turns: list[Attributed]) -> None:
        t0 = time.perf_counter()
        ctxs = [self._final_context(turn) for turn in turns]
        loaded = self._persist_and_load_many(turns, ctxs)
        if self._cas:
            own = self._fold_and_store(turns, ctxs, loaded)
            shared = (time.perf_counter() - t0 - sum(own)) / len(turns)
            for turn, seconds in zip(turns, own, strict=True):
                self._observe(turn, seconds + shared)
            return
        folded: dict[str, ConversationState] = {}

        def keep(ctx: TurnContext, state: ConversationState) -> None:
            if not ctx.degraded:
                folded[ctx.conversation_id] = state

        own = []
        shared = time.perf_counter() - t0
        for turn, ctx, state in zip(turns, ctxs, loaded, strict=True):
            t1 = time.perf_counter()
            if not ctx.degraded:
                state = folded.get(ctx.conversation_id, state)
            try:
                self._checked(turn, ctx, state, keep)
            except Exception as exc:  # as the worker would count it one by one
                self._errors.failed("pipeline", exc)
            own.append(time.perf_counter() - t1)
        t2 = time.perf_counter()
        self._save_many(folded)
        shared = (shared + time.perf_counter() - t2) / len(turns)
        for turn, seconds in zip(turns, own, strict=True):
            self._observe(turn, seconds + shared)

    def _fold_and_store(
        self, turns: list[Attributed], ctxs: list[TurnContext], loaded: list[ConversationState]
    ) -> list[float]:
        """Fold turns on their conversations' states, store the states compare-and-set, then
        count and export the turns (in order); returns each turn's own seconds.

        A conversation whose stored state changed since it was read (another replica folded
        a turn of it meanwhile: ``put_states_if`` answers with the state stored now) has its
        turns folded again on that state and written again, up to ``CAS_RETRIES`` times, so
        the cluster sums count every turn on the state every other turn left, as one replica
        would. Past that, the turns are counted as last folded and the failure counted
        (``monitor_errors{stage="state"}``); a store failure leaves them as folded (fail open).
        """
        own = [0.0] * len(turns)
        finishes: list[Callable[[], None] | None] = [None] * len(turns)
        groups: dict[str, list[int]] = {}
        for i, ctx in enumerate(ctxs):
            if ctx.degraded:  # no state: folded on a fresh one, never stored
                t1 = time.perf_counter()
                finishes[i] = self._fold_one(turns[i], ctx, loaded[i])[1]
                own[i] += time.perf_counter() - t1
            else:
                groups.setdefault(ctx.conversation_id, []).append(i)

        def refold(cid: str, state: ConversationState) -> ConversationState:
            for i in groups[cid]:
                t1 = time.perf_counter()
                state, finishes[i] = self._fold_one(turns[i], ctxs[i], state)
                own[i] += time.perf_counter() - t1
            return state

        pending = {cid: refold(cid, loaded[group[0]]) for cid, group in groups.items()}
        store: Any = self._store  # the guard (``_cas``)
        for attempt in range(CAS_RETRIES + 1):
            if not pending:
                break
            try:
                conflicts = store.put_states_if([(cid, _stored(st), st.rev) for cid, st in pending.items()])
            except StoreError:  # counted by the store guard
                break
            except Exception as exc:
                self._errors.failed("state", exc)
                break
            if conflicts and attempt == CAS_RETRIES:
                message = f"{len(conflicts)} conversation states still conflicting after {CAS_RETRIES} folds"
                self._errors.failed("state", StoreError(message))
                break
            pending = {cid: refold(cid, self._state_of(current)) for cid, current in conflicts.items()}
        for i, finish in enumerate(finishes):
            if finish is None:
                continue
            t1 = time.perf_counter()
            try:
                finish()
            except Exception as exc:  # as the worker would count it one by one
                self._errors.failed("pipeline", exc)
            own[i] += time.perf_counter() - t1
        return own

    def _fold_one(
        self, turn: Attributed, ctx: TurnContext, state: ConversationState
    ) -> tuple[ConversationState, Callable[[], None] | None]:
        """:meth:`_fold`, a failure counted (the state left as it was, nothing to finish)."""
        try:
            return self._fold(turn, ctx, state)
        except Exception as exc:  # as the worker would count it one by one
            self._errors.failed("pipeline", exc)
            return state, None

    def _state_of(self, mapping: Mapping[str, object] | None) -> ConversationState:
        """A stored state; an unreadable one as a fresh state with its revision (so the next
        compare-and-set replaces it)."""
        try:
            return ConversationState.from_mapping(mapping)
        except Exception as exc:
            self._errors.failed("state", exc)
            return ConversationState(rev=rev_of(mapping))

    def _persist_and_load_many(
        self, turns: list[Attributed], ctxs: list[TurnContext]
    ) -> list[ConversationState]:
        """:meth:`_persist_and_load` of a batch in one store call."""
        batch = [
            (turn.recorded, None if ctx.degraded else ctx.conversation_id)
            for turn, ctx in zip(turns, ctxs, strict=True)
        ]
        try:
            mappings = self._attributor.persist_and_get_states(batch)
        except StoreError:  # counted by the store guard; the overlay keeps the replies meanwhile
            return [ConversationState() for _ in turns]
        except Exception as exc:
            self._errors.failed("persist", exc)
            return [ConversationState() for _ in turns]
        return [self._state_of(mapping) for mapping in mappings]

    def _save_many(self, folded: Mapping[str, ConversationState]) -> None:
        try:
            store: Any = self._store  # the guard (``batched``)
            store.put_states([(cid, state.to_mapping()) for cid, state in folded.items()])
        except StoreError:  # counted by the store guard
            pass
        except Exception as exc:
            self._errors.failed("state", exc)

    def _final_context(self, turn: Attributed) -> TurnContext:
        ctx = turn.ctx
        final_id = getattr(turn.recorded, "conversation_id", None)
        if final_id and final_id != ctx.conversation_id:  # a depth-1 derived id is fixed at record()
            ctx = _ctx_with(ctx, conversation_id=final_id)
        return ctx

    def _process(self, turn: Attributed) -> None:
        ctx = self._final_context(turn)
        state = self._persist_and_load(turn, ctx)
        if self._cas and not ctx.degraded:
            self._fold_and_store([turn], [ctx], [state])
            return
        self._checked(turn, ctx, state, self._save_state)

    def _checked(
        self,
        turn: Attributed,
        ctx: TurnContext,
        state: ConversationState,
        save: Callable[[TurnContext, ConversationState], None],
    ) -> None:
        """Rules, state, counts and export of a turn whose conversation state is ``state``;
        ``save`` keeps the state it leaves."""
        state, finish = self._fold(turn, ctx, state)
        save(ctx, state)
        finish()

    def _fold(
        self, turn: Attributed, ctx: TurnContext, state: ConversationState
    ) -> tuple[ConversationState, Callable[[], None]]:
        """Rules and state of a turn whose conversation state is ``state``: the state it leaves,
        and ``finish``, which counts and exports the turn (called once, when the state is
        stored; a turn folded again on a newer state drops its earlier ``finish``)."""
        author = turn.outcome.authors[-1]
        attributions = ctx.attributions
        if attributions and attributions[0].index < 0 and state.chars:
            ctx = _continued(ctx, state)
        session = state.depth if not ctx.degraded and ctx.depth > state.depth else None
        state = self._declare(state, ctx)
        evaluate = self._evaluator(ctx, state)
        skip = INCOMPLETE if not turn.outcome.complete else TOOL_CALLS if turn.tools_only else None
        checks = self._check(evaluate, turn.reply_text, skip) if evaluate is not None else ()
        offer = None
        if (
            turn.shadow is not None
            and self.shadow is not None
            and evaluate is not None
            and not ctx.degraded
            and skip is None  # a cut-off reply, or one that only calls tools, has no verdicts to compare
        ):
            shadow = turn.shadow
            if shadow.unsent is None and not any(c.verdict in ("pass", "fail") for c in checks):
                # no rule judged the served reply: no shadow reply can pair with it, so the runner
                # counts it as skipped (``no_verdict``) without spending budget on a call
                shadow = shadow._replace(unsent=NO_VERDICT)
            offer = ShadowTurn(shadow, ctx.conversation_id, ctx.prefix_model, author, checks, evaluate)
        # clean baseline turn: same author, and no other model's (or unattributed) text in the history
        clean = (
            ctx.prefix_model == author
            and ctx.prefix_purity >= 1.0
            and ctx.prefix_authors <= 1
            and not ctx.degraded
        )
        chars = ctx.history_chars + getattr(turn.recorded, "chars", 0)
        state, cluster, transitions = state.fold(ctx.depth, author, ctx.prefix_model, clean, checks, chars)

        def finish() -> None:
            if session is not None:
                self._aggregates.move_session(session, ctx.depth)
            if offer is not None:
                self._offer(offer)
            self._finish(turn, ctx, author, checks, transitions, clean, cluster)

        return state, finish

    def _finish(
        self,
        turn: Attributed,
        ctx: TurnContext,
        author: str,
        checks: tuple[CheckResult, ...],
        transitions: tuple[Transition, ...],
        clean: bool,
        cluster: tuple[ClusterStep, ...],
    ) -> None:
        """Count and export a folded turn."""
        record = self._record(turn, ctx, author)
        content = None
        if self._capture_content and ctx.input_messages:
            content = TurnContent(ctx.input_messages, turn.reply_text)
        if ctx.user_message or ctx.input_messages:
            # text stays out of what exporters see, except as opt-in ``content``
            ctx = _ctx_with(ctx, user_message="", input_messages=())
        result = TurnResult(
            context=ctx,
            record=record,
            depth_bucket=self._buckets.bucket(ctx.depth),
            checks=checks,
            transitions=transitions,
            attribution_methods=tuple([a.method for a in ctx.attributions]),
            content=content,
            clean=clean,
            cluster=cluster,
        )
        self._aggregates.add_turn(result)
        self._emit(result)

    def _persist_and_load(self, turn: Attributed, ctx: TurnContext) -> ConversationState:
        """Persist the reply's authorship, then load the conversation's state: one store call
        where the store does both (``_combined``), else two that fail open independently."""
        recorded = turn.recorded
        if not self._combined or recorded is None or not recorded.items or ctx.degraded:
            self._persist(turn)
            return self._load_state(ctx)
        try:
            mapping = self._attributor.persist_and_get_state(recorded, ctx.conversation_id)
        except StoreError:  # counted by the store guard; the overlay keeps the reply meanwhile
            return ConversationState()
        except Exception as exc:
            self._errors.failed("persist", exc)
            return ConversationState()
        return self._state_of(mapping)

    def _persist(self, turn: Attributed) -> None:
        if turn.recorded is None:
            return
        try:
            self._attributor.persist(turn.recorded)
        except StoreError:  # counted by the store guard; the overlay keeps the reply meanwhile
            pass
        except Exception as exc:
            self._errors.failed("persist", exc)

    def _load_state(self, ctx: TurnContext) -> ConversationState:
        if ctx.degraded:
            return ConversationState()
        try:
            if self._stored:
                return self._load_stored(ctx.conversation_id)
            mapping = self._store.get_state(ctx.conversation_id)
        except StoreError:  # counted by the store guard: continue with a fresh state
            return ConversationState()
        except Exception as exc:
            self._errors.failed("state", exc)
            return ConversationState()
        return self._state_of(mapping)

    def _save_state(self, ctx: TurnContext, state: ConversationState) -> None:
        if ctx.degraded:
            return
        try:
            if self._stored:
                self._save_stored(ctx.conversation_id, state)
            else:
                self._store.put_state(ctx.conversation_id, state.to_mapping())
        except StoreError:  # counted by the store guard
            self._states.pop(ctx.conversation_id, None)
        except Exception as exc:
            self._states.pop(ctx.conversation_id, None)
            self._errors.failed("state", exc)

    def _load_stored(self, conversation_id: str) -> ConversationState:
        store: Any = self._store
        stored = store.get_state_stored(conversation_id)
        hit = self._states.get(conversation_id)
        if hit is not None and stored is not None and hit[0] is stored:
            return hit[1]  # what from_mapping would rebuild from it (see _save_stored)
        return ConversationState.from_mapping(MemoryStore.state_mapping(stored))

    def _save_stored(self, conversation_id: str, state: ConversationState) -> None:
        mapping = state.to_mapping()
        store: Any = self._store
        stored = store.put_state_stored(conversation_id, mapping)
        states = self._states
        if mapping["previous"] != state.previous:  # expired text dropped: reload it as stored
            states.pop(conversation_id, None)
            return
        if len(states) >= STATE_CACHE:
            states.clear()
        states[conversation_id] = (stored, state)

    def _declare(self, state: ConversationState, ctx: TurnContext) -> ConversationState:
        if not ctx.metadata:
            return state
        try:
            declared = self._rules.parse_request_rules(ctx.metadata, declared=state.declared)
        except RuleError as exc:  # a client sends these: the log line is rate limited
            self._errors.failed("rules", exc, "ignored invalid request rules")
            return state
        except Exception as exc:
            self._errors.failed("rules", exc)
            return state
        if not declared:
            return state
        stored = tuple(r.model_dump(mode="json", exclude_defaults=True) for r in declared)
        return state.declare(stored, ctx.depth)

    def _active_rules(self, state: ConversationState, depth: int) -> tuple[RuleConfig, ...]:
        out = []
        for raw in state.active_rules(depth):
            try:
                out.append(self._rules.declared_rule(raw))
            except Exception:
                self._errors.count("rules")
        return tuple(out)

    def _evaluator(self, ctx: TurnContext, state: ConversationState) -> Evaluate | None:
        """The turn's rules with its context: checks the served reply (and a shadow reply)."""
        meta: Mapping[str, object] = ctx.metadata or {}
        try:
            cctx = CheckContext(
                turn=ctx,
                model_group=ctx.requested_model,
                route=str(meta["route"]) if meta.get("route") is not None else None,
                tags=frozenset(_str_list(meta.get("tags"))),
                user_message=ctx.user_message,
                previous=dict(state.previous),
                depth=ctx.depth,
                memory=self._rules.memory,  # the rule set's own: evaluate() need not copy the context
            )
        except Exception as exc:
            self._errors.failed("check", exc)
            return None
        extra = self._active_rules(state, ctx.depth) if state.declared_rules else ()
        rules = self._rules
        return lambda text, skip=None: tuple(rules.evaluate(text, cctx, extra_rules=extra, skip=skip))

    def _offer(self, turn: ShadowTurn) -> None:
        assert self.shadow is not None
        try:
            self.shadow(turn)
        except Exception as exc:  # the runner fails open itself; this guards the plumbing
            self._errors.failed("shadow", exc)

    def _check(self, evaluate: Evaluate, text: str, skip: str | None) -> tuple[CheckResult, ...]:
        try:
            checks = evaluate(text) if skip is None else evaluate(text, skip)
        except Exception as exc:
            self._errors.failed("check", exc)
            return ()
        # a limit at work (a reply too long for its checker, a check over its CPU budget) is shown
        # by the verdict and handoffmon_check_errors_total{reason}, not counted as a failure
        errors = [c for c in checks if c.verdict == "error" and c.reason not in LIMIT_REASONS]
        if errors:
            self._errors.count("check", len(errors))
        return checks

    def _record(self, turn: Attributed, ctx: TurnContext, author: str) -> TurnRecord:
        out = turn.outcome
        return TurnRecord(
            author=author,
            authors=out.authors,
            deployment_id=out.deployment_id,
            requested_model=ctx.requested_model,
            fallbacks=out.fallbacks,
            retries=out.retries,
            latency_s=turn.latency_s,
            reply_chars=len(turn.reply_text),
            streamed=turn.streamed,
            handoff=ctx.handoff_for(author),
            input_tokens=out.input_tokens,
            output_tokens=out.output_tokens,
            finish_reason=out.finish_reason,
            provider=out.provider,
            response_model=out.response_model,
            finished_at=turn.finished_at,
            response_id=out.response_id,
        )
