"""Multi-IF conversations (IFEval instructions accumulating over three turns) as drift scripts.

The CSV (facebook/Multi-IF, CC-BY-NC-2.0) is not shipped with handoffmon: pass its path.
Columns used: ``key``, ``language``, ``turn_k_prompt`` (a JSON chat message),
``turn_k_instruction_id_list`` (JSON list of IFEval ids, cumulative) and ``turn_k_kwargs``
(JSON list of JSON-encoded dicts). Each instruction becomes a rule named after its id
(``#2`` appended when an id repeats within a turn) checked by ``ifeval:<id>`` with the
same kwargs; every turn is a checkpoint asserting that turn's full list.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handoffmon.config import RuleConfig
from handoffmon.errors import InputError
from handoffmon.evals.script import DriftScript, ScriptTurn

MAX_TURNS = 3


@dataclass(frozen=True)
class MultiIFTurn:
    """One turn as stored: the user message and its (cumulative) instructions."""

    prompt: str
    instruction_ids: tuple[str, ...]
    kwargs: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class MultiIFConversation:
    """One Multi-IF row."""

    key: str
    language: str
    turns: tuple[MultiIFTurn, ...]
    line: int = 0
    """The CSV line the row ends on (errors name it)."""


def _json(value: str, where: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not JSON: {exc.msg}") from exc


def _turn(row: dict[str, str], k: int, where: str) -> MultiIFTurn | None:
    raw_prompt = row.get(f"turn_{k}_prompt") or ""
    if not raw_prompt.strip():
        return None
    msg = _json(raw_prompt, f"{where} turn_{k}_prompt")
    prompt = msg.get("content") if isinstance(msg, dict) else msg
    if not isinstance(prompt, str) or not prompt:
        raise InputError(f"{where} turn_{k}_prompt: no message content")
    ids = _json(row.get(f"turn_{k}_instruction_id_list") or "[]", f"{where} turn_{k}_instruction_id_list")
    kws = _json(row.get(f"turn_{k}_kwargs") or "[]", f"{where} turn_{k}_kwargs")
    if not isinstance(ids, list) or not isinstance(kws, list) or len(ids) != len(kws):
        raise InputError(f"{where} turn_{k}: instruction ids and kwargs differ in length")
    decoded = tuple(_json(k_, f"{where} turn_{k}_kwargs") if isinstance(k_, str) else k_ for k_ in kws)
    if not all(isinstance(d, dict) for d in decoded):
        raise InputError(f"{where} turn_{k}_kwargs: each entry must be an object")
    return MultiIFTurn(
        prompt, tuple(map(str, ids)), tuple({k_: v for k_, v in d.items() if v is not None} for d in decoded)
    )


def read_multiif(path: str | Path) -> Iterator[MultiIFConversation]:
    """Parse the CSV row by row; ``InputError`` naming file, line and column on a bad cell."""
    csv.field_size_limit(1 << 26)
    try:
        fh = open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    with fh:
        reader = csv.DictReader(fh)
        missing = {"key", "turn_1_prompt"} - set(reader.fieldnames or ())
        if missing:
            raise InputError(f"{path}: missing column(s) {sorted(missing)}")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            turns = [t for k in range(1, MAX_TURNS + 1) if (t := _turn(row, k, where)) is not None]
            yield MultiIFConversation(row["key"], row.get("language", ""), tuple(turns), reader.line_num)


def _rules(turn: MultiIFTurn) -> tuple[RuleConfig, ...]:
    seen: Counter[str] = Counter()
    out = []
    for iid, kw in zip(turn.instruction_ids, turn.kwargs, strict=True):
        seen[iid] += 1
        name = iid if seen[iid] == 1 else f"{iid}#{seen[iid]}"
        out.append(RuleConfig(name=name, check=f"ifeval:{iid}", params=kw))
    return tuple(out)


def to_script(conv: MultiIFConversation, *, runs: int = 1, source: str = "multi-if") -> DriftScript:
    """The conversation as a script: each turn a checkpoint asserting that turn's instructions."""
    turns = tuple(
        ScriptTurn(
            user=t.prompt,
            checkpoint=True,
            checkpoint_rules=tuple(r.name for r in _rules(t)),
            add_rules=_rules(t),
        )
        for t in conv.turns
    )
    return DriftScript(
        id=f"multi-if:{conv.key}",
        turns=turns,
        runs=runs,
        description=f"Multi-IF {conv.language} conversation {conv.key}",
        source=source,
    )


