"""Hypothesis-generated hostile rule declarations through the Monitor.

Names, checker kinds, params (nested, large, non-JSON), import strings and regex bombs,
declared turn after turn. Whatever is sent: nothing is imported, every conversation's
state stays within the ``request_rules`` limits, every turn is checked by the configured
rule, and every refused declaration is counted as ``monitor_errors{stage="rules"}``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoffmon.checkers.request_rules import NAME, RESERVED_NAMES, canonical_json
from handoffmon.config import DEFAULT_REQUEST_CHECKERS
from handoffmon.pipeline.monitor import Monitor
from handoffmon.types import TurnResult
from tests.pipeline.helpers import RecordingExporter, make_config, monitor, turn

CANARY = f"hm_fuzz_canary_{uuid.uuid4().hex}"
ALLOWED_EXACT = {c for c in DEFAULT_REQUEST_CHECKERS if not c.endswith("*")}
ALLOWED_PREFIXES = tuple(c[:-1] for c in DEFAULT_REQUEST_CHECKERS if c.endswith("*"))
CONFIG_LIMITS = {
    "max_per_request": 8,
    "max_per_conversation": 12,
    "max_conversation_bytes": 2048,
    "max_names": 64,
}

IMPORTS = [f"{CANARY}:Nope", f"{CANARY}.sub:X", "this:Nope", "os:system", "subprocess:Popen", "antigravity:x"]
BOMBS = ["(a+)+$", "(x+x+)+y", "(a|aa)*b", "(.*a){20}", "((a*)*)*$", "(?=x)", "\\1(a)", "[" * 50]
KINDS = [c for c in DEFAULT_REQUEST_CHECKERS if not c.endswith("*")] + [
    "ifeval:length_constraints:number_words",
    "ifeval:keywords:existence",
    "ifeval_loose:detectable_format:title",
    "ifeval:no_such_id",
    "pydantic_model",
    "json_schema",
    "language",
    "no_such_checker",
    "PYDANTIC_MODEL",
    "",
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(IMPORTS + BOMBS),
    st.integers(0, 3000).map(lambda n: "a" * n),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
names = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,20}", fullmatch=True),
    st.sampled_from([*sorted(RESERVED_NAMES), "ALL", "x" * 65, "a b", "a\nb", "é", "{x}"]),
    st.text(max_size=80),
    st.integers(),
    st.none(),
)
params = st.one_of(
    st.fixed_dictionaries({"model": st.sampled_from(IMPORTS)}),
    st.fixed_dictionaries({"pattern": st.sampled_from(BOMBS)}),
    st.fixed_dictionaries({"keywords": st.lists(st.text(min_size=1, max_size=300), max_size=20)}),
    st.fixed_dictionaries(
        {"schema": st.fixed_dictionaries({"type": st.just("string"), "pattern": st.sampled_from(BOMBS)})}
    ),
    st.dictionaries(st.text(max_size=10), json_value, max_size=5),
    st.sets(st.integers(), max_size=3),
    json_value,
)
valid_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,20}", fullmatch=True)
plausible = st.one_of(  # rules a real client would send: accepted unless a limit says no
    st.fixed_dictionaries({"name": valid_names, "check": st.just("no_commas")}),
    st.fixed_dictionaries(
        {
            "name": valid_names,
            "check": st.sampled_from(["regex_must_match", "regex_must_not_match"]),
            "params": st.fixed_dictionaries(
                {"pattern": st.sampled_from(["(a+)+$", "(x+x+)+y", "(a|aa)*b", "ok"])}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": valid_names,
            "check": st.sampled_from(["keywords_present", "keywords_absent"]),
            "params": st.fixed_dictionaries(
                {"keywords": st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5)}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": valid_names,
            "check": st.just("ifeval:length_constraints:number_words"),
            "params": st.fixed_dictionaries(
                {"relation": st.just("less than"), "num_words": st.integers(0, 50)}
            ),
        }
    ),
    st.fixed_dictionaries({"name": valid_names, "check": st.sampled_from(["answer_flip", "answer_tag"])}),
)
hostile = st.fixed_dictionaries(
    {"name": names, "check": st.sampled_from(KINDS)},
    optional={
        "params": params,
        "scope": st.dictionaries(st.sampled_from(["min_depth", "tags", "bogus"]), json_value, max_size=2),
    },
)
attack = st.fixed_dictionaries(  # well-formed, so only the allowlist stands in the way
    {
        "name": valid_names,
        "check": st.sampled_from(["pydantic_model", "json_schema", "language"]),
        "params": st.one_of(
            st.fixed_dictionaries({"model": st.sampled_from(IMPORTS)}),
            st.fixed_dictionaries({"schema": st.fixed_dictionaries({"pattern": st.sampled_from(BOMBS)})}),
            st.fixed_dictionaries({"languages": st.just(["en"])}),
        ),
    }
)
rule = st.one_of(plausible, plausible, attack, hostile, json_value)
declaration = st.one_of(
    st.lists(plausible, max_size=6),
    st.lists(st.one_of(plausible, attack), min_size=1, max_size=3),
    st.lists(rule, max_size=12),
    json_value,
)
conversation = st.lists(st.one_of(st.none(), declaration), min_size=1, max_size=4)


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An importable module that leaves a marker file when imported."""
    folder = tmp_path_factory.mktemp("canary")
    marker = folder / "imported"
    (folder / f"{CANARY}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\nclass Nope: pass\n"
    )
    sys.path.insert(0, str(folder))
    yield marker
    sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def fuzzed(canary: Path) -> Iterator[tuple[Monitor, RecordingExporter]]:
    exp = RecordingExporter()
    m = monitor(make_config(request_rules=CONFIG_LIMITS), exporters=[exp])
    yield m, exp
    m.close()


