"""The shipped Prometheus rules: promtool validity, unit tests, and what every alert must carry."""

from __future__ import annotations

import itertools
import re
import subprocess

import pytest
import yaml

from tests.conftest import require_binary
from tests.deploy.shipped import (
    ALERTING_DOC,
    GRAFANA_ALERTS,
    RULES,
    RULES_TEST,
    alert_rules,
    from_rules_tool,
    load_yaml,
)

EXPECTED_ALERTS = {
    "HandoffPairRisky",
    "HandoffsIntoModelHurt",
    "HandoffRoutingFollowsFailures",
    "FallbackSwitchCostNegative",
    "DeepAdherenceLow",
    "FallbackStorm",
    "RefitStale",
    "AttributionCoverageFalling",
    "MonitorErrors",
    "QueueDrops",
    "AnswersWithoutReply",
    "RouterFallbacksFrequent",
    "RoutingTableStale",
    "ProxyUpstreamErrors",
    "RefitFailing",
    "RefitJobMislabelled",
    "RefitInputRepaired",
    "StoreFailures",
    "LabelCapPressure",
    "LabelCapReached",
    "HandoffmonTargetDown",
}
IDENTITY = "job, namespace, cluster"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = require_binary("promtool")
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=300, check=False)


def test_promtool_check_rules_accepts_the_shipped_rules() -> None:
    """`promtool check rules` parses every expression and template."""
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    """`promtool test rules` runs the firing and non-firing cases of every alert."""
    proc = _promtool("test", "rules", str(RULES_TEST))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_pass_with_the_recording_rules_one_interval_late() -> None:
    """Each rule group runs on its own timer: with the alert groups evaluated before the recording
    rules, the switch from a stale pooled fit to the local fits keeps a firing alert firing."""
    proc = _promtool("test", "rules", str(RULES_TEST.with_name("handoffmon-rules.lag.test.yml")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.slow
def test_promtool_unit_tests_catch_a_broken_threshold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The unit tests are not vacuous: loosening HandoffPairRisky's Δ threshold makes them fail."""
    shipped = RULES.read_text(encoding="utf-8")
    # the first Δ-upper threshold (HandoffPairRisky's delta_upper branch), however the gauge is
    # selected (through the standing fit since ADR 0013)
    broken, n = re.subn(r'(bound="upper"\}[^<]{0,200}\)\s*)< -0\.05\b', r"\1< -0.5", shipped, count=1)
    assert n == 1 and broken != shipped
    (tmp_path / RULES.name).write_text(broken, encoding="utf-8")
    suite = load_yaml(RULES_TEST)
    suite["tests"] = [  # only the HandoffPairRisky cases: the full suite takes ~15 s
        t
        for t in suite["tests"]
        if any(c["alertname"] == "HandoffPairRisky" for c in t.get("alert_rule_test", []))
    ]
    assert suite["tests"]
    (tmp_path / RULES_TEST.name).write_text(yaml.safe_dump(suite, allow_unicode=True), encoding="utf-8")
    proc = _promtool("test", "rules", str(tmp_path / RULES_TEST.name))
    assert proc.returncode != 0
    assert "alertname: HandoffPairRisky" in proc.stdout + proc.stderr


def test_the_expected_alerts_are_shipped() -> None:
    """The handoff-risk, routing, refit and health alerts the docs describe exist, once each."""
    names = [a["alert"] for a in alert_rules()]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


@pytest.mark.parametrize("alert", alert_rules(), ids=lambda a: a["alert"])
def test_every_alert_has_for_severity_texts_and_a_runbook_in_the_alerting_doc(alert: dict) -> None:  # type: ignore[type-arg]
    """Each alert waits (`for:`), has a severity, summary, description and a runbook URL whose
    anchor is a heading of docs/operations/alerting.md."""
    assert re.fullmatch(r"\d+[smh]", str(alert["for"])), alert.get("for")
    assert alert["labels"]["severity"] in {"info", "warning", "critical"}
    ann = alert["annotations"]
    assert ann["summary"].strip() and ann["description"].strip()
    anchor = ann["runbook_url"].rsplit("#", 1)[1]
    assert anchor == alert["alert"].lower()
    assert "docs/operations/alerting.md#" in ann["runbook_url"]
    assert f"### {alert['alert']}\n" in ALERTING_DOC.read_text(encoding="utf-8")


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    """The unit-test file evaluates each alert at least once expecting alerts and once expecting none."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in load_yaml(RULES_TEST)["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing == EXPECTED_ALERTS
    assert quiet == EXPECTED_ALERTS


STANDING_FIT_ALERTS = {
    "HandoffPairRisky",
    "HandoffsIntoModelHurt",
    "HandoffRoutingFollowsFailures",
    "FallbackSwitchCostNegative",
}


def test_alerts_on_the_standing_fit_outlast_a_switch_in_every_copy() -> None:
    """The alerts that read the standing refit fit (and only they) keep firing through a switch
    between the pooled and the local fits (keep_firing_for), in the rules and in the Grafana
    copy (`keepFiringFor`); the PrometheusRule carries the groups unchanged."""
    kept = {a["alert"]: a.get("keep_firing_for") for a in alert_rules() if "keep_firing_for" in a}
    assert kept == dict.fromkeys(STANDING_FIT_ALERTS, "5m")
    for alert in alert_rules():
        if alert["alert"] in STANDING_FIT_ALERTS:
            assert "handoffmon:refit_standing_publisher:last_success" in alert["expr"], alert["alert"]
    grafana = {r["title"]: r.get("keepFiringFor") for r in load_yaml(GRAFANA_ALERTS)["groups"][0]["rules"]}
    assert {k: v for k, v in grafana.items() if v} == kept


def test_pair_alerts_name_the_model_pair_in_summary_and_description() -> None:
    """Pair-level alerts name both models via labels so the page says which handoff is risky."""
    for alert in alert_rules():
        if alert["alert"] in {"HandoffPairRisky", "FallbackStorm"}:
            for key in ("summary", "description"):
                text = alert["annotations"][key]
                assert "$labels.prefix_model" in text and "$labels.model" in text, (alert["alert"], key)


def test_every_aggregation_and_match_keeps_the_identity_labels() -> None:
    """Every `by (...)` and `on (...)` clause in the rules starts with job, namespace, cluster,
    so two deployments are never summed or matched together (`ignoring`/`group_left` keep
    them by construction)."""
    text = RULES.read_text(encoding="utf-8")
    clauses = re.findall(r"\b(by|on) \(([^)]*)\)", text)
    assert len(clauses) > 40
    bad = [f"{kw} ({labels})" for kw, labels in clauses if not labels.startswith(IDENTITY)]
    assert not bad, bad
    assert "without (" not in text


def test_identity_labels_can_be_swapped_and_the_result_still_passes_promtool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`from_rules --identity-labels job,env` rewrites every clause; promtool accepts the result."""
    tool = from_rules_tool()
    assert tool.main(["--identity-labels", "job,env", "--out-dir", str(tmp_path)]) == 0
    text = (tmp_path / RULES.name).read_text(encoding="utf-8")
    assert IDENTITY not in text and text.count("by (job, env,") >= 20
    assert "job, env" in (tmp_path / "prometheusrule.yaml").read_text(encoding="utf-8")
    proc = _promtool("check", "rules", str(tmp_path / RULES.name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with pytest.raises(ValueError):
        tool.relabel(text, ["bad-label"])


def _expand(values: str) -> list[float | None]:
    """promtool's expanding notation (``0+10x30 _ 5x3 stale``) as one value per interval
    (None: no sample)."""
    out: list[float | None] = []
    for token in str(values).split():
        if token in ("_", "stale"):
            out.append(None)
            continue
        m = re.fullmatch(r"(_|-?[\d.e]+)(?:([+-])([\d.e]+))?x(\d+)", token)
        if not m:
            out.append(float(token))
            continue
        start, sign, step, times = m.groups()
        if start == "_":
            out.extend([None] * int(times))
            continue
        delta = (float(step) if sign == "+" else -float(step)) if step else 0.0
        out.extend(float(start) + i * delta for i in range(int(times) + 1))
    return out


def _minutes(duration: str) -> float:
    return sum(float(n) * {"h": 60, "m": 1, "s": 1 / 60}[u] for n, u in re.findall(r"(\d+)([hms])", duration))


def test_expanding_notation_reader() -> None:
    """The reader below agrees with promtool's notation on the forms the suite uses."""
    assert _expand("0+10x2 _ 5x1 3-1x2") == [0, 10, 20, None, 5, 5, 3, 2, 1]


def test_every_alert_is_tested_quiet_without_handoffmon_series() -> None:
    """A Prometheus that never scraped handoffmon (no handoffmon series at all) fires nothing:
    no alert reads absent data as a problem (an `absent()` or `or vector(1)` would)."""
    quiet: set[str] = set()
    for case in load_yaml(RULES_TEST)["tests"]:
        if any("handoffmon" in s["series"] for s in case["input_series"]):
            continue
        quiet |= {c["alertname"] for c in case.get("alert_rule_test", []) if not c.get("exp_alerts")}
    assert quiet == EXPECTED_ALERTS


def test_every_alert_is_tested_across_a_counter_reset() -> None:
    """A replica restart resets its counters: every alert is evaluated after a reset of a
    counter in its test's input (a `_total` series whose value falls), and the reset cases
    expect both firing alerts (a failure that goes on through the restart keeps firing) and
    quiet ones (a restart alone pages nothing)."""
    evaluated: set[str] = set()
    firing = quiet = 0
    for case in load_yaml(RULES_TEST)["tests"]:
        interval = _minutes(case.get("interval", "1m"))
        resets = []
        for s in case["input_series"]:
            if "_total{" not in s["series"]:
                continue
            seen = [(i, v) for i, v in enumerate(_expand(s["values"])) if v is not None]
            resets += [i * interval for (_, a), (i, b) in itertools.pairwise(seen) if b < a]
        if not resets:
            continue
        for check in case.get("alert_rule_test", []):
            if _minutes(check["eval_time"]) > min(resets):
                evaluated.add(check["alertname"])
                if check.get("exp_alerts"):
                    firing += 1
                else:
                    quiet += 1
    assert evaluated == EXPECTED_ALERTS
    assert firing >= 10 and quiet >= 10
