"""The simulated population's shadow arm: counterfactual continuations of the same prefixes.

A sampled turn at depth ≥ 2 whose history was last written by A gets a second
continuation with the **same** conversation difficulty u_c and turn noise e_t:

* handoff arm (A wrote the history, B served): A continues, with the shift A's own turn
  would have carried (no new handoff effect);
* no-handoff arm (A→A served): the candidate B (``candidates``, default the next model
  in population order) continues, with the planted handoff shift ``effects[A, B]``.

That shared noise is what pairing buys. The planted switch cost of a pair is the mean,
over its pairs, of P(B passes) − P(A passes) given the realized prefix (difficulty,
noise, depth, carried shifts) — the quantity the paired estimator targets.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from handoffmon.counts import POOLED_RULE, SHADOW_TABLE, ShadowKey
from handoffmon.sim.population import P_HIGH, P_LOW, Population, TurnRows, draw_verdicts, simulate


def simulate_shadowed(
    pop: Population,
    conversations: int,
    *,
    rate: float,
    candidates: tuple[str, ...] = (),
    seed: int = 0,
) -> tuple[TurnRows, ShadowRows]:
    """``population.simulate`` plus a shadow continuation of a ``rate`` share of turns at depth ≥ 2.

    The shadow draws come from a spawned stream, so the served rows equal
    ``simulate(pop, conversations, seed=seed)`` whatever the rate.
    """
    rng = np.random.default_rng(seed)
    turns = ShadowTurns(pop, rate, candidates, rng.spawn(1)[0])
    rows = simulate(pop, conversations, seed=rng, observer=turns)
    return rows, turns.rows(pop, rows)


@dataclass(frozen=True)
class ShadowRows:
    """One row per shadow pair and rule, numpy columns (model indexes ``names``).

    ``prefix`` is A, ``model`` B; ``y_model``/``y_prefix`` are B's and A's verdicts
    (0 pass, 1 fail, 2 not_applicable); ``p_model``/``p_prefix`` their pass probabilities
    given the prefix (the truth, not seen by the estimator); ``handoff`` marks the arm.
    """

    names: tuple[str, ...]
    rules: tuple[str, ...]
    conversation: np.ndarray
    depth: np.ndarray
    prefix: np.ndarray
    model: np.ndarray
    rule: np.ndarray
    handoff: np.ndarray
    y_model: np.ndarray
    y_prefix: np.ndarray
    p_model: np.ndarray
    p_prefix: np.ndarray

    def __len__(self) -> int:
        return len(self.depth)

    @property
    def checked(self) -> np.ndarray:
        """Rows where both continuations got a pass/fail verdict."""
        return np.asarray((self.y_model < 2) & (self.y_prefix < 2))


class ShadowTurns:
    """Collects the sampled turns while ``population.simulate`` steps through depths (a
    ``population.TurnObserver``)."""

    def __init__(
        self, pop: Population, rate: float, candidates: tuple[str, ...], rng: np.random.Generator
    ) -> None:
        k = len(pop.models)
        if candidates and len(candidates) != k:
            raise ValueError("candidates must have one entry per model")
        self.pop, self.rate, self.rng = pop, rate, rng
        default = (np.arange(k) + 1) % k
        self.candidate = np.array([pop.index(c) for c in candidates]) if candidates else default
        self.parts: dict[str, list[np.ndarray]] = {
            key: [] for key in ("turn", "c", "d", "a", "b", "h", "cf_mean", "cf_shift", "noise")
        }

    def observe(
        self, offset: int, act: np.ndarray, depth: int, prev: np.ndarray, author: np.ndarray,
        handoff: np.ndarray, carried: np.ndarray, base: np.ndarray, decay: np.ndarray, noise: np.ndarray,
    ) -> None:  # fmt: skip
        """Sample this depth's turns and keep, for the sampled ones, the other continuation's
        model and shift: the prefix model with its carried shift (handoff arm), or the
        candidate with ``effects[A, candidate]`` (no-handoff arm)."""
        a = np.maximum(prev, 0)
        model = np.where(handoff, a, self.candidate[a])
        shift = np.where(handoff, carried, self.pop.effects[a, model])
        keep = (self.rng.random(len(act)) < self.rate) & (prev >= 0) & (model != author)
        idx = np.nonzero(keep)[0]
        m = model[idx]
        values = {
            "turn": offset + idx, "c": act[idx], "d": np.full(len(idx), depth), "a": prev[idx],
            "b": np.where(handoff[idx], author[idx], m), "h": handoff[idx],
            "cf_mean": base[m] - decay[m] * (depth - 1), "cf_shift": shift[idx], "noise": noise[idx],
        }  # fmt: skip
        for key, val in values.items():
            self.parts[key].append(np.asarray(val))

    def rows(self, pop: Population, served: TurnRows) -> ShadowRows:
        """Draw the shadow verdicts and pair them with the served verdicts of the same turns."""
        t = {k: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for k, v in self.parts.items()}
        r = len(pop.rules)
        offsets = np.asarray(pop.rule_offsets, dtype=float)
        rule = np.tile(np.arange(r), len(t["turn"]))
        row = np.repeat(t["turn"].astype(np.int64), r) * r + rule
        noise = np.repeat(t["noise"], r)
        p_served = np.clip(served.mean[row] + noise + served.shift[row], P_LOW, P_HIGH)
        cf_mean = np.repeat(t["cf_mean"], r) + offsets[rule] + np.repeat(t["cf_shift"], r)
        p_cf = np.clip(cf_mean + noise, P_LOW, P_HIGH)
        y_cf = draw_verdicts(p_cf, pop.not_applicable_rate, self.rng)
        y_served = served.verdict[row]
        h = np.repeat(t["h"].astype(bool), r)
        return ShadowRows(
            names=pop.names,
            rules=pop.rules,
            conversation=np.repeat(t["c"], r).astype(np.int64),
            depth=np.repeat(t["d"], r).astype(np.int64),
            prefix=np.repeat(t["a"], r).astype(np.int64),
            model=np.repeat(t["b"], r).astype(np.int64),
            rule=rule,
            handoff=h,
            y_model=np.where(h, y_served, y_cf),
            y_prefix=np.where(h, y_cf, y_served),
            p_model=np.where(h, p_served, p_cf),
            p_prefix=np.where(h, p_cf, p_served),
        )


def planted_switch_costs(rows: ShadowRows, *, rule: int | None = None) -> np.ndarray:
    """(K, K) [A, B] mean of P(B passes) − P(A passes) over the checked pairs (NaN: none).

    ``rule`` None pools every rule's pairs (the refit's ``all`` fit).
    """
    k = len(rows.names)
    sel = rows.checked if rule is None else rows.checked & (rows.rule == rule)
    flat = rows.prefix[sel] * k + rows.model[sel]
    total = np.bincount(flat, weights=(rows.p_model - rows.p_prefix)[sel], minlength=k * k)
    count = np.bincount(flat, minlength=k * k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count).reshape(k, k)


def shadow_counts(rows: ShadowRows) -> dict[ShadowKey, int]:
    """The ``Counts.shadow`` counters of the pairs (what the live recorder would count)."""
    ok = rows.checked
    names, rules = rows.names, rows.rules
    a, b, r, c = rows.prefix[ok], rows.model[ok], rows.rule[ok], rows.conversation[ok]
    ym, yp, h = rows.y_model[ok] == 0, rows.y_prefix[ok] == 0, rows.handoff[ok]
    cell = 2 * (~ym) + (~yp)
    out: Counter[ShadowKey] = Counter()
    table = Counter(zip(r.tolist(), a.tolist(), b.tolist(), cell.tolist(), strict=True))
    for (ri, ai, bi, ci), v in table.items():
        out[ShadowKey(rules[ri], names[ai], names[bi], SHADOW_TABLE[ci])] += v
    for (ri, ai, bi), v in Counter(zip(r[h].tolist(), a[h].tolist(), b[h].tolist(), strict=True)).items():
        out[ShadowKey(rules[ri], names[ai], names[bi], "handoff_arm")] += v
    disc_b, disc_c = (ym & ~yp).astype(np.int64), (yp & ~ym).astype(np.int64)
    for pooled in (False, True):
        group = np.zeros_like(r) if pooled else r
        keys = np.stack([group, a, b, c], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.ravel()
        bc_, cc_, nc_ = (
            np.bincount(inv, weights=w, minlength=len(uniq)) for w in (disc_b, disc_c, np.ones(len(inv)))
        )
        stats = {"conversations": np.ones(len(uniq)), "b2": bc_**2, "c2": cc_**2, "bc": bc_ * cc_,
                 "bn": bc_ * nc_, "cn": cc_ * nc_, "n2": nc_**2}  # fmt: skip
        for j, (gi, ai, bi, _) in enumerate(uniq.tolist()):
            rule_name = POOLED_RULE if pooled else rules[gi]
            for stat, val in stats.items():
                out[ShadowKey(rule_name, names[ai], names[bi], stat)] += int(val[j])
    return dict(out)
