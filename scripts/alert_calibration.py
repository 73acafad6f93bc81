"""False-alert rate and power of the shipped alert expressions on wide fleets (K = 10–30).

Run: ``.venv/bin/python scripts/alert_calibration.py [--scale 1.0]`` (≈ 10 min at scale 1 on one
core). Prints one JSON line per scenario (``handoffmon.sim.alert_calibration``): the per-pair
and per-model false-alert rates of HandoffPairRisky (delta_upper, risk) and
HandoffsIntoModelHurt with no planted effect, the share of refits paging on anything null,
and with planted harm the power and the Δ intervals' coverage of the estimand.
"""

from __future__ import annotations

import argparse
import json
import time

from handoffmon.sim.alert_calibration import alert_calibration, wide_population

SCENARIOS: dict[str, dict[str, object]] = {
    # name: (population kwargs, replicates, conversations)
    "k10_null": {"pop": {"k": 10, "sparse": 2}, "n": 200, "conv": 4000},
    "k20_null": {"pop": {"k": 20, "sparse": 3}, "n": 200, "conv": 6000},
    "k30_null": {"pop": {"k": 30, "sparse": 4}, "n": 150, "conv": 8000},
    "k10_null_rho95_sd12": {
        "pop": {"k": 10, "sparse": 2, "turn_rho": 0.95, "conversation_sd": 0.12},
        "n": 200,
        "conv": 4000,
    },
    # three rules: each rule's fit and the pooled "all" are paged on (every_fit)
    "k10_3rules_null": {"pop": {"k": 10, "sparse": 2, "rules": 3}, "n": 150, "conv": 4000, "every_fit": True},
    "k20_3rules_null": {
        "pop": {"k": 20, "sparse": 3, "rules": 3, "turn_rho": 0.95, "conversation_sd": 0.12},
        "n": 100,
        "conv": 6000,
        "every_fit": True,
    },
    # the same wide fleet with four pairs planted at -15 pp: the Δ branch's BH gate against the
    # hundreds of pairs per fit (power per harmful pair and fit, every fit scored)
    "k20_3rules_harm": {
        "pop": {
            "k": 20,
            "sparse": 3,
            "rules": 3,
            "turn_rho": 0.95,
            "conversation_sd": 0.12,
            "harmful": ((0, 1), (1, 2), (2, 0), (3, 1)),
        },
        "n": 60,
        "conv": 6000,
        "every_fit": True,
    },
    "k10_confounded_0.5": {"pop": {"k": 10, "sparse": 2, "confounding": 0.5}, "n": 60, "conv": 4000},
    "k10_harm": {
        "pop": {"k": 10, "sparse": 2, "harmful": ((0, 1), (1, 2), (2, 0), (3, 1))},
        "n": 100,
        "conv": 8000,
    },
    "k10_harm_8pp": {
        "pop": {"k": 10, "sparse": 2, "harm": -0.08, "harmful": ((0, 1), (1, 2), (2, 0), (3, 1))},
        "n": 100,
        "conv": 8000,
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every scenario's replicates")
    ap.add_argument("--only", nargs="*", default=None, help="scenario names (default: all)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for name, sc in SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        kw = dict(sc["pop"])  # type: ignore[call-overload]
        pop = wide_population(**kw)
        tally = alert_calibration(
            pop,
            replicates=max(1, round(int(sc["n"]) * args.scale)),  # type: ignore[call-overload]
            conversations=int(sc["conv"]),  # type: ignore[call-overload]
            seed=args.seed,
            sparse=int(kw.get("sparse", 0)),
            every_fit=bool(sc.get("every_fit", False)),
        )
        out = {"scenario": name, **tally.summary(), "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
