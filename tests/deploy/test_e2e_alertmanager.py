"""End to end: demo traffic with ONE planted problem → Prometheus (shipped rules) → Alertmanager
(shipped config) → a webhook that gets exactly one grouped notification for it.

The default test replays the recorded demo snapshots (``tests/deploy/conftest.py``); the slow
test drives live demo traffic of the same fleet and shows the same single notification.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.deploy.conftest import ReplayStack, shortened_rules
from tests.deploy.demo_fleets import RISKY_PAIR, RULES
from tests.deploy.servers import alertmanager, alertmanager_test_config, webhook_receiver
from tests.deploy.shipped import ALERTMANAGER_CONFIG, load_yaml

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # replay stack: 30-50 s

NOTIFY_TIMEOUT_S = 90.0
QUIET_AFTER_S = 12.0
"""Watch this long after the first notification (> the test's group_interval of 10 s): a
changed group or a second group would notify again within it."""


def _wait_for_notifications(webhook: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not webhook.notifications and time.monotonic() < deadline:
        time.sleep(0.5)
    assert webhook.notifications, "no notification reached the webhook"
    time.sleep(QUIET_AFTER_S)


def _firing(note: dict[str, Any]) -> set[tuple[tuple[str, str], ...]]:
    return {tuple(sorted(a["labels"].items())) for a in note["alerts"] if a["status"] == "firing"}


def _summary(notifications: list[dict[str, Any]]) -> str:
    """Every notification's group and alerts (name, rule, pair, signal, status, start), one per
    line: what a failed assertion needs to say which alert paged and when."""
    lines = []
    for i, note in enumerate(notifications):
        lines.append(f"#{i} {note['status']} group={note['groupLabels']}")
        for a in note["alerts"]:
            lab = a["labels"]
            pair = f"{lab.get('prefix_model', '*')}->{lab.get('model', '*')}"
            lines.append(
                f"    {a['status']:8} {lab.get('alertname')} rule={lab.get('rule')} {pair}"
                f" signal={lab.get('signal', '-')} starts={a.get('startsAt')} ends={a.get('endsAt')}"
            )
    return "\n".join(lines)


def _assert_one_grouped_notification(notifications: list[dict[str, Any]], job: str) -> dict[str, Any]:
    """One page: the first notification is the only one that fires anything. On live data the
    refit moves every few seconds and the test's ``for:`` is seconds (15-30 min when shipped), so
    an alert of the group (a per-rule one muted by the pooled one, or one signal of the pooled
    one) may resolve meanwhile; Alertmanager then updates the same group with it as resolved.
    Such updates may follow — nothing that fires anew, no other group."""
    note, seen = notifications[0], _summary(notifications)
    for later in notifications[1:]:
        assert later["groupLabels"] == note["groupLabels"], seen
        assert _firing(later) <= _firing(note), seen
        assert any(a["status"] == "resolved" for a in later["alerts"]), seen
    prefix, model = RISKY_PAIR
    assert note["status"] == "firing", seen
    assert note["groupLabels"] == {"job": job, "prefix_model": prefix, "model": model}, seen
    names = {a["labels"]["alertname"] for a in note["alerts"]}
    assert names == {"HandoffPairRisky"}, seen
    for alert in note["alerts"]:
        labels = alert["labels"]
        assert (labels["prefix_model"], labels["model"], labels["job"]) == (prefix, model, job)
        assert alert["annotations"]["runbook_url"].endswith("alerting.md#handoffpairrisky")
    # inhibition: the pooled fit speaks for the pair, per-rule alerts are muted
    assert {a["labels"]["rule"] for a in note["alerts"]} == {"all"}, seen
    return note


@pytest.mark.timeout(180)
def test_one_planted_problem_gives_exactly_one_grouped_notification(replay_stack: ReplayStack) -> None:
    """Demo traffic with one planted risky handoff (atlas → birch) and a healthy staging
    deployment: the webhook gets one notification, grouped on the pair and the deployment,
    holding the pooled HandoffPairRisky alert(s); Alertmanager holds the per-rule alerts as
    inhibited, so the 'many alert instances' are still visible there but page once.

    Every rule's own Δ(atlas → birch) pages here (upper ends −0.07 to −0.11 against the alert's
    −0.05): the fleet's traffic (``demo_fleets.SWITCH_RATE``) keeps enough clean conversations
    at the depths where handoffs happen for each rule's depth-matched baseline. With the demo's
    default 30% reroute rate that baseline is a handful of checks past depth 8 and only the
    pooled alert fires; the inhibition of per-rule alerts would then go untested."""
    _wait_for_notifications(replay_stack.webhook, NOTIFY_TIMEOUT_S)
    _assert_one_grouped_notification(replay_stack.webhook.notifications, "prod")
    alerts = replay_stack.am.get_json("/api/v2/alerts")
    per_rule = [a for a in alerts if a["labels"].get("rule") not in (None, "all")]
    pair_rules = {a["labels"]["rule"] for a in per_rule if a["labels"]["alertname"] == "HandoffPairRisky"}
    assert pair_rules == {r.name for r in RULES}, "every rule's HandoffPairRisky should reach Alertmanager"
    assert all(a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"] for a in per_rule)
    # the model-level alert about the same handoffs is there too, muted by the pair alert
    into = [a for a in alerts if a["labels"]["alertname"] == "HandoffsIntoModelHurt"]
    assert into, "HandoffsIntoModelHurt should fire for birch (all its handoffs come from atlas)"
    assert all(a["status"]["state"] == "suppressed" for a in into), into
    assert {a["labels"]["job"] for a in alerts} == {"prod"}, "the healthy staging deployment alerted"


def test_prometheus_alerts_are_only_the_planted_pair_in_prod(replay_stack: ReplayStack) -> None:
    """Every alert Prometheus holds carries the deployment's job label and is about prod's planted
    problem: HandoffPairRisky for the pair, or HandoffsIntoModelHurt for its suffix model (every
    handoff into birch comes from atlas, so Δ into birch is the pair's Δ); nothing for staging,
    although both run the same models and rules."""
    prom = replay_stack.prom
    assert prom.wait_for(lambda: any(a["state"] == "firing" for a in prom.alerts()), NOTIFY_TIMEOUT_S)
    prefix, model = RISKY_PAIR
    for alert in prom.alerts():
        labels = alert["labels"]
        assert labels["job"] == "prod", labels
        assert labels["alertname"] in {"HandoffPairRisky", "HandoffsIntoModelHurt"}, labels
        assert labels["model"] == model, labels
        if labels["alertname"] == "HandoffPairRisky":
            assert labels["prefix_model"] == prefix, labels


@pytest.mark.slow
@pytest.mark.exclusive
@pytest.mark.timeout(600)
def test_live_demo_traffic_gives_the_same_single_notification(tmp_path: Path) -> None:
    """Live: the one-problem fleet through the real demo pipeline, served on /metrics with a
    periodic refit, scraped by Prometheus with the shipped rules, routed by the shipped
    Alertmanager config: one notification for atlas → birch (what the snapshot replays)."""
    from prometheus_client import CollectorRegistry

    from handoffmon.exporters.serving import start_metrics_server
    from tests.deploy.demo_fleets import demo_world, one_problem_fleet
    from tests.promserver import prometheus_server

    require_binary("prometheus")
    registry = CollectorRegistry()
    rules = shortened_rules(tmp_path / "handoffmon-rules.yml")
    with (
        # the runtime refits; conversations pause 50 ms between turns: at full speed the CPU-bound
        # driver can outrun the pipeline on a busy 2-core machine, and QueueDrops rightly pages
        demo_world(one_problem_fleet(), registry, refit_interval_s=5, think_s=0.05) as world,
        start_metrics_server(registry, 0) as metrics,
    ):
        import asyncio
        import threading

        stop = asyncio.Event()
        # A Runner, not a bare loop: closing it cancels what litellm left on the loop (its
        # logging worker), which would otherwise be destroyed pending during a later test.
        runner = asyncio.Runner()
        loop = runner.get_loop()

        def drive() -> None:
            runner.run(world.driver.run(100_000, stop=stop))

        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        try:
            with (
                webhook_receiver() as webhook,
                alertmanager(
                    tmp_path, alertmanager_test_config(load_yaml(ALERTMANAGER_CONFIG), webhook.url)
                ) as am,
                prometheus_server(
                    tmp_path,
                    [],
                    [rules],
                    scrape_configs=[
                        {
                            "job_name": "live",
                            # as in test_e2e_demo_live: a 1 s timeout drops scrapes of a loaded process
                            "scrape_interval": "5s",
                            "scrape_timeout": "5s",
                            "static_configs": [{"targets": [f"127.0.0.1:{metrics.port}"]}],
                        }
                    ],
                    alertmanagers=[am.address],
                ),
            ):
                _wait_for_notifications(webhook, 400.0)
                try:
                    _assert_one_grouped_notification(webhook.notifications, "live")
                except AssertionError as exc:
                    held = [
                        (
                            a["labels"].get("alertname"),
                            a["labels"].get("rule"),
                            a["labels"].get("prefix_model"),
                            a["status"]["state"],
                            a["status"].get("inhibitedBy"),
                        )
                        for a in am.get_json("/api/v2/alerts")
                    ]
                    raise AssertionError(f"{exc}\nAlertmanager holds: {held}") from exc
                assert world.runtime.monitor.snapshot().dropped == 0  # the pipeline kept up
        finally:
            loop.call_soon_threadsafe(stop.set)
            driver.join(timeout=60)
            if not driver.is_alive():
                runner.close()
