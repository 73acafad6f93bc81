"""The tables' one-lookup-per-name path against the prometheus_client children (the reference):
attribution methods outside the known set, rule names admitted mid-turn, overflowing and
truncated names, in random mixes."""

from __future__ import annotations

import dataclasses
import random

from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from handoffmon.types import ATTRIBUTION_METHODS, ClusterStep, TurnResult
from tests.exporters.turns import make_result

NAMES = ("r1", "r2", "r3", "x" * 300, "")
MODELS = ("m1", "m2", "m3", "m4", "y" * 300)


def _results(seed: int) -> list[TurnResult]:
    rng = random.Random(seed)
    out = []
    for _ in range(60):
        checks = [
            (rng.choice(NAMES), rng.choice(("pass", "fail", "error", "not_applicable", "weird")))
            for _ in range(rng.randrange(0, 5))
        ]
        transitions = [(rng.choice(NAMES), "pass", rng.choice(("fail", "pass", "weird"))) for _ in range(2)]
        result = make_result(
            depth=rng.randrange(1, 12),
            author=rng.choice(MODELS),
            prefix_model=rng.choice(MODELS),
            checks=checks,
            transitions=transitions[: rng.randrange(0, 3)],
        )
        methods = tuple(
            rng.choice((*ATTRIBUTION_METHODS, "bogus", "other_bogus")) for _ in range(rng.randrange(0, 6))
        )
        cluster = tuple(
            ClusterStep(rng.choice((*NAMES, "all")), rng.randrange(2), rng.randrange(4), 0, rng.randrange(3))
            for _ in range(rng.randrange(0, 3))
        )
        out.append(
            dataclasses.replace(
                result, attribution_methods=methods, clean=rng.random() < 0.5, cluster=cluster
            )
        )
    return out


def test_tables_match_the_reference_on_random_names_and_methods() -> None:
    for seed in range(4):
        for caps in ((50, 100), (2, 1), (3, 2)):
            exporters = [
                PrometheusExporter(
                    CollectorRegistry(),
                    multiprocess=False,
                    guard=LabelGuard(max_models=caps[0], max_rules=caps[1]),
                    **({"_tables": False} if old else {}),  # type: ignore[arg-type]
                )
                for old in (True, False)
            ]
            for result in _results(seed):
                for exp in exporters:
                    assert exp.export(result)
            old, new = (generate_latest(e.registry).decode() for e in exporters)
            assert new == old
            assert 'handoffmon_attributions_total{method="unknown"}' in new