def _bad_by_construction(raw: Any) -> bool:
    """Declarations the default policy must refuse: something that is not a rule, a checker
    kind outside the default allowlist, or a name outside the charset."""
    if raw is None:
        return False
    if not isinstance(raw, list):
        return not (isinstance(raw, dict) and not raw)  # {} and [] etc. are "nothing declared"
    for item in raw:
        if not isinstance(item, dict) or item.get("check") in ("pydantic_model", "json_schema", "language"):
            return True
        name = item.get("name")
        if not isinstance(name, str) or NAME.fullmatch(name) is None or name.lower() in RESERVED_NAMES:
            return True
    return False


def _check_state(state: Any) -> None:
    declared = [r for _, r in state["rules"]]
    assert len(declared) <= CONFIG_LIMITS["max_per_conversation"]
    assert sum(len(canonical_json(r)) for r in declared) <= CONFIG_LIMITS["max_conversation_bytes"]
    names = {"short"}
    for r in declared:
        assert NAME.fullmatch(r["name"]) and r["name"].lower() not in RESERVED_NAMES
        assert r["check"] in ALLOWED_EXACT or r["check"].startswith(ALLOWED_PREFIXES)
        assert r["check"] not in ("pydantic_model", "json_schema", "language")
        names.add(r["name"])
    assert set(state["last"]) <= names and set(state["previous"]) <= names
    assert len(json.dumps(state)) < 4 * CONFIG_LIMITS["max_conversation_bytes"]


def _run(m: Monitor, exp: RecordingExporter, canary: Path, turns: list[Any]) -> None:
    conversation_id = f"fuzz-{uuid.uuid4().hex}"
    before = len(exp.results)
    rejected_before = sum(m.rules.request_rejections.values())
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for i, raw in enumerate(turns):
        meta: dict[str, Any] = {"conversation_id": conversation_id}
        if raw is not None:
            meta["handoffmon"] = {"rules": raw}
        reply = f"reply {i}, with a comma <answer>{i}</answer>"
        turn(m, history, {"role": "assistant", "content": reply}, "a", metadata=meta)
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": "are you sure?"}]
    assert m.flush(30)
    results: list[TurnResult] = exp.results[before:]
    assert len(results) == len(turns)
    for r in results:  # the configured rule, first, with a real verdict, every turn
        assert r.checks and r.checks[0].rule == "short" and r.checks[0].verdict in ("pass", "fail")
    state = m.store.get_state(results[-1].context.conversation_id)
    assert state is not None
    _check_state(state)
    rejected = sum(m.rules.request_rejections.values()) - rejected_before
    assert rejected >= sum(_bad_by_construction(t) for t in turns)
    assert m.snapshot().monitor_errors.get("rules", 0) == sum(m.rules.request_rejections.values())
    assert not canary.exists() and CANARY not in sys.modules


def _property(examples: int, doc: str) -> Any:
    """The test over ``examples`` generated conversations."""

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(turns=conversation)
    def check(fuzzed: tuple[Monitor, RecordingExporter], canary: Path, turns: list[Any]) -> None:
        _run(*fuzzed, canary, turns)

    check.__doc__ = doc
    return check


test_hostile_declarations_leave_state_bounded_and_checks_intact = _property(
    40, "A bounded run in the default suite (~40 conversations)."
)
test_hostile_declarations_long_run = pytest.mark.slow(
    _property(2000, "The same properties over 2,000 conversations (``-m slow``, ~35 s).")
)
