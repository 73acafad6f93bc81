"""Shadow policy: arms, allowlist, candidates, breaker; the config fails fast."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from xxhash import xxh3_64_intdigest

from handoffmon.config import ShadowConfig, config_from_mapping
from handoffmon.errors import ConfigError
from handoffmon.shadow import Breaker, Budget, Decision, ShadowPolicy, Skip
from handoffmon.testing import FakeClock

LIMITS = {"calls_per_minute": 1e6, "pair_calls_per_hour": 10**6, "tokens_per_hour": 10**9}


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
    """With the turn's key and a ``seed``, sampling and the no-handoff arm's candidate no longer
    depend on the order turns arrive in (threads, replicas, a rerun of a seeded demo): the same key
    gets the same decision from two policies with differently seeded sources, the rate holds over
    distinct keys, and every candidate is taken."""
    config = ShadowConfig(enabled=True, sample_rate=0.2, usd_per_day=None, targets=["a", "b", "c"],
                          seed="replicas-share-this", **LIMITS)  # type: ignore[arg-type]  # fmt: skip

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


def _old_public_draw(key: str) -> float:
    """The sampling draw before ``shadow.seed``: xxh3 with a seed anyone could read in the source."""
    return xxh3_64_intdigest(key.encode("utf-8"), seed=0x5EED5A3D) / 2.0**64


def _sampled(policy: ShadowPolicy, keys: list[str]) -> list[bool]:
    return [isinstance(policy.decide("a", "b", 10, 3, key=k), Decision) for k in keys]


def test_ids_chosen_offline_against_the_public_seed_are_sampled_at_the_rate() -> None:
    """Audit t5: the draw was a public hash of (conversation id, length), so a client could pick
    ids whose turns are always sampled (40 found in ~2,400 tries at 2%) and spend the budget.
    400 ids picked that way (their depth-2 turn drew < 0.1 under the public hash) are sampled at
    about the rate, not always, with the default random secret and with a configured seed.
    Before the fix all 400 were sampled."""
    rate, ids, i = 0.1, [], 0
    while len(ids) < 400:
        if _old_public_draw(f"evil-{i}\x003") < rate:
            ids.append(f"evil-{i}\x003")
        i += 1
    for seed in (None, "a-configured-secret-seed"):
        hits = sum(_sampled(_policy(targets=["a"], sample_rate=rate, seed=seed, **LIMITS), ids))
        assert 15 <= hits <= 70, (seed, hits)  # Binomial(400, 0.1): mean 40, SD 6, ±4 SD


_SAMPLE_IN_A_PROCESS = """
import json, sys
from handoffmon.config import ShadowConfig
from handoffmon.shadow import Breaker, Budget, Decision, ShadowPolicy
seed = sys.argv[1] or None
c = ShadowConfig(enabled=True, sample_rate=0.5, usd_per_day=None, targets=["a"], seed=seed,
                 calls_per_minute=1e6, pair_calls_per_hour=10**6, tokens_per_hour=10**9)
p = ShadowPolicy(c, Budget(c), Breaker(2, 30.0))
print(json.dumps([isinstance(p.decide("a", "b", 10, 3, key=f"c{i}\\x003"), Decision) for i in range(200)]))
"""


def _sample_in_a_process(seed: str) -> list[bool]:
    out = subprocess.run([sys.executable, "-c", _SAMPLE_IN_A_PROCESS, seed], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    return list(json.loads(out.stdout))


def test_two_processes_without_a_seed_sample_differently_and_one_seed_reproduces() -> None:
    """No ``shadow.seed``: each process draws its own secret, so two processes sample different
    turns (200 keys at rate 0.5 agree by chance with probability 2^-200). The same seed samples
    the same turns in two processes, another seed different ones. Before the fix every process
    sampled the same turns (the seed was a constant), and ``seed`` was no key."""
    unseeded = _sample_in_a_process(""), _sample_in_a_process("")
    assert unseeded[0] != unseeded[1]
    assert 60 <= sum(unseeded[0]) <= 140
    seeded = _sample_in_a_process("the-same-seed-16+"), _sample_in_a_process("the-same-seed-16+")
    assert seeded[0] == seeded[1]
    assert _sample_in_a_process("another-seed-16++") != seeded[0]


def test_a_conversation_gets_at_most_max_calls_per_conversation_per_hour() -> None:
    """Every turn sampled: a conversation's third call within the hour is skipped as
    ``conversation_quota`` (another conversation still gets its calls), and it gets calls again an
    hour after them. Before the fix one conversation could take the whole budget."""
    clock = FakeClock(0.0)
    p = _policy(clock, targets=["a"], max_calls_per_conversation=2, **LIMITS)

    def decide(conversation: str, depth: int) -> Decision | Skip:
        return p.decide("a", "b", 10, 3, key=f"{conversation}\x00{depth}", conversation=conversation)

    assert [type(decide("x", n)).__name__ for n in (3, 5, 7, 9)] == ["Decision", "Decision", "Skip", "Skip"]
    assert decide("x", 11) == Skip("conversation_quota")
    assert isinstance(decide("y", 3), Decision)
    clock.advance(3601)
    assert isinstance(decide("x", 13), Decision)


def test_bad_shadow_seed_and_cap_fail_fast_naming_the_key() -> None:
    """``seed`` is a secret of at least 16 characters (a short or numeric one could be guessed),
    ``max_calls_per_conversation`` a positive integer; a bad value names its key."""
    ok = config_from_mapping({"shadow": {"seed": "s" * 16, "max_calls_per_conversation": 3}}).shadow
    assert (ok.seed, ok.max_calls_per_conversation) == ("s" * 16, 3)
    defaults = config_from_mapping({}).shadow
    assert (defaults.seed, defaults.max_calls_per_conversation) == (None, 2)
    for bad, key in (({"seed": "short"}, "shadow.seed"), ({"seed": 12345}, "shadow.seed"),
                     ({"max_calls_per_conversation": 0}, "shadow.max_calls_per_conversation")):  # fmt: skip
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            config_from_mapping({"shadow": bad}, source="handoffmon.yaml")


def test_a_lone_surrogate_is_sized_and_a_failed_sizing_gives_the_probe_back() -> None:
    """A client's JSON may carry a lone surrogate (``"\\ud800"``). Sizing such a history for the
    budget raised UnicodeEncodeError — after the half-open breaker had granted its one probe —
    so the turn counted as handoffmon's own failure and the probe was never given back: the target
    got no shadow call again until a restart. The history is sized (a surrogate as 3 bytes, as
    any BMP character), and a sizing that raises anyway gives the probe back."""
    from handoffmon.shadow.turns import prompt_bytes

    messages = [{"role": "user", "content": "x\ud800y"}]
    assert prompt_bytes(messages) == prompt_bytes([{"role": "user", "content": "x\u4e00y"}])
    clock = FakeClock(0.0)
    p = _policy(clock, targets=["a"])
    for _ in range(2):
        p.breaker.record("a", ok=False)
    clock.advance(31)

    def broken() -> int:
        raise RuntimeError("sizing failed")

    with pytest.raises(RuntimeError):
        p.decide("a", "b", broken, 1)
    assert isinstance(p.decide("a", "b", lambda: prompt_bytes(messages), 1), Decision)  # the probe
