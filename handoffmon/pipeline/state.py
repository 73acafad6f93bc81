"""Per-conversation state kept between turns: declared rules, last verdicts, extracted values."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from handoffmon.checkers.extracted import without_expired_text
from handoffmon.counts import POOLED_RULE, in_cell
from handoffmon.stores._rev import rev_of
from handoffmon.types import CheckResult, ClusterStep, Transition, Verdict

STATE_VERSION = 1

MARKOV_VERDICTS: frozenset[str] = frozenset(("pass", "fail"))
"""Verdicts that take part in transitions; ``not_applicable`` and ``error`` are skipped."""

MAX_CELLS = 256
"""Cells (rule or ``all``, author, prefix model) whose partial counts a conversation keeps.

A conversation touching more cells (many rules × many models) counts the checks of further
cells as one-check clusters: bounded state, slightly optimistic intervals for those cells.
"""


def _slots_maker(cls: type, *names: str) -> Any:
    """``cls(*values)`` for a frozen slotted dataclass whose ``__init__`` only assigns
    ``names`` (all its fields, in order): the object built and its slots set through their
    own setters, ~40 % faster than the generated ``__init__`` (several objects per turn)."""
    assert names == tuple(f.name for f in fields(cls)) and not hasattr(cls, "__post_init__")
    new, setters = object.__new__, tuple(cls.__dict__[name].__set__ for name in names)
    first, *rest = setters
    if len(setters) == 2:
        second = rest[0]

        def make2(a: object, b: object) -> Any:
            obj: Any = new(cls)
            first(obj, a)
            second(obj, b)
            return obj

        return make2
    second, third = rest

    def make3(a: object, b: object, c: object) -> Any:
        obj: Any = new(cls)
        first(obj, a)
        second(obj, b)
        third(obj, c)
        return obj

    return make3


CellId = tuple[str, str, str]
"""(rule or ``all``, author, prefix model)."""


@dataclass(frozen=True, slots=True)
class LastVerdict:
    """A rule's most recent pass/fail verdict in a conversation and the depth it was seen at."""

    verdict: Verdict
    depth: int


