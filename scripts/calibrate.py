"""Reproduce docs/concepts/alert-promises.md: Monte Carlo of the refit's alert signals.

Run: ``.venv/bin/python scripts/calibrate.py [--null 200] [--harm 100]`` (≈ 2 min at the defaults).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from handoffmon.sim.calibration import calibrate, standard_population

HARMFUL = (("atlas", "birch"), ("dune", "cedar"))


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
    args = ap.parse_args()
    t0 = time.perf_counter()

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
