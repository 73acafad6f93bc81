"""OTel counting on the check thread makes few SDK measurements per turn, and sums the rest right.

One synchronous SDK measurement costs ~7 µs (a ``Measurement`` built, its attributes cleaned
and hashed, the exemplar filter asked); a turn made one per check, checker time, error,
transition, baseline verdict, cell stat, attribution method and fallback (~13 in
bench_export, 92 µs p50 against Prometheus' 11). Only the measurements that carry exemplars
(turns, checks) and the histogram stay synchronous; the other counters are summed in memory and
read at collection, with the same values.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from handoffmon.exporters.otel import OTelExporter
from handoffmon.labels import LabelGuard
from tests.exporters.test_otel import points
from tests.exporters.turns import make_result


class _CountingFilter(AlwaysOnExemplarFilter):
    """Asked once for every synchronous measurement, on the thread that records it."""

    def __init__(self) -> None:
        self.calls = 0

    def should_sample(self, value: Any, time_unix_nano: int, attributes: Any, context: Any) -> bool:
        self.calls += 1
        return super().should_sample(value, time_unix_nano, attributes, context)


def _values(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    return {k: p.value for k, p in points(reader, name).items()}


def _turn() -> Any:
    return make_result(
        depth=3,
        author="gpt",
        prefix_model="claude",
        checks=[("json", "fail"), ("lang", "error"), ("length", "pass")],
        transitions=[("json", "pass", "fail"), ("lang", "pass", "error"), ("length", "pass", "pass")],
        methods=["chain", "content"],
        fallbacks=2,
        reasons={"lang": "raised:ValueError"},
    )


def test_a_turn_makes_five_sdk_measurements_and_the_summed_counters_are_exact() -> None:
    seen = _CountingFilter()
    reader = InMemoryMetricReader()
    exporter = OTelExporter(
        meter_provider=MeterProvider(metric_readers=[reader], exemplar_filter=seen, shutdown_on_exit=False),
        guard=LabelGuard(),
    )
    assert exporter.export(_turn())  # first turn of its cells: their verdicts start at 0 too
    seen.calls = 0
    assert exporter.export(_turn())
    # handoffmon_turns 1 + handoffmon_checks 3 + handoffmon_history_tokens 1
    assert seen.calls == 5, seen.calls

    # make_result's checks take 0.001 s each
    assert _values(reader, "handoffmon_check_seconds") == {
        (("rule", r),): 0.002 for r in ("json", "lang", "length")
    }
    assert _values(reader, "handoffmon_check_errors") == {(("reason", "raised"), ("rule", "lang")): 2}
    transitions = _values(reader, "handoffmon_rule_transitions")
    assert sorted(transitions.values()) == [2, 2, 2]
    assert {dict(k)["to_verdict"] for k in transitions} == {"fail", "error", "pass"}
    assert _values(reader, "handoffmon_attributions") == {
        (("method", "chain"),): 2,
        (("method", "content"),): 2,
        (("method", "response_id"),): 0,
        (("method", "unknown"),): 0,
    }
    assert _values(reader, "handoffmon_fallbacks") == {
        (("model", "gpt"), ("requested_model", "gpt-group")): 4
    }
    assert _values(reader, "handoffmon_turns") == {
        (("depth_bucket", "3-4"), ("model", "gpt"), ("prefix_model", "claude")): 2
    }
