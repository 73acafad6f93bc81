"""Conversations whose verdicts follow a two-state Markov chain (test helper).

One model, one rule. Conversation c runs its own chain: logit p_TF,c and logit p_FT,c are
the planted values plus N(0, sd²) (sd = 0: every conversation runs the same chain). Lengths
are uniform on 2 … 2·length − 1, depth 1 passes with probability 0.9. ``truth`` gives the
population p_TF and p_FT the refit estimates: transitions-weighted means over conversations,
from a large run.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, logit

from handoffmon.sim.population import TurnRows


def markov_rows(
    conversations: int, sd: float, seed: int, *, p_tf: float = 0.1, p_ft: float = 0.4, length: int = 12
) -> tuple[TurnRows, float, float]:
    """(rows, realized transitions-weighted p_TF, p_FT)."""
    rng = np.random.default_rng(seed)
    n = conversations
    tf = expit(logit(p_tf) + rng.normal(0, sd, n))
    ft = expit(logit(p_ft) + rng.normal(0, sd, n))
    lengths = rng.integers(2, 2 * length, n)
    state = rng.random(n) < 0.9  # True = pass
    n_pass, n_fail = np.zeros(n), np.zeros(n)
    cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for depth in range(1, 2 * length):
        act = lengths >= depth
        if depth > 1:
            u = rng.random(n)
            new = np.where(state, u >= tf, u < ft)
            n_pass += act & state
            n_fail += act & ~state
            state = np.where(act, new, state)
        idx = np.nonzero(act)[0]
        cols.append((idx, np.full(len(idx), depth), (~state[idx]).astype(np.int64)))
    c, d, v = (np.concatenate(x) for x in zip(*cols, strict=True))
    zero = np.zeros(len(c), dtype=np.int64)
    rows = TurnRows(
        names=("m",), rules=("r",), conversation=c, depth=d, model=zero, prefix=np.where(d > 1, 0, -1),
        rule=zero, verdict=v, shift=np.zeros(len(c)), mean=np.full(len(c), 0.9),
        handoff=np.zeros(len(c), dtype=bool), noise_var=0.0,
    )  # fmt: skip
    return rows, float((n_pass * tf).sum() / n_pass.sum()), float((n_fail * ft).sum() / n_fail.sum())


def truth(sd: float) -> tuple[float, float]:
    """Population p_TF, p_FT (transitions-weighted over conversations) from 150,000 conversations."""
    _, tf, ft = markov_rows(150_000, sd, 999)
    return tf, ft
