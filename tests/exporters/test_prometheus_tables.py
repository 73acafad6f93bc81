"""PrometheusExporter's per-turn tables expose exactly what per-turn prometheus_client counters did.

The per-turn counters and histograms live in plain dicts served by the exporter's collector at
scrape time (issue 21); the prometheus_client children (``_tables=False``, and the
multiprocess mode) are the reference: same families, samples, order, values and exemplars.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from handoffmon.config import config_from_mapping
from handoffmon.counts import CELL_TOTAL, turn_cell_stats
from handoffmon.exporters import prometheus
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.integrations.router import RouterWrapper
from handoffmon.labels import LabelGuard, refit_input_labels
from handoffmon.pipeline.monitor import Monitor
from handoffmon.types import TurnResult
from tests.exporters.turns import make_result, scripted_conversation
from tests.integrations.zero_router import ZeroLatencyRouter

RULES = [
    {"name": "no_commas", "check": "no_commas"},
    {"name": "mentions_ring", "check": "regex_must_match", "params": {"pattern": "(?i)ring"}},
]
WORDS = ("policy", "answer,", "model", "turn", "ring", "sorry", "reply", "user")


class _Recorder:
    """An exporter that keeps every ``TurnResult`` the pipeline hands on."""

    export_inline = True

    def __init__(self) -> None:
        self.results: list[TurnResult] = []

    def export(self, result: TurnResult) -> bool:
        self.results.append(result)
        return True

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _pipeline_results(conversations: int = 12, turns: int = 6) -> list[TurnResult]:
    """Turn results of a real pipeline: three models picked at random, handoffs, clean turns."""
    rng = random.Random(7)
    router = ZeroLatencyRouter(
        {"g1": ("dep-1", "openai/m1"), "g2": ("dep-2", "openai/m2"), "g3": ("dep-3", "openai/m3")}
    )
    config = config_from_mapping({"rules": RULES, "telemetry": {"log_turns": False}})
    recorder = _Recorder()
    with Monitor(config, exporters=[recorder]) as m:
        wrapped = RouterWrapper(router, m)
        for _ in range(conversations):
            history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
            for _ in range(turns):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 40)))
                history.append({"role": "user", "content": text})
                reply = wrapped.completion(
                    model=rng.choice(("g1", "g2", "g3")), messages=json.loads(json.dumps(history))
                )
                history.append({"role": "assistant", "content": reply.choices[0].message.content})
            m.flush(30)
    assert len(recorder.results) == conversations * turns
    return recorder.results


def _stream() -> list[TurnResult]:
    return [*_pipeline_results(), *scripted_conversation(), make_result(depth=6, checks=[("json", "weird")])]


def _replay(exp: PrometheusExporter, results: list[TurnResult]) -> None:
    for i, result in enumerate(results):
        assert exp.export(result)
        exp.observe_overhead("background", 1e-4 * (i % 7))
        exp.observe_overhead("attribution", 3e-5 * (i % 3) + 1e-6)
        if i % 10 == 0:
            exp.count_error("check")
            exp.count_drop(2)
            exp.observe_overhead("finish", float("nan") if i == 20 else 2.0)


def _pair(**kwargs: Any) -> tuple[PrometheusExporter, PrometheusExporter]:
    guard = kwargs.pop("guard", None)
    old = PrometheusExporter(
        CollectorRegistry(), multiprocess=False, _tables=False, guard=guard() if guard else None, **kwargs
    )
    new = PrometheusExporter(
        CollectorRegistry(), multiprocess=False, guard=guard() if guard else None, **kwargs
    )
    assert old._t is None and new._t is not None
    return old, new


@pytest.mark.parametrize("plans", [1024, 2])
def test_tables_expose_what_per_turn_counters_did(plans: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte-identical Prometheus text and OpenMetrics after a real pipeline's turns and health
    calls; most turns counted from the keys kept per turn shape (at most ``PLAN_CACHE``)."""
    monkeypatch.setattr(prometheus, "PLAN_CACHE", plans)
    results = _stream()
    old, new = _pair()
    _replay(old, results)
    _replay(new, results)
    assert 0 < len(new._plans) <= plans
    text = generate_latest(new.registry).decode()
    assert text == generate_latest(old.registry).decode()
    assert generate_openmetrics(new.registry) == generate_openmetrics(old.registry)
    for name in (
        "handoffmon_cell_stats_total",
        "handoffmon_baseline_checks_total",
        "handoffmon_rule_transitions_total",
    ):
        assert f"\n{name}{{" in text  # the stream exercised every per-turn family


def test_tables_keep_the_label_caps_and_overflow_accounting() -> None:
    """Under tight caps both map the same names to ``other`` and count the same overflows."""
    results = _stream()
    old, new = _pair(guard=lambda: LabelGuard(max_models=2, max_rules=1))
    _replay(old, results)
    _replay(new, results)
    assert new._plans  # the admitted names' turns: from kept keys; the others through the guard
    text = generate_latest(new.registry).decode()
    assert text == generate_latest(old.registry).decode()
    assert 'model="other"' in text and 'handoffmon_label_overflows_total{label="model"} 0.0' not in text


