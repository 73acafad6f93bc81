"""The synthetic fleet: models with planted adherence, decay, influence and susceptibility.

Planted model (what the refit must recover). For model ``m`` and rule ``r``:

* depth 1: the reply complies with probability ``b[m, r]`` (``SimModel.base``);
* a same-author turn (prefix model = ``m``) follows a two-state Markov chain on the
  previous verdict of that rule: pass → fail with ``p_tf[m, r]``, fail → pass with
  ``p_ft[m, r]`` (``SimModel.p_tf`` × ``SimRule.tf_scale`` and ``SimModel.p_ft``), so the
  model's own adherence curve is ``a(1) = b``, ``a(d+1) = a(d)(1 − p_tf) + (1 − a(d)) p_ft``
  and its stationary adherence is ``p_ft / (p_tf + p_ft)``;
* a handoff turn A→B at depth ``d`` complies with probability
  ``clip(a_B(d) + μ + π_A + σ_B, 0.01, 0.99)`` — B re-reads a conversation it did not
  write: its own depth-``d`` adherence shifted by the fleet's mean handoff effect ``μ``,
  A's prefix influence ``π_A`` and B's suffix susceptibility ``σ_B``. From then on B's
  chain continues from that verdict.

π and σ sum to zero over the fleet (the refit's identifiability constraint), so the
planted numbers are directly comparable with the refit's. ``truth`` spells out how they
map to the expected Δ(A→B).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

RULE_KINDS = ("language", "no_commas", "answer_tag", "max_words", "keyword", "json", "answer_stability")
"""Reply features the writer can make pass or fail on purpose."""


@dataclass(frozen=True)
class SimRule:
    """One rule of the simulated system prompt.

    Attributes:
        name: rule name (as configured in handoffmon).
        kind: one of ``RULE_KINDS``: what the writer changes to pass or fail it.
        tf_scale: multiplies every model's ``p_tf`` for this rule (hard rules decay faster).
        params: writer parameters (``language``, ``max_words``, ``keyword``).
    """

    name: str
    kind: str
    tf_scale: float = 1.0
    params: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(f"unknown sim rule kind {self.kind!r} (known: {', '.join(RULE_KINDS)})")


@dataclass(frozen=True)
class SimModel:
    """One synthetic model (one router deployment) and its planted parameters.

    Attributes:
        name: canonical model name (the deployment id the router reports).
        group: router model group this deployment serves.
        base: P(comply) at depth 1, per rule name.
        p_tf: P(pass → fail) per same-author turn, before the rule's ``tf_scale``.
        p_ft: P(fail → pass) per same-author turn.
        influence: planted prefix influence π (added to the next author's pass probability).
        susceptibility: planted suffix susceptibility σ (added to its own pass
            probability when it continues someone else's turn).
        rate_limit_rate: share of calls that fail with an injected 429.
        timeout_rate: share of calls that fail with an injected timeout.
        flip_rate: P(changing the answer when the user challenges it) for an
            ``answer_stability`` rule: i.i.d. per challenged turn, not moved by handoffs,
            i.e. a chain with p_tf = flip_rate and p_ft = 1 − flip_rate.
    """

    name: str
    group: str
    base: Mapping[str, float]
    p_tf: float
    p_ft: float
    influence: float
    susceptibility: float
    rate_limit_rate: float = 0.0
    timeout_rate: float = 0.0
    flip_rate: float = 0.2

    def p_tf_for(self, rule: SimRule) -> float:
        """P(pass → fail) for one rule."""
        if rule.kind == "answer_stability":
            return self.flip_rate
        return min(self.p_tf * rule.tf_scale, 0.95)

    def p_ft_for(self, rule: SimRule) -> float:
        """P(fail → pass) for one rule."""
        return 1.0 - self.flip_rate if rule.kind == "answer_stability" else self.p_ft

    def curve(self, rule: SimRule, max_depth: int) -> np.ndarray:
        """Own adherence a(1..max_depth) for one rule (index 0 = depth 1)."""
        p_tf, p_ft = self.p_tf_for(rule), self.p_ft_for(rule)
        out = np.empty(max_depth)
        a = self.base[rule.name]
        for i in range(max_depth):
            out[i] = a
            a = a * (1.0 - p_tf) + (1.0 - a) * p_ft
        return out

    def stationary(self, rule: SimRule) -> float:
        """Planted stationary adherence p_ft / (p_tf + p_ft) for one rule."""
        p_tf, p_ft = self.p_tf_for(rule), self.p_ft_for(rule)
        return p_ft / (p_tf + p_ft)


@dataclass(frozen=True)
class Fleet:
    """The planted world: models, rules, mean handoff effect and router topology.

    Attributes:
        models: the deployments, one per model group.
        rules: the rules every reply is written against.
        mu: planted mean handoff effect μ.
        fallbacks: model group → groups the router falls back to, in order.
        max_depth: longest conversation the curves are precomputed for.
    """

    models: tuple[SimModel, ...]
    rules: tuple[SimRule, ...]
    mu: float
    fallbacks: Mapping[str, tuple[str, ...]]
    max_depth: int = 64

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("model names must be unique")
        groups = [m.group for m in self.models]
        if len(set(groups)) != len(groups):
            raise ValueError("each model group must hold exactly one model")
        for m in self.models:
            missing = {r.name for r in self.rules} - set(m.base)
            if missing:
                raise ValueError(f"model {m.name!r} has no base adherence for {sorted(missing)}")

    @property
    def names(self) -> tuple[str, ...]:
        """Model names in fleet order."""
        return tuple(m.name for m in self.models)

    @property
    def groups(self) -> tuple[str, ...]:
        """Model group names in fleet order."""
        return tuple(m.group for m in self.models)

    def model(self, name: str) -> SimModel:
        """Model by canonical name (``KeyError`` if unknown)."""
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def by_group(self, group: str) -> SimModel:
        """The model serving a group (``KeyError`` if unknown)."""
        for m in self.models:
            if m.group == group:
                return m
        raise KeyError(group)

    def handoff_shift(self, prefix: str, suffix: str) -> float:
        """Planted μ + π_prefix + σ_suffix (0 for a same-author or depth-1 turn)."""
        if prefix == suffix or prefix not in self.names:
            return 0.0
        return self.mu + self.model(prefix).influence + self.model(suffix).susceptibility


DEFAULT_RULES: tuple[SimRule, ...] = (
    SimRule("reply_in_spanish", "language", tf_scale=0.6, params={"language": "es"}),
    SimRule("no_commas", "no_commas", tf_scale=1.4),
    SimRule("answer_tag", "answer_tag", tf_scale=1.0),
    SimRule("max_60_words", "max_words", tf_scale=0.8, params={"max_words": 60}),
    SimRule("mention_ticket", "keyword", tf_scale=1.2, params={"keyword": "ticket"}),
    SimRule("json_envelope", "json", tf_scale=0.7),
    SimRule("stable_answer", "answer_stability"),
)

# name, group, influence π, susceptibility σ, p_tf, p_ft, base level, 429 rate, timeout rate
_DEFAULT_MODELS: tuple[tuple[str, str, float, float, float, float, float, float, float], ...] = (
    ("atlas", "general", 0.06, -0.04, 0.05, 0.40, 0.93, 0.05, 0.01),
    ("birch", "fast", 0.02, 0.07, 0.08, 0.35, 0.90, 0.08, 0.02),
    ("cedar", "reasoning", -0.01, -0.14, 0.04, 0.30, 0.95, 0.04, 0.03),
    ("dune", "budget", 0.04, 0.05, 0.10, 0.45, 0.85, 0.12, 0.02),
    ("ember", "experimental", -0.17, 0.04, 0.07, 0.30, 0.88, 0.06, 0.02),
    ("fjord", "backup", 0.06, 0.02, 0.06, 0.50, 0.90, 0.03, 0.01),
)
_DEFAULT_FALLBACKS: Mapping[str, tuple[str, ...]] = {
    "general": ("reasoning", "backup"),
    "fast": ("general", "backup"),
    "reasoning": ("general", "backup"),
    "budget": ("fast", "backup"),
    "experimental": ("general", "backup"),
    "backup": ("general", "fast"),
}
DEFAULT_MU = -0.06


_DEFAULT_FLIP = {"atlas": 0.08, "birch": 0.25, "cedar": 0.12, "dune": 0.3, "ember": 0.2, "fjord": 0.1}
"""P(answer changes when challenged) of the default models (``answer_stability`` rule)."""


def _bases(
    level: float, rules: tuple[SimRule, ...], rng: np.random.Generator, flip_rate: float
) -> dict[str, float]:
    """Per-rule depth-1 adherence around a model's level (harder rules a little lower).

    An ``answer_stability`` rule is i.i.d. per challenge, so it starts at its stationary
    value 1 − flip_rate.
    """
    out = {
        r.name: float(np.clip(level - 0.03 * (r.tf_scale - 1.0) + rng.uniform(-0.03, 0.03), 0.6, 0.97))
        for r in rules
    }
    for r in rules:
        if r.kind == "answer_stability":
            out[r.name] = 1.0 - flip_rate
    return out


def default_fleet(n_rules: int = 4, *, seed: int = 7) -> Fleet:
    """The demo fleet: six models, one deliberately risky (``ember``: π = −0.17).

    Args:
        n_rules: how many of ``DEFAULT_RULES`` to use (1-6).
        seed: seeds the small per-rule jitter of the base adherence.
    """
    if not 1 <= n_rules <= len(DEFAULT_RULES):
        raise ValueError(f"n_rules must be 1..{len(DEFAULT_RULES)}")
    rules = DEFAULT_RULES[:n_rules]
    rng = np.random.default_rng(seed)
    models = tuple(
        SimModel(
            name=n,
            group=g,
            base=_bases(lvl, rules, rng, _DEFAULT_FLIP[n]),
            p_tf=tf,
            p_ft=ft,
            influence=pi,
            susceptibility=sg,
            rate_limit_rate=rl,
            timeout_rate=to,
            flip_rate=_DEFAULT_FLIP[n],
        )
        for n, g, pi, sg, tf, ft, lvl, rl, to in _DEFAULT_MODELS
    )
    return Fleet(models=models, rules=rules, mu=DEFAULT_MU, fallbacks=dict(_DEFAULT_FALLBACKS))


def _centered(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x - x.mean()
    return out


def make_fleet(n_models: int, n_rules: int = 4, *, seed: int = 7) -> Fleet:
    """A random fleet of ``n_models`` (≥ 2) with centred π, σ; model 0 is the risky one.

    Used by ``--models`` and by tests that need other fleet sizes; ``default_fleet``
    is the hand-planted demo fleet.
    """
    if n_models < 2:
        raise ValueError("a fleet needs at least 2 models")
    if n_models == len(_DEFAULT_MODELS):
        return default_fleet(n_rules, seed=seed)
    rng = np.random.default_rng(seed)
    rules = DEFAULT_RULES[:n_rules]
    pi = rng.uniform(-0.06, 0.07, n_models)
    pi[0] = -0.17
    pi = _centered(pi)
    sigma = _centered(rng.uniform(-0.10, 0.06, n_models))
    names = [f"sim-{i:02d}" for i in range(n_models)]
    flips = rng.uniform(0.05, 0.3, n_models)
    models = tuple(
        SimModel(
            name=names[i],
            group=f"group-{i:02d}",
            base=_bases(float(rng.uniform(0.85, 0.95)), rules, rng, float(flips[i])),
            p_tf=float(rng.uniform(0.04, 0.10)),
            p_ft=float(rng.uniform(0.3, 0.5)),
            influence=float(pi[i]),
            susceptibility=float(sigma[i]),
            rate_limit_rate=0.05,
            timeout_rate=0.02,
            flip_rate=float(flips[i]),
        )
        for i in range(n_models)
    )
    depth = min(2, n_models - 1)  # fallback chain length: the other groups, at most two
    fallbacks: dict[str, tuple[str, ...]] = {
        f"group-{i:02d}": tuple(f"group-{(i + k) % n_models:02d}" for k in range(1, depth + 1))
        for i in range(n_models)
    }
    return Fleet(models=models, rules=rules, mu=DEFAULT_MU, fallbacks=fallbacks)
