"""Cardinality guard: capped model/rule labels, always-allowed values, depth only as buckets."""

from __future__ import annotations

import random
import string
import threading
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.config import HandoffmonConfig
from handoffmon.depth import DepthBuckets
from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import MAX_LABEL_CHARS, MAX_STAGES, OTHER, LabelGuard
from handoffmon.types import VERDICTS
from tests.exporters.turns import make_result, only, parse_exposition


def garbage_names(n: int, seed: int = 7) -> list[str]:
    """n distinct random model names, some very long, some with quotes and unicode."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + '-_./:"\\ éß漢'
    names: set[str] = set()
    while len(names) < n:
        names.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))))
    return sorted(names)


def test_5000_garbage_models_stay_within_cap_plus_other() -> None:
    """5,000 distinct model names → at most max_models series + one `other` series, on both exporters."""
    cap = 20
    guard = LabelGuard(max_models=cap, rules=["json"])
    prom = PrometheusExporter(CollectorRegistry(), guard=guard, multiprocess=False)
    reader = InMemoryMetricReader()
    otel = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=guard)
    names = garbage_names(5000)
    for name in names:
        result = make_result(author=name, checks=[("json", "pass")])
        assert prom.export(result) and otel.export(result)

    series = parse_exposition(generate_latest(prom.registry).decode())
    turns = only(series, "handoffmon_turns_total")
    models = {dict(k)["model"] for k in turns}
    assert len(turns) == cap + 1
    assert OTHER in models and len(models - {OTHER}) == cap
    assert turns[(("depth_bucket", "1"), ("model", OTHER), ("prefix_model", "none"))] == 5000 - cap
    assert len(only(series, "handoffmon_checks_total")) == (cap + 1) * len(VERDICTS)  # all verdicts from 0
    assert all(len(m) <= MAX_LABEL_CHARS for m in models)

    data = reader.get_metrics_data()
    points = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "handoffmon_turns"
        for p in m.data.data_points
    ]
    assert len(points) == cap + 1
    assert sum(p.value for p in points) == 5000


def test_none_and_unknown_never_count_against_the_cap() -> None:
    """With the cap full, `none` and `unknown` still export as themselves."""
    guard = LabelGuard(max_models=2)
    assert [guard.model(m) for m in ("a", "b", "c")] == ["a", "b", OTHER]
    assert guard.model("none") == "none"
    assert guard.model("unknown") == "unknown"
    assert guard.model(None) == "unknown"
    assert guard.model("") == "unknown"
    assert guard.model("a") == "a"  # admitted names stay admitted


def test_configured_rules_are_admitted_before_per_request_rules() -> None:
    """Configured rule names keep their labels even if per-request rules arrive first."""
    config = HandoffmonConfig(
        rules=[{"name": "json", "check": "json_valid"}, {"name": "lang", "check": "language"}],
        telemetry={"max_rules": 3},
    )
    guard = LabelGuard.from_config(config)
    assert guard.rule("adhoc-1") == "adhoc-1"  # third slot
    assert guard.rule("adhoc-2") == OTHER
    assert guard.rule("lang") == "lang"
    assert guard.rule("json") == "json"
    assert guard.rule("all") == "all"  # pooled refit label is always allowed


def test_long_names_are_truncated_consistently() -> None:
    """Over-long names are cut to MAX_LABEL_CHARS, and the same name maps to the same label."""
    guard = LabelGuard()
    long = "m" * 1000
    assert guard.model(long) == "m" * MAX_LABEL_CHARS
    assert guard.model(long + "x") == "m" * MAX_LABEL_CHARS


def test_depth_is_only_ever_a_bucket_label() -> None:
    """A valid bucket label passes through; anything else is replaced by the bucket of the depth."""
    guard = LabelGuard(buckets=DepthBuckets((1, 3, 10)))
    assert guard.depth_bucket("3-9", 5) == "3-9"
    assert guard.depth_bucket("5", 5) == "3-9"
    assert guard.depth_bucket("", 40) == "10+"


def test_concurrent_admission_never_exceeds_the_cap() -> None:
    """Eight threads racing 500 new names each admit exactly max_models of them."""
    guard = LabelGuard(max_models=37)
    names = garbage_names(4000, seed=3)

    def work(chunk: list[str]) -> None:
        for n in chunk:
            guard.model(n)

    threads = [threading.Thread(target=work, args=(names[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(guard.models) == 37
    assert guard.usage()["model"] == (37, 37)


def test_stages_are_bounded() -> None:
    """Monitoring stage names are capped too (they come from code, but a bug must not explode series)."""
    guard = LabelGuard()
    labels = {guard.stage(f"stage-{i}") for i in range(MAX_STAGES + 10)}
    assert len(labels) == MAX_STAGES + 1 and OTHER in labels


def test_configured_models_keep_their_labels_after_a_flood_of_random_names() -> None:
    """An upstream echoing whatever model a client asks for: 500 random names fill every
    first-come slot, yet the canonical names, shadow targets and candidates the config names
    are still their own label values (and the cap still bounds the total)."""
    config = HandoffmonConfig(
        attribution={"canonical_models": {"azure/gpt4o-eu": "gpt-4o", "claude-3-5": "claude-sonnet"}},
        shadow={"targets": ["gpt-4o-mini"], "candidates": {"llama-70b": ["mistral-large"]}},
        rules=[{"name": "json", "check": "json_valid", "scope": {"model_groups": ["support"]}}],
        telemetry={"max_models": 10},
    )
    guard = LabelGuard.from_config(config)
    prom = PrometheusExporter(CollectorRegistry(), guard=guard, multiprocess=False)
    for name in garbage_names(500, seed=11):
        prom.export(make_result(author=name, requested_model=name))
    configured = ["gpt-4o", "claude-sonnet", "gpt-4o-mini", "llama-70b", "mistral-large"]
    assert [guard.model(m) for m in configured] == configured
    assert guard.requested_model("support") == "support"
    assert guard.model("a-real-but-unconfigured-model") == OTHER
    assert guard.usage()["model"] == (10, 10)  # 5 configured + 5 first-come
    prom.export(make_result(author="gpt-4o", requested_model="support"))
    turns = only(parse_exposition(generate_latest(prom.registry).decode()), "handoffmon_turns_total")
    authors = {dict(labels)["model"] for labels in turns}
    assert "gpt-4o" in authors and len(authors - {OTHER}) <= 10


def test_configured_names_keep_their_slots_when_another_worker_filled_the_shared_file(tmp_path: Path) -> None:
    """Multiprocess: a worker flooded the shared name file before this one started; the
    configured model and rule are still admitted here, as themselves."""
    first = LabelGuard(max_models=4, max_rules=4, shared_dir=tmp_path)
    for name in garbage_names(50, seed=5):
        first.model(name)
        first.rule(name)
    assert first.model("gpt-4o") == OTHER
    later = LabelGuard(max_models=4, max_rules=4, shared_dir=tmp_path, models=["gpt-4o"], rules=["json"])
    assert later.model("gpt-4o") == "gpt-4o"
    assert later.rule("json") == "json"
    assert later.model("another") == OTHER
