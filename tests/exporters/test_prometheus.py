"""PrometheusExporter: exact series after a scripted conversation, health API, exemplars, refit gauges."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from handoffmon._version import __version__
from handoffmon.errors import HandoffmonError
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.serving import start_metrics_server
from handoffmon.labels import LabelGuard
from handoffmon.protocols import Exporter, MonitorObserver
from tests.exporters.refits import make_refit
from tests.exporters.turns import (
    LF,
    L,
    chk,
    counted,
    make_result,
    only,
    parse_exposition,
    scripted_conversation,
    tr,
)


@pytest.fixture
def exporter() -> PrometheusExporter:
    return PrometheusExporter(CollectorRegistry(), multiprocess=False)


def scrape(exp: PrometheusExporter) -> dict:
    return parse_exposition(generate_latest(exp.registry).decode())


def test_implements_exporter_and_observer_protocols(exporter: PrometheusExporter) -> None:
    """The pipeline finds the exporter and its health API through the shared protocols."""
    assert isinstance(exporter, Exporter)
    assert isinstance(exporter, MonitorObserver)


def test_scrape_after_scripted_conversation_has_exact_series(exporter: PrometheusExporter) -> None:
    """Over HTTP /metrics: every turn/check/transition/attribution series and value, nothing more."""
    for result in scripted_conversation():
        assert exporter.export(result) is True
    with start_metrics_server(exporter.registry, 0) as server:
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
    series = parse_exposition(text)

    assert only(series, "handoffmon_turns_total") == {
        L(model="gpt", prefix_model="none", depth_bucket="1"): 2,
        L(model="gpt", prefix_model="gpt", depth_bucket="2"): 1,
        L(model="claude", prefix_model="gpt", depth_bucket="3-4"): 1,
        L(model="claude", prefix_model="claude", depth_bucket="3-4"): 1,
        L(model="claude", prefix_model="none", depth_bucket="1"): 1,
        L(model="llama", prefix_model="unknown", depth_bucket="2"): 1,
    }

    assert counted(series, "handoffmon_checks_total") == {
        chk("json", "gpt", "none", "1", "pass"): 2,
        chk("lang", "gpt", "none", "1", "pass"): 1,
        chk("lang", "gpt", "none", "1", "fail"): 1,
        chk("json", "gpt", "gpt", "2", "pass"): 1,
        chk("lang", "gpt", "gpt", "2", "fail"): 1,
        chk("json", "claude", "gpt", "3-4", "fail"): 1,
        chk("lang", "claude", "gpt", "3-4", "not_applicable"): 1,
        chk("json", "claude", "claude", "3-4", "fail"): 1,
        chk("lang", "claude", "claude", "3-4", "error"): 1,
        chk("json", "claude", "none", "1", "pass"): 1,
        chk("json", "llama", "unknown", "2", "pass"): 1,
    }

    assert only(series, "handoffmon_rule_transitions_total") == {
        tr("json", "gpt", "false", "pass", "pass"): 1,
        tr("lang", "gpt", "false", "pass", "fail"): 1,
        tr("json", "claude", "true", "pass", "fail"): 1,
        tr("json", "claude", "false", "fail", "fail"): 1,
        tr("json", "llama", "unknown", "pass", "pass"): 1,
    }
    assert only(series, "handoffmon_attributions_total") == {
        L(method="chain"): 5,
        L(method="content"): 1,
        L(method="response_id"): 0,
        L(method="unknown"): 1,
    }
    assert only(series, "handoffmon_fallbacks_total") == {L(requested_model="gpt-group", model="claude"): 1}
    assert only(series, "handoffmon_history_tokens_count") == {
        L(depth_bucket="1"): 3,
        L(depth_bucket="2"): 2,
        L(depth_bucket="3-4"): 2,
    }
    # 12 checks of 1 ms each: json 7, lang 5
    secs = only(series, "handoffmon_check_seconds_total")
    assert secs[L(rule="json")] == pytest.approx(0.007)
    assert secs[L(rule="lang")] == pytest.approx(0.005)
    assert only(series, "handoffmon_build_info") == {L(version=__version__): 1}


def test_health_api_counts_errors_drops_and_overhead_buckets(exporter: PrometheusExporter) -> None:
    """observe_overhead/count_error/count_drop land in the histogram and counters the pipeline pushes to."""
    exporter.observe_overhead("attribution", 30e-6)
    exporter.observe_overhead("attribution", 2e-3)
    exporter.observe_overhead("check", 0.04)
    exporter.count_error("store")
    exporter.count_error("store")
    exporter.count_error("check")
    exporter.count_drop()
    exporter.count_drop(4)
    series = scrape(exporter)
    assert counted(series, "handoffmon_monitor_errors_total") == {L(stage="store"): 2, L(stage="check"): 1}
    assert only(series, "handoffmon_queue_dropped_total") == {(): 5}
    buckets = only(series, "handoffmon_overhead_seconds_bucket")
    assert buckets[L(stage="attribution", le="2.5e-05")] == 0  # 30 µs is above 25 µs
    assert buckets[L(stage="attribution", le="5e-05")] == 1
    assert buckets[L(stage="attribution", le="0.0025")] == 2
    assert buckets[L(stage="check", le="0.025")] == 0
    assert buckets[L(stage="check", le="0.05")] == 1
    assert only(series, "handoffmon_overhead_seconds_count") == {
        L(stage="attribution"): 2,
        L(stage="check"): 1,
    }


def test_responses_without_reply_start_at_zero_and_count_by_status(exporter: PrometheusExporter) -> None:
    """handoffmon_responses_without_reply_total: every status at 0 before any (``increase()``
    sees the first), then one per ``count_no_reply``; an unknown status (never sent) reads
    ``other``, so the label stays bounded."""
    name = "handoffmon_responses_without_reply_total"
    statuses = ("failed", "cancelled", "incomplete", "refusal", "error", "unreadable")
    assert only(scrape(exporter), name) == {L(status=s): 0 for s in statuses}
    for status in ("incomplete", "failed", "incomplete", "refusal", "unreadable", "odd"):
        exporter.count_no_reply(status)
    assert only(scrape(exporter), name) == {
        L(status="failed"): 1,
        L(status="cancelled"): 0,
        L(status="incomplete"): 2,
        L(status="refusal"): 1,
        L(status="error"): 0,
        L(status="unreadable"): 1,
        L(status="other"): 1,
    }


def test_conversation_ids_are_exemplars_in_openmetrics_only() -> None:
    """With exemplars on, the conversation id rides on turn/check counters in OpenMetrics (not a label)."""
    exp = PrometheusExporter(CollectorRegistry(), exemplars=True, multiprocess=False)
    exp.export(make_result(conversation_id="conv-exemplar-42", checks=[("json", "pass")]))
    om = generate_openmetrics(exp.registry).decode()
    line = 'handoffmon_turns_total{depth_bucket="1",model="gpt-4o",prefix_model="none"} 1.0'
    assert f'{line} # {{conversation_id="conv-exemplar-42"}} 1.0' in om
    assert om.count('# {conversation_id="conv-exemplar-42"}') == 2  # turns + checks
    assert "conv-exemplar-42" not in generate_latest(exp.registry).decode()  # Prometheus text: no exemplars


def test_conversation_ids_never_appear_without_exemplars(exporter: PrometheusExporter) -> None:
    """Default: no conversation id anywhere in either exposition format."""
    exporter.export(make_result(conversation_id="conv-secret-7", checks=[("json", "fail")]))
    assert "conv-secret-7" not in generate_latest(exporter.registry).decode()
    assert "conv-secret-7" not in generate_openmetrics(exporter.registry).decode()


def test_out_of_contract_values_are_bounded(exporter: PrometheusExporter) -> None:
    """An unknown verdict counts as error; a bogus depth bucket label is recomputed from the depth."""
    result = make_result(depth=6, checks=[("json", "weird")])
    result = type(result)(
        context=result.context,
        record=result.record,
        depth_bucket="bogus",
        checks=result.checks,
        transitions=(),
        attribution_methods=("chain",) * 5,
    )
    assert exporter.export(result)
    series = scrape(exporter)
    assert set(counted(series, "handoffmon_checks_total")) == {
        L(rule="json", model="gpt-4o", prefix_model="none", depth_bucket="5-8", verdict="error")
    }


def test_export_never_raises_and_reports_failure(exporter: PrometheusExporter) -> None:
    """A malformed result returns False instead of raising into the pipeline."""
    assert exporter.export(object()) is False  # type: ignore[arg-type]


def test_second_exporter_on_same_registry_is_a_clear_error() -> None:
    """Two exporters on one registry fail fast with a HandoffmonError that says what to do."""
    reg = CollectorRegistry()
    PrometheusExporter(reg, multiprocess=False)
    with pytest.raises(HandoffmonError, match="own CollectorRegistry"):
        PrometheusExporter(reg, multiprocess=False)


def test_global_registry_is_untouched_by_default(exporter: PrometheusExporter) -> None:
    """Nothing is registered on prometheus_client's global REGISTRY unless passed explicitly."""
    exporter.export(make_result())
    assert "handoffmon_turns_total" not in generate_latest(REGISTRY).decode()


