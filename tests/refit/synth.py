"""Synthetic counts with planted μ, π, σ and depth confounding (test/benchmark helper)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets


@dataclass(frozen=True)
class Planted:
    """Ground truth behind ``synth_counts``."""

    models: tuple[str, ...]
    rules: tuple[str, ...]
    mu: float
    pi: np.ndarray
    sigma: np.ndarray
    base: np.ndarray  # (R, K, D) adherence of same-author turns by bucket
    p_tf: np.ndarray  # (R, K)
    p_ft: np.ndarray  # (R, K)

    def delta(self, a: int, b: int) -> float:
        """Planted Δ(a→b), the same in every rule and depth bucket."""
        return float(self.mu + self.pi[a] + self.sigma[b])


def plant(k: int, n_rules: int, rng: np.random.Generator, d: int = 7, effect_sd: float = 0.05) -> Planted:
    """Draw planted parameters: sum-to-zero π and σ, adherence that decays with depth."""
    pi = rng.normal(0, effect_sd, k)
    pi -= pi.mean()
    sigma = rng.normal(0, effect_sd, k)
    sigma -= sigma.mean()
    start = rng.uniform(0.75, 0.92, (n_rules, k))
    slope = rng.uniform(0.02, 0.06, (n_rules, k))
    base = start[..., None] - slope[..., None] * np.arange(d)[None, None, :]
    p_tf = rng.uniform(0.03, 0.2, (n_rules, k))
    p_ft = rng.uniform(0.2, 0.6, (n_rules, k))
    return Planted(
        models=tuple(f"m{i:02d}" for i in range(k)),
        rules=tuple(f"r{i}" for i in range(n_rules)),
        mu=-0.03,
        pi=pi,
        sigma=sigma,
        base=base,
        p_tf=p_tf,
        p_ft=p_ft,
    )


def depth_mixes(k: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Depth mix of same-author turns (shallow-heavy) and of each prefix's handoffs (deep-heavy).

    Each prefix model gets its own handoff depth profile, so the depth confounding
    differs by pair and biases a depth-unadjusted estimator of π, not only of μ.
    """
    idx = np.arange(1, d)
    same = np.exp(-0.25 * idx)
    same /= same.sum()
    tilt = rng.uniform(0.2, 0.9, k)
    hand = np.exp(tilt[:, None] * idx[None, :])
    hand /= hand.sum(axis=1, keepdims=True)
    return same, hand


def synth_counts(
    planted: Planted,
    rng: np.random.Generator,
    *,
    n_diag: int = 20000,
    n_pair: int = 600,
    n_first: int = 1500,
    n_trans: int = 3000,
    buckets: DepthBuckets | None = None,
) -> Counts:
    """Binomial pass/fail counts for every cell, plus multinomial Markov transitions.

    Args:
        n_diag: same-author turns at depth ≥ 2 per (rule, model).
        n_pair: handoff turns per (rule, prefix, suffix).
        n_first: depth-1 turns per (rule, model).
        n_trans: transitions per (rule, model, handoff state).
    """
    from handoffmon.depth import DEFAULT_EDGES

    labels = (buckets or DepthBuckets(DEFAULT_EDGES[: planted.base.shape[-1]])).labels
    k, d = len(planted.models), len(labels)
    same, hand = depth_mixes(k, d, np.random.default_rng(12345))
    checks: dict[CheckKey, int] = {}
    for r, rule in enumerate(planted.rules):
        for b, mb in enumerate(planted.models):
            p = np.clip(planted.base[r, b], 0.02, 0.98)
            _add(checks, rule, mb, "none", labels[:1], np.array([n_first]), p[:1], rng)
            _add(checks, rule, mb, mb, labels[1:], rng.multinomial(n_diag, same), p[1:], rng)
            for a, ma in enumerate(planted.models):
                if a == b:
                    continue
                pa = np.clip(p[1:] + planted.delta(a, b), 0.0, 1.0)
                _add(checks, rule, mb, ma, labels[1:], rng.multinomial(n_pair, hand[a]), pa, rng)
    return Counts(checks=checks, transitions=_transitions(planted, rng, n_trans))


def _add(checks, rule, model, prefix, labels, n, p, rng) -> None:  # type: ignore[no-untyped-def]
    x = rng.binomial(n, p)
    for lab, ni, xi in zip(labels, n.tolist(), x.tolist(), strict=True):
        if ni:
            checks[CheckKey(rule, model, prefix, lab, "pass")] = xi
            checks[CheckKey(rule, model, prefix, lab, "fail")] = ni - xi


def _transitions(planted: Planted, rng: np.random.Generator, n: int) -> dict[TransitionKey, int]:
    out: dict[TransitionKey, int] = {}
    for r, rule in enumerate(planted.rules):
        for i, m in enumerate(planted.models):
            s = planted.p_ft[r, i] / (planted.p_tf[r, i] + planted.p_ft[r, i])
            for h in ("true", "false"):
                n_p = rng.binomial(n, s)
                tf = rng.binomial(n_p, planted.p_tf[r, i])
                ft = rng.binomial(n - n_p, planted.p_ft[r, i])
                for fv, tv, c in (
                    ("pass", "pass", n_p - tf),
                    ("pass", "fail", tf),
                    ("fail", "pass", ft),
                    ("fail", "fail", n - n_p - ft),
                ):
                    out[TransitionKey(rule, m, h, fv, tv)] = c
    return out
