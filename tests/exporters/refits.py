"""Test helper: small hand-built RefitResults with known values."""

from __future__ import annotations

import math

from handoffmon.refit.result import MarkovFit, ModelScores, PairEffect, RefitResult, RuleFit

NAN = math.nan


def pair(
    a: str, b: str, rule: str, *, delta: float, risk: float, observed: bool = True, n: int = 100
) -> PairEffect:
    """A pair with a ±0.05 interval around ``delta`` (significant when it excludes 0)."""
    lo, hi = delta - 0.05, delta + 0.05
    return PairEffect(
        rule=rule,
        prefix_model=a,
        model=b,
        n=n if observed else 0,
        delta=delta if observed else NAN,
        se=0.025,
        ci_low=lo if observed else NAN,
        ci_high=hi if observed else NAN,
        significant=observed and (lo > 0 or hi < 0),
        risk=risk,
        risk_se=0.03,
        observed=observed,
    )


def markov(model: str, rule: str, stationary: float, half_life: float, after: bool | None) -> MarkovFit:
    """A Markov fit with the given stationary adherence and half-life."""
    return MarkovFit(
        model=model,
        rule=rule,
        turns={None: "all", True: "handoff", False: "same_author"}[after],
        p_tf=0.1,
        p_tf_ci=(0.05, 0.15),
        p_ft=0.3,
        p_ft_ci=(0.2, 0.4),
        stationary=stationary,
        stationary_ci=(0.6, 0.9),
        half_life_turns=half_life,
        log_loss=0.5,
        mse=0.01,
        n_transitions=200,
    )


def rule_fit(rule: str, *, with_claude_pair: bool = True) -> RuleFit:
    """gpt and claude: π/σ, two pairs (one unobserved unless ``with_claude_pair``), Markov fits."""
    pairs = [pair("gpt", "claude", rule, delta=-0.12, risk=-0.1)]
    if with_claude_pair:
        pairs.append(pair("claude", "gpt", rule, delta=0.02, risk=0.01))
    else:
        pairs.append(pair("claude", "gpt", rule, delta=NAN, risk=0.01, observed=False))
    return RuleFit(
        rule=rule,
        mu=-0.05,
        mu_se=0.01,
        r2=0.7 if rule == "all" else NAN,
        r2_adjusted=0.7 if rule == "all" else NAN,
        r2_unweighted=0.6,
        n_pairs=2,
        models={
            "gpt": ModelScores(-0.06, 0.02, 0.03, 0.02, 300, 0.02, -0.01, 0.05, 150),
            "claude": ModelScores(0.06, 0.02, -0.03, 0.02, 300, -0.12, -0.2, -0.04, 150, 0.003, 0.006, True),
        },
        pairs=pairs,
        markov={"gpt": markov("gpt", rule, 0.75, 3.5, None)},
        markov_handoff_turns={"claude": markov("claude", rule, 0.5, math.inf, True)},
        markov_same_author={"claude": markov("claude", rule, 0.8, 2.0, False)},
    )


def make_refit(*, created_at: float = 1_800_000_100.0, with_claude_pair: bool = True) -> RefitResult:
    """A refit over rules ``json`` and pooled ``all``."""
    return RefitResult(
        created_at=created_at,
        source="local",
        observational=True,
        note="test",
        rules={name: rule_fit(name, with_claude_pair=with_claude_pair) for name in ("json", "all")},
    )
