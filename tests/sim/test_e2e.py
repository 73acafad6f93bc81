"""End to end: simulated traffic → Router → wrapper → checkers → aggregates → refit recovers the plant."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from statistics import NormalDist

import pytest

from handoffmon.sim.demo import DemoOutcome, DemoSettings, DemoWorld, build_world, close_world, run_initial

pytestmark = pytest.mark.slow  # the default demo (600 conversations) takes 35-50 s to set up

Z95 = NormalDist().inv_cdf(0.975)


def _run(settings: DemoSettings) -> Iterator[tuple[DemoWorld, DemoOutcome]]:
    world = build_world(settings)
    world.provider.record = True  # keep the simulator's intents to compare with the checkers
    try:
        yield world, run_initial(world)
    finally:
        close_world(world)


@pytest.fixture(scope="module")
def demo_run() -> Iterator[tuple[DemoWorld, DemoOutcome]]:
    """The default demo size and seed, exactly as `handoffmon demo` runs it."""
    yield from _run(DemoSettings())


def _max_abs_z(outcome: DemoOutcome) -> float:
    """Largest |estimate − planted| in standard errors, on the logit scale the refit's interval uses."""

    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    return max(
        abs(logit(c.estimate) - logit(c.planted)) / ((logit(c.ci_high) - logit(c.ci_low)) / (2 * Z95))
        for c in outcome.recovery.stationary
    )


def _allowed_misses(n: int, p: float = 0.05, tail: float = 0.01) -> int:
    """Largest miss count outside the upper ``tail`` of Binomial(n, p) (what calibrated intervals allow)."""
    cdf, k = 0.0, 0
    while True:
        cdf += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if 1 - cdf < tail:
            return k
        k += 1


def test_checkers_judge_every_reply_exactly_as_the_simulator_intended(demo_run) -> None:
    """Pass/fail counts per (rule, author) equal the simulator's intents: the checkers decide, and agree."""
    world, outcome = demo_run
    intended: Counter[tuple[str, str, str]] = Counter()
    for turn in world.provider.truth:
        for rule, ok in turn.intent.items():
            intended[(rule, turn.author, "pass" if ok else "fail")] += 1
    counted: Counter[tuple[str, str, str]] = Counter()
    for key, n in outcome.counts.checks.items():
        counted[(key.rule, key.model, key.verdict)] += n
    assert counted == intended
    assert outcome.counts.total_turns == outcome.stats.turns == len(world.provider.truth)


def test_same_author_transitions_equal_the_simulators_chain_steps(demo_run) -> None:
    """The pipeline's no-handoff transitions are exactly the simulator's same-author chain steps."""
    world, outcome = demo_run

    def verdict(ok: bool) -> str:
        return "pass" if ok else "fail"

    steps: Counter[tuple[str, str, str, str]] = Counter()
    for t in world.provider.truth:
        if t.prefix == t.author and t.previous is not None:
            for rule, ok in t.intent.items():
                steps[(rule, t.author, verdict(t.previous[rule]), verdict(ok))] += 1
    recorded: Counter[tuple[str, str, str, str]] = Counter()
    for key, n in outcome.counts.transitions.items():
        if key.handoff == "false":
            recorded[(key.rule, key.model, key.from_verdict, key.to_verdict)] += n
    assert recorded == steps and sum(steps.values()) > 5000


def test_handoffs_come_from_routing_changes_and_router_fallbacks(demo_run) -> None:
    """Injected failures caused real fallbacks; handoffmon attributed the resulting handoffs itself."""
    world, outcome = demo_run
    assert outcome.stats.fallbacks > 50 and outcome.stats.route_changes > 500
    assert sum(outcome.injected.values()) >= outcome.stats.fallbacks
    handoffs = sum(n for k, n in outcome.counts.turns.items() if k.handoff == "true")
    sim_handoffs = sum(1 for t in world.provider.truth if t.prefix is not None and t.prefix != t.author)
    assert handoffs == sim_handoffs > 1000
    assert set(outcome.counts.attributions) == {"chain"}  # every earlier message attributed by the chain


def test_default_demo_recovers_planted_influence_and_susceptibility(demo_run) -> None:
    """Pearson(planted, estimated) ≥ 0.9 for π and for σ at the default demo size."""
    _, outcome = demo_run
    rec = outcome.recovery
    assert len(rec.models) == 6
    assert rec.pearson_pi >= 0.9, rec.to_dict()
    assert rec.pearson_sigma >= 0.9, rec.to_dict()
    fit = outcome.result.rules["all"]
    worst = min(fit.models, key=lambda m: fit.models[m].prefix_influence)
    assert worst == "ember"  # the deliberately risky prefix is found


def test_planted_stationary_adherence_lies_within_the_refit_intervals(demo_run) -> None:
    """Per (model, rule) same-author chain: misses consistent with 95% coverage, none beyond 3.5 SE."""
    _, outcome = demo_run
    checks = outcome.recovery.stationary
    # a chain is published only with refit.markov_min_transitions transitions out of each state
    out_of: Counter[tuple[str, str, str]] = Counter()
    for key, n in outcome.counts.transitions.items():
        if key.handoff == "false":
            out_of[(key.model, key.rule, key.from_verdict)] += n
    need = outcome.result.markov_min_transitions
    chains = {(m, r) for m, r, _ in out_of}
    published = {(m, r) for m, r in chains if min(out_of[(m, r, "pass")], out_of[(m, r, "fail")]) >= need}
    assert {(c.model, c.rule) for c in checks} == published and len(chains) == 24 and len(published) >= 20
    misses = sum(not c.covered for c in checks)
    assert misses <= _allowed_misses(len(checks)), [c for c in checks if not c.covered]
    assert _max_abs_z(outcome) < 3.5


@pytest.mark.xfail(
    reason="precision, not a bug (bisected 2026-12-01): sigma rests on each model's clean same-author "
    "baseline (issue 16), which ends at depth 8 for models with frequent fallbacks; sigma SEs are "
    "2x the old binomial ones and Pearson(sigma) at size 3 seed 11 is 0.907 with the fitted prior "
    "(0.891 fixed; pi 0.997); every sigma interval but cedar's covers the planted value",
    strict=False,
    raises=AssertionError,  # a crash or a timeout is a failure, not the expected one
)
@pytest.mark.known_limitation  # 3x the demo: 200-300+ s on a 2-core host, so not in CI
@pytest.mark.timeout(1200)
def test_larger_seeded_run_recovers_influence_and_susceptibility_closely() -> None:
    """3x the default traffic, another seed: Pearson ≥ 0.95 for π and σ; stationary still calibrated."""
    for _, outcome in _run(DemoSettings(size=3.0, seed=11)):
        rec = outcome.recovery
        assert rec.pearson_pi >= 0.95 and rec.pearson_sigma >= 0.95, rec.to_dict()
        misses = sum(not c.covered for c in rec.stationary)
        assert misses <= _allowed_misses(len(rec.stationary))
