"""The fallback-ordering policy: conservative reordering, fail-safe to the router's own order."""

from __future__ import annotations

import itertools

import pytest

from handoffmon.config import RoutingConfig
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.routing import Candidate, FallbackPolicy, PairRisk, PairRiskTable, ShadowCost
from handoffmon.sim import default_fleet
from handoffmon.sim.offline import simulate_counts

NOW = 10_000.0


def _table(
    risks: dict[tuple[str, str], tuple[float, float]], created_at: float = NOW, **shadow: ShadowCost
) -> PairRiskTable:
    pairs = {k: PairRisk(r, se) for k, (r, se) in risks.items()}
    for name, cost in shadow.items():
        a, b = name.split("_")
        pairs[(a, b)] = PairRisk(pairs.get((a, b), PairRisk(0.0, 0.0)).risk, 0.01, shadow=cost)
    return PairRiskTable(pairs, created_at=created_at)


def _c(
    group: str, model: str | None = None, cost: float | None = None, latency: float | None = None
) -> Candidate:
    return Candidate(group, model if model is not None else group, cost, latency)


RISKY = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01), ("a", "d"): (-0.14, 0.01)})
B, C, D = _c("b"), _c("c"), _c("d")


def _decide(
    table: PairRiskTable | None, cands: list[Candidate], prefix: str | None = "a", **kw: object
) -> tuple[list[str], str]:
    settings = RoutingConfig(**{k: v for k, v in kw.items() if k in RoutingConfig.model_fields})
    extra = {k: v for k, v in kw.items() if k not in RoutingConfig.model_fields}
    d = FallbackPolicy(settings).decide(table, prefix, cands, now=extra.pop("now", NOW), **extra)  # type: ignore[arg-type]
    return d.groups, d.outcome


def test_significantly_safer_candidate_moves_ahead() -> None:
    """a→b costs 15 pp, a→c nothing: c is tried first."""
    assert _decide(RISKY, [B, C]) == (["c", "b"], "reordered")


def test_missing_or_stale_table_is_exactly_the_router_order() -> None:
    """No table, a table older than max_table_age_s (or from the future by NaN): the candidates as given."""
    assert _decide(None, [B, C]) == (["b", "c"], "no_table")
    old = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01)}, created_at=NOW - 3601)
    assert _decide(old, [B, C]) == (["b", "c"], "stale")
    assert _decide(old, [B, C], max_table_age_s=7200) == (["c", "b"], "reordered")
    nan = _table({("a", "b"): (-0.15, 0.01)}, created_at=float("nan"))
    assert _decide(nan, [B, C]) == (["b", "c"], "stale")


