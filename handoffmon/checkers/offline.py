"""Offline rule runs: load a rules file, replay a JSONL of replies, tally verdicts per rule."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from handoffmon.checkers.base import CheckContext
from handoffmon.checkers.ifeval.evaluate import read_jsonl
from handoffmon.checkers.request_rules import DEFAULT_POLICY, stored_form
from handoffmon.checkers.rules import RuleSet
from handoffmon.config import RuleConfig, read_structured_file
from handoffmon.errors import ConfigError, InputError, RuleError
from handoffmon.types import CheckResult


def load_rules_file(path: str | Path, *, budget_s: float = 0.05) -> RuleSet:
    """Compile the rules of a YAML/TOML file: a handoffmon config (``rules:`` key) or a bare list.

    Raises:
        ConfigError: unreadable file, or a bad rule (naming the rule, key and file).
    """
    source = str(path)
    data = read_structured_file(Path(path), "rules file")
    raw = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            "expected a non-empty list of rules (top level or under 'rules')", key="rules", source=source
        )
    rules = []
    for i, item in enumerate(raw):
        label = item.get("name") if isinstance(item, dict) else None
        where = f"rules[{label!r}]" if label else f"rules[{i}]"
        try:
            rules.append(RuleConfig.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise RuleError(err["msg"], key=f"{where}.{loc}" if loc else where, source=source) from exc
    # request rules in replayed lines get production's default limits, except the process-wide
    # name table: a file of many conversations is not a client flooding a server
    offline = replace(DEFAULT_POLICY, max_names=sys.maxsize)
    return RuleSet.from_config(rules, source=source, budget_s=budget_s, request=offline)


@dataclass(frozen=True, slots=True)
class ReplyLine:
    """One line of a replies JSONL file.

    Fields: ``reply`` (required), ``depth`` (1), ``user_message`` (""), ``model_group``,
    ``route``, ``tags`` ([]), ``previous`` ({rule: value}), ``conversation_id``,
    ``metadata`` (per-request rules under ``handoffmon.rules``).
    """

    lineno: int
    reply: str
    ctx: CheckContext
    conversation_id: str | None
    metadata: Mapping[str, Any] | None


def _opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}: field {key!r} must be a string")
    return value


def parse_reply_line(obj: Mapping[str, Any], where: str, lineno: int) -> ReplyLine:
    """Validate one JSON object of a replies file; ``InputError`` naming ``where`` on a bad field."""
    reply = obj.get("reply")
    if not isinstance(reply, str):
        raise InputError(f"{where}: field 'reply' missing or not a string")
    depth = obj.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise InputError(f"{where}: field 'depth' must be an integer >= 1")
    tags = obj.get("tags", [])
    previous = obj.get("previous", {})
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError(f"{where}: field 'tags' must be a list of strings")
    if not isinstance(previous, dict) or not all(isinstance(v, str) for v in previous.values()):
        raise InputError(f"{where}: field 'previous' must map rule names to strings")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InputError(f"{where}: field 'metadata' must be an object")
    ctx = CheckContext(
        model_group=_opt_str(obj, "model_group", where),
        route=_opt_str(obj, "route", where),
        tags=frozenset(tags),
        user_message=_opt_str(obj, "user_message", where) or "",
        previous=dict(previous),
        depth=depth,
    )
    return ReplyLine(lineno, reply, ctx, _opt_str(obj, "conversation_id", where), metadata)


def read_replies(path: str | Path) -> Iterator[ReplyLine]:
    """Parse a replies JSONL file line by line."""
    for lineno, obj in read_jsonl(path):
        yield parse_reply_line(obj, f"{path}:{lineno}", lineno)


@dataclass(slots=True)
class _Conversation:
    previous: dict[str, str] = field(default_factory=dict)
    rules: tuple[RuleConfig, ...] = ()


@dataclass(slots=True)
class Tally:
    """Verdict counts per rule."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, results: Iterable[CheckResult]) -> None:
        """Count one reply's results."""
        for r in results:
            self.counts.setdefault(r.rule, Counter())[r.verdict] += 1

    def pass_rate(self, rule: str) -> float | None:
        """pass / (pass + fail); ``None`` when the rule never passed or failed."""
        c = self.counts.get(rule, Counter())
        decided = c["pass"] + c["fail"]
        return c["pass"] / decided if decided else None


LineResults = list[tuple[int, tuple[CheckResult, ...]]]


def replay(rules: RuleSet, lines: Iterable[ReplyLine], path: str = "<input>") -> tuple[Tally, LineResults]:
    """Every line's results (in memory: see :func:`replay_lines` for a file of any size)."""
    tally = Tally()
    return tally, list(replay_lines(rules, lines, tally, path))


def replay_lines(
    rules: RuleSet, lines: Iterable[ReplyLine], tally: Tally, path: str = "<input>"
) -> Iterator[tuple[int, tuple[CheckResult, ...]]]:
    """Evaluate line by line, yielding (line number, results) and counting them in ``tally``;
    ``InputError`` naming file and line for bad per-request rules.

    Lines sharing a ``conversation_id`` carry state forward as the pipeline does: extracted
    values become the next line's ``previous`` and per-request rules accumulate, within the
    rule set's ``request_rules`` limits. Only the conversations' state is kept.
    """
    convs: dict[str, _Conversation] = {}
    for line in lines:
        conv = (
            convs.setdefault(line.conversation_id, _Conversation())
            if line.conversation_id
            else _Conversation()
        )
        try:
            new_rules = rules.parse_request_rules(
                line.metadata, declared=[stored_form(r) for r in conv.rules]
            )
        except RuleError as exc:
            raise InputError(f"{path}:{line.lineno}: {exc}") from exc
        conv.rules = RuleSet.accumulate(conv.rules, new_rules)
        ctx = line.ctx
        if conv.previous:
            ctx = replace(ctx, previous={**conv.previous, **ctx.previous})
        results = rules.evaluate(line.reply, ctx, conv.rules)
        conv.previous.update({r.rule: r.extracted for r in results if r.extracted is not None})
        tally.add(results)
        yield line.lineno, results