def load_multiif(path: str | Path, *, runs: int = 1, limit: int | None = None) -> list[DriftScript]:
    """Every conversation of the CSV as a ``DriftScript`` (the first ``limit`` when given).

    Raises:
        InputError: a bad cell, or an instruction id or kwarg no IFEval checker takes (naming
            file, line and turn, as ``handoffmon ifeval`` does): run, every verdict of such a
            rule would be ``error`` and drop out of n, so the eval would report without it.
    """
    from handoffmon.checkers import default_registry
    from handoffmon.checkers.base import ParamError, UnknownChecker

    registry = default_registry()
    out: list[DriftScript] = []
    for conv in read_multiif(path):
        if limit is not None and len(out) >= limit:
            break
        for k, turn in enumerate(conv.turns, start=1):
            for iid, kw in zip(turn.instruction_ids, turn.kwargs, strict=True):
                try:
                    registry.build(f"ifeval:{iid}", kw)
                except UnknownChecker:
                    raise InputError(f"{path}:{conv.line} turn_{k}: unknown instruction id {iid!r}") from None
                except ParamError as exc:
                    raise InputError(f"{path}:{conv.line} turn_{k}: {iid}: kwargs: {exc}") from exc
        out.append(to_script(conv, runs=runs, source=str(path)))
    return out


@dataclass
class Support:
    """How many instruction uses (id + kwargs) the checkers accept.

    Attributes:
        uses: (turn, instruction) entries seen.
        accepted: entries whose checker built with the given kwargs.
        ids: distinct instruction ids seen.
        accepted_ids: distinct ids accepted at every use.
        kwarg_names: distinct (id, kwarg name) pairs seen.
        accepted_kwarg_names: pairs accepted at every use.
        rejected: (id, reason) → count of rejections.
    """

    uses: int = 0
    accepted: int = 0
    ids: set[str] = field(default_factory=set)
    accepted_ids: set[str] = field(default_factory=set)
    kwarg_names: set[tuple[str, str]] = field(default_factory=set)
    accepted_kwarg_names: set[tuple[str, str]] = field(default_factory=set)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)

    def summary(self) -> str:
        """One line: accepted uses, ids and kwarg names out of those seen."""
        return (
            f"{self.accepted}/{self.uses} instruction uses, {len(self.accepted_ids)}/{len(self.ids)} "
            f"instruction ids, {len(self.accepted_kwarg_names)}/{len(self.kwarg_names)} kwarg names accepted"
        )


def checker_support(conversations: list[MultiIFConversation]) -> Support:
    """Try to build ``ifeval:<id>`` with each use's kwargs through the default registry."""
    from handoffmon.checkers import default_registry

    registry = default_registry()
    s = Support()
    failed_ids: set[str] = set()
    failed_names: set[tuple[str, str]] = set()
    for conv in conversations:
        for turn in conv.turns:
            for iid, kw in zip(turn.instruction_ids, turn.kwargs, strict=True):
                s.uses += 1
                s.ids.add(iid)
                names = {(iid, k) for k in kw}
                s.kwarg_names |= names
                try:
                    registry.build(f"ifeval:{iid}", kw)
                except (KeyError, ValueError) as exc:
                    s.rejected[(iid, type(exc).__name__ + ":" + str(exc)[:80])] += 1
                    failed_ids.add(iid)
                    failed_names |= names
                else:
                    s.accepted += 1
    s.accepted_ids = s.ids - failed_ids
    s.accepted_kwarg_names = s.kwarg_names - failed_names
    return s
