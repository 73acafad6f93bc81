"""Request-declared rules: limits, names, the checker allowlist, nothing imported, rejections counted."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from handoffmon.checkers import CheckContext, RequestRulePolicy, RequestRuleRejected, RuleSet
from handoffmon.checkers.request_rules import CODES, canonical_json, json_size, stored_form
from handoffmon.config import RuleConfig, config_from_mapping
from handoffmon.errors import ConfigError


def meta(*rules: Any) -> dict[str, Any]:
    return {"handoffmon": {"rules": list(rules)}}


def no_commas(name: str) -> dict[str, Any]:
    return {"name": name, "check": "no_commas"}


def rejected(rs: RuleSet, metadata: Any, declared: Any = ()) -> str:
    with pytest.raises(RequestRuleRejected) as e:
        rs.parse_request_rules(metadata, declared=declared)
    assert e.value.code in CODES
    return e.value.code


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A module that leaves a file behind when imported (and must never be)."""
    name = f"hm_canary_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\nclass Nope: pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, marker


def test_pydantic_model_from_a_request_imports_nothing(canary: tuple[str, Path]) -> None:
    """The issue-17 attack ("model": "this:Nope") with a canary module: refused, never imported,
    even when the operator lists every checker kind as allowed."""
    module, marker = canary
    attack = {"name": "m", "check": "pydantic_model", "params": {"model": f"{module}:Nope"}}
    for policy in (RequestRulePolicy(), RequestRulePolicy(allowed_exact=frozenset({"pydantic_model"}))):
        rs = RuleSet(request=policy)
        assert rejected(rs, meta(attack)) == "not_allowed"
    assert not marker.exists() and module not in sys.modules
    assert rejected(RuleSet(), meta(attack | {"check": "pydantic_model "})) == "not_allowed"


@pytest.mark.parametrize("entry", ["pydantic_model", "pydantic*", "p*"])
def test_config_cannot_allow_pydantic_model_for_requests(entry: str) -> None:
    """request_rules.allowed_checkers refuses entries that would let requests import code."""
    with pytest.raises(ConfigError) as e:
        config_from_mapping({"request_rules": {"allowed_checkers": [entry]}})
    assert e.value.key == "request_rules.allowed_checkers"
    assert "imports code" in str(e.value)


def test_default_allowlist_refuses_costly_or_python_regex_checkers() -> None:
    """json_schema (Python re in `pattern`), language (a model to load) and custom kinds need
    an explicit allowlist entry; the IFEval family and the linear-time checkers do not."""
    rs = RuleSet()
    bomb = {
        "name": "s",
        "check": "json_schema",
        "params": {"schema": {"type": "string", "pattern": "(a+)+$"}},
    }
    assert rejected(rs, meta(bomb)) == "not_allowed"
    assert (
        rejected(rs, meta({"name": "l", "check": "language", "params": {"languages": ["en"]}}))
        == "not_allowed"
    )
    ok = rs.parse_request_rules(
        meta(
            {
                "name": "w",
                "check": "ifeval:length_constraints:number_words",
                "params": {"relation": "less than", "num_words": 9},
            },
            {"name": "r", "check": "regex_must_not_match", "params": {"pattern": "(a+)+$"}},
            {"name": "f", "check": "answer_flip"},
        )
    )
    assert [r.name for r in ok] == ["w", "r", "f"]
    allowing = RuleSet(
        request=RequestRulePolicy.from_config(
            config_from_mapping(
                {"request_rules": {"allowed_checkers": ["json_schema", "no_*"]}}
            ).request_rules
        )
    )
    assert [r.name for r in allowing.parse_request_rules(meta(bomb, no_commas("c")))] == ["s", "c"]
    assert rejected(allowing, meta({"name": "f", "check": "answer_flip"})) == "not_allowed"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("all", "reserved_name"),
        ("Other", "reserved_name"),
        ("x" * 65, "bad_name"),
        ("has space", "bad_name"),
        ('quote"', "bad_name"),
        ("new\nline", "bad_name"),
        ("_leading", "bad_name"),
        ("label{x=1}", "bad_name"),
        ("", "invalid"),
        (5, "invalid"),
        ("cfg", "configured_name"),
    ],
)
def test_names_are_validated(name: object, code: str) -> None:
    """Names: 1-64 of [A-Za-z0-9_.:/-] starting with a letter or digit; reserved and configured refused."""
    rs = RuleSet.from_config([RuleConfig(name="cfg", check="no_commas")])
    assert rejected(rs, meta({"name": name, "check": "no_commas"})) == code


def test_ifeval_ids_are_valid_names() -> None:
    """Multi-IF names rules by instruction id: those fit the name charset."""
    rs = RuleSet()
    rule = {
        "name": "detectable_format:number_bullet_lists",
        "check": "ifeval:detectable_format:number_bullet_lists",
    }
    assert rs.parse_request_rules(meta(rule | {"params": {"num_bullets": 2}}))[0].name == rule["name"]


