"""Helpers for testing your own rules, checkers and exporters against handoffmon (like ``structlog.testing``).

- :class:`RecordingExporter` keeps every :class:`~handoffmon.types.TurnResult` a monitor hands it.
- :class:`FakeClock` is a clock you move by hand, for stores and anything that takes ``clock=``.
- :func:`make_turn_result` builds one finished turn directly, to unit-test an exporter.
- :func:`simulated_fleet` puts a small fleet of synthetic models with planted adherence
  behind a real ``litellm.Router`` (needs the ``demo`` extra), to drive realistic multi-turn,
  multi-model traffic through your monitor.

This module imports neither litellm nor a server stack; :func:`simulated_fleet` imports
litellm when called.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from handoffmon.config import AttributionConfig, HandoffmonConfig, config_from_mapping
from handoffmon.depth import DepthBuckets
from handoffmon.sim.fleet import Fleet, make_fleet
from handoffmon.sim.rules import rule_configs
from handoffmon.types import (
    AttributionMethod,
    CheckResult,
    MessageAttribution,
    Transition,
    TurnContent,
    TurnContext,
    TurnRecord,
    TurnResult,
    Verdict,
)

__all__ = [
    "FakeClock",
    "RecordingExporter",
    "SimulatedFleet",
    "make_turn_result",
    "simulated_fleet",
]


class RecordingExporter:
    """An :class:`~handoffmon.protocols.Exporter` that keeps every result it is given.

    Attach it to a monitor (``Monitor(config, exporters=[rec])``), run turns, call
    ``monitor.flush()``, then assert on ``rec.results`` or :meth:`verdicts`.

    Attributes:
        results: every exported turn, in export order.
        no_replies: responses that finished without a reply, by status (``NoReplyObserver``:
            no turn, see ``ingress.responses.NoReply``).
        flushed: how many times ``force_flush`` was called.
        shut: whether ``shutdown`` was called.
    """

    def __init__(self) -> None:
        self.results: list[TurnResult] = []
        self.no_replies: Counter[str] = Counter()
        self.flushed = 0
        self.shut = False

    def export(self, result: TurnResult) -> bool:
        """Keep the result."""
        self.results.append(result)
        return True

    def count_no_reply(self, status: str) -> None:
        """Count a response that finished without a reply."""
        self.no_replies[status] += 1

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Count the flush (nothing is buffered)."""
        self.flushed += 1
        return True

    def shutdown(self) -> None:
        """Remember the shutdown."""
        self.shut = True

    def verdicts(self, rule: str | None = None) -> Counter[tuple[str, Verdict]]:
        """``(rule, verdict) → count`` over the recorded turns (one rule when given)."""
        return Counter(
            (c.rule, c.verdict)
            for r in list(self.results)
            for c in r.checks
            if rule is None or c.rule == rule
        )