def test_publish_refit_sets_every_gauge(exporter: PrometheusExporter) -> None:
    """Refit values land in the documented gauges with rule="all" for pooled values."""
    assert exporter.publish_refit(make_refit())
    s = scrape(exporter)
    assert only(s, "handoffmon_prefix_influence")[LF(model="gpt", rule="json")] == -0.06
    assert only(s, "handoffmon_suffix_susceptibility")[LF(model="claude", rule="all")] == -0.03
    assert only(s, "handoffmon_prefix_influence_stderr")[LF(model="gpt", rule="json")] == 0.02
    assert only(s, "handoffmon_suffix_susceptibility_stderr")[LF(model="claude", rule="all")] == 0.02
    assert only(s, "handoffmon_handoff_risk")[LF(prefix_model="gpt", model="claude", rule="all")] == -0.1
    delta = only(s, "handoffmon_handoff_delta")
    assert delta[LF(prefix_model="gpt", model="claude", rule="json", bound="estimate")] == -0.12
    assert delta[LF(prefix_model="gpt", model="claude", rule="json", bound="lower")] == pytest.approx(-0.17)
    assert delta[LF(prefix_model="gpt", model="claude", rule="json", bound="upper")] == pytest.approx(-0.07)
    sig = only(s, "handoffmon_handoff_significant")
    assert sig[LF(prefix_model="gpt", model="claude", rule="json")] == 1
    into_sig = only(s, "handoffmon_handoff_into_significant")
    assert into_sig == {
        LF(model=m, rule=r): float(m == "claude") for m in ("gpt", "claude") for r in ("json", "all")
    }
    assert sig[LF(prefix_model="claude", model="gpt", rule="json")] == 0
    assert (
        only(s, "handoffmon_handoff_checked_turns")[LF(prefix_model="gpt", model="claude", rule="json")]
        == 100
    )
    stat = only(s, "handoffmon_stationary_adherence")
    assert stat == {
        LF(model=m, rule=r, after_handoff=f): v
        for r in ("json", "all")
        for m, f, v in (("gpt", "all", 0.75), ("claude", "true", 0.5), ("claude", "false", 0.8))
    }
    assert math.isinf(
        only(s, "handoffmon_adherence_half_life_turns")[LF(model="claude", rule="json", after_handoff="true")]
    )
    assert only(s, "handoffmon_refit_r2") == {LF(rule="all"): 0.7}  # json's R² is NaN → left out
    assert only(s, "handoffmon_refit_mu") == {LF(rule="json"): -0.05, LF(rule="all"): -0.05}
    assert only(s, "handoffmon_refit_last_success_timestamp_seconds") == {LF(): 1_800_000_100.0}


