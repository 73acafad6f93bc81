"""The shipped Alertmanager example: amtool accepts it, and its routing tree and inhibitions
do what docs/operations/alerting.md says (checked with `amtool config routes test`)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.deploy.servers import Process, alertmanager, alertmanager_test_config
from tests.deploy.shipped import ALERTMANAGER_CONFIG, alert_names, from_rules_tool, load_yaml

IDENTITY = ["job", "namespace", "cluster"]


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    amtool = require_binary("amtool")
    return subprocess.run([amtool, *args], capture_output=True, text=True, timeout=60, check=False)


def test_amtool_check_config_accepts_the_example() -> None:
    """`amtool check-config` parses the routes, receivers and inhibitions."""
    proc = _amtool("check-config", str(ALERTMANAGER_CONFIG))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout and "4 inhibit rules" in proc.stdout


def test_amtool_check_config_rejects_a_broken_copy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The check is not vacuous: a route naming an unknown receiver fails."""
    broken = ALERTMANAGER_CONFIG.read_text(encoding="utf-8").replace(
        "receiver: handoffmon-pager", "receiver: nobody"
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(broken, encoding="utf-8")
    assert _amtool("check-config", str(path)).returncode != 0


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=HandoffPairRisky", "severity=warning", "job=prod"], "handoffmon-tickets"),
        (["alertname=FallbackStorm", "severity=critical", "job=prod"], "handoffmon-pager"),
    ],
)
def test_routes_send_warnings_to_tickets_and_critical_to_the_pager(labels: list[str], receiver: str) -> None:
    """`amtool config routes test` resolves handoffmon's alerts to the documented receivers."""
    proc = _amtool("config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == receiver


def test_route_matches_every_shipped_alert_and_groups_by_deployment_and_pair() -> None:
    """The handoffmon route's alertname matcher lists every shipped alert; group_by holds the
    identity labels and the pair."""
    config = load_yaml(ALERTMANAGER_CONFIG)
    assert config["route"]["group_by"] == [
        *IDENTITY,
        "prefix_model",
        "requested_model",
        "model",
    ]
    (route,) = config["route"]["routes"]
    (matcher,) = route["matchers"]
    names = matcher.split("=~", 1)[1].strip('"').split("|")
    assert sorted(names) == sorted(alert_names())
    inhibit = config["inhibit_rules"]
    assert inhibit[0]["source_matchers"] == ['rule="all"']
    assert {"alertname", "job", "prefix_model", "model"} <= set(inhibit[0]["equal"])


def test_every_inhibition_compares_the_whole_identity_list() -> None:
    """Each inhibition's `equal` holds job, namespace, cluster, in the rules' order (the text
    ``from_rules --identity-labels`` rewrites): one deployment's alert never mutes another's."""
    config = load_yaml(ALERTMANAGER_CONFIG)
    assert len(config["inhibit_rules"]) == 4
    for rule in config["inhibit_rules"]:
        equal = rule["equal"]
        start = equal.index("job")
        assert equal[start : start + 3] == IDENTITY, equal


def _post_alerts(am: Process, alerts: list[dict[str, str]]) -> None:
    body = json.dumps([{"labels": labels, "annotations": {}} for labels in alerts]).encode()
    req = urllib.request.Request(
        f"{am.url}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def _states(
    am: Process, expected: dict[tuple[str, ...], str], key: tuple[str, ...] = ("alertname", "env", "rule")
) -> dict[tuple[str, ...], str]:
    """The ``key`` labels of each alert ("" where absent) → Alertmanager's state: polled until it is
    ``expected`` or 20 s have passed. Alertmanager marks an alert suppressed asynchronously,
    after it is held (its inhibitor reads the alerts' subscription), so a read as soon as all
    are held can still show an inhibited alert ``active`` (seen once in a loaded test run)."""
    deadline = time.monotonic() + 20
    while True:
        held = am.get_json("/api/v2/alerts")
        states = {tuple(a["labels"].get(name, "") for name in key): a["status"]["state"] for a in held}
        if states == expected or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_identity_labels_rewrite_grouping_and_inhibitions_so_deployments_stay_apart(tmp_path: Path) -> None:
    """`from_rules --identity-labels job,env,tenant` writes alertmanager.yml with that list in
    group_by and every `equal`; a real Alertmanager running it lets staging's RefitFailing mute
    staging's RefitStale, not production's (same job, other env), and staging's pooled
    HandoffPairRisky mute staging's per-rule alert, not production's."""
    out = tmp_path / "my-rules"
    assert from_rules_tool().main(["--identity-labels", "job,env,tenant", "--out-dir", str(out)]) == 0
    path = out / ALERTMANAGER_CONFIG.name
    config = load_yaml(path)
    labels = ["job", "env", "tenant"]
    assert config["route"]["group_by"][:3] == labels
    for rule in config["inhibit_rules"]:
        assert set(labels) <= set(rule["equal"]) and "namespace" not in rule["equal"], rule
    proc = _amtool("check-config", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    base = {"job": "handoffmon", "tenant": "t1", "severity": "warning"}
    pair = {"prefix_model": "a", "model": "b"}
    alerts = [
        {**base, "alertname": "RefitFailing", "env": "staging"},
        {**base, "alertname": "RefitStale", "env": "staging"},
        {**base, "alertname": "RefitStale", "env": "prod"},
        {**base, **pair, "alertname": "HandoffPairRisky", "env": "staging", "rule": "all"},
        {**base, **pair, "alertname": "HandoffPairRisky", "env": "staging", "rule": "no_commas"},
        {**base, **pair, "alertname": "HandoffPairRisky", "env": "prod", "rule": "no_commas"},
    ]
    with alertmanager(tmp_path, alertmanager_test_config(config, "http://127.0.0.1:9/hook")) as am:
        _post_alerts(am, alerts)
        expected = {
            ("RefitFailing", "staging", ""): "active",
            ("RefitStale", "staging", ""): "suppressed",  # the inhibition works within a deployment
            ("RefitStale", "prod", ""): "active",
            ("HandoffPairRisky", "staging", "all"): "active",
            ("HandoffPairRisky", "staging", "no_commas"): "suppressed",
            ("HandoffPairRisky", "prod", "no_commas"): "active",
        }
        states = _states(am, expected)
    assert states == expected, states


def test_relabelled_alertmanager_config_refuses_a_list_without_the_identity(tmp_path: Path) -> None:
    """A config whose list the relabelling cannot find (another order) is refused, not written
    with a list that compares only part of the identity."""
    odd = ALERTMANAGER_CONFIG.read_text(encoding="utf-8").replace(
        "equal: [job, namespace, cluster, fit, instance]", "equal: [cluster, namespace, job, fit, instance]"
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(odd, encoding="utf-8")
    with pytest.raises(ValueError, match=r"inhibit_rules\[2\]"):
        from_rules_tool().render_alertmanager(["job", "env"], path)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_failing_refit_mutes_refit_stale_of_its_fit_replica_and_the_no_success_one(tmp_path: Path) -> None:
    """The shipped config with the label sets the rules give these alerts: RefitFailing always
    names its fit; RefitStale names it, except "no refit success at all while turns flow" (no
    `fit`), which a refit failing from its first run raises too. A failing fit mutes RefitStale of
    the same fit and the fit-less one (one cause, one notification), not the other fit's. Local
    fits are per replica (`instance`): r1's failing refit mutes r1's RefitStale, not r2's (a
    hung refit there, another cause)."""
    base = {"job": "prod", "severity": "warning"}
    fleet = {"job": "fleet", "severity": "warning", "fit": "local"}
    alerts = [
        {**base, "alertname": "RefitFailing", "fit": "pooled"},
        {**base, "alertname": "RefitStale", "fit": "pooled"},
        {**base, "alertname": "RefitStale"},
        {**base, "alertname": "RefitStale", "fit": "local", "instance": "r1:4100"},
        {"job": "staging", "severity": "warning", "alertname": "RefitStale"},
        {**fleet, "alertname": "RefitFailing", "instance": "r1:4100"},
        {**fleet, "alertname": "RefitStale", "instance": "r1:4100"},
        {**fleet, "alertname": "RefitStale", "instance": "r2:4100"},
    ]
    config = alertmanager_test_config(load_yaml(ALERTMANAGER_CONFIG), "http://127.0.0.1:9/hook")
    expected = {
        ("RefitFailing", "prod", "pooled", ""): "active",
        ("RefitStale", "prod", "pooled", ""): "suppressed",
        ("RefitStale", "prod", "", ""): "suppressed",
        ("RefitStale", "prod", "local", "r1:4100"): "active",
        ("RefitStale", "staging", "", ""): "active",
        ("RefitFailing", "fleet", "local", "r1:4100"): "active",
        ("RefitStale", "fleet", "local", "r1:4100"): "suppressed",
        ("RefitStale", "fleet", "local", "r2:4100"): "active",
    }
    with alertmanager(tmp_path, config) as am:
        _post_alerts(am, alerts)
        states = _states(am, expected, ("alertname", "job", "fit", "instance"))
    assert states == expected, states
