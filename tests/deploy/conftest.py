"""The shared replay stack: two recorded demo deployments → Prometheus (shipped rules) → Alertmanager.

One Prometheus scrapes two handoffmon deployments with different ``job`` labels — ``prod``
replays the demo with ONE planted problem (the handoff atlas → birch), ``staging`` replays
the same two models with nothing planted — and sends alerts to a real Alertmanager running
the shipped configuration, whose receivers all point at a webhook in the test. A second,
reference Prometheus scrapes ``prod`` alone: every panel and alert restricted to
``job="prod"`` on the shared server must equal it.

The shipped rules are loaded unchanged except for ``for:``, shortened to a few seconds.

The stack is module-scoped: each test module that uses it starts its own and stops it when
the module ends. Session-scoped, its two Prometheus servers kept scraping and evaluating
every rule each second until the end of the run (25.6 s of CPU in a two-worker default run,
more serially) for tests that finished minutes earlier.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.demo_fleets import SNAPSHOTS
from tests.deploy.replay import replay_exporter
from tests.deploy.servers import Process, Webhook, alertmanager, alertmanager_test_config, webhook_receiver
from tests.deploy.shipped import ALERTMANAGER_CONFIG, RULES, load_yaml
from tests.promserver import PromServer, prometheus_server

SHORT_FOR = "3s"
JOBS = {"prod": "one-problem", "staging": "healthy"}


def shortened_rules(dst: Path) -> Path:
    """The shipped rules with every `for:` set to SHORT_FOR (and nothing else changed)."""
    text = RULES.read_text(encoding="utf-8")
    short, n = re.subn(r"(?m)^(\s+for:\s*)\d+[smh]\s*$", rf"\g<1>{SHORT_FOR}", text)
    assert n == sum(1 for g in load_yaml(RULES)["groups"] for r in g["rules"] if "for" in r)
    dst.write_text(short, encoding="utf-8")
    return dst


@dataclass
class ReplayStack:
    """The running servers."""

    prom: PromServer
    reference: PromServer
    am: Process
    webhook: Webhook
    started_at: float
    """When the replayed counters began to grow (both servers were scraping by then)."""


def _job(name: str, target: str) -> dict[str, object]:
    return {"job_name": name, "static_configs": [{"targets": [target]}]}


@pytest.fixture(scope="module")
def replay_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplayStack]:
    tmp = tmp_path_factory.mktemp("replay-stack")
    rules = shortened_rules(tmp / "handoffmon-rules.yml")
    (tmp / "shared").mkdir()
    (tmp / "reference").mkdir()
    with (
        replay_exporter(SNAPSHOTS[JOBS["prod"]], hold=True) as prod,
        replay_exporter(SNAPSHOTS[JOBS["staging"]], hold=True) as staging,
        webhook_receiver() as webhook,
        alertmanager(tmp, alertmanager_test_config(load_yaml(ALERTMANAGER_CONFIG), webhook.url)) as am,
        prometheus_server(
            tmp / "shared",
            [],
            [rules],
            scrape_configs=[_job("prod", prod.target), _job("staging", staging.target)],
            alertmanagers=[am.address],
        ) as prom,
        prometheus_server(tmp / "reference", [], [rules], scrape_configs=[_job("prod", prod.target)]) as ref,
    ):
        # both servers scrape zeros until here, so both see the traffic begin at the same moment
        # (a rate over a window longer than their uptime would otherwise differ by the uptime ratio)
        for server in (prom, ref):
            scraping = server.wait_for(lambda s=server: bool(s.query('up{job="prod"} == 1')), 30.0)
            assert scraping, server.log_tail()
        prod.start()
        staging.start()
        assert prod.started_at is not None
        yield ReplayStack(prom=prom, reference=ref, am=am, webhook=webhook, started_at=prod.started_at)