@pytest.mark.parametrize(
    ("metadata", "code"),
    [
        (meta(*[no_commas(f"r{i}") for i in range(17)]), "too_many"),
        (
            meta({"name": "k", "check": "keywords_absent", "params": {"keywords": ["w" * 50] * 30}}),
            "too_large",
        ),
        (meta({"name": "k", "check": "keywords_absent", "params": {"keywords": ["x" * 10**7]}}), "too_large"),
        (meta({"name": "d", "check": "no_commas", "params": {"a": [[[[[[[[[[1]]]]]]]]]]}}), "too_deep"),
        (meta({"name": "o", "check": "no_commas", "params": {"a": {1, 2}}}), "malformed"),
        (meta({"name": "o", "check": "no_commas", "params": {1: "x"}}), "malformed"),
        (meta("no_commas"), "malformed"),
        ({"handoffmon": {"rules": "no_commas"}}, "malformed"),
        ({"handoffmon": "rules"}, "malformed"),
        (meta({"name": "u", "check": "no_such_checker"}), "not_allowed"),
        (meta({"name": "p", "check": "length", "params": {"unit": "words"}}), "invalid"),
        (meta({"name": "x", "check": "regex_must_match", "params": {"pattern": "(?=look)ahead"}}), "invalid"),
        (meta(no_commas("a"), {"name": "b", "check": "nope"}), "not_allowed"),
        (
            meta(
                no_commas("twice"),
                {"name": "twice", "check": "length", "params": {"unit": "words", "max": 3}},
            ),
            "invalid",
        ),
    ],
)
def test_bad_declarations_are_rejected_whole_with_a_code(metadata: Any, code: str) -> None:
    """Count, size (checked before pydantic sees the payload), depth, JSON-ness, unknown
    checkers and bad params: the whole declaration is refused, with a reason code."""
    rs = RuleSet()
    assert rejected(rs, metadata) == code
    assert rs.request_rejections == {code: 1}


def test_json_size_stops_walking_at_the_limit() -> None:
    """The size walk gives up as soon as the limit is passed (a 10^6-item list costs nothing)."""
    with pytest.raises(RequestRuleRejected):
        json_size({"a": ["x"] * 10**6}, 1024)
    small = {"name": "a", "check": "no_commas", "params": {"k": [1, 2.5, True, None, "é"]}}
    assert json_size(small, 1024) == pytest.approx(len(canonical_json(small)), rel=0.25)


def test_conversation_limits_count_what_it_already_declared() -> None:
    """A conversation keeps at most max_per_conversation names and max_conversation_bytes;
    redeclaring one of its names (Multi-IF) does not count twice."""
    rs = RuleSet(request=RequestRulePolicy(max_per_request=4, max_per_conversation=5))
    declared = [stored_form(r) for r in rs.parse_request_rules(meta(*[no_commas(f"r{i}") for i in range(4)]))]
    assert len(rs.parse_request_rules(meta(no_commas("r0"), no_commas("r4")), declared=declared)) == 2
    assert rejected(rs, meta(no_commas("r4"), no_commas("r5")), declared=declared) == "conversation_full"
    tight = RuleSet(request=RequestRulePolicy(max_conversation_bytes=120))  # one such rule is ~75 B
    big = [
        {"name": f"k{i}", "check": "keywords_present", "params": {"keywords": ["alpha", "beta"]}}
        for i in range(2)
    ]
    first = [stored_form(r) for r in tight.parse_request_rules(meta(big[0]))]
    assert rejected(tight, meta(big[1]), declared=first) == "conversation_full"


def test_process_wide_name_table_is_bounded() -> None:
    """Past max_names distinct declared names, new names are refused; known ones still work."""
    rs = RuleSet(request=RequestRulePolicy(max_names=3))
    rs.parse_request_rules(meta(no_commas("a"), no_commas("b")))
    rs.parse_request_rules(meta(no_commas("c")))
    assert rejected(rs, meta(no_commas("d"))) == "names_full"
    assert rejected(rs, meta(no_commas("a"), no_commas("e"))) == "names_full"
    assert [r.name for r in rs.parse_request_rules(meta(no_commas("a"), no_commas("c")))] == ["a", "c"]
    assert rs.request_rejections == {"names_full": 2}


def test_disabled_rejects_every_declaration() -> None:
    """request_rules.enabled = false: declarations are refused (and counted), nothing compiled."""
    rs = RuleSet(request=RequestRulePolicy(enabled=False))
    assert rejected(rs, meta(no_commas("a"))) == "disabled"
    assert rs.parse_request_rules({"handoffmon": {}}) == ()


def test_stored_rules_are_held_to_the_same_policy() -> None:
    """A rule read back from (shared) conversation state passes the same gate as a request's."""
    rs = RuleSet()
    assert rs.declared_rule(no_commas("ok")).name == "ok"
    with pytest.raises(RequestRuleRejected) as e:
        rs.declared_rule({"name": "m", "check": "pydantic_model", "params": {"model": "os:path"}})
    assert e.value.code == "not_allowed"
    with pytest.raises(RequestRuleRejected):
        rs.declared_rule({"name": "all", "check": "no_commas"})


