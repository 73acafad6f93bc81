"""The shipped Alertmanager example: amtool accepts it, and its routing tree and inhibitions
do what docs/operations/alerting.md says (checked with `amtool config routes test`)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import require_binary
from tests.deploy.shipped import ALERTMANAGER_CONFIG, alert_names, load_yaml


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    amtool = require_binary("amtool")
    return subprocess.run([amtool, *args], capture_output=True, text=True, timeout=60, check=False)


def test_amtool_check_config_accepts_the_example() -> None:
    """`amtool check-config` parses the routes, receivers and inhibitions."""
    proc = _amtool("check-config", str(ALERTMANAGER_CONFIG))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout and "3 inhibit rules" in proc.stdout


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
        "cluster",
        "namespace",
        "job",
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
