"""Conversations whose router hands off after a failed check (test helper).

Three models with the same adherence and no handoff effect anywhere; each conversation has
its own difficulty u_c. From depth 2 on, the next turn goes to another model with
probability ``after_fail`` when the previous check failed and ``after_pass`` when it
passed, which is what an escalate-on-failure or retry-elsewhere router does. The rows are
in ``TurnRows`` form, so ``sim.counting.counts_from_rows`` aggregates them like any turn log.
"""

from __future__ import annotations

import numpy as np

from handoffmon.sim.population import TurnRows


def verdict_routed_rows(
    conversations: int, *, after_fail: float, after_pass: float, seed: int, length: int = 12
) -> TurnRows:
    rng = np.random.default_rng(seed)
    k, n = 3, conversations
    u = rng.normal(0.0, 0.08, n)
    author = rng.integers(0, k, n)
    prev = np.full(n, -1)
    failed = np.zeros(n, dtype=bool)
    cols: dict[str, list[np.ndarray]] = {key: [] for key in ("c", "d", "m", "p", "v", "h", "mean")}
    for depth in range(1, length + 1):
        if depth > 1:
            switch = rng.random(n) < np.where(failed, after_fail, after_pass)
            other = (author + rng.integers(1, k, n)) % k
            prev = author.copy()
            author = np.where(switch, other, author)
        p = np.clip(0.85 + u, 0.005, 0.995)
        verdict = (rng.random(n) >= p).astype(np.int64)
        failed = verdict == 1
        for key, val in (("c", np.arange(n)), ("d", np.full(n, depth)), ("m", author.copy()),
                         ("p", prev.copy()), ("v", verdict), ("h", (depth > 1) & (author != prev)),
                         ("mean", np.full(n, 0.85))):  # fmt: skip
            cols[key].append(val)
    t = {key: np.concatenate(v) for key, v in cols.items()}
    return TurnRows(
        names=("a", "b", "c"),
        rules=("r",),
        conversation=t["c"].astype(np.int64),
        depth=t["d"].astype(np.int64),
        model=t["m"].astype(np.int64),
        prefix=t["p"].astype(np.int64),
        rule=np.zeros(len(t["c"]), dtype=np.int64),
        verdict=t["v"],
        shift=np.zeros(len(t["c"])),
        mean=t["mean"],
        handoff=t["h"].astype(bool),
        noise_var=0.08**2,
    )