def test_tables_carry_the_last_exemplar_per_series() -> None:
    """With exemplars on, the same exemplars as prometheus_client's (their timestamps aside)."""
    results = _stream()
    old, new = _pair(exemplars=True)
    _replay(old, results)
    _replay(new, results)
    stamp = re.compile(r"( # \{[^}]*\} \S+) \S+$", re.MULTILINE)
    got = stamp.sub(r"\1", generate_openmetrics(new.registry).decode())
    assert got == stamp.sub(r"\1", generate_openmetrics(old.registry).decode())
    assert got.count(" # {conversation_id=") > 10


def test_multiprocess_mode_keeps_prometheus_client_values() -> None:
    """Under ``PROMETHEUS_MULTIPROC_DIR`` only prometheus_client's values reach the files: no tables."""
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=True)
    assert exp._t is None
    assert exp.export(make_result(checks=[("json", "pass")]))
    assert (
        exp.registry.get_sample_value(
            "handoffmon_turns_total", {"model": "gpt-4o", "prefix_model": "none", "depth_bucket": "1"}
        )
        == 1.0
    )


def _reference_refit_input_labels(
    result: TurnResult, guard: LabelGuard
) -> tuple[list[tuple[str, ...]], list[tuple[tuple[str, ...], int]]]:
    """``refit_input_labels`` as it was before it built its keys directly (from ``turn_cell_stats``)."""
    ctx = result.context
    model, prefix = guard.model(result.record.author), guard.model(ctx.prefix_model)
    bucket = guard.depth_bucket(result.depth_bucket, ctx.depth)
    baseline: list[tuple[str, ...]] = (
        [(guard.rule(c.rule), model, bucket, guard.verdict(c.verdict)) for c in result.checks]
        if result.clean
        else []
    )
    stats = [
        (
            (
                guard.rule(s.rule),
                model,
                prefix,
                CELL_TOTAL if s.depth_bucket == CELL_TOTAL else bucket,
                s.stat,
            ),
            v,
        )
        for s, v in turn_cell_stats(result)
    ]
    return baseline, stats


def test_refit_input_labels_match_the_cell_stats_definition() -> None:
    """Same keys, values and order as from ``turn_cell_stats``, and the same guard lookups (caps)."""
    results = _stream()
    results.append(dataclasses.replace(results[5], depth_bucket="*"))
    results.append(dataclasses.replace(results[7], depth_bucket="bogus"))
    new, old = LabelGuard(max_models=2, max_rules=2), LabelGuard(max_models=2, max_rules=2)
    for result in results:
        assert refit_input_labels(result, new) == _reference_refit_input_labels(result, old)
    assert new.overflows() == old.overflows() and new.overflow_total > 0
    assert sum(len(refit_input_labels(r, new)[1]) for r in results) > len(results)


def test_observe_overheads_equals_one_observation_at_a_time() -> None:
    """A turn's overheads in one call give the same histogram as one call per stage (both modes)."""
    items = [("begin", 2e-6), ("attribution", 4e-5), ("finish", 1e-6), ("background", 3e-4), ("odd", -1.0)]
    for tables in (True, False):
        one, many = (
            PrometheusExporter(CollectorRegistry(), multiprocess=False, _tables=tables) for _ in "ab"
        )
        for _ in range(3):
            for stage, seconds in items:
                one.observe_overhead(stage, seconds)
            many.observe_overheads(items)
        assert generate_latest(many.registry) == generate_latest(one.registry)
        assert b'handoffmon_overhead_seconds_count{stage="background"} 3.0' in generate_latest(many.registry)


def test_observe_overheads_equals_one_observe_per_stage_past_the_stage_cap() -> None:
    """Batched overheads (stage keys cached once admitted) expose and count overflows like
    one ``observe_overhead`` per item, also for stages beyond ``MAX_STAGES``."""
    from handoffmon.labels import MAX_STAGES

    one, many = PrometheusExporter(CollectorRegistry()), PrometheusExporter(CollectorRegistry())
    stages = [f"stage{i}" for i in range(MAX_STAGES + 8)] + ["x" * 200, "background"]
    for rep in range(3):
        items = [(s, 1e-5 * (i + rep)) for i, s in enumerate(stages)] + [("finish", float("nan"))]
        for stage, seconds in items:
            one.observe_overhead(stage, seconds)
        many.observe_overheads(items)
    assert many.guard.overflows() == one.guard.overflows()
    assert many.guard.overflows()["stage"] > 0
    for exp in (one, many):
        exp.export(make_result(checks=[("json", "pass")]))  # publishes the overflow counts
    text = generate_latest(many.registry).decode()
    assert text == generate_latest(one.registry).decode()
    assert 'stage="other"' in text