def test_a_table_stamped_ahead_of_this_clock_is_stale() -> None:
    """A table from another clock a day ahead was fresh for max_table_age_s plus a day: stale now;
    ordinary skew (a minute ahead, or exactly MAX_FUTURE_S) still routes by it."""
    risks = {("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01)}
    assert _decide(_table(risks, created_at=NOW + 86_400), [B, C]) == (["b", "c"], "stale")
    assert _decide(_table(risks, created_at=NOW + 301), [B, C]) == (["b", "c"], "stale")
    assert _decide(_table(risks, created_at=NOW + 300), [B, C]) == (["c", "b"], "reordered")
    assert _decide(_table(risks, created_at=NOW + 60), [B, C]) == (["c", "b"], "reordered")


@pytest.mark.parametrize("prefix", [None, "none", "unknown", ""])
def test_no_prefix_keeps_the_order(prefix: str | None) -> None:
    """Depth 1 or an unknown previous author: no pair to look up."""
    assert _decide(RISKY, [B, C], prefix=prefix) == (["b", "c"], "no_prefix")


def test_single_candidate() -> None:
    assert _decide(RISKY, [B]) == (["b"], "single")
    assert _decide(RISKY, []) == ([], "single")


def test_min_effect_and_significance_gate_the_move() -> None:
    """Better by less than min_effect, or not by z standard errors: the router's order stands."""
    small = _table({("a", "b"): (-0.015, 0.001), ("a", "c"): (0.0, 0.001)})
    assert _decide(small, [B, C]) == (["b", "c"], "unchanged")
    assert _decide(small, [B, C], min_effect_pp=1.0) == (["c", "b"], "reordered")
    noisy = _table({("a", "b"): (-0.10, 0.05), ("a", "c"): (0.0, 0.05)})  # diff 10 pp, se of diff 7 pp
    assert _decide(noisy, [B, C]) == (["b", "c"], "unchanged")
    assert _decide(noisy, [B, C], z=1.0) == (["c", "b"], "reordered")


def test_ties_and_insignificant_differences_keep_router_order() -> None:
    """b and d differ by 1 pp: their relative order is the router's in every permutation; c leads."""
    for perm in itertools.permutations([B, C, D]):
        got, _ = _decide(RISKY, list(perm))
        assert got[0] == "c"
        assert [g for g in got if g != "c"] == [c.group for c in perm if c.group != "c"]


def test_equal_scores_keep_router_order_with_no_effect_or_z_gate() -> None:
    """min_effect_pp 0 and z 0 (move on any improvement): equal scores are no improvement, so the
    router's order stands in every permutation; a real improvement still moves."""
    equal = _table({("a", "b"): (-0.05, 0.0), ("a", "c"): (-0.05, 0.0), ("a", "d"): (-0.05, 0.01)})
    for perm in itertools.permutations([B, C, D]):
        assert _decide(equal, list(perm), min_effect_pp=0.0, z=0.0) == ([c.group for c in perm], "unchanged")
    better = _table({("a", "b"): (-0.05, 0.0), ("a", "c"): (-0.04, 0.0)})
    assert _decide(better, [B, C], min_effect_pp=0.0, z=0.0) == (["c", "b"], "reordered")


def test_unknown_candidate_is_a_barrier() -> None:
    """A candidate without a single known model (or pair) is never moved, nor passed."""
    multi = Candidate("mixed", None)
    assert _decide(RISKY, [B, multi, C]) == (["b", "mixed", "c"], "unchanged")
    assert _decide(RISKY, [B, _c("x"), C]) == (["b", "x", "c"], "unchanged")
    assert _decide(RISKY, [multi, B, C]) == (["mixed", "c", "b"], "reordered")


def test_shadow_costs_compare_only_with_shadow_costs() -> None:
    """A measured switch cost and a fitted risk are different contrasts and never compared: a pair
    with only a switch cost against one with only a risk keeps the router's order; two switch
    costs are compared; a pair with both is compared by the kind the other pair has."""
    shadow_only = PairRisk(float("nan"), float("nan"), shadow=ShadowCost(0.05, 0.01, 50))
    t = PairRiskTable({("a", "b"): PairRisk(-0.15, 0.01), ("a", "c"): shadow_only}, created_at=NOW)
    assert _decide(t, [B, C]) == (["b", "c"], "unchanged")
    t2 = _table({}, a_b=ShadowCost(-0.2, 0.02, 50), a_c=ShadowCost(0.0, 0.02, 50))
    assert _decide(t2, [B, C]) == (["c", "b"], "reordered")
    both = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01)}, a_c=ShadowCost(-0.01, 0.01, 50))
    assert _decide(both, [B, C]) == (["c", "b"], "reordered")  # risks: 0.0 vs −0.15


def test_observed_adherence_is_compared_when_it_is_the_sharper_kind() -> None:
    """Both pairs observed: the depth-standardized adherence (SE 0.02) outranks the fitted risks
    (SE 0.05, which call c worse) because its difference has the smaller SE; with sharper risks
    the risks decide."""

    def pair(risk: float, risk_se: float, adh: float) -> PairRisk:
        return PairRisk(risk, risk_se, n=200, adherence=adh, adherence_se=0.02)

    t = PairRiskTable(
        {("a", "b"): pair(0.0, 0.05, 0.70), ("a", "c"): pair(-0.01, 0.05, 0.85)}, created_at=NOW
    )
    assert t.compare("a", "c", "b") == pytest.approx((0.15, 0.02 * 2**0.5, "adherence"))  # type: ignore[arg-type]
    assert _decide(t, [B, C]) == (["c", "b"], "reordered")
    sharp = PairRiskTable(
        {("a", "b"): pair(0.0, 0.005, 0.70), ("a", "c"): pair(-0.01, 0.005, 0.85)}, created_at=NOW
    )
    assert sharp.compare("a", "c", "b")[2] == "risk"  # type: ignore[index]
    assert _decide(sharp, [B, C]) == (["b", "c"], "unchanged")


