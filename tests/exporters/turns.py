"""Test helpers: a scripted multi-model conversation and scrape parsing (turns: handoffmon.testing)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from handoffmon.testing import make_turn_result as make_result  # the exporter tests' short name
from handoffmon.types import (
    Message,
    TurnContent,
    TurnResult,
)

FINISHED_AT = 1_800_000_000.0
"""``make_result``'s default ``finished_at``."""


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


def LF(**labels: str) -> tuple[tuple[str, str], ...]:
    """``L`` of a refit gauge published by a process's own refit (``fit="local"``)."""
    return L(fit="local", **labels)


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


def export_turn(exporter: Any, result: TurnResult) -> bool:
    """Both halves of an ``OTelExporter``, as the pipeline runs them: the events (and own
    span), then the counting; True when both took the turn."""
    emitted = exporter.events.export(result)
    return bool(exporter.export(result) and emitted)


def prometheus_total(registry: Any, name: str) -> float:
    """The sum of counter ``name``'s ``_total`` samples over all its labels in ``registry``."""
    return sum(
        s.value for f in registry.collect() if f.name == name for s in f.samples if s.name == f"{name}_total"
    )
