"""Vocabulary records shared by every layer: messages, turn context, turn record, verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

AttributionMethod = Literal["chain", "content", "response_id", "unknown"]
"""How an earlier assistant message was attributed: chained fingerprint, content-only
fingerprint (the chain broke), the stored response a Responses API call continues (the
message is in the history the provider keeps), or not at all."""

Verdict = Literal["pass", "fail", "not_applicable", "error"]
"""Outcome of one rule on one reply. ``error`` = the checker raised or ran out of time."""

VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "not_applicable", "error")

ATTRIBUTION_METHODS: tuple[AttributionMethod, ...] = ("chain", "content", "response_id", "unknown")
"""How an earlier assistant message was attributed (``handoffmon_attributions_total{method}``)."""

MONITOR_STAGES: tuple[str, ...] = (
    "attribution",
    "record",
    "persist",
    "state",
    "rules",
    "check",
    "pipeline",
    "export",
    "aggregates",
    "integration",
    "refit",
    "parse",
    "store",
    "shadow",
)
"""Stages that count their own failures (``handoffmon_monitor_errors_total{stage}``); exported at 0
from the start so dashboards and ``rate()`` show 0, not "No data"."""

NO_REPLY_STATUSES: tuple[str, ...] = ("failed", "cancelled", "incomplete", "refusal", "error", "unreadable")
"""How an answer (of any API) finished without a reply, which is no turn
(``handoffmon_responses_without_reply_total{status}``, exported at 0 from the start): a
Responses API answer ``failed``, ``cancelled``, or ``incomplete`` with no output text and no
tool call (a Messages API answer cut at ``max_tokens`` with nothing but thinking is
``incomplete`` too); a Messages API answer stopped for ``refusal`` before any text
(``refusal``); a Chat Completions, Responses or Messages API stream the upstream ended with
an error before any text (``error``: an ``error`` event or chunk, or the SDK or LiteLLM
raising it to the application); a response with no reply to read — a chat completion with no
choice (``choices: []`` or ``null``) or a choice without a message — (``unreadable``, which
``serve`` also counts ``unmonitored{reason="bad_reply"}``)."""

CHECK_ERROR_REASONS: tuple[str, ...] = (
    "too_large",
    "turn_budget",
    "over_budget",
    "raised",
    "bad_outcome",
    "scope_error",
    "invalid_rule",
    "other",
)
"""Why a check's verdict is ``error`` (``handoffmon_check_errors_total{reason}``): the first three
are handoffmon's limits at work (``checkers.base.LIMIT_REASONS``), the others failures."""


def check_error_reason(reason: str) -> str:
    """The ``reason`` label of an ``error`` verdict's reason (``raised:ValueError`` is ``raised``;
    one outside :data:`CHECK_ERROR_REASONS` is ``other``)."""
    head = reason.partition(":")[0]
    return head if head in CHECK_ERROR_REASONS else "other"


NO_PREFIX = "none"
"""Prefix model of a depth-1 turn (nothing was written before it)."""

UNKNOWN_MODEL = "unknown"
"""Author of an assistant message handoffmon never produced (or that the client edited)."""