def test_scores_of_two_kinds_that_disagree_keep_the_router_order() -> None:
    """c is the better model after a (adherence 0.85 vs 0.70) but loses more on the handoff (risk
    −0.10 vs 0.0), both far past the gates. Which kind is sharper changed with the SEs from refit
    to refit, and the order with it (c first when adherence was sharper, b first when risk was):
    it flapped on SE noise, not on the estimates. Now neither order is acted on while a kind
    contradicts the sharper one; a kind that only fails to confirm does not block the move."""

    def table(adh_se: float, risk_se: float, c_risk: float = -0.10) -> PairRiskTable:
        def pair(risk: float, adh: float) -> PairRisk:
            return PairRisk(risk, risk_se, n=500, adherence=adh, adherence_se=adh_se)

        return PairRiskTable({("a", "b"): pair(0.0, 0.70), ("a", "c"): pair(c_risk, 0.85)}, created_at=NOW)

    for adh_se, risk_se in ((0.01, 0.02), (0.02, 0.01), (0.012, 0.013), (0.013, 0.012)):
        assert _decide(table(adh_se, risk_se), [B, C]) == (["b", "c"], "unchanged"), (adh_se, risk_se)
        assert _decide(table(adh_se, risk_se), [C, B]) == (["c", "b"], "unchanged"), (adh_se, risk_se)
    assert _decide(table(0.01, 0.02, c_risk=-0.01), [B, C]) == (["c", "b"], "reordered")


def test_same_author_continuation_compares_with_either_kind() -> None:
    """Handing the conversation back to its last author has no handoff risk: it beats a risky pair."""
    t = _table({("a", "b"): (-0.15, 0.01)})
    assert _decide(t, [B, _c("a")]) == (["a", "b"], "reordered")


def test_cost_and_latency_caps() -> None:
    """A safer candidate does not pass one cheaper/faster by more than the cap; unknown facts
    block under a cap."""
    b, c = _c("b", cost=1.0, latency=0.5), _c("c", cost=5.0, latency=2.0)
    assert _decide(RISKY, [b, c]) == (["c", "b"], "reordered")
    assert _decide(RISKY, [b, c], max_extra_cost_usd_per_mtok=3.0)[1] == "unchanged"
    assert _decide(RISKY, [b, c], max_extra_cost_usd_per_mtok=4.0)[1] == "reordered"
    assert _decide(RISKY, [b, c], max_extra_latency_s=1.0)[1] == "unchanged"
    assert _decide(RISKY, [b, c], max_extra_latency_s=1.5)[1] == "reordered"
    assert _decide(RISKY, [B, C], max_extra_latency_s=1.5)[1] == "unchanged"


def test_return_home_when_healthy() -> None:
    """The conversation's first author goes first when it is a healthy candidate; not when cooling down."""
    t = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01), ("a", "h"): (-0.075, 0.05)})
    h = _c("h")
    assert _decide(t, [B, C, h], home_model="h") == (["h", "c", "b"], "home")
    assert _decide(t, [B, C, h], home_model="h", healthy=lambda g: g != "h") == (["c", "b", "h"], "reordered")
    assert _decide(t, [B, C, h], home_model="h", return_home=False) == (["c", "b", "h"], "reordered")
    assert _decide(t, [h, B], home_model="h") == (["h", "b"], "unchanged")


def test_return_home_never_passes_a_candidate_the_table_says_is_safer() -> None:
    """Home is a preference, not evidence: a→h measured 15 pp worse than a→c (15 SEs) kept h behind
    c (h went first, into the handoff the table says is the riskiest). Behind b, which is no safer
    than h, it still moves first; with no score for a→h at all it moves first too (configured)."""
    h = _c("h")
    risky_home = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01), ("a", "h"): (-0.15, 0.01)})
    assert _decide(risky_home, [B, C, h], home_model="h") == (["c", "b", "h"], "reordered")
    assert _decide(risky_home, [B, h], home_model="h") == (["h", "b"], "home")
    unknown_home = _table({("a", "b"): (-0.15, 0.01), ("a", "c"): (0.0, 0.01)})
    assert _decide(unknown_home, [B, C, h], home_model="h") == (["h", "c", "b"], "home")


def test_refit_table_reorders_only_in_the_planted_direction() -> None:
    """On a refit of the default fleet, every move the policy makes agrees with the planted σ, and the
    16-pp gap between cedar (σ = −0.14) and fjord (σ = +0.02) moves fjord first for every prefix."""
    fleet = default_fleet()
    result = refit(simulate_counts(fleet, 300, seed=11), buckets=DepthBuckets(), now=NOW)
    table = PairRiskTable.from_refit(result)
    policy = FallbackPolicy(RoutingConfig())
    cands = {g: tuple(Candidate(f, fleet.by_group(f).name) for f in fb) for g, fb in fleet.fallbacks.items()}
    moved = 0
    for prefix in fleet.names:
        for cs in cands.values():
            d = policy.decide(table, prefix, cs, now=NOW)
            if d.changed:
                moved += 1
                first, displaced = d.order[0].model, cs[0].model
                assert first is not None and displaced is not None
                assert fleet.handoff_shift(prefix, first) > fleet.handoff_shift(prefix, displaced)
        if prefix not in ("cedar", "fjord"):
            d = policy.decide(table, prefix, cands["general"], now=NOW)
            assert d.groups == ["backup", "reasoning"], prefix
    assert moved >= 5