def test_evaluate_with_request_rules_still_runs_configured_rules() -> None:
    """Configured rules run first and are never displaced by declared ones."""
    rs = RuleSet.from_config([RuleConfig(name="cfg", check="no_commas")])
    extra = rs.parse_request_rules(
        meta({"name": "words", "check": "length", "params": {"unit": "words", "max": 1}})
    )
    out = rs.evaluate("a, b", CheckContext(), extra)
    assert [(r.rule, r.verdict) for r in out] == [("cfg", "fail"), ("words", "fail")]


def test_a_name_declared_twice_in_one_request_is_refused_naming_it() -> None:
    """Two rules of one name in one declaration: the later one used to replace the earlier
    without a word (a range written as two constraints lost one). Refused, naming the rule."""
    rs = RuleSet()
    twice = meta(no_commas("n"), {"name": "n", "check": "length", "params": {"unit": "words", "max": 3}})
    with pytest.raises(RequestRuleRejected) as exc:
        rs.parse_request_rules(twice)
    assert exc.value.code == "invalid" and exc.value.key == "metadata.handoffmon.rules['n'].name"
    assert "declared twice" in str(exc.value)


def test_instruction_lists_with_a_repeated_id_are_admitted_whole() -> None:
    """``ifeval_rules`` names an id's second occurrence ``<id>#2``: the request gate takes it,
    and both bounds of the range are checked."""
    from handoffmon.checkers.ifeval.adapter import ifeval_rules

    iid = "length_constraints:number_words"
    rules = ifeval_rules(
        [iid, iid], [{"relation": "at least", "num_words": 3}, {"relation": "less than", "num_words": 5}]
    )
    declared = [r.model_dump(mode="json", exclude_defaults=True) for r in rules]
    rs = RuleSet()
    admitted = rs.parse_request_rules({"handoffmon": {"rules": declared}})
    assert [r.name for r in admitted] == [iid, f"{iid}#2"]

    def verdicts(text: str) -> list[str]:
        return [r.verdict for r in rs.evaluate(text, CheckContext(), admitted)]

    assert verdicts("one two three four") == ["pass", "pass"]
    assert verdicts("one two") == ["fail", "pass"]
    assert verdicts("one two three four five six") == ["pass", "fail"]


class _Counted(list):  # type: ignore[type-arg]
    """A list that counts the items anyone iterates over."""

    seen = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for item in super().__iter__():
            _Counted.seen += 1
            yield item


def test_json_size_refuses_a_wide_list_or_mapping_without_walking_it() -> None:
    """A list or mapping of a million short items is refused after a bounded look: the walk
    used to queue every item before comparing the size (0.19 s for a million-key params)."""
    _Counted.seen = 0
    with pytest.raises(RequestRuleRejected) as exc:
        json_size({"keywords": _Counted(["k"] * 10**6)}, 1024)
    assert exc.value.code == "too_large" and _Counted.seen == 0
    wide = {f"k{i}": 1 for i in range(10**6)}
    looked = []

    class Spy(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            for pair in super().items():
                looked.append(pair[0])
                yield pair

    with pytest.raises(RequestRuleRejected):
        json_size(Spy(wide), 1024)
    assert len(looked) < 200


def test_a_compile_error_names_the_source_and_key_once() -> None:
    """A bad regex's rejection reads ``<request metadata>: key '…': rule 'x': invalid regex…``;
    it used to carry the source and key twice."""
    rs = RuleSet()
    bad = meta({"name": "x", "check": "regex_must_match", "params": {"pattern": "(a{1000}){1000}"}})
    with pytest.raises(RequestRuleRejected) as exc:
        rs.parse_request_rules(bad)
    text = str(exc.value)
    assert exc.value.code == "invalid" and text.count("<request metadata>") == 1
    key = "metadata.handoffmon.rules['x'].params.pattern"
    assert text.startswith(f"<request metadata>: key {key!r}: rule 'x': ")


def test_a_hostile_declared_regex_costs_the_check_thread_milliseconds_not_a_third_of_a_second() -> None:
    """Patterns whose RE2 program is huge (0.3-0.7 s each to compile in RE2's default 8 MiB),
    declared per request, are refused as ``invalid`` within ``REQUEST_REGEX_MAX_MEM``: four
    distinct ones (no cache helps) cost the check thread well under 0.2 s of CPU, and the same
    pattern still compiles as a configured rule. The compile cache stays bounded."""
    rs = RuleSet(request=RequestRulePolicy(cache_size=2))
    hostile = [rf"(\pL|\pN|\pZ){{{n}}}" for n in (297, 296, 295, 294)]
    start = time.thread_time()
    for i, pattern in enumerate(hostile):
        declared = {"name": f"h{i}", "check": "regex_must_match", "params": {"pattern": pattern}}
        assert rejected(rs, meta(declared)) == "invalid"
    assert time.thread_time() - start < 0.2
    assert len(rs._cache) == 2
    configured = RuleSet.from_config(
        [RuleConfig(name="h", check="regex_must_match", params={"pattern": hostile[0]})]
    )
    assert configured.names == ("h",)