ConversationIdSource = Literal["caller", "derived"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message, normalized for fingerprinting.

    Attributes:
        role: ``system``, ``user``, ``assistant``, ``tool`` (or whatever the client sent).
        content: text with whitespace folded; list-of-parts content joined in a stable
            way (non-text parts as stable placeholders); ``""`` when content was ``None``.
        tool_calls: canonical JSON of the tool calls, or ``""``.
        name: optional participant name.
        tool_call_id: for ``tool`` messages, the call they answer.
    """

    role: str
    content: str
    tool_calls: str = ""
    name: str = ""
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class MessageAttribution:
    """Who wrote one earlier assistant message of the request history.

    Attributes:
        index: position of the message in the request's ``messages`` list; negative for the
            history a Responses API call continues by ``previous_response_id``, which the
            request does not carry (-1: the previous response).
        author: canonical model name, or ``unknown``.
        authors: every model that wrote part of it (two for a mid-stream fallback).
        depth: the depth at which handoffmon produced it, when known.
        method: ``chain``, ``content``, ``response_id`` (the provider-held history of a
            Responses API call, from the stored response it continues) or ``unknown``.
    """

    index: int
    author: str
    authors: tuple[str, ...]
    depth: int | None
    method: AttributionMethod


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What handoffmon knows about a turn before the router is called.

    Attributes:
        conversation_id: from the caller, or derived (see ``attribution.conversation``).
        conversation_id_source: ``caller`` or ``derived``.
        depth: 1-based index of the assistant reply about to be produced.
        history_chars: characters of content in the request history.
        history_tokens: approximate token count of the history (chars / 4, rounded up).
        prefix_model: author of the previous assistant turn; ``none`` at depth 1,
            ``unknown`` when that message was never seen by handoffmon.
        prefix_purity: share of the earlier assistant messages written by
            ``prefix_model`` (1.0 at depth 1 and for a single-author history).
        prefix_authors: number of distinct known authors of earlier assistant messages.
        attributions: one entry per earlier assistant message, in order.
        history_fingerprint: chained fingerprint of the whole request history; the reply's
            fingerprint is chained from it.
        requested_model: the model or group the application asked for.
        metadata: request metadata handoffmon reads (rules, tags, route); never content.
        started_at: ``time.perf_counter()`` at the start of the call (a monotonic clock).
        user_message: text of the request's last user message, for checkers that compare
            the reply with the prompt; kept in memory only, never exported or logged.
        degraded: attribution failed internally; the context is a fail-open placeholder
            (prefix ``unknown``) and the reply is not recorded for later attribution.
        attribution_s: time ``Monitor.begin`` took (hot-path overhead, for telemetry).
        input_messages: the normalized request messages, kept only while the turn is in
            flight and only with ``telemetry.capture_content`` (they become
            ``TurnResult.content``; the context handed to exporters has them cleared).
        tail_fingerprint: chain-independent digest of the history's last non-system
            message; binds a short reply's content-only key to its context.
    """

    conversation_id: str
    conversation_id_source: ConversationIdSource
    depth: int
    history_chars: int
    history_tokens: int
    prefix_model: str
    prefix_purity: float
    prefix_authors: int
    attributions: tuple[MessageAttribution, ...]
    history_fingerprint: int
    requested_model: str | None = None
    metadata: Mapping[str, object] = field(default_factory=dict)
    started_at: float = 0.0
    user_message: str = field(default="", repr=False, compare=False)
    degraded: bool = False
    attribution_s: float = field(default=0.0, compare=False)
    input_messages: tuple[Message, ...] = field(default=(), repr=False, compare=False)
    tail_fingerprint: int = field(default=0, repr=False, compare=False)

    def handoff_for(self, author: str) -> bool | None:
        """Whether a reply by ``author`` is a handoff: ``None`` when undecidable.

        Depth-1 turns are never handoffs; a turn after an ``unknown`` prefix is undecided.
        """
        if self.prefix_model == NO_PREFIX:
            return False
        if self.prefix_model == UNKNOWN_MODEL or author == UNKNOWN_MODEL:
            return None
        return self.prefix_model != author


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What handoffmon learned after the reply.

    Attributes:
        author: canonical model that wrote the reply (the last one, if several did).
        authors: every canonical model that wrote part of the reply, in order.
        deployment_id: router deployment id that served the reply, if known.
        requested_model: the model or group the application asked for.
        fallbacks: how many fallbacks the router took before this reply.
        retries: how many retries the router made.
        latency_s: wall time of the router call (to the end of the stream).
        reply_chars: characters in the reply text.
        streamed: the reply was streamed.
        handoff: ``author`` differs from the prefix model (``None`` = undecided).
        input_tokens: usage reported by the provider, when present.
        output_tokens: usage reported by the provider, when present.
        finish_reason: provider finish reason, when present.
        provider: provider name (``openai``, ``anthropic``, ...), when known.
        response_model: model string the provider reported.
        finished_at: wall-clock seconds (``time.time()``) when the reply finished (end of
            the stream); 0.0 = unknown. Exporters date spans from it (the span starts
            ``latency_s`` earlier); with 0.0 they use the export time.
        response_id: the completion's id (``chatcmpl-…``), when the response carried one;
            OpenTelemetry evaluation events carry it as ``gen_ai.response.id``.
    """

    author: str
    authors: tuple[str, ...]
    deployment_id: str | None
    requested_model: str | None
    fallbacks: int
    retries: int
    latency_s: float
    reply_chars: int
    streamed: bool
    handoff: bool | None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    provider: str | None = None
    response_model: str | None = None
    finished_at: float = 0.0
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnContent:
    """Message text of one turn; carried only when ``telemetry.capture_content`` is on.

    Only the OpenTelemetry span exporter reads it (``gen_ai.input.messages`` /
    ``gen_ai.output.messages``); metrics and logs never do.

    Attributes:
        input_messages: the request history as sent (normalized messages).
        output_text: the reply text.
    """

    input_messages: tuple[Message, ...]
    output_text: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One rule's verdict on one reply.

    Attributes:
        rule: the rule's configured name.
        verdict: pass, fail, not_applicable or error.
        reason: short machine-friendly reason (never reply content).
        duration_s: time the checker took.
        extracted: value a stateful checker extracted (e.g. the tagged answer), kept in
            per-conversation state only; never exported.
    """

    rule: str
    verdict: Verdict
    reason: str = ""
    duration_s: float = 0.0
    extracted: str | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """Consecutive verdicts of one rule in one conversation (feeds the Markov refit)."""

    rule: str
    from_verdict: Verdict
    to_verdict: Verdict


class ClusterStep(NamedTuple):
    """Increments of one cell's conversation-cluster sums from one turn.

    The cell is (``rule``, the turn's author, its prefix model); ``rule`` is ``"all"`` for
    the sums pooled over rules. Over conversations c with y_c passes in n_c checks of the
    cell, the sums are G (``conversations``), Σy², Σyn, Σn²; each increment is ≥ 0
    (``counts.cluster_increments``), so they are monotone counters.
    """

    rule: str
    conversations: int
    y2: int
    yn: int
    n2: int


@dataclass(frozen=True, slots=True)
class TurnResult:
    """Everything the background pipeline hands to exporters for one turn.

    Carries no message or reply text, except ``content`` when the operator opted in
    with ``telemetry.capture_content`` (span exporters only; ``None`` otherwise).

    ``clean`` marks a clean same-author turn (its prefix is its author and no other
    model's text is anywhere in the history: the refit's B→B baseline); ``cluster`` holds
    the turn's increments of its cells' conversation-cluster sums (empty for turns that
    are in no refit cell: not clean same-author turns, or no pass/fail verdict).
    """

    context: TurnContext
    record: TurnRecord
    depth_bucket: str
    checks: tuple[CheckResult, ...]
    transitions: tuple[Transition, ...]
    attribution_methods: tuple[AttributionMethod, ...]
    content: TurnContent | None = field(default=None, repr=False, compare=False)
    clean: bool = False
    cluster: tuple[ClusterStep, ...] = ()