def test_last_success_timestamp_is_absent_until_a_refit_succeeds(exporter: PrometheusExporter) -> None:
    """Before any refit the exposition has no ``handoffmon_refit_last_success_timestamp_seconds``
    (a 0 would say "refitted in 1970": RefitStale's "none published" branch never fired and the
    dashboards showed 57 years); the first successful refit adds it. Its name is reserved
    from the start: another collector cannot take it."""
    name = "handoffmon_refit_last_success_timestamp_seconds"
    text = generate_latest(exporter.registry).decode()
    assert "handoffmon_turns_total" in text and name not in text
    exporter.publish_refit(make_refit(created_at=1_800_000_100.0))
    text = generate_latest(exporter.registry).decode()
    assert f'{name}{{fit="local"}} 1.8000001e+09' in text
    assert f"# TYPE {name} gauge" in text
    assert text.count(f"# TYPE {name} ") == 1
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Gauge(name, "taken", registry=exporter.registry)


def test_republishing_removes_vanished_series(exporter: PrometheusExporter) -> None:
    """A pair that is no longer observed loses its Δ series; the still-present ones keep values."""
    exporter.publish_refit(make_refit())
    exporter.publish_refit(make_refit(created_at=1_800_000_200.0, with_claude_pair=False))
    s = scrape(exporter)
    delta = only(s, "handoffmon_handoff_delta")
    assert {dict(k)["prefix_model"] for k in delta} == {"gpt"}
    assert len(delta) == 6  # gpt→claude × (json, all) × 3 bounds
    assert LF(prefix_model="claude", model="gpt", rule="json") not in only(
        s, "handoffmon_handoff_significant"
    )
    assert only(s, "handoffmon_handoff_risk")[LF(prefix_model="claude", model="gpt", rule="json")] == 0.01
    assert only(s, "handoffmon_refit_last_success_timestamp_seconds") == {LF(): 1_800_000_200.0}