class FakeClock:
    """A clock you move by hand: ``clock()`` returns ``clock.now``.

    Pass it wherever handoffmon takes ``clock=`` (stores, the monitor) to test TTLs and
    expiry without sleeping.
    """

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward; returns the new time."""
        self.now += seconds
        return self.now


_BUCKETS = DepthBuckets()


def make_turn_result(
    *,
    conversation_id: str = "conv-1",
    depth: int = 1,
    author: str = "gpt-4o",
    prefix_model: str = "none",
    checks: Iterable[tuple[str, Verdict]] = (),
    transitions: Iterable[tuple[str, Verdict, Verdict]] = (),
    methods: Iterable[AttributionMethod] = (),
    fallbacks: int = 0,
    latency_s: float = 0.5,
    history_tokens: int = 100,
    requested_model: str | None = "gpt-group",
    provider: str | None = "openai",
    input_tokens: int | None = 120,
    output_tokens: int | None = 30,
    reasons: Mapping[str, str] | None = None,
    content: TurnContent | None = None,
    metadata: Mapping[str, object] | None = None,
    finished_at: float = 1_800_000_000.0,
    response_id: str | None = None,
) -> TurnResult:
    """One finished turn as the pipeline hands it to exporters.

    Args:
        conversation_id: the conversation's id.
        depth: 1-based turn depth (bucketed with the default depth buckets).
        author: the model that wrote the reply.
        prefix_model: author of the previous turn (``none`` at depth 1, ``unknown``).
        checks: ``(rule, verdict)`` per rule checked.
        transitions: ``(rule, from_verdict, to_verdict)`` Markov transitions.
        methods: attribution method per earlier assistant message (default: all ``chain``).
        fallbacks: router fallbacks before the reply.
        latency_s: router call latency.
        history_tokens: approximate request history size.
        requested_model: the model group asked for.
        provider: provider id (for OTel's ``gen_ai.provider.name``).
        input_tokens: usage, as the provider reported it.
        output_tokens: usage, as the provider reported it.
        reasons: checker reason per rule.
        content: opt-in message text (spans only).
        metadata: the request metadata handoffmon kept.
        finished_at: wall-clock time the reply finished.
        response_id: the completion id (``gen_ai.response.id`` on OpenTelemetry events).
    """
    methods = tuple(methods) or tuple("chain" for _ in range(depth - 1))
    ctx = TurnContext(
        conversation_id=conversation_id,
        conversation_id_source="caller",
        depth=depth,
        history_chars=history_tokens * 4,
        history_tokens=history_tokens,
        prefix_model=prefix_model,
        prefix_purity=1.0,
        prefix_authors=0 if depth == 1 else 1,
        attributions=tuple(
            MessageAttribution(
                index=2 * i + 1, author=prefix_model, authors=(prefix_model,), depth=i + 1, method=m
            )
            for i, m in enumerate(methods)
        ),
        history_fingerprint=12345,
        requested_model=requested_model,
        metadata=dict(metadata or {}),
    )
    record = TurnRecord(
        author=author,
        authors=(author,),
        deployment_id=f"{author}-dep",
        requested_model=requested_model,
        fallbacks=fallbacks,
        retries=0,
        latency_s=latency_s,
        reply_chars=42,
        streamed=False,
        handoff=ctx.handoff_for(author),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason="stop",
        provider=provider,
        response_model=f"{author}-2024",
        finished_at=finished_at,
        response_id=response_id,
    )
    why = reasons or {}
    return TurnResult(
        context=ctx,
        record=record,
        depth_bucket=_BUCKETS.bucket(depth),
        checks=tuple(
            CheckResult(rule=r, verdict=v, reason=why.get(r, ""), duration_s=0.001) for r, v in checks
        ),
        transitions=tuple(Transition(rule=r, from_verdict=a, to_verdict=b) for r, a, b in transitions),
        attribution_methods=methods,
        content=content,
    )


@dataclass
class SimulatedFleet:
    """Synthetic models with planted adherence, served by a real ``litellm.Router``.

    Each model group has one deployment; groups fall back to each other and the provider
    injects rate limits and timeouts, so fallbacks cause real handoffs. Replies are real
    text that passes or fails the fleet's rules (``config().rules``) as planted.

    Attributes:
        fleet: the planted parameters (``fleet.models``, ``fleet.rules``, ``fleet.groups``).
        provider: the litellm custom provider serving the fleet.
        router: the ``litellm.Router`` to wrap (``handoffmon.wrap(sim.router, ...)``).
    """

    fleet: Fleet
    provider: Any
    router: Any

    def config(self, **sections: Any) -> HandoffmonConfig:
        """The fleet's rules and canonical model names, plus any config sections you pass.

        ``rules=[...]`` is added to the fleet's rules; other sections replace the defaults
        (``telemetry={"log_turns": False}``, ``refit={"interval_s": 0}`` unless given).
        """
        from handoffmon.sim.router import canonical_models

        fleet_rules = [r.model_dump() for r in rule_configs(self.fleet)]
        data: dict[str, Any] = {
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            **sections,
            "rules": [*fleet_rules, *sections.get("rules", [])],
        }
        names = canonical_models(self.fleet, self.provider.provider_name or "")
        attribution = AttributionConfig(canonical_models=names).model_dump()
        data["attribution"] = {**attribution, **sections.get("attribution", {})}
        return config_from_mapping(data, source="simulated_fleet")

    async def adrive(
        self, client: Any, conversations: int = 20, *, seed: int = 0, concurrency: int = 8
    ) -> Any:
        """Run simulated conversations through ``client.acompletion``; returns the traffic stats.

        Args:
            client: the router, or ``handoffmon.wrap(sim.router, ...)``.
            conversations: how many conversations (their lengths follow the demo's traffic policy).
            seed: seeds the traffic and every reply.
            concurrency: conversations in flight at once.
        """
        from handoffmon.sim.driver import Driver

        driver = Driver(client, self.fleet, seed=seed, concurrency=concurrency)
        return await driver.run(conversations)

    def drive(self, client: Any, conversations: int = 20, *, seed: int = 0, concurrency: int = 8) -> Any:
        """:meth:`adrive` from synchronous code (runs its own event loop)."""
        return asyncio.run(self.adrive(client, conversations, seed=seed, concurrency=concurrency))


@contextmanager
def simulated_fleet(models: int = 3, rules: int = 2, *, seed: int = 7) -> Iterator[SimulatedFleet]:
    """A :class:`SimulatedFleet` for the duration of the block; the provider is unregistered after.

    Args:
        models: fleet size (6 = the demo's hand-planted fleet with one risky prefix model).
        rules: how many of the demo's rules the fleet plants (1-7).
        seed: seeds the planted parameters and every reply.

    Raises:
        MissingExtraError: litellm is not installed (``pip install 'handoffmon[demo]'``).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.sim.provider import SimProvider
    from handoffmon.sim.router import build_router, unregister_provider

    fleet = make_fleet(models, rules, seed=seed)
    provider = SimProvider(fleet, seed=seed)
    router = build_router(fleet, provider)
    try:
        yield SimulatedFleet(fleet, provider, router)
    finally:
        unregister_provider(provider.provider_name or "")
