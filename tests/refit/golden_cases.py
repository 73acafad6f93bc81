"""Simulated inputs whose refit JSON is pinned in ``tests/refit/golden/`` (regression guard for speed-ups).

Regenerate (only when a change of the numbers is intended, and say why in the commit):
``.venv/bin/python -m tests.refit.golden_cases``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from handoffmon.config import RefitConfig
from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.result import RefitResult
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import PopModel, Population, simulate
from tests.refit.synth import plant, synth_counts

GOLDEN = Path(__file__).parent / "golden"
BUCKETS = DepthBuckets((1, 2, 3, 5, 9, 17, 33))


def _population(k: int, seed: int) -> Population:
    """K models with planted effects, a canary, a suffix-only model and confounded routing."""
    rng = np.random.default_rng(seed)
    models = [PopModel(f"m{i}", base=float(rng.uniform(0.8, 0.95)), decay=0.004) for i in range(k - 2)]
    models += [PopModel("canary"), PopModel("tail", suffix_only=True, start=0.0)]
    return Population(
        models=tuple(models),
        rules=("r0", "r1", "r2"),
        rule_offsets=(0.0, -0.1, 0.03),
        effects=rng.normal(0, 0.04, (k, k)),
        canary="canary",
        confounding=0.5,
        handoff_rate=0.15,
        buckets=BUCKETS,
    )


def _sim(k: int, seed: int, conversations: int, *, clean: bool = True) -> Counts:
    return counts_from_rows(
        simulate(_population(k, seed), conversations, seed=seed), BUCKETS, clean_baseline=clean
    )


def _synth(k: int, seed: int) -> Counts:
    rng = np.random.default_rng(seed)
    return synth_counts(plant(k, 3, rng), rng, n_trans=200, n_pair=80, buckets=BUCKETS)


CASES: dict[str, tuple[Callable[[], Counts], RefitConfig]] = {
    "sim_k8_clean": (lambda: _sim(8, 1, 3000), RefitConfig()),
    "sim_k8_contaminated": (lambda: _sim(8, 2, 3000, clean=False), RefitConfig()),
    "sim_k12_capped": (lambda: _sim(12, 3, 3000), RefitConfig(max_models=9, max_rules=2, min_n=10)),
    "synth_k14_no_cell_stats": (lambda: _synth(14, 4), RefitConfig(min_n=20)),
}


def run(name: str) -> RefitResult:
    make, settings = CASES[name]
    return refit(make(), buckets=BUCKETS, settings=settings, now=0.0)


def load(name: str) -> dict[str, Any]:
    with gzip.open(GOLDEN / f"{name}.json.gz", "rt") as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name in CASES:
        text = run(name).to_json(indent=None)
        with gzip.GzipFile(GOLDEN / f"{name}.json.gz", "wb", mtime=0) as fh:
            fh.write(text.encode())
        print(name, len(text))


if __name__ == "__main__":
    main()
