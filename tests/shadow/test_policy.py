"""Shadow policy: arms, allowlist, candidates, breaker; the config fails fast."""

from __future__ import annotations

import random

import pytest

from handoffmon.config import ShadowConfig, config_from_mapping
from handoffmon.errors import ConfigError
from handoffmon.shadow import Breaker, Budget, Decision, ShadowPolicy, Skip
from handoffmon.testing import FakeClock


def _policy(clock: FakeClock | None = None, **cfg: object) -> ShadowPolicy:
    clock = clock or FakeClock(0.0)
    config = ShadowConfig(**{"enabled": True, "sample_rate": 1.0, "usd_per_day": None, **cfg})  # type: ignore[arg-type]
    return ShadowPolicy(config, Budget(config, clock), Breaker(2, 30.0, clock),
                        candidates=lambda m: {"a": ["b", "c"]}.get(m, []), rng=random.Random(0))  # fmt: skip


def test_handoff_arm_asks_the_prefix_model() -> None:
    """A→B served: A continues; the pair is (A, B)."""
    d = _policy(targets=["a"]).decide("a", "b", 1000, 3)
    assert isinstance(d, Decision) and (d.arm, d.prefix_model, d.model, d.target) == (
        "handoff",
        "a",
        "b",
        "a",
    )


def test_no_handoff_arm_asks_an_allowed_candidate() -> None:
    """A→A served: a candidate from the router's fallbacks that is on the allowlist continues."""
    d = _policy(targets=["c"]).decide("a", "a", 1000, 3)
    assert isinstance(d, Decision) and (d.arm, d.prefix_model, d.model, d.target) == (
        "no_handoff",
        "a",
        "c",
        "c",
    )
    assert _policy(targets=["z"]).decide("a", "a", 10, 1) == Skip("not_allowed")
    assert _policy(targets=["a"]).decide("b", "b", 10, 1) == Skip("no_candidate")


def test_ineligible_and_disabled_turns() -> None:
    """Depth 1, unknown prefix and a disabled section never shadow; sampling is respected."""
    p = _policy(targets=["a"])
    assert p.decide("none", "a", 10, 1) == Skip("not_eligible")
    assert p.decide("unknown", "a", 10, 1) == Skip("not_eligible")
    assert _policy(targets=["a"], arms=["no_handoff"]).decide("a", "b", 10, 1) == Skip("arm_off")
    off = ShadowPolicy(ShadowConfig(), Budget(ShadowConfig()), Breaker(1, 1.0))
    assert off.decide("a", "b", 10, 1) == Skip("disabled")
    sampled = _policy(
        targets=["a"], sample_rate=0.2, calls_per_minute=1e6, pair_calls_per_hour=10**6, tokens_per_hour=10**9
    )
    hits = sum(isinstance(sampled.decide("a", "b", 10, 1), Decision) for _ in range(2000))
    assert 330 <= hits <= 470  # Binomial(2000, 0.2): mean 400, SD 17.9, ±3.9 SD


def test_breaker_stops_a_failing_target_and_probes_after_cooldown() -> None:
    """Two failures open the breaker; after 30 s one probe goes; its success closes it."""
    clock = FakeClock(0.0)
    p = _policy(clock, targets=["a"])
    for _ in range(2):
        p.breaker.record("a", ok=False)
    assert p.decide("a", "b", 10, 1) == Skip("breaker_open")
    clock.advance(31)
    assert isinstance(p.decide("a", "b", 10, 1), Decision)
    assert p.decide("a", "b", 10, 1) == Skip("breaker_open")  # one probe at a time
    p.breaker.record("a", ok=True)
    assert isinstance(p.decide("a", "b", 10, 1), Decision)


def test_enabled_without_targets_fails_fast() -> None:
    """Content must not go anywhere unnamed: ``enabled`` requires ``targets``; the error names the key."""
    with pytest.raises(ConfigError, match="shadow") as info:
        config_from_mapping({"shadow": {"enabled": True}}, source="handoffmon.yaml")
    assert "handoffmon.yaml" in str(info.value) and "targets" in str(info.value)
    assert not config_from_mapping({}).shadow.enabled


def test_a_keyed_turn_is_sampled_and_given_a_candidate_by_its_key_alone() -> None:
    """With the turn's key, sampling and the no-handoff arm's candidate no longer depend on
    the order turns arrive in (threads, replicas, a rerun of a seeded demo): the same key gets
    the same decision from two policies with differently seeded sources, the rate holds over
    distinct keys, and every candidate is taken."""
    limits = {"calls_per_minute": 1e6, "pair_calls_per_hour": 10**6, "tokens_per_hour": 10**9}
    config = ShadowConfig(enabled=True, sample_rate=0.2, usd_per_day=None, targets=["a", "b", "c"], **limits)  # type: ignore[arg-type]

    def policy(seed: int) -> ShadowPolicy:
        clock = FakeClock(0.0)
        return ShadowPolicy(
            config,
            Budget(config, clock),
            Breaker(2, 30.0, clock),
            candidates=lambda m: {"a": ["b", "c"]}.get(m, []),
            rng=random.Random(seed),
        )

    one, two = policy(1), policy(2)
    keys = [f"conv-{i}\x00{2 * (i % 7) + 1}" for i in range(2000)]
    first = [one.decide("a", "a", 10, 1, key=k) for k in keys]
    again = [two.decide("a", "a", 10, 1, key=k) for k in reversed(keys)][::-1]
    assert [(type(d), getattr(d, "target", None)) for d in first] == [
        (type(d), getattr(d, "target", None)) for d in again
    ]
    sampled = [d for d in first if isinstance(d, Decision)]
    assert 330 <= len(sampled) <= 470  # Binomial(2000, 0.2): mean 400, SD 17.9, ±3.9 SD
    picks = [d.target for d in sampled]
    assert 0.35 <= picks.count("b") / len(picks) <= 0.65 and set(picks) == {"b", "c"}
    # without a key, the injected source decides (two sources: different samples)
    unkeyed = (
        [one.decide("a", "a", 10, 1) for _ in range(200)],
        [two.decide("a", "a", 10, 1) for _ in range(200)],
    )
    assert [isinstance(d, Decision) for d in unkeyed[0]] != [isinstance(d, Decision) for d in unkeyed[1]]