def test_a_decision_costs_microseconds() -> None:
    """decide() with three candidates: median well under 25 µs (≈ 3 µs measured; 8× margin for a
    loaded 2-core host). tests/benchmarks/bench_routing.py has the full figures."""
    from tests.benchmarks.bench_routing import measure_decide

    (p50, _), (p50_none, _) = measure_decide(2000).values()
    assert p50 < 25e-6 and p50_none < 25e-6


class _Counting(PairRiskTable):
    """A table counting the policy's comparisons."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.compared = 0

    def compare(self, prefix_model: str, c: str, b: str) -> tuple[float, float, str] | None:
        self.compared += 1
        return super().compare(prefix_model, c, b)


def test_a_long_fallback_list_costs_a_bounded_decision() -> None:
    """A request may carry its own fallbacks (a LiteLLM Proxy body, serve): 4,000 alternating
    b, c entries made the insertion sort compare ~2 million times (2.9 s on the request path).
    Only the first MAX_ORDERED are ordered, the rest keep their places: at most 32·31/2 comparisons,
    and the result is still a permutation of the list."""
    from handoffmon.routing.policy import MAX_ORDERED

    table = _Counting({("a", "b"): PairRisk(-0.15, 0.01), ("a", "c"): PairRisk(0.0, 0.01)}, created_at=NOW)
    cands = [B, C] * 2000
    d = FallbackPolicy(RoutingConfig()).decide(table, "a", cands, now=NOW)
    assert table.compared <= MAX_ORDERED * (MAX_ORDERED - 1) // 2
    assert d.outcome == "reordered"
    assert d.groups[:MAX_ORDERED] == ["c"] * (MAX_ORDERED // 2) + ["b"] * (MAX_ORDERED // 2)
    assert d.groups[MAX_ORDERED:] == [g.group for g in cands[MAX_ORDERED:]]


def _refits(seed: int, diff: float, refits: int = 100, per_refit: int = 100) -> list[str]:
    """Outcomes of one request (prefix a, candidates b then c) decided with each of ``refits``
    successive tables, each refitted from all checks so far (as the in-process refit is): every
    refit adds ``per_refit`` checks of b after a (adherence 0.80) and of c after a (0.80 + diff)."""
    import math

    import numpy as np

    rng = np.random.default_rng(seed)
    policy = FallbackPolicy(RoutingConfig(return_home=False))
    xb = xc = n = 0
    out = []
    for _ in range(refits):
        n += per_refit
        xb += rng.binomial(per_refit, 0.80)
        xc += rng.binomial(per_refit, 0.80 + diff)
        shares = {"b": xb / n, "c": xc / n}
        pairs = {
            ("a", m): PairRisk(math.nan, math.nan, adherence=p, adherence_se=math.sqrt(p * (1 - p) / n))
            for m, p in shares.items()
        }
        out.append(policy.decide(PairRiskTable(pairs, created_at=NOW), "a", (B, C), now=NOW).outcome)
    return out


def _changes(outcomes: list[str]) -> int:
    return sum(a != b for a, b in itertools.pairwise(outcomes))


def test_cumulative_refits_change_the_order_rarely_with_no_hysteresis() -> None:
    """The policy keeps no state between refits (no hysteresis); its gates — min_effect_pp and z
    standard errors, the router's order winning every tie — are the only damping, and on refits of
    growing counts they are enough (50 runs of 100 refits, 100 checks per candidate per refit):
    with no difference 98% of the decisions keep the router's order (false moves from repeated
    looks at z = 1.96); a 5 pp difference is acted on in 95% of the refits (at least 80 of 100 in
    every run) and the order changes at most 8 times; a difference right at min_effect_pp (2 pp),
    the worst case, changes the order about 5 times per 100 refits (measured 5.1 on average over
    200 runs, at most 20) between two orders the operator's own threshold calls equivalent. See
    docs/guides/routing.md."""
    none = [_refits(s, 0.0) for s in range(50)]
    assert sum(o.count("reordered") for o in none) / (50 * 100) <= 0.03
    clear = [_refits(s, 0.05) for s in range(50)]
    assert min(o.count("reordered") for o in clear) >= 80 and max(_changes(o) for o in clear) <= 8
    edge = [_changes(_refits(s, 0.02)) for s in range(50)]
    assert sum(edge) / 50 <= 8
