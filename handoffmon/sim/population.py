"""A conversation-level production population: turn rows with planted pair effects.

Each conversation has its own difficulty (a random shift u_c of every pass probability),
turn-level noise that persists (AR(1) across turns, shared by the rules of a turn),
adherence that decays with depth, and routing with ping-pong conversations, handoffs
bunched at the ends of depth buckets, a canary seen in a handful of turns, suffix-only
models (a conversation handed to one ends there) and, optionally, confounded routing
(hard conversations hand off more). A handoff A→B at depth d shifts B's pass probability
by the planted ``effects[A, B]``; the shift carries over to B's next turns, shrinking by
``carry`` per turn, which is what contaminates a baseline that includes same-author turns
after a handoff.

For rule r, turn t of conversation c by model m at depth d:
``p = clip(base[m] + rule_offset[r] − decay[m]·(d − 1) + u_c + e_t + shift_t, 0.005, 0.995)``.

``expected_delta`` gives the estimand for each pair: the mean over the handoff turns
that happened of E[p | shift] − E[p | no shift] at the same model, rule and depth, with
the expectation over u_c + e_t taken exactly (clipped normal). With ``confounding = 0``
routing is independent of u_c and e_t, so the clean-baseline Δ estimates it without bias.
The simulator is vectorized over conversations (one step per depth), so a 2,000-
conversation refit input takes tens of milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from handoffmon.depth import DepthBuckets


class TurnObserver(Protocol):
    """Sees every step of ``simulate`` at depth ≥ 2 (the shadow arm's hook, ``sim.shadow_arm``)."""

    def observe(
        self, offset: int, act: np.ndarray, depth: int, prev: np.ndarray, author: np.ndarray,
        handoff: np.ndarray, carried: np.ndarray, base: np.ndarray, decay: np.ndarray, noise: np.ndarray,
    ) -> None:  # fmt: skip
        """``act`` conversations' turns at ``depth`` (served rows from ``offset``): previous and
        current author, the handoff flag, the shift a same-author turn would carry, the
        models' base and decay, and the turn's noise u_c + e_t."""


P_LOW, P_HIGH = 0.005, 0.995
VERDICT_NAMES: tuple[str, ...] = ("pass", "fail", "not_applicable", "error")


@dataclass(frozen=True)
class PopModel:
    """One model of the population.

    Attributes:
        name: model name.
        base: pass probability at depth 1 (before rule offsets and noise).
        decay: pass probability lost per turn of depth (linear, the curve floors at ``P_LOW``).
        start: weight as the first model of a conversation (0 = never starts one).
        route: weight as the target of a handoff.
        suffix_only: a conversation handed to this model ends after its turn (so it is
            never a prefix model).
    """

    name: str
    base: float = 0.92
    decay: float = 0.002
    start: float = 1.0
    route: float = 1.0
    suffix_only: bool = False


@dataclass(frozen=True)
class Population:
    """The planted world of a production population.

    Attributes:
        models: the models.
        rules: rule names.
        rule_offsets: added to every model's base for each rule (same length as ``rules``).
        effects: (K, K) planted shift of a handoff A→B (row A = prefix, column B = suffix).
        conversation_sd: SD of the per-conversation difficulty u_c.
        turn_sd: stationary SD of the turn noise e_t.
        turn_rho: AR(1) correlation of e_t between consecutive turns.
        carry: share of a handoff's shift left on the suffix model's next own turn.
        handoff_rate: per-turn probability of a routing change (depth ≥ 2).
        bucket_end_boost: multiplies ``handoff_rate`` at the last depth of a depth bucket.
        pingpong_share: share of conversations alternating between two models every turn.
        canary: name of a model that only appears in about ``canary_turns`` turns.
        canary_turns: expected turns of the canary in the whole run.
        confounding: handoff odds multiply by exp(−confounding · u_c / conversation_sd).
        depth_confounding: handoff odds also multiply by (depth / mean_length)^depth_confounding
            (with ``confounding`` > 0: fallbacks mostly in hard, deep conversations).

        mean_length: mean conversation length (geometric-lognormal mix below).
        max_length: cap on conversation length.
        not_applicable_rate: share of checks with verdict not_applicable (ignored by the refit).
        buckets: depth buckets whose ends get the handoff boost.
    """

    models: tuple[PopModel, ...]
    rules: tuple[str, ...] = ("rule_a",)
    rule_offsets: tuple[float, ...] = (0.0,)
    effects: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    conversation_sd: float = 0.06
    turn_sd: float = 0.05
    turn_rho: float = 0.6
    carry: float = 0.6
    handoff_rate: float = 0.08
    bucket_end_boost: float = 4.0
    pingpong_share: float = 0.05
    canary: str | None = None
    canary_turns: float = 20.0
    confounding: float = 0.0
    depth_confounding: float = 0.0
    mean_length: float = 12.0
    max_length: int = 120
    not_applicable_rate: float = 0.02
    buckets: DepthBuckets = field(default_factory=DepthBuckets)

    def __post_init__(self) -> None:
        k = len(self.models)
        if self.effects.shape != (k, k):
            object.__setattr__(self, "effects", np.zeros((k, k)))
        if len(self.rule_offsets) != len(self.rules):
            raise ValueError("rule_offsets must have one entry per rule")

    @property
    def names(self) -> tuple[str, ...]:
        """Model names in population order."""
        return tuple(m.name for m in self.models)

    def index(self, name: str) -> int:
        """Position of a model."""
        return self.names.index(name)


@dataclass(frozen=True)
class TurnRows:
    """One row per checked turn and rule (the turn-level log format), as numpy columns.

    ``model``/``prefix`` index ``names`` (prefix −1 = ``none``); ``rule`` indexes ``rules``;
    ``verdict`` indexes ``VERDICT_NAMES``; ``shift`` and ``mean`` are the planted handoff
    shift and the noise-free pass probability of the row (for the truth, not the refit).
    """

    names: tuple[str, ...]
    rules: tuple[str, ...]
    conversation: np.ndarray
    depth: np.ndarray
    model: np.ndarray
    prefix: np.ndarray
    rule: np.ndarray
    verdict: np.ndarray
    shift: np.ndarray
    mean: np.ndarray
    handoff: np.ndarray
    noise_var: float

    def __len__(self) -> int:
        return len(self.depth)

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts with the turn-log columns (for writing JSONL/CSV)."""
        names, rules = self.names, self.rules
        return [
            {
                "conversation_id": f"c{c}",
                "depth": d,
                "model": names[m],
                "prefix_model": "none" if p < 0 else names[p],
                "rule": rules[r],
                "verdict": VERDICT_NAMES[v],
            }
            for c, d, m, p, r, v in zip(
                *(
                    a.tolist()
                    for a in (self.conversation, self.depth, self.model, self.prefix, self.rule, self.verdict)
                ),
                strict=True,
            )
        ]


def _lengths(pop: Population, n: int, rng: np.random.Generator) -> np.ndarray:
    """Half short chats (geometric), half long sessions (lognormal), mean ≈ ``mean_length``."""
    short = rng.geometric(1.0 / max(pop.mean_length / 3, 1.01), n)
    long = np.rint(rng.lognormal(np.log(pop.mean_length * 1.4), 0.7, n)).astype(np.int64)
    out = np.where(rng.random(n) < 0.5, short, long)
    return np.clip(out, 1, pop.max_length)


def simulate(
    pop: Population,
    conversations: int,
    *,
    seed: int | np.random.Generator = 0,
    observer: TurnObserver | None = None,
) -> TurnRows:
    """Simulate ``conversations`` conversations; rows ordered by depth, then conversation."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    k, n = len(pop.models), conversations
    base = np.array([m.base for m in pop.models])
    decay = np.array([m.decay for m in pop.models])
    start_w = np.array([m.start for m in pop.models], dtype=float)
    route_w = np.array([m.route for m in pop.models], dtype=float)
    suffix_only = np.array([m.suffix_only for m in pop.models])
    canary = pop.index(pop.canary) if pop.canary else -1
    if canary >= 0:
        start_w[canary] = route_w[canary] = 0.0
    lengths = _lengths(pop, n, rng)
    u = rng.normal(0.0, pop.conversation_sd, n)
    e = rng.normal(0.0, pop.turn_sd, n)
    start = rng.choice(k, n, p=start_w / start_w.sum())
    partner = _partners(start, route_w, suffix_only, rng)
    pingpong = (rng.random(n) < pop.pingpong_share) & (partner >= 0)
    ends = {lo - 1 for lo in pop.buckets.edges[1:]}
    odds = np.exp(-pop.confounding * u / max(pop.conversation_sd, 1e-9))
    served = 0
    p_canary = pop.canary_turns / max(float(lengths.sum()), 1.0) if canary >= 0 else 0.0
    cur = np.full(n, -1)
    home = start.copy()
    shock = np.zeros(n)
    alive = np.ones(n, dtype=bool)
    out: dict[str, list[np.ndarray]] = {k_: [] for k_ in ("c", "d", "m", "p", "s", "mean", "h", "e")}
    for depth in range(1, int(lengths.max()) + 1):
        act = np.nonzero(alive & (lengths >= depth))[0]
        if not len(act):
            break
        author = _route(pop, depth, act, cur, start, partner, pingpong, route_w, odds, ends, rng)
        if canary >= 0 and depth > 1:
            back = cur[act] == canary
            author[back] = home[act][back]
            to_canary = ~back & (rng.random(len(act)) < p_canary)
            author[to_canary] = canary
        home[act] = np.where(author != canary, author, home[act])
        prev = cur[act]
        handoff = (depth > 1) & (author != prev)
        shift = np.where(handoff, pop.effects[np.maximum(prev, 0), author], shock[act] * pop.carry)
        shift = np.where(depth > 1, shift, 0.0)
        carried = shock[act] * pop.carry
        shock[act] = shift
        if depth > 1:
            e[act] = pop.turn_rho * e[act] + np.sqrt(1 - pop.turn_rho**2) * rng.normal(
                0.0, pop.turn_sd, len(act)
            )
        mean = base[author] - decay[author] * (depth - 1)
        if observer is not None and depth > 1:
            observer.observe(served, act, depth, prev, author, handoff, carried, base, decay, u[act] + e[act])
        served += len(act)
        for key, val in (("c", act), ("d", np.full(len(act), depth)), ("m", author), ("p", prev),
                         ("s", shift), ("mean", mean), ("h", handoff), ("e", u[act] + e[act])):  # fmt: skip
            out[key].append(np.asarray(val))
        cur[act] = author
        alive[act[suffix_only[author]]] = False
    return _rows(pop, {k_: np.concatenate(v) if v else np.zeros(0) for k_, v in out.items()}, rng)


def _partners(
    start: np.ndarray, route_w: np.ndarray, suffix_only: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A ping-pong partner per conversation: another model that can route and is not suffix-only."""
    w = np.where(suffix_only, 0.0, route_w)
    out = np.full(len(start), -1)
    for s in np.unique(start):
        ws = w.copy()
        ws[s] = 0.0
        if ws.sum() > 0:
            idx = np.nonzero(start == s)[0]
            out[idx] = rng.choice(len(w), len(idx), p=ws / ws.sum())
    return out


def _route(
    pop: Population, depth: int, act: np.ndarray, cur: np.ndarray, start: np.ndarray, partner: np.ndarray,
    pingpong: np.ndarray, route_w: np.ndarray, odds: np.ndarray, ends: set[int], rng: np.random.Generator,
) -> np.ndarray:  # fmt: skip
    """Author of this turn for the active conversations."""
    if depth == 1:
        return np.array(start[act])
    prev = cur[act]
    author: np.ndarray = prev.copy()
    rate = pop.handoff_rate * (pop.bucket_end_boost if depth in ends else 1.0)
    rate *= (depth / pop.mean_length) ** pop.depth_confounding
    p = 1.0 - np.exp(-rate * odds[act])  # confounded: odds scale the hazard
    switch = rng.random(len(act)) < p
    k = len(route_w)
    for m in np.unique(prev[switch]):
        idx = np.nonzero(switch & (prev == m))[0]
        w = route_w.copy()
        w[m] = 0.0
        if w.sum() > 0:
            author[idx] = rng.choice(k, len(idx), p=w / w.sum())
    pp = pingpong[act]
    author[pp] = np.where(prev[pp] == start[act][pp], partner[act][pp], start[act][pp])
    return author


def _rows(pop: Population, t: dict[str, np.ndarray], rng: np.random.Generator) -> TurnRows:
    r = len(pop.rules)
    offsets = np.asarray(pop.rule_offsets, dtype=float)
    nt = len(t["d"])
    mean = np.repeat(t["mean"], r) + np.tile(offsets, nt)
    noise = np.repeat(t["e"], r)
    shift = np.repeat(t["s"], r)
    verdict = draw_verdicts(mean + noise + shift, pop.not_applicable_rate, rng)
    return TurnRows(
        names=pop.names,
        rules=pop.rules,
        conversation=np.repeat(t["c"], r).astype(np.int64),
        depth=np.repeat(t["d"], r).astype(np.int64),
        model=np.repeat(t["m"], r).astype(np.int64),
        prefix=np.repeat(t["p"], r).astype(np.int64),
        rule=np.tile(np.arange(r), nt),
        verdict=verdict,
        shift=shift,
        mean=mean,
        handoff=np.repeat(t["h"], r).astype(bool),
        noise_var=pop.conversation_sd**2 + pop.turn_sd**2,
    )


def draw_verdicts(p: np.ndarray, not_applicable_rate: float, rng: np.random.Generator) -> np.ndarray:
    """Verdict indexes (0 pass, 1 fail, 2 not_applicable) for pass probabilities ``p`` (clipped)."""
    verdict: np.ndarray = (rng.random(len(p)) >= np.clip(p, P_LOW, P_HIGH)).astype(np.int64)
    verdict[rng.random(len(p)) < not_applicable_rate] = 2
    return verdict


def clipped_mean(mean: np.ndarray, var: float) -> np.ndarray:
    """E[clip(mean + N(0, var), P_LOW, P_HIGH)] (exact, clipped normal)."""
    from scipy.special import ndtr

    sd = np.sqrt(var)
    a, b = (P_LOW - mean) / sd, (P_HIGH - mean) / sd

    def phi(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi))

    inside = mean * (ndtr(b) - ndtr(a)) + sd * (phi(a) - phi(b))
    return np.asarray(P_LOW * ndtr(a) + inside + P_HIGH * (1 - ndtr(b)))


def expected_delta(rows: TurnRows, *, rule: int | None = None) -> np.ndarray:
    """(K, K) estimand: mean over handoff checks of E[p | shift] − E[p | no shift] (NaN: no handoff).

    ``rule`` None pools every rule's checks (the refit's ``all`` fit).
    """
    k = len(rows.names)
    sel = rows.handoff & (rows.verdict < 2) & (rows.prefix >= 0)
    if rule is not None:
        sel &= rows.rule == rule
    gap = clipped_mean(rows.mean[sel] + rows.shift[sel], rows.noise_var) - clipped_mean(
        rows.mean[sel], rows.noise_var
    )
    flat = rows.prefix[sel] * k + rows.model[sel]
    total = np.bincount(flat, weights=gap, minlength=k * k)
    count = np.bincount(flat, minlength=k * k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count).reshape(k, k)
