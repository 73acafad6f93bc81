"""End to end: the refit job publishes its gauges through a real Pushgateway, read back through a
real Prometheus that scrapes it with honor_labels, carrying the deployment's identity labels;
a failed refit pushes its failure time next to the last success and RefitFailing fires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from tests.cli.test_refit_cmd import _csv_inputs
from tests.deploy.conftest import shortened_rules
from tests.deploy.servers import pushgateway
from tests.promserver import prometheus_server

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

LABELS = ["--push-label", "job=handoffmon", "--push-label", "namespace=llm-prod"]


@pytest.mark.timeout(120)
def test_refit_job_gauges_reach_prometheus_through_the_pushgateway(tmp_path: Path) -> None:
    """`handoffmon refit --pushgateway URL --push-label …` → Pushgateway → Prometheus
    (honor_labels): the gauges equal the refit JSON and carry job/namespace of the deployment;
    then a refit on a missing source exits 1, pushes its failure time, keeps the last success,
    and the shipped RefitFailing alert (for: shortened) fires for that deployment."""
    rules = shortened_rules(tmp_path / "handoffmon-rules.yml")
    with pushgateway(tmp_path) as gateway:
        scrape = {
            "job_name": "pushgateway",
            "honor_labels": True,
            "static_configs": [{"targets": [gateway.address]}],
        }
        with prometheus_server(tmp_path, [], [rules], scrape_configs=[scrape]) as prom:
            out = tmp_path / "refit.json"
            args = [
                "refit",
                *_csv_inputs(tmp_path),
                "--out",
                str(out),
                "--pushgateway",
                gateway.address,
                *LABELS,
            ]
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 0, res.output
            doc = json.loads(out.read_text(encoding="utf-8"))
            mu = doc["rules"]["all"]["mu"]

            def mu_scraped() -> list[dict]:  # type: ignore[type-arg]
                return prom.query('handoffmon_refit_mu{rule="all"}')

            assert prom.wait_for(lambda: bool(mu_scraped()), 30.0), prom.log_tail()
            (series,) = mu_scraped()
            assert series["metric"]["job"] == "handoffmon" and series["metric"]["namespace"] == "llm-prod"
            assert float(series["value"][1]) == pytest.approx(mu)
            risks = prom.query('handoffmon_handoff_risk{rule="all", job="handoffmon", namespace="llm-prod"}')
            assert len(risks) == len(doc["rules"]["all"]["pairs"])

            bad = ["refit", "--source", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "x.json")]
            res = CliRunner().invoke(main, [*bad, "--pushgateway", gateway.address, *LABELS])
            assert res.exit_code == 1

            def failing() -> bool:
                return any(
                    a["labels"]["alertname"] == "RefitFailing" and a["state"] == "firing"
                    for a in prom.alerts()
                )

            assert prom.wait_for(failing, 30.0), prom.alerts()
            (alert,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "RefitFailing"]
            assert alert["labels"]["job"] == "handoffmon" and alert["labels"]["namespace"] == "llm-prod"
            assert prom.query('handoffmon_refit_mu{rule="all", job="handoffmon"}'), "last success was dropped"


@pytest.mark.timeout(120)
def test_refit_job_pushes_to_a_pushgateway_that_requires_basic_auth(tmp_path: Path) -> None:
    """`--pushgateway http://user:password@host:port` pushes with basic auth to a Pushgateway
    behind ``--web.config.file``: the gauges land, a failed refit's time too; without the
    credentials, or with a wrong password, the push is refused (401) and the command fails;
    the password appears in no output."""
    import base64
    import urllib.request

    from tests.sources.test_prometheus_auth import HASHED, PASSWORD, USER

    with pushgateway(tmp_path, basic_auth=(USER, PASSWORD, HASHED)) as gateway:
        secured = f"http://{USER}:{PASSWORD}@{gateway.address}"
        out = tmp_path / "refit.json"
        res = CliRunner().invoke(
            main, ["refit", *_csv_inputs(tmp_path), "--out", str(out), "--pushgateway", secured]
        )
        assert res.exit_code == 0, res.output
        assert PASSWORD not in res.output

        def pushed() -> str:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            request = urllib.request.Request(
                f"{gateway.url}/metrics", headers={"Authorization": f"Basic {token}"}
            )
            with urllib.request.urlopen(request, timeout=5) as resp:
                return str(resp.read().decode())

        mu = json.loads(out.read_text(encoding="utf-8"))["rules"]["all"]["mu"]
        (line,) = [
            x for x in pushed().splitlines() if x.startswith("handoffmon_refit_mu{") and 'rule="all"' in x
        ]
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(mu)

        bad = ["refit", "--source", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "x.json")]
        res = CliRunner().invoke(main, [*bad, "--pushgateway", secured])
        assert res.exit_code == 1 and "could not push" not in res.stderr, res.stderr
        assert "handoffmon_refit_last_failure_timestamp_seconds" in pushed()

        for target in (gateway.address, f"http://{USER}:wrong-{PASSWORD}@{gateway.address}"):
            res = CliRunner().invoke(
                main, ["refit", *_csv_inputs(tmp_path), "--out", str(out), "--pushgateway", target]
            )
            assert res.exit_code == 1, res.output
            assert "401" in res.stderr and PASSWORD not in res.stderr and "Traceback" not in res.output
