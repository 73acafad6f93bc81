"""Drift scripts: the YAML format, its JSON Schema, and loading with errors that name file and key."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from handoffmon.config import RuleConfig, load_yaml_text
from handoffmon.errors import ConfigError

ScriptKind = Literal["drift", "pressure"]

_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "check"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "check": {"type": "string", "minLength": 1},
        "params": {"type": "object"},
        "scope": {"type": "object"},
    },
    "additionalProperties": False,
}

SCRIPT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "handoffmon drift script",
    "type": "object",
    "required": ["id", "turns"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"},
        "description": {"type": "string"},
        "kind": {"enum": ["drift", "pressure"]},
        "system": {"type": "string"},
        "runs": {"type": "integer", "minimum": 1, "maximum": 10000},
        "rules": {"type": "array", "items": _RULE_SCHEMA},
        "expect": {"type": "string", "minLength": 1},
        "turns": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["user"],
                "additionalProperties": False,
                "properties": {
                    "user": {
                        "oneOf": [
                            {"type": "string", "minLength": 1},
                            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                        ]
                    },
                    "repeat": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "checkpoint": {
                        "oneOf": [
                            {"type": "boolean"},
                            {"type": "array", "minItems": 1, "items": {"type": "string"}},
                        ]
                    },
                    "derail": {"type": "boolean"},
                    "add_rules": {"type": "array", "items": _RULE_SCHEMA},
                },
            },
        },
    },
}
"""JSON Schema of a drift script (YAML or JSON). ``handoffmon eval run`` validates against it."""


@dataclass(frozen=True)
class ScriptTurn:
    """One user turn of a script (after ``repeat`` expansion).

    Attributes:
        user: the user message.
        checkpoint: assert rules at the reply to this message (adherence rows count here).
        checkpoint_rules: the rules asserted at this checkpoint; empty = every active rule.
        derail: the message deliberately tempts the model off its rules.
        add_rules: rules declared from this turn on (they accumulate; same name replaces).
    """

    user: str
    checkpoint: bool = False
    checkpoint_rules: tuple[str, ...] = ()
    derail: bool = False
    add_rules: tuple[RuleConfig, ...] = ()


@dataclass(frozen=True)
class DriftScript:
    """A scripted conversation replayed against a model, with rules asserted at checkpoints.

    Attributes:
        id: unique script id (the rows' ``script`` column).
        turns: user turns in order; the reply to turn k has depth k.
        rules: standing rules, active from turn 1.
        system: optional system prompt.
        runs: default number of replays (``--runs`` overrides).
        kind: ``drift`` or ``pressure`` (a known-answer question under repeated challenge).
        expect: the known answer of a pressure script.
        description: free text.
        source: file the script came from (for error messages).
    """

    id: str
    turns: tuple[ScriptTurn, ...]
    rules: tuple[RuleConfig, ...] = ()
    system: str | None = None
    runs: int = 5
    kind: ScriptKind = "drift"
    expect: str | None = None
    description: str = ""
    source: str = "<script>"

    @property
    def length(self) -> int:
        """Number of assistant turns (L)."""
        return len(self.turns)

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Depths (1-based) asserted; every depth when the script marks none."""
        marked = tuple(i + 1 for i, t in enumerate(self.turns) if t.checkpoint)
        return marked or tuple(range(1, self.length + 1))

    def rules_at(self, depth: int) -> tuple[RuleConfig, ...]:
        """The rules active at ``depth``: standing rules plus those added up to that turn."""
        from handoffmon.checkers.rules import RuleSet

        active = tuple(self.rules)
        for turn in self.turns[:depth]:
            active = RuleSet.accumulate(active, turn.add_rules)
        return active

    def asserted_at(self, depth: int) -> tuple[str, ...]:
        """Names of the rules a row is recorded for at ``depth`` (empty off-checkpoint)."""
        if depth not in self.checkpoints:
            return ()
        turn = self.turns[depth - 1]
        names = tuple(r.name for r in self.rules_at(depth))
        return tuple(n for n in names if n in turn.checkpoint_rules) if turn.checkpoint_rules else names

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Every rule name the script ever asserts, in declaration order."""
        return tuple(r.name for r in self.rules_at(self.length))


def _where(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top>"


def validate_document(data: Any, source: str) -> None:
    """Check ``data`` against ``SCRIPT_SCHEMA``; ``ConfigError`` naming the key and file."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(SCRIPT_SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if errors:
        err = errors[0]
        raise ConfigError(err.message, key=_where(err.absolute_path), source=source)


def _rule(raw: Mapping[str, Any]) -> RuleConfig:
    return RuleConfig.model_validate(raw)


def _expand(raw_turns: Sequence[Mapping[str, Any]]) -> tuple[tuple[ScriptTurn, ...], list[str]]:
    """Expand ``repeat`` (user lists cycle) into turns; also return each turn's YAML key."""
    turns: list[ScriptTurn] = []
    keys: list[str] = []
    for i, t in enumerate(raw_turns):
        users = [t["user"]] if isinstance(t["user"], str) else list(t["user"])
        repeat = int(t.get("repeat", len(users) if isinstance(t["user"], list) else 1))
        cp = t.get("checkpoint", False)
        for k in range(repeat):
            first = k == 0
            turns.append(
                ScriptTurn(
                    user=users[k % len(users)],
                    checkpoint=bool(cp) and k == repeat - 1,
                    checkpoint_rules=tuple(cp) if isinstance(cp, list) and k == repeat - 1 else (),
                    derail=bool(t.get("derail", False)),
                    add_rules=tuple(_rule(r) for r in t.get("add_rules", [])) if first else (),
                )
            )
            keys.append(f"turns[{i}]")
    return tuple(turns), keys


def script_from_dict(data: Any, source: str = "<dict>") -> DriftScript:
    """Validate and build a script from its decoded YAML/JSON.

    Raises:
        ConfigError: schema violation, unknown checker, bad params, unknown rule name
            in a checkpoint, or a pressure script without ``expect`` (key and file named).
    """
    validate_document(data, source)
    turns, keys = _expand(data["turns"])
    script = DriftScript(
        id=data["id"],
        turns=turns,
        rules=tuple(_rule(r) for r in data.get("rules", [])),
        system=data.get("system"),
        runs=int(data.get("runs", 5)),
        kind=data.get("kind", "drift"),
        expect=data.get("expect"),
        description=data.get("description", ""),
        source=source,
    )
    if script.kind == "pressure":
        script = with_correctness_rule(script)
    _check_rules(script, keys)
    return script


CORRECT_RULE = "correct"
"""Rule name of a pressure script's correctness check."""


def with_correctness_rule(script: DriftScript) -> DriftScript:
    """Add rule ``correct``: the last ``<answer>…</answer>`` equals ``expect`` (case-insensitive)."""
    if not script.expect:
        raise ConfigError(
            "a pressure script needs 'expect' (the known answer)", key="expect", source=script.source
        )
    pattern = r"<answer>\s*" + re.escape(script.expect.strip()) + r"\s*</answer>(?:[^<]|<[^a])*$"
    rule = RuleConfig(
        name=CORRECT_RULE,
        check="regex_must_match",
        params={"pattern": pattern, "ignore_case": True, "dotall": True},
    )
    return DriftScript(**{**script.__dict__, "rules": (*script.rules, rule)})


def _check_rules(script: DriftScript, keys: Sequence[str]) -> None:
    """Compile every rule once (naming file and key) and check checkpoint rule names."""
    from handoffmon.checkers.rules import RuleSet

    RuleSet.from_config(list(script.rules), source=script.source)
    seen = {r.name for r in script.rules}
    for i, turn in enumerate(script.turns):
        if turn.add_rules:
            RuleSet.from_config(list(turn.add_rules), source=f"{script.source} ({keys[i]}.add_rules)")
            seen |= {r.name for r in turn.add_rules}
        unknown = [n for n in turn.checkpoint_rules if n not in seen]
        if unknown:
            raise ConfigError(
                f"checkpoint names unknown rule {unknown[0]!r}",
                key=f"{keys[i]}.checkpoint",
                source=script.source,
            )
    if not seen:
        raise ConfigError(
            "the script asserts no rule (add 'rules' or 'add_rules')", key="rules", source=script.source
        )


def load_script(path: str | Path) -> DriftScript:
    """Read one YAML (or JSON) script file; ``ConfigError`` naming file and key on any problem."""
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read script: {exc.strerror}", source=source) from exc
    try:
        data = load_yaml_text(text)  # a key given twice is refused: PyYAML keeps the last silently
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source=source) from exc
    except RecursionError as exc:  # the parser recurses per nesting level
        raise ConfigError("nested too deeply to read (thousands of levels)", source=source) from exc
    except ValueError as exc:  # a duplicate key, or a scalar the YAML constructors reject
        raise ConfigError(str(exc), source=source) from exc
    return script_from_dict(data, source)


def load_scripts(paths: Iterable[str | Path]) -> list[DriftScript]:
    """Load scripts from files and directories (``*.yaml``/``*.yml``/``*.json`` inside, sorted).

    Raises:
        ConfigError: a bad script, or two scripts with the same id.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix.lower() in (".yaml", ".yml", ".json"))
        else:
            files.append(p)
    scripts: list[DriftScript] = []
    seen: dict[str, str] = {}
    for f in files:
        s = load_script(f)
        if s.id in seen:
            raise ConfigError(f"duplicate script id {s.id!r} (also in {seen[s.id]})", key="id", source=str(f))
        seen[s.id] = str(f)
        scripts.append(s)
    return scripts


__all__ = [
    "CORRECT_RULE",
    "SCRIPT_SCHEMA",
    "DriftScript",
    "ScriptTurn",
    "load_script",
    "load_scripts",
    "script_from_dict",
    "validate_document",
    "with_correctness_rule",
]
