"""Test helpers: build TurnResults directly, a scripted multi-model conversation, scrape parsing."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from handoffmon.depth import DepthBuckets
from handoffmon.types import (
    CheckResult,
    Message,
    MessageAttribution,
    Transition,
    TurnContent,
    TurnContext,
    TurnRecord,
    TurnResult,
)

BUCKETS = DepthBuckets()
FINISHED_AT = 1_800_000_000.0


def make_result(
    *,
    conversation_id: str = "conv-1",
    depth: int = 1,
    author: str = "gpt-4o",
    prefix_model: str = "none",
    checks: Iterable[tuple[str, str]] = (),
    transitions: Iterable[tuple[str, str, str]] = (),
    methods: Iterable[str] = (),
    fallbacks: int = 0,
    latency_s: float = 0.5,
    history_tokens: int = 100,
    requested_model: str | None = "gpt-group",
    provider: str | None = "openai",
    input_tokens: int | None = 120,
    output_tokens: int | None = 30,
    reasons: dict[str, str] | None = None,
    content: TurnContent | None = None,
    metadata: dict[str, object] | None = None,
) -> TurnResult:
    """One turn as the pipeline would hand it to exporters."""
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
        metadata=metadata or {},
    )
    handoff = ctx.handoff_for(author)
    rec = TurnRecord(
        author=author,
        authors=(author,),
        deployment_id=f"{author}-dep",
        requested_model=requested_model,
        fallbacks=fallbacks,
        retries=0,
        latency_s=latency_s,
        reply_chars=42,
        streamed=False,
        handoff=handoff,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason="stop",
        provider=provider,
        response_model=f"{author}-2024",
        finished_at=FINISHED_AT,
    )
    reasons = reasons or {}
    return TurnResult(
        context=ctx,
        record=rec,
        depth_bucket=BUCKETS.bucket(depth),
        checks=tuple(
            CheckResult(rule=r, verdict=v, reason=reasons.get(r, ""), duration_s=0.001)
            for r, v in checks  # type: ignore[arg-type]
        ),
        transitions=tuple(Transition(rule=r, from_verdict=a, to_verdict=b) for r, a, b in transitions),  # type: ignore[arg-type]
        attribution_methods=methods,  # type: ignore[arg-type]
        content=content,
    )


def scripted_conversation() -> list[TurnResult]:
    """Two conversations over three models: a fallback handoff gpt→claude and an unknown prefix.

    c1: d1 gpt (none), d2 gpt (gpt), d3 claude after a fallback (handoff gpt→claude), d4 claude.
    c2: d1 claude (none), d2 llama whose prefix message handoffmon never saw (prefix unknown).
    c3: d1 gpt (none) again, so one series counts 2.
    Rules ``json`` and ``lang`` with every verdict represented.
    """
    return [
        make_result(
            conversation_id="c1",
            depth=1,
            author="gpt",
            prefix_model="none",
            checks=[("json", "pass"), ("lang", "pass")],
        ),
        make_result(
            conversation_id="c1",
            depth=2,
            author="gpt",
            prefix_model="gpt",
            checks=[("json", "pass"), ("lang", "fail")],
            transitions=[("json", "pass", "pass"), ("lang", "pass", "fail")],
        ),
        make_result(
            conversation_id="c1",
            depth=3,
            author="claude",
            prefix_model="gpt",
            fallbacks=1,
            checks=[("json", "fail"), ("lang", "not_applicable")],
            transitions=[("json", "pass", "fail")],
        ),
        make_result(
            conversation_id="c1",
            depth=4,
            author="claude",
            prefix_model="claude",
            checks=[("json", "fail"), ("lang", "error")],
            transitions=[("json", "fail", "fail")],
            methods=["chain", "chain", "content"],
        ),
        make_result(
            conversation_id="c2", depth=1, author="claude", prefix_model="none", checks=[("json", "pass")]
        ),
        make_result(
            conversation_id="c2",
            depth=2,
            author="llama",
            prefix_model="unknown",
            checks=[("json", "pass")],
            transitions=[("json", "pass", "pass")],
            methods=["unknown"],
        ),
        make_result(
            conversation_id="c3",
            depth=1,
            author="gpt",
            prefix_model="none",
            checks=[("json", "pass"), ("lang", "fail")],
        ),
    ]


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_exposition(text: str, *, prefix: str = "handoffmon_") -> Series:
    """Samples as {(sample name, sorted labels): value}, without ``_created`` samples."""
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(prefix) and not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def only(series: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of one sample name, keyed by labels."""
    return {labels: v for (n, labels), v in series.items() if n == name}


def counted(series: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The non-zero samples of one sample name (children initialised at 0 left out)."""
    return {labels: v for labels, v in only(series, name).items() if v != 0}


def L(**labels: str) -> tuple[tuple[str, str], ...]:
    """A sorted label tuple for lookups into ``parse_exposition`` output."""
    return tuple(sorted(labels.items()))


def sample_content(user: str, reply: str) -> TurnContent:
    """Opt-in turn content for capture tests."""
    return TurnContent(
        input_messages=(Message("system", "be brief"), Message("user", user)), output_text=reply
    )


def chk(rule: str, model: str, prefix: str, bucket: str, verdict: str) -> tuple[tuple[str, str], ...]:
    """Label set of a ``handoffmon_checks_total`` series."""
    return L(rule=rule, model=model, prefix_model=prefix, depth_bucket=bucket, verdict=verdict)


def tr(rule: str, model: str, handoff: str, a: str, b: str) -> tuple[tuple[str, str], ...]:
    """Label set of a ``handoffmon_rule_transitions_total`` series."""
    return L(rule=rule, model=model, handoff=handoff, from_verdict=a, to_verdict=b)
