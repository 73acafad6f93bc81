"""Background processing of one turn: persist authorship, run rules, fold state, count, export."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from handoffmon.config import RuleConfig
from handoffmon.depth import DepthBuckets
from handoffmon.errors import RuleError
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.state import ConversationState
from handoffmon.protocols import AttributionStore
from handoffmon.types import CheckResult, TurnContent, TurnContext, TurnRecord, TurnResult

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.attribution import Attributor
    from handoffmon.checkers import RuleSet

_log = logging.getLogger("handoffmon.pipeline")


class Capture(NamedTuple):
    """What ``Monitor.capture`` keeps of a request so its history can be attributed later.

    A snapshot, not a copy of the content: the message list is copied (applications
    append the reply to theirs) but the messages are shared. Everything attribution needs
    from the caller's side (its conversation id, the kept metadata, the current
    OpenTelemetry span) is read here, on the request path.

    Attributes:
        messages: the request's messages (a new list of the same message objects).
        requested_model: the model or group the application asked for.
        conversation_id: the caller's conversation id, if it sent one.
        metadata: the kept request metadata (``request_meta.turn_metadata``).
        started_at: monotonic clock when the call started.
        begin_s: time the capture took (request-path overhead, for telemetry).
    """

    messages: list[Any]
    requested_model: str | None
    conversation_id: str | None
    metadata: dict[str, Any]
    started_at: float
    begin_s: float = 0.0

    def __repr__(self) -> str:  # no message content in reprs (they reach logs)
        return f"Capture(messages={len(self.messages)}, requested_model={self.requested_model!r})"


class Described(NamedTuple):
    """Who served a reply and what it cost, as ``Monitor.finish`` takes it (see ``finish_described``)."""

    authors: tuple[str, ...] = ()
    deployment_id: str | None = None
    fallbacks: int = 0
    retries: int = 0
    provider: str | None = None
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None


TurnHandle = Capture | TurnContext
"""What ``Monitor.capture`` / ``Monitor.begin`` return and ``Monitor.finish`` takes."""


@dataclass(slots=True)
class PendingTurn:
    """What ``Monitor.finish`` queues for the background pipeline.

    Not frozen on purpose: a frozen dataclass's ``__init__`` costs several µs more on the
    request path. A turn that was only captured (``ctx`` is ``None``) is completed by the
    attribution stage — ``ctx``, ``recorded``, ``reply_text`` and canonical ``authors``
    filled in, ``capture`` and ``reply`` released — before the rest of the pipeline sees it.
    """

    ctx: TurnContext | None
    recorded: Any
    reply_text: str
    authors: tuple[str, ...]
    deployment_id: str | None
    fallbacks: int
    retries: int
    streamed: bool
    latency_s: float
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    provider: str | None
    response_model: str | None
    finished_at: float = 0.0
    finish_s: float = 0.0
    begin_s: float = 0.0
    capture: Capture | None = None
    reply: Any = None
    describe: Callable[..., Described] | None = None
    describe_args: tuple[Any, ...] = ()

    def apply(self, d: Described) -> None:
        """Take the serving fields from ``d`` (authors still raw)."""
        self.authors = d.authors
        self.deployment_id = d.deployment_id
        self.fallbacks = d.fallbacks
        self.retries = d.retries
        self.provider = d.provider
        self.response_model = d.response_model
        self.input_tokens = d.input_tokens
        self.output_tokens = d.output_tokens
        self.finish_reason = d.finish_reason


def _str_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()


class TurnProcessor:
    """Runs the background stages for one turn; each stage fails open and is counted.

    Args:
        attributor: persists recorded authorship.
        store: per-conversation state.
        rules: the configured rule set.
        aggregates: counters to update.
        buckets: depth buckets.
        emit: hands the finished ``TurnResult`` to the exporters.
        count_error: counts a failure by stage.
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
        count_error: Callable[..., None],
        observe: Callable[[str, float], None] | None = None,
        capture_content: bool = False,
    ) -> None:
        self._attributor = attributor
        self._store = store
        self._rules = rules
        self._aggregates = aggregates
        self._buckets = buckets
        self._emit = emit
        self._count_error = count_error
        self._observe = observe
        self._capture_content = capture_content

    def process(self, turn: PendingTurn) -> None:
        """Process one turn end to end, then report the stage overheads."""
        t0 = time.perf_counter()
        self._process(turn)
        if self._observe is not None and turn.ctx is not None:
            self._observe("begin", turn.begin_s)
            self._observe("attribution", turn.ctx.attribution_s)
            self._observe("finish", turn.finish_s)
            self._observe("background", time.perf_counter() - t0)

    def _process(self, turn: PendingTurn) -> None:
        ctx = turn.ctx
        if ctx is None:  # the attribution stage always completes a captured turn first
            raise ValueError("turn reached the pipeline unattributed")
        final_id = getattr(turn.recorded, "conversation_id", None)
        if final_id and final_id != ctx.conversation_id:  # a depth-1 derived id is fixed at record()
            ctx = dataclasses.replace(ctx, conversation_id=final_id)
        if turn.recorded is not None:
            try:
                self._attributor.persist(turn.recorded)
            except Exception:
                _log.warning("handoffmon could not persist authorship", exc_info=True)
                self._count_error("persist")
        author = turn.authors[-1]
        state = self._load_state(ctx)
        if not ctx.degraded and ctx.depth > state.depth:
            self._aggregates.move_session(state.depth, ctx.depth)
        state = self._declare(state, ctx)
        checks = self._check(turn, ctx, state)
        state, transitions = state.advance(ctx.depth, checks)
        self._save_state(ctx, state)
        record = self._record(turn, ctx, author)
        content = None
        if self._capture_content and ctx.input_messages:
            content = TurnContent(ctx.input_messages, turn.reply_text)
        if ctx.user_message or ctx.input_messages:
            # text stays out of what exporters see, except as opt-in ``content``
            ctx = dataclasses.replace(ctx, user_message="", input_messages=())
        result = TurnResult(
            context=ctx,
            record=record,
            depth_bucket=self._buckets.bucket(ctx.depth),
            checks=checks,
            transitions=transitions,
            attribution_methods=tuple(a.method for a in ctx.attributions),
            content=content,
        )
        self._aggregates.add_turn(result)
        self._emit(result)

    def _load_state(self, ctx: TurnContext) -> ConversationState:
        if ctx.degraded:
            return ConversationState()
        try:
            return ConversationState.from_mapping(self._store.get_state(ctx.conversation_id))
        except Exception:
            _log.warning("handoffmon could not load conversation state", exc_info=True)
            self._count_error("state")
            return ConversationState()

    def _save_state(self, ctx: TurnContext, state: ConversationState) -> None:
        if ctx.degraded:
            return
        try:
            self._store.put_state(ctx.conversation_id, state.to_mapping())
        except Exception:
            _log.warning("handoffmon could not save conversation state", exc_info=True)
            self._count_error("state")

    def _declare(self, state: ConversationState, ctx: TurnContext) -> ConversationState:
        if not ctx.metadata:
            return state
        try:
            declared = self._rules.parse_request_rules(ctx.metadata, declared=state.declared)
        except RuleError as exc:
            _log.warning("handoffmon ignored invalid request rules: %s", exc)
            self._count_error("rules")
            return state
        except Exception:
            _log.warning("handoffmon could not parse request rules", exc_info=True)
            self._count_error("rules")
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
                self._count_error("rules")
        return tuple(out)

    def _check(
        self, turn: PendingTurn, ctx: TurnContext, state: ConversationState
    ) -> tuple[CheckResult, ...]:
        from handoffmon.checkers import CheckContext

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
            )
            checks = tuple(
                self._rules.evaluate(turn.reply_text, cctx, extra_rules=self._active_rules(state, ctx.depth))
            )
        except Exception:
            _log.warning("handoffmon rule evaluation failed", exc_info=True)
            self._count_error("check")
            return ()
        errors = sum(1 for c in checks if c.verdict == "error")
        if errors:
            self._count_error("check", errors)
        return checks

    def _record(self, turn: PendingTurn, ctx: TurnContext, author: str) -> TurnRecord:
        return TurnRecord(
            author=author,
            authors=turn.authors,
            deployment_id=turn.deployment_id,
            requested_model=ctx.requested_model,
            fallbacks=turn.fallbacks,
            retries=turn.retries,
            latency_s=turn.latency_s,
            reply_chars=len(turn.reply_text),
            streamed=turn.streamed,
            handoff=ctx.handoff_for(author),
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            finish_reason=turn.finish_reason,
            provider=turn.provider,
            response_model=turn.response_model,
            finished_at=turn.finished_at,
        )