@dataclass(frozen=True)
class ConversationState:
    """What the pipeline remembers about one conversation (JSON round-trips via the store).

    Attributes:
        depth: deepest turn processed so far.
        declared_rules: per-request rules (as ``RuleConfig`` dumps) with the depth they were
            first declared at; a rule declared at turn k applies at every turn ≥ k. Their
            number and size are bounded by ``request_rules`` (``RuleSet.parse_request_rules``).
        previous: rule name → stored form of the value its checker extracted at the last
            checked turn (a keyed fingerprint unless text was opted in: ``checkers.extracted``).
        last: rule name → last pass/fail verdict (feeds transitions).
        cells: (rule or ``all``, author, prefix) → (passes, pass/fail checks) this
            conversation contributed to the cell: what the cluster sums' increments need
            (at most ``MAX_CELLS`` entries).
        chars: the conversation's size after its deepest turn (that turn's
            ``history_chars`` plus its reply's): the history a call continuing the latest
            stored response holds without sending it (``CheckStage``, ADR 0011).
        rev: the revision of the stored state this one was folded from (0: none stored).
            Shared stores write a state only while the stored one still has this revision
            (compare-and-set, ``put_states_if``), so replicas folding the same conversation
            at once cannot lose each other's turns; folds keep it unchanged.
    """

    depth: int = 0
    declared_rules: tuple[tuple[int, Mapping[str, Any]], ...] = ()
    previous: Mapping[str, str] = field(default_factory=dict)
    last: Mapping[str, LastVerdict] = field(default_factory=dict)
    cells: Mapping[CellId, tuple[int, int]] = field(default_factory=dict)
    chars: int = 0
    rev: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, object] | None) -> ConversationState:
        """Rebuild from a stored mapping; anything malformed yields an empty state."""
        if not data or data.get("v") != STATE_VERSION:
            return cls(rev=rev_of(data))
        rules_raw: Any = data.get("rules") or []
        last_raw: Any = data.get("last") or {}
        prev_raw: Any = data.get("previous") or {}
        depth: Any = data.get("depth", 0)
        cells_raw: Any = data.get("cells") or []
        chars: Any = data.get("chars", 0)  # absent in states written before it was kept
        return cls(
            int(depth),
            tuple((int(d), dict(r)) for d, r in rules_raw),
            {str(k): str(v) for k, v in dict(prev_raw).items()},
            {str(k): LastVerdict(v[0], int(v[1])) for k, v in dict(last_raw).items()},
            _cells(cells_raw),
            int(chars),
            rev_of(data),
        )

    def to_mapping(self, now_s: float | None = None) -> dict[str, object]:
        """JSON-serializable form for ``AttributionStore.put_state``; opted-in answer text
        past its expiry (wall clock ``now_s``, default now) is dropped, its fingerprint kept."""
        previous: dict[str, str | None] = {}
        if self.previous:
            now = time.time() if now_s is None else now_s
            previous = {k: without_expired_text(v, now) for k, v in self.previous.items()}
        return {
            "rev": self.rev,  # first: stores read it from the blob's start (``stored_rev``)
            "v": STATE_VERSION,
            "depth": self.depth,
            "rules": [[d, dict(r)] for d, r in self.declared_rules],
            "previous": {k: v for k, v in previous.items() if v is not None},
            "last": {k: [v.verdict, v.depth] for k, v in self.last.items()},
            "cells": [[r, m, p, y, n] for (r, m, p), (y, n) in self.cells.items()],
            "chars": self.chars,
        }

    def declare(self, rules: tuple[Mapping[str, Any], ...], depth: int) -> ConversationState:
        """Add rules declared in this turn's request.

        A name declared again takes the new definition but keeps its first declaration
        depth (as ``RuleSet.accumulate``: same name, the new one wins).
        """
        merged: dict[str, tuple[int, Mapping[str, Any]]] = {
            str(r.get("name")): (d, r) for d, r in self.declared_rules
        }
        for r in rules:
            name = str(r.get("name"))
            first = merged[name][0] if name in merged else depth
            merged[name] = (first, dict(r))
        return replace(self, declared_rules=tuple(merged.values()))

    @property
    def declared(self) -> tuple[Mapping[str, Any], ...]:
        """The declared rules (``RuleConfig`` dumps), in declaration order."""
        return tuple(r for _, r in self.declared_rules)

    def active_rules(self, depth: int) -> tuple[Mapping[str, Any], ...]:
        """Declared rules that apply at ``depth`` (declared at or before it)."""
        return tuple(r for d, r in self.declared_rules if d <= depth)

    def advance(
        self, depth: int, checks: tuple[CheckResult, ...]
    ) -> tuple[ConversationState, tuple[Transition, ...]]:
        """Fold one turn's checks into the state; returns the new state and the transitions.

        A transition is emitted for a rule whose verdict at this turn is pass/fail and whose
        last pass/fail verdict in the conversation was at a strictly smaller depth (turns
        where the rule was not applicable or errored are skipped, not counted as breaks; a
        regenerated reply at the same depth replaces the last verdict without a transition).
        """
        previous, last, transitions = self._advanced(depth, checks)
        state = ConversationState(
            max(self.depth, depth), self.declared_rules, previous, last, self.cells, self.chars, self.rev
        )
        return state, transitions

    def tally(
        self, author: str, prefix_model: str, clean: bool, checks: tuple[CheckResult, ...]
    ) -> tuple[ConversationState, tuple[ClusterStep, ...]]:
        """Fold one turn's pass/fail checks into the conversation's cell partial counts.

        Returns the new state and the increments of the turn's cells' cluster sums (per
        rule, and pooled over rules as ``all``) — none when the turn is in no refit cell
        (``counts.in_cell``: a same-author turn that is not ``clean``). O(1) per check: the
        conversation's (y, n) in the cell before the check give the increments of Σy², Σyn,
        Σn² (``counts.cluster_increments``), so the sums never need a pass over conversations.
        """
        cells, steps = self._tallied(author, prefix_model, clean, checks)
        if cells is self.cells:
            return self, steps
        return (
            ConversationState(
                self.depth, self.declared_rules, self.previous, self.last, cells, self.chars, self.rev
            ),
            steps,
        )

    def fold(
        self,
        depth: int,
        author: str,
        prefix_model: str,
        clean: bool,
        checks: tuple[CheckResult, ...],
        chars: int = 0,
    ) -> tuple[ConversationState, tuple[ClusterStep, ...], tuple[Transition, ...]]:
        """:meth:`tally` then :meth:`advance` in one step (one new state: the per-turn path).

        ``chars``: the conversation's size after this turn; kept when the turn is at least
        as deep as any before it (a regenerated earlier turn leaves the size of the deepest)."""
        cells, steps = self._tallied(author, prefix_model, clean, checks)
        previous, last, transitions = self._advanced(depth, checks)
        size = chars if depth >= self.depth else self.chars
        state = ConversationState(
            max(self.depth, depth), self.declared_rules, previous, last, cells, size, self.rev
        )
        return state, steps, transitions

    def _advanced(
        self, depth: int, checks: tuple[CheckResult, ...]
    ) -> tuple[Mapping[str, str], Mapping[str, LastVerdict], tuple[Transition, ...]]:
        last = dict(self.last)
        extracted = {c.rule: c.extracted for c in checks if c.extracted is not None}
        previous = {**self.previous, **extracted} if extracted else self.previous
        transitions: list[Transition] = []
        for check in checks:
            verdict = check.verdict
            if verdict not in MARKOV_VERDICTS:
                continue
            before = last.get(check.rule)
            if before is not None and before.depth < depth:
                transitions.append(_transition(check.rule, before.verdict, verdict))
            last[check.rule] = _last_verdict(verdict, depth)
        return previous, last, tuple(transitions)

    def _tallied(
        self, author: str, prefix_model: str, clean: bool, checks: tuple[CheckResult, ...]
    ) -> tuple[Mapping[CellId, tuple[int, int]], tuple[ClusterStep, ...]]:
        if not in_cell(author, prefix_model, clean):
            return self.cells, ()
        verdicts = [(c.rule, c.verdict == "pass") for c in checks if c.verdict in MARKOV_VERDICTS]
        if not verdicts:
            return self.cells, ()
        cells = dict(self.cells)
        steps: dict[str, list[int]] = {}
        verdicts.extend([(POOLED_RULE, p) for _, p in verdicts])
        for rule, passed in verdicts:
            cell = (rule, author, prefix_model)
            got = cells.get(cell)
            if got is not None:
                y, n = got
                cells[cell] = (y + passed, n + 1)
            else:
                y = n = 0
                if len(cells) < MAX_CELLS:
                    cells[cell] = (int(passed), 1)
            acc = steps.get(rule)
            if acc is None:
                acc = steps[rule] = [0, 0, 0, 0]
            # counts.cluster_increments(y, n, passed), inlined (~6 calls per turn)
            if not n:
                acc[0] += 1
            if passed:
                acc[1] += 2 * y + 1
                acc[2] += y + n + 1
            else:
                acc[2] += y
            acc[3] += 2 * n + 1
        make = tuple.__new__  # ClusterStep(...) without its Python-level __new__
        return cells, tuple([make(ClusterStep, (r, *v)) for r, v in steps.items()])


_last_verdict = _slots_maker(LastVerdict, "verdict", "depth")
_transition = _slots_maker(Transition, "rule", "from_verdict", "to_verdict")


def _cells(raw: Any) -> dict[CellId, tuple[int, int]]:
    """Stored cells ``[[rule, author, prefix, y, n], …]``; values as stored when they are
    already plain (the common case: one dict insert per cell), coerced otherwise."""
    out: dict[CellId, tuple[int, int]] = {}
    for r, m, p, y, n in raw:
        if type(r) is str and type(m) is str and type(p) is str and type(y) is int and type(n) is int:
            out[r, m, p] = (y, n)
        else:
            out[str(r), str(m), str(p)] = (int(y), int(n))
    return out