def test_refit_models_beyond_cap_are_left_out() -> None:
    """Refit gauges never collapse several models into one `other` series."""
    guard = LabelGuard(max_models=1)
    exp = PrometheusExporter(CollectorRegistry(), guard=guard, multiprocess=False)
    exp.export(make_result(author="gpt"))
    exp.publish_refit(make_refit())
    models = {dict(k)["model"] for k in only(scrape(exp), "handoffmon_prefix_influence")}
    assert models == {"gpt"}


def test_label_usage_gauges_show_cap_pressure() -> None:
    """handoffmon_label_values / _limit let operators alert before names collapse into `other`."""
    exp = PrometheusExporter(
        CollectorRegistry(), guard=LabelGuard(max_models=3, max_rules=5), multiprocess=False
    )
    for name in ("a", "b", "c", "d"):
        exp.export(make_result(author=name, checks=[("r1", "pass")]))
    s = scrape(exp)
    assert only(s, "handoffmon_label_values")[L(label="model")] == 3
    assert only(s, "handoffmon_label_limit")[L(label="model")] == 3
    assert only(s, "handoffmon_label_values")[L(label="rule")] == 1
    assert only(s, "handoffmon_turns_total")[L(model="other", prefix_model="none", depth_bucket="1")] == 1


def test_names_folded_past_a_cap_are_counted_also_when_the_aggregates_folded_them() -> None:
    """handoffmon_label_overflows_total{label} starts at 0 and counts every name folded into
    `other` once, whether this exporter or whoever shares its guard (the monitor's aggregates)
    folded it first."""
    from handoffmon.pipeline.aggregates import Aggregates

    guard = LabelGuard(max_models=2, max_rules=1)
    exp = PrometheusExporter(CollectorRegistry(), guard=guard, multiprocess=False)
    assert only(scrape(exp), "handoffmon_label_overflows_total") == {
        L(label=label): 0 for label in ("model", "requested_model", "rule", "stage")
    }
    agg = Aggregates(guard=guard)
    for name in ("a", "b", "c", "d"):
        result = make_result(author=name, checks=[(f"r-{name}", "pass")])
        agg.add_turn(result)  # c, d and r-b, r-c, r-d folded here
        exp.export(result)  # and again here
    overflows = only(scrape(exp), "handoffmon_label_overflows_total")
    # each folded name once, though the aggregates and the exporter (once per series family
    # it labels) looked it up many times
    assert overflows[L(label="model")] == 2
    assert overflows[L(label="rule")] == 3
    assert overflows[L(label="requested_model")] == overflows[L(label="stage")] == 0
    assert overflows[L(label="model")] + overflows[L(label="rule")] == guard.overflow_total
    admitted = make_result(author="a", checks=[("r-a", "pass")])
    agg.add_turn(admitted)
    exp.export(admitted)
    assert only(scrape(exp), "handoffmon_label_overflows_total") == overflows  # admitted names: no count


