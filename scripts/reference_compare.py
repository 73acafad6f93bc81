"""The refit's Δ(A→B) against a reference fitted on the turn rows with statsmodels.

Run: ``.venv/bin/python scripts/reference_compare.py [--replicates 20]`` (≈ 20 s a replicate).
The reference is ``tests/refit/reference_ols.py`` (OLS with a handoff indicator and a
piecewise-linear depth curve, SEs clustered by conversation). Prints one JSON line per
scenario: the mean and RMS of Δ_refit − Δ_reference in units of the reference SE, the
correlation, the median SE ratio, each method's bias, RMSE and coverage of the planted
estimand (``population.expected_delta``) over pairs with ≥ 100 checked handoff turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.refit.reference_ols import compare


def main() -> None:
    from handoffmon.sim.alert_calibration import wide_population
    from handoffmon.sim.calibration import standard_population

    ap = argparse.ArgumentParser()
    ap.add_argument("--replicates", type=int, default=20)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    scenarios = {
        "standard_harm": (standard_population(harmful=(("atlas", "birch"), ("dune", "cedar"))), 8000),
        "k10_harm": (wide_population(10, harmful=((0, 1), (1, 2), (2, 0), (3, 1))), 8000),
    }
    for name, (pop, conv) in scenarios.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        res = compare(pop, args.replicates, conv, seed=3)
        print(
            json.dumps({"scenario": name, **res, "seconds": round(time.perf_counter() - t0, 1)}), flush=True
        )


if __name__ == "__main__":
    main()
