"""RuleSet: loading (errors name rule + key), scope, per-request rules, budget, never raising."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from handoffmon.checkers import (
    CheckContext,
    CheckerRegistry,
    CheckOutcome,
    RequestRulePolicy,
    RuleSet,
    Scope,
    default_registry,
)
from handoffmon.config import RuleConfig, config_from_mapping, load_config
from handoffmon.errors import RuleError


def rule(name: str, check: str, params: dict[str, object] | None = None, **scope: object) -> RuleConfig:
    return RuleConfig(name=name, check=check, params=params or {}, scope=scope)


def verdicts(results: tuple) -> dict[str, str]:  # type: ignore[type-arg]
    return {r.rule: r.verdict for r in results}


@pytest.mark.parametrize(
    ("cfg", "key", "fragment"),
    [
        (rule("r1", "no_such_checker"), "rules['r1'].check", "unknown checker"),
        (rule("r1", "no_such_checker"), "rules['r1'].check", "ifeval_loose:<instruction id>"),
        # the typo, not the `min` the factory then misses (it blamed `min` before)
        (
            rule("r6", "length", {"unit": "words", "maxx": 3}),
            "rules['r6'].params.maxx",
            "unknown parameter (did you mean 'max'?)",
        ),
        (rule("r7", "length", {"unit": "words", "max": 3, "mn": 1}), "rules['r7'].params.mn", "'min'?"),
        (
            rule("r2", "regex_must_match", {"pattern": "(unclosed"}),
            "rules['r2'].params.pattern",
            "invalid regex",
        ),
        (rule("r3", "length", {"unit": "words", "min": "ten"}), "rules['r3'].params.min", "integer"),
        (rule("r4", "valid_json", {"strict": True}), "rules['r4'].params.strict", "unknown parameter"),
        (
            rule("r5", "ifeval:length_constraints:number_words", {"num_words": 3}),
            "rules['r5'].params.relation",
            "required",
        ),
    ],
)
def test_bad_rules_fail_at_load_naming_rule_and_key(cfg: RuleConfig, key: str, fragment: str) -> None:
    """Unknown checker, invalid regex, bad or unknown params: RuleError with rule, key and file."""
    with pytest.raises(RuleError) as e:
        RuleSet.from_config([cfg], source="rules.yaml")
    assert e.value.key == key
    assert e.value.source == "rules.yaml"
    assert fragment in str(e.value) and "rules.yaml" in str(e.value)


def test_config_rules_compile_through_from_config() -> None:
    """Rules from a validated HandoffmonConfig compile; names keep config order."""
    cfg = config_from_mapping(
        {"rules": [{"name": "j", "check": "valid_json"}, {"name": "c", "check": "no_commas"}]}
    )
    rs = RuleSet.from_config(cfg.rules, source="x.yaml")
    assert rs.names == ("j", "c")
    assert verdicts(rs.evaluate("[1]", CheckContext())) == {"j": "pass", "c": "pass"}


def test_scope_selects_by_group_route_tag_and_depth() -> None:
    """Empty selectors match all; tags match any-of; depth range is inclusive."""
    rs = RuleSet.from_config(
        [
            rule("everywhere", "no_commas"),
            rule("group", "no_commas", model_groups=["gpt"]),
            rule("route", "no_commas", routes=["/chat"]),
            rule("tag", "no_commas", tags=["legal", "medical"]),
            rule("deep", "no_commas", min_depth=3, max_depth=4),
        ]
    )
    assert set(verdicts(rs.evaluate("x", CheckContext()))) == {"everywhere"}
    ctx = CheckContext(model_group="gpt", route="/chat", tags=frozenset({"medical"}), depth=3)
    assert set(verdicts(rs.evaluate("x", ctx))) == {"everywhere", "group", "route", "tag", "deep"}
    assert "deep" not in verdicts(rs.evaluate("x", CheckContext(depth=5)))
    assert "group" not in verdicts(rs.evaluate("x", CheckContext(model_group="claude")))


def test_request_rules_parse_and_evaluate() -> None:
    """metadata={"handoffmon": {"rules": [...]}} yields RuleConfigs evaluated after configured rules."""
    rs = RuleSet.from_config([rule("cfg", "no_commas")])
    meta = {
        "handoffmon": {
            "rules": [
                {
                    "name": "words",
                    "check": "ifeval:length_constraints:number_words",
                    "params": {"relation": "less than", "num_words": 4},
                },
                {"name": "late", "check": "no_commas", "scope": {"min_depth": 2}},
            ]
        }
    }
    extra = rs.parse_request_rules(meta)
    assert [r.name for r in extra] == ["words", "late"]
    out = rs.evaluate("one two three", CheckContext(), extra)
    assert [r.rule for r in out] == ["cfg", "words"]
    assert verdicts(rs.evaluate("one two three four", CheckContext(depth=2), extra)) == {
        "cfg": "pass",
        "words": "fail",
        "late": "pass",
    }
    assert rs.parse_request_rules(None) == () and rs.parse_request_rules({"other": 1}) == ()


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        ({"handoffmon": {"rules": [{"name": "x", "check": "nope"}]}}, "metadata.handoffmon.rules['x'].check"),
        (
            {"handoffmon": {"rules": [{"name": "x", "check": "length", "params": {"unit": "words"}}]}},
            "metadata.handoffmon.rules['x'].params.min",
        ),
        ({"handoffmon": {"rules": [{"check": "no_commas"}]}}, "metadata.handoffmon.rules[0].name"),
        ({"handoffmon": {"rules": "no_commas"}}, "metadata.handoffmon.rules"),
        (
            {"handoffmon": {"rules": [{"name": "cfg", "check": "no_commas"}]}},
            "metadata.handoffmon.rules['cfg'].name",
        ),
    ],
)
def test_bad_request_rules_raise_rule_error(meta: dict[str, object], key: str) -> None:
    """Bad per-request rules raise RuleError naming the metadata key (a configured name cannot be reused)."""
    rs = RuleSet.from_config([rule("cfg", "no_commas")])
    with pytest.raises(RuleError) as e:
        rs.parse_request_rules(meta)
    assert e.value.key == key


def test_too_many_request_rules_rejected() -> None:
    """A request cannot declare more than request_rules.max_per_request rules."""
    rs = RuleSet(request=RequestRulePolicy(max_per_request=2))
    many = {"handoffmon": {"rules": [{"name": f"r{i}", "check": "no_commas"} for i in range(3)]}}
    with pytest.raises(RuleError):
        rs.parse_request_rules(many)


def test_oversized_request_rule_rejected() -> None:
    """A per-request rule over request_rules.max_rule_bytes is refused before anything is compiled;
    rules handed to evaluate directly (eval scripts, validated state) are not held to it."""
    rs = RuleSet(request=RequestRulePolicy(max_rule_bytes=200))
    big = {
        "handoffmon": {
            "rules": [
                {
                    "name": "k",
                    "check": "keywords_absent",
                    "params": {"keywords": [f"word{i}" for i in range(50)]},
                }
            ]
        }
    }
    with pytest.raises(RuleError) as e:
        rs.parse_request_rules(big)
    assert "limited to 200" in str(e.value) and e.value.key == "metadata.handoffmon.rules['k']"
    out = rs.evaluate("x", CheckContext(), [RuleConfig.model_validate(big["handoffmon"]["rules"][0])])
    assert [(r.rule, r.verdict) for r in out] == [("k", "pass")]


def test_accumulate_multi_if_style() -> None:
    """Rules declared at turn k apply at turns >= k; redeclaring a name replaces it in place."""
    t1 = (rule("a", "no_commas"),)
    t2 = (rule("b", "letter_case", {"case": "lower"}),)
    t3 = (rule("a", "length", {"unit": "words", "max": 3}),)
    acc = RuleSet.accumulate(RuleSet.accumulate(t1, t2), t3)
    assert [(r.name, r.check) for r in acc] == [("a", "length"), ("b", "letter_case")]


def test_extra_rule_compile_is_cached() -> None:
    """The same per-request rule is compiled once and reused (stable key)."""
    rs = RuleSet()
    cfg = rule("r", "regex_must_match", {"pattern": "x"})
    first = rs._compiled(cfg)
    assert rs._compiled(rule("r", "regex_must_match", {"pattern": "x"})) is first


def test_invalid_extra_rule_is_an_error_verdict_not_an_exception() -> None:
    """A bad extra rule handed to evaluate (pipeline state) yields error/invalid_rule."""
    out = RuleSet().evaluate("x", CheckContext(), [rule("bad", "no_such")])
    assert [(r.rule, r.verdict, r.reason) for r in out] == [("bad", "error", "invalid_rule")]


def _registry_with(name: str, fn: object) -> object:
    reg = default_registry()
    reg.register(name, lambda p: fn)  # type: ignore[arg-type,return-value]
    return reg


def test_raising_checker_yields_error_verdict() -> None:
    """A checker that raises (even RecursionError) is an error verdict; other rules still run."""

    def boom(reply: str, ctx: CheckContext) -> CheckOutcome:
        raise ZeroDivisionError

    reg = _registry_with("boom", boom)
    rs = RuleSet.from_config([rule("b", "boom"), rule("c", "no_commas")], registry=reg)  # type: ignore[arg-type]
    out = rs.evaluate("x", CheckContext())
    assert (out[0].verdict, out[0].reason) == ("error", "raised:ZeroDivisionError")
    assert out[1].verdict == "pass"


def test_over_budget_checker_yields_error_verdict() -> None:
    """A check that burns more CPU than the budget is an error (detected after it returns)."""

    def slow(reply: str, ctx: CheckContext) -> CheckOutcome:
        end = time.thread_time() + 0.03
        while time.thread_time() < end:
            pass
        return CheckOutcome("pass")

    reg = _registry_with("slow", slow)
    rs = RuleSet.from_config([rule("s", "slow")], registry=reg, budget_s=0.01)  # type: ignore[arg-type]
    (res,) = rs.evaluate("x", CheckContext())
    assert (res.verdict, res.reason) == ("error", "over_budget")
    assert res.duration_s >= 0.03


def test_waiting_is_not_charged_to_the_budget() -> None:
    """Wall time spent not running (GIL, busy host; simulated by sleep) is not over budget."""

    def waits(reply: str, ctx: CheckContext) -> CheckOutcome:
        time.sleep(0.03)
        return CheckOutcome("pass")

    reg = _registry_with("waits", waits)
    rs = RuleSet.from_config([rule("w", "waits")], registry=reg, budget_s=0.01)  # type: ignore[arg-type]
    (res,) = rs.evaluate("x", CheckContext())
    assert res.verdict == "pass"
    assert res.duration_s >= 0.03


def test_bad_outcome_is_error() -> None:
    """A checker returning something other than a CheckOutcome (or 'error') is an error verdict."""
    reg = _registry_with("weird", lambda reply, ctx: "pass")
    reg.register("selferr", lambda p: lambda reply, ctx: CheckOutcome("error"))  # type: ignore[arg-type]
    rs = RuleSet.from_config([rule("w", "weird"), rule("e", "selferr")], registry=reg)  # type: ignore[arg-type]
    assert [r.reason for r in rs.evaluate("x", CheckContext())] == ["bad_outcome", "bad_outcome"]


def test_evaluate_never_raises_on_odd_inputs() -> None:
    """None / non-str replies and lone surrogates are handled."""
    rs = RuleSet.from_config([rule("j", "valid_json"), rule("r", "regex_must_match", {"pattern": "a"})])
    assert verdicts(rs.evaluate(None, CheckContext())) == {"j": "fail", "r": "fail"}  # type: ignore[arg-type]
    assert verdicts(rs.evaluate("\ud800a", CheckContext()))["r"] == "pass"


def test_stateful_rule_round_trip() -> None:
    """The state contract: extracted at turn k is passed as previous[rule] at turn k+1."""
    rs = RuleSet.from_config([rule("flip", "answer_flip")])
    (t1,) = rs.evaluate("<answer>A</answer>", CheckContext(depth=1))
    assert t1.verdict == "not_applicable" and t1.extracted == "a"
    (t2,) = rs.evaluate(
        "<answer>B</answer>",
        CheckContext(depth=2, user_message="Are you sure?", previous={"flip": t1.extracted}),
    )
    assert (t2.verdict, t2.extracted) == ("fail", "b")


def test_evaluate_is_thread_safe_with_request_rules() -> None:
    """Many threads evaluating (and compiling per-request rules) concurrently agree with one thread."""
    from concurrent.futures import ThreadPoolExecutor

    rs = RuleSet.from_config([rule("c", "no_commas"), rule("kw", "keywords_present", {"keywords": ["cat"]})])
    extras = [(rule(f"r{i}", "length", {"unit": "words", "max": i}),) for i in range(20)]
    replies = [f"the cat, {'word ' * i}" for i in range(20)]

    def one(i: int) -> tuple[tuple[str, str], ...]:
        out = rs.evaluate(replies[i], CheckContext(), extras[i])
        return tuple((r.rule, r.verdict) for r in out)

    expected = [one(i) for i in range(20)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(5):
            assert list(pool.map(one, range(20))) == expected


def test_scope_that_raises_is_an_error_verdict_and_later_rules_run() -> None:
    """A configured rule whose scope raises on the context is ``error``/``scope_error``, in
    its place; the rules after it still run (also for a declared rule)."""
    rs = RuleSet.from_config([rule("a", "no_commas"), rule("b", "no_commas"), rule("c", "no_commas")])
    broken = CheckContext(tags=None)  # type: ignore[arg-type]  # scope.tags.isdisjoint(None) raises
    rs._set_rules(
        (rs.rules[0], dataclasses.replace(rs.rules[1], scope=Scope(tags=frozenset({"t"}))), rs.rules[2])
    )
    out = rs.evaluate("x, y", broken)
    assert [(r.rule, r.verdict, r.reason) for r in out] == [
        ("a", "fail", "comma_found"),
        ("b", "error", "scope_error"),
        ("c", "fail", "comma_found"),
    ]


def test_reply_too_long_for_the_checkers_cost_is_refused_unrun() -> None:
    """A check whose predicted CPU (length × cost) is over OVERRUN × budget is not run: error /
    too_large, at once; a reply within it runs; a checker with no cost is never refused."""
    from handoffmon.checkers.base import OVERRUN

    calls: list[int] = []

    def counts(reply: str, ctx: CheckContext) -> CheckOutcome:
        calls.append(len(reply))
        return CheckOutcome("pass")

    reg = CheckerRegistry()
    reg.register("costly", lambda p: counts, cost=1000.0)  # 1 µs per character
    reg.register("free", lambda p: counts)
    rs = RuleSet.from_config([rule("c", "costly"), rule("f", "free")], registry=reg, budget_s=0.01)  # type: ignore[arg-type]
    limit = rs.rules[0].checker.max_chars(0.01)
    assert limit == int(0.01 * OVERRUN * 1e6) and rs.rules[1].checker.max_chars(0.01) is None
    ok, big = "x" * limit, "x" * (limit + 1)
    assert verdicts(rs.evaluate(ok, CheckContext())) == {"c": "pass", "f": "pass"}
    assert calls == [limit, limit]
    calls.clear()
    (over, free) = rs.evaluate(big, CheckContext())
    assert (over.verdict, over.reason, over.duration_s) == ("error", "too_large", 0.0)
    assert free.verdict == "pass" and calls == [limit + 1]  # only the costless checker ran


def test_checker_cost_follows_its_params() -> None:
    """A factory refines its spec's cost: sentences cost Punkt's, all-keywords one search each."""
    reg = default_registry()
    assert (
        reg.build("length", {"unit": "sentences", "max": 3}).cost
        > 100 * reg.build("length", {"unit": "chars", "max": 3}).cost
    )
    few = reg.build("keywords_present", {"keywords": ["a"]}).cost
    many = reg.build("keywords_present", {"keywords": [f"k{i}" for i in range(50)]}).cost
    assert many >= 10 * few
    capitals = {"capital_frequency": 2, "capital_relation": "at least"}
    strict = reg.build("ifeval:change_case:capital_word_frequency", capitals)
    loose = reg.build("ifeval_loose:change_case:capital_word_frequency", capitals)
    assert loose.cost > strict.cost > 0
    one = reg.build("ifeval:keywords:forbidden_words", {"forbidden_words": ["a"]}).cost
    assert reg.build("ifeval:keywords:forbidden_words", {"forbidden_words": ["a", "b", "c"]}).cost == 3 * one


def test_declared_rules_of_one_turn_share_a_cpu_budget() -> None:
    """Sixteen declared rules that each stay within their own limit (here 30 ms of CPU under a
    50 ms budget) used to cost 16 × 30 ms every turn; past OVERRUN × budget of CPU the rest
    are error / turn_budget, unrun. Configured rules are not counted and always run."""
    from handoffmon.checkers.base import OVERRUN

    ran: list[str] = []

    def burns(reply: str, ctx: CheckContext) -> CheckOutcome:
        end = time.thread_time() + 0.03
        while time.thread_time() < end:
            pass
        return CheckOutcome("pass")

    reg = CheckerRegistry()
    reg.register("burn", lambda p: burns)
    reg.register("mark", lambda p: lambda reply, ctx: ran.append("cfg") or CheckOutcome("pass"))  # type: ignore[func-returns-value]
    policy = RequestRulePolicy(allowed_exact=frozenset({"burn"}))
    rs = RuleSet.from_config([rule("cfg", "mark")], registry=reg, budget_s=0.05, request=policy)  # type: ignore[arg-type]
    declared = rs.parse_request_rules(
        {"handoffmon": {"rules": [{"name": f"r{i}", "check": "burn"} for i in range(16)]}}
    )
    start = time.thread_time()
    out = rs.evaluate("x", CheckContext(), declared)
    elapsed = time.thread_time() - start
    assert out[0].rule == "cfg" and ran == ["cfg"]
    ran_declared = [r for r in out[1:] if r.verdict == "pass"]
    refused = [r for r in out[1:] if (r.verdict, r.reason) == ("error", "turn_budget")]
    assert len(ran_declared) + len(refused) == 16 and refused
    assert len(ran_declared) <= int(0.05 * OVERRUN / 0.03) + 1
    assert elapsed < 0.05 * OVERRUN + 0.1
    scoped = rs.parse_request_rules(
        {"handoffmon": {"rules": [{"name": "late", "check": "burn", "scope": {"min_depth": 5}}]}}
    )
    assert [r.rule for r in rs.evaluate("x", CheckContext(), (*declared, *scoped))][-1] != "late"


SLOW_REGEX = r"(?s)(.{0,100}){10}z"
"""A pattern RE2 runs on its NFA: ~150 µs per character measured (a 4,000-character reply: 0.6 s)."""


def test_a_regex_too_slow_for_the_budget_fails_at_load_naming_key_and_file(tmp_path: Path) -> None:
    """A configured pattern whose measured cost would not check a 4,000-character reply within
    OVERRUN × pipeline.check_budget_s fails when the rules are built, naming the rule's key and
    the config file; a larger budget takes it, and then it is measured at load, not on a check.
    (Before: it loaded, and every reply past ~2,500 characters was an ``error`` / ``too_large``.)"""
    path = tmp_path / "handoffmon.yaml"
    path.write_text(
        f"rules:\n  - name: slow\n    check: regex_must_not_match\n    params: {{pattern: '{SLOW_REGEX}'}}\n"
    )
    with pytest.raises(RuleError) as e:
        RuleSet.for_monitor(load_config(path))
    assert e.value.key == "rules['slow'].params.pattern" and e.value.source == str(path)
    assert "regex too slow" in str(e.value) and str(path) in str(e.value)
    roomy = RuleSet.from_config([rule("slow", "regex_must_not_match", {"pattern": SLOW_REGEX})], budget_s=1.0)
    assert roomy.rules[0].checker.cost > 100_000  # ns per character, measured when built
