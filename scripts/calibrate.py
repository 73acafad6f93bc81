"""Reproduce docs/concepts/alert-promises.md: Monte Carlo of the refit's alert signals.

Run: ``.venv/bin/python scripts/calibrate.py [--null 200] [--harm 100]`` (≈ 2 min at the defaults);
``--tail 700`` measures the far tail of the raw p-values instead (≈ 5 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from handoffmon.sim.calibration import calibrate, standard_population

HARMFUL = (("atlas", "birch"), ("dune", "cedar"))


def tail_rates(refits: int, confounding: float) -> dict[str, object]:
    """Raw p-values of every reported no-effect pair (first rule) over ``refits`` null refits of
    the calibration population (3,000 conversations each): the share below each level, over
    the level. The far tail (0.001) needs ~10,000 pairs (500+ refits) to read to ±0.3×."""
    import numpy as np

    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit
    from handoffmon.sim.counting import counts_from_rows
    from handoffmon.sim.population import simulate

    pop = dataclasses.replace(standard_population(), confounding=confounding)
    buckets = DepthBuckets()
    p: list[float] = []
    for i in range(refits):
        rows = simulate(pop, 3000, seed=np.random.default_rng([7, i]))
        fit = refit(counts_from_rows(rows, buckets), buckets=buckets, now=0.0).rules[pop.rules[0]]
        p += [q.p_value for q in fit.pairs if q.observed]
    arr = np.asarray(p)
    levels = (0.05, 0.01, 0.001)
    return {"pairs": len(arr), **{f"p<{a}": round(float(np.mean(arr < a)) / a, 3) for a in levels}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--null", type=int, default=200, help="replicates under the planted null")
    ap.add_argument("--harm", type=int, default=100, help="replicates with two -15 pp pairs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--confounding",
        type=float,
        default=0.0,
        help="Population.confounding: harder conversations are handed off more (default 0: independent)",
    )
    ap.add_argument(
        "--tail",
        type=int,
        default=0,
        help="instead: N null refits (seeds [7, i]); p-value rates at 0.05/0.01/0.001 over nominal",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.tail:
        print(
            json.dumps(
                {**tail_rates(args.tail, args.confounding), "seconds": round(time.perf_counter() - t0, 1)}
            )
        )
        return

    def population(**kw: object) -> object:
        return dataclasses.replace(standard_population(**kw), confounding=args.confounding)  # type: ignore[arg-type]

    null = calibrate(population(), replicates=args.null, conversations=3000, seed=args.seed)
    harm = calibrate(
        population(harmful=HARMFUL), replicates=args.harm, conversations=8000, seed=args.seed + 1
    )
    out = {
        "confounding": args.confounding,
        "null": {"replicates": null.replicates, "pairs": null.null_pairs, "false_rate": null.false_rate,
                 "refits_with_false_pair": null.familywise, "coverage": null.coverage},
        "harm": {"replicates": harm.replicates, "harmful_pairs": harm.harmful_pairs, "power": harm.power,
                 "false_rate": harm.false_rate, "coverage": harm.coverage},
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