def test_no_created_series_and_the_application_keeps_its_own() -> None:
    """handoffmon's counters and histograms expose no `_created` sample, while an application
    counter in the same registry keeps prometheus_client's default (the global switch is untouched)."""
    from prometheus_client import Counter
    from prometheus_client import metrics as client_metrics

    registry = CollectorRegistry()
    app_counter = Counter("app_requests", "The application's own counter.", registry=registry)
    app_counter.inc()
    exp = PrometheusExporter(registry, multiprocess=False)
    for result in scripted_conversation():
        exp.export(result)
    exp.observe_overhead("background", 0.001)
    text = generate_latest(registry).decode()
    assert "app_requests_created" in text
    assert client_metrics._use_created is True  # the process-wide default is still on
    handoffmon_created = [ln for ln in text.splitlines() if ln.startswith("handoffmon_") and "_created" in ln]
    assert handoffmon_created == []
    assert "handoffmon_turns_total{" in text and "handoffmon_overhead_seconds_bucket{" in text
    openmetrics = generate_openmetrics(registry).decode()
    assert "handoffmon_checks_created" not in openmetrics and "handoffmon_checks_total{" in openmetrics


def test_known_label_values_start_at_zero(exporter: PrometheusExporter) -> None:
    """Stages and attribution methods exist at 0 before any event; a new check cell creates
    every verdict, so `rate(...{verdict="error"})` is 0 rather than absent."""
    from handoffmon.types import ATTRIBUTION_METHODS, MONITOR_STAGES, VERDICTS

    s = scrape(exporter)
    assert only(s, "handoffmon_monitor_errors_total") == {L(stage=st): 0 for st in MONITOR_STAGES}
    assert only(s, "handoffmon_attributions_total") == {L(method=m): 0 for m in ATTRIBUTION_METHODS}
    exporter.export(make_result(author="gpt", checks=[("json", "pass")]))
    checks = only(scrape(exporter), "handoffmon_checks_total")
    cell = {"rule": "json", "model": "gpt", "prefix_model": "none", "depth_bucket": "1"}
    assert checks == {L(**cell, verdict=v): (1 if v == "pass" else 0) for v in VERDICTS}


def test_every_monitor_stage_in_the_package_is_initialised() -> None:
    """Each literal stage the package counts (`count_error("x")`, `errors.count("x")`,
    `errors.failed("x", …)`, `_fail("x", …)`) is in MONITOR_STAGES, so no panel starts as "No data"."""
    import re
    from pathlib import Path

    import handoffmon
    from handoffmon.types import MONITOR_STAGES

    root = Path(handoffmon.__file__).parent
    used = {
        m.group(1)
        for path in root.rglob("*.py")
        for m in re.finditer(
            r"(?:count_error|_on_error|_fail|errors\.count|errors\.failed)\(\s*\"([a-z_]+)\"",
            path.read_text(encoding="utf-8"),
        )
    }
    assert {"attribution", "check", "export", "refit", "parse", "store", "integration"} <= used
    assert used <= set(MONITOR_STAGES)


def test_fallbacks_carry_requested_and_serving_model_under_a_cap() -> None:
    """`handoffmon_fallbacks_total{requested_model, model}`; requested groups beyond
    `max_models` become `other` without taking serving-model slots."""
    exp = PrometheusExporter(CollectorRegistry(), guard=LabelGuard(max_models=2), multiprocess=False)
    for group in ("g1", "g2", "g3", "g3"):
        exp.export(make_result(author="gpt", requested_model=group, fallbacks=1))
    exp.export(make_result(author="claude", requested_model="g1", fallbacks=2))
    s = scrape(exp)
    assert only(s, "handoffmon_fallbacks_total") == {
        L(requested_model="g1", model="gpt"): 1,
        L(requested_model="g2", model="gpt"): 1,
        L(requested_model="other", model="gpt"): 2,
        L(requested_model="g1", model="claude"): 2,
    }
    assert only(s, "handoffmon_label_values")[L(label="requested_model")] == 2
    assert only(s, "handoffmon_label_limit")[L(label="requested_model")] == 2
    assert only(s, "handoffmon_label_values")[L(label="model")] == 2
