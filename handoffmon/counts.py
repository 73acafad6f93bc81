"""Aggregate counters as one plain record: what the pipeline keeps and the refit reads.

The same record comes from a local aggregates snapshot, from Prometheus (summed over
replicas) or from CSV files, so the refit has one input type.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from handoffmon.types import ClusterStep, TurnResult, Verdict

CELL_TOTAL = "*"
"""``depth_bucket`` of the whole-cell cluster sums in ``cell_stats``."""

CLUSTER_STATS: tuple[str, ...] = ("conversations", "y2", "yn", "n2")
"""Per cell, over conversations c with y_c passes in n_c checked turns: G = #c, Σy², Σyn, Σn²."""

CELL_STATS: tuple[str, ...] = ("depth", *CLUSTER_STATS)

POOLED_RULE = "all"
"""Rule name of cluster sums pooled over rules (the refit's pooled fit; reserved)."""


def cluster_increments(y: int, n: int, passed: bool) -> tuple[int, int, int, int]:
    """Increments of (G, Σy², Σyn, Σn²) when one more check lands in a conversation's cell.

    ``y``/``n`` are the conversation's passes/checks in that cell *before* this check.
    Every increment is ≥ 0, so the sums are monotone counters (Prometheus ``_total``):
    (n+1)² − n² = 2n + 1; (y+1)² − y² = 2y + 1 on a pass, else 0; (y+1)(n+1) − yn =
    y + n + 1 on a pass, else y.
    """
    if passed:
        return int(n == 0), 2 * y + 1, y + n + 1, 2 * n + 1
    return int(n == 0), 0, y, 2 * n + 1


def in_cell(author: str, prefix_model: str, clean: bool) -> bool:
    """A turn's checks enter its refit cell's depth and cluster sums: handoff (or other-
    prefix) turns always, same-author turns only when clean (the diagonal is the clean
    baseline)."""
    return clean or prefix_model != author


PLAN_CACHE = 1024
"""Turn shapes (``turn_shape``) whose keys the aggregates and the Prometheus tables each keep
built (cleared when full): a deployment sees a few of them at a time."""

_rule_verdict = operator.attrgetter("rule", "verdict")
_transition_shape = operator.attrgetter("rule", "from_verdict", "to_verdict")
_step_rule = operator.itemgetter(0)


_last_shape: tuple[object, tuple[object, ...]] = (None, ())
"""The last turn ``turn_shape`` was asked about and its shape: the aggregates and then the
Prometheus tables ask about the same turn (one reference, replaced at the next turn)."""


def turn_shape(result: TurnResult) -> tuple[object, ...]:
    """What a finished turn's counter keys depend on, besides the label guard: its author,
    prefix model, depth bucket, handoff and cleanliness, its checks' rules and verdicts, its
    transitions and its cluster steps' rules (not its depth, durations or cluster values, which
    are what it adds). Turns of one shape add to the same keys, so the aggregates and the
    Prometheus tables build those once per shape instead of once per turn (issue 21)."""
    global _last_shape
    last = _last_shape  # one read: another thread may replace it meanwhile
    if last[0] is result:
        return last[1]
    rec, ctx = result.record, result.context
    shape = (
        rec.author,
        ctx.prefix_model,
        result.depth_bucket,
        rec.handoff,
        result.clean,
        tuple(map(_rule_verdict, result.checks)),
        tuple(map(_transition_shape, result.transitions)),
        tuple(map(_step_rule, result.cluster)),
    )
    _last_shape = (result, shape)
    return shape


def add_cluster_sums(
    counter: MutableMapping[Any, Any],
    keys: Sequence[Sequence[Any]],
    cluster: tuple[ClusterStep, ...],
) -> None:
    """Add a turn's cluster steps to ``counter`` under their keys (``keys[i]``: the four keys of
    ``cluster[i]``'s stats, in ``CLUSTER_STATS`` order), in order, skipping the stats that did not
    move (a series is created by its first increment: the aggregates' and the Prometheus tables'
    order of keys)."""
    for stat_keys, step in zip(keys, cluster, strict=True):
        _, conversations, y2, yn, n2 = step
        if conversations:
            counter[stat_keys[0]] += conversations
        if y2:
            counter[stat_keys[1]] += y2
        if yn:
            counter[stat_keys[2]] += yn
        if n2:
            counter[stat_keys[3]] += n2


def turn_cell_stats(
    result: TurnResult,
    *,
    model: str | None = None,
    prefix_model: str | None = None,
    rule: Callable[[str], str] | None = None,
) -> list[tuple[CellStatKey, int]]:
    """The ``cell_stats`` increments of one finished turn (live pipeline and exporters).

    Σ depth of its pass/fail checks per rule in its depth bucket (when the turn is in its
    cell, ``in_cell``) and the conversation-cluster increments the pipeline computed from
    the conversation's partial counts (``TurnResult.cluster``). The same definitions as
    the turn-log source (``sources/turns.sql``), so both give the same counts.

    ``model``, ``prefix_model`` and ``rule`` name the keys' cell when given (capped label
    values: the caller builds each key once); whether the turn is in a cell is always
    decided on the turn's own names.
    """
    ctx, author = result.context, result.record.author
    prefix, bucket = ctx.prefix_model, result.depth_bucket
    key_model = author if model is None else model
    key_prefix = prefix if prefix_model is None else prefix_model
    name = rule if rule is not None else str
    make = tuple.__new__  # CellStatKey(...) without its Python-level __new__ (~20 keys per turn)
    out: list[tuple[CellStatKey, int]] = []
    append = out.append
    if in_cell(author, prefix, result.clean):
        depth = ctx.depth
        for c in result.checks:
            if c.verdict in ("pass", "fail"):
                append((make(CellStatKey, (name(c.rule), key_model, key_prefix, bucket, "depth")), depth))
    for step in result.cluster:
        step_rule = name(step.rule)
        for stat, v in zip(CLUSTER_STATS, step[1:], strict=True):
            if v:
                append((make(CellStatKey, (step_rule, key_model, key_prefix, CELL_TOTAL, stat)), v))
    return out


SHADOW_STATS: tuple[str, ...] = (
    "both_pass",
    "model_only",
    "prefix_only",
    "both_fail",
    "conversations",
    "b2",
    "c2",
    "bc",
    "bn",
    "cn",
    "n2",
    "handoff_arm",
)
"""Stats of a shadow pair cell (see ``ShadowKey``): the paired 2×2 table, cluster sums, arm.

Over pairs i of one (rule, prefix model A, model B): y_B,i = B's verdict continuing A's
prefix, y_A,i = A's verdict continuing the same prefix. ``both_pass`` = #(y_B = y_A = pass),
``model_only`` (b) = #(B passes, A fails), ``prefix_only`` (c) = #(A passes, B fails),
``both_fail``. Per conversation c with b_c, c_c discordant pairs among n_c pairs: G = #c,
Σb², Σc², Σbc, Σbn, Σcn, Σn² (every increment ≥ 0, so all are monotone counters, and the
clustered variance of the paired difference Σ(b − c)/Σn is computable from them).
``handoff_arm`` counts the pairs whose served turn was the handoff (B served, A shadowed).
"""

SHADOW_TABLE: tuple[str, ...] = SHADOW_STATS[:4]
SHADOW_CLUSTER: tuple[str, ...] = SHADOW_STATS[4:11]


def shadow_increments(b: int, c: int, n: int, model_pass: bool, prefix_pass: bool) -> dict[str, int]:
    """Increments of the shadow cluster sums when a conversation gets one more pair.

    ``b``/``c``/``n`` are that conversation's discordant counts and pairs in the cell
    *before* this pair; ``model_pass``/``prefix_pass`` are the pair's verdicts.
    (b + δb)² − b² = δb(2b + 1); (b + δb)(c + δc) − bc = δb·c + δc·b (never both);
    (b + δb)(n + 1) − bn = b + δb(n + 1); likewise for c; (n + 1)² − n² = 2n + 1.
    """
    db, dc = int(model_pass and not prefix_pass), int(prefix_pass and not model_pass)
    cell = SHADOW_TABLE[2 * (not model_pass) + (not prefix_pass)]
    return {
        cell: 1,
        "conversations": int(n == 0),
        "b2": db * (2 * b + 1),
        "c2": dc * (2 * c + 1),
        "bc": db * c + dc * b,
        "bn": b + db * (n + 1),
        "cn": c + dc * (n + 1),
        "n2": 2 * n + 1,
    }


class ShadowKey(NamedTuple):
    """Key of ``shadow``: one stat (``SHADOW_STATS``) of the shadow pairs of a (rule, A, B) cell.

    ``prefix_model`` A wrote the history; ``model`` B is the other continuation. Whichever
    of the two was served (the handoff arm serves B, the no-handoff arm serves A), the
    pair is (y_B, y_A) on the same prefix. With ``rule`` = ``"all"`` only the cluster
    sums are kept (a pair's checks of several rules are one cluster).
    """

    rule: str
    prefix_model: str
    model: str
    stat: str


class CheckKey(NamedTuple):
    """Key of ``checks``: one rule's verdict on turns by ``model`` after ``prefix_model``."""

    rule: str
    model: str
    prefix_model: str
    depth_bucket: str
    verdict: Verdict


class TransitionKey(NamedTuple):
    """Key of ``transitions``: consecutive verdicts of a rule in one conversation.

    ``model`` authored the later turn; ``handoff`` is ``"true"``, ``"false"`` or
    ``"unknown"`` for that later turn.
    """

    rule: str
    model: str
    handoff: str
    from_verdict: Verdict
    to_verdict: Verdict


class CellStatKey(NamedTuple):
    """Key of ``cell_stats``: a per-cell sum the conversation-clustered refit needs.

    ``stat`` is one of ``CELL_STATS``. ``depth`` is kept per depth bucket (Σ depth of
    the cell's checked turns, for the within-bucket depth adjustment); the cluster sums
    ``conversations``, ``y2``, ``yn``, ``n2`` cover the whole cell (``depth_bucket`` is
    ``CELL_TOTAL``) and, with ``rule`` = ``"all"``, the checks of every rule together.
    On the diagonal (``prefix_model == model``) every stat describes the **clean
    baseline**: same-author turns whose history holds no other model's text.
    """

    rule: str
    model: str
    prefix_model: str
    depth_bucket: str
    stat: str


class TurnKey(NamedTuple):
    """Key of ``turns``."""

    model: str
    prefix_model: str
    depth_bucket: str
    handoff: str


@dataclass(frozen=True)
class Counts:
    """All refit inputs, as counters. Frozen by convention; ``merge`` returns a new one.

    Attributes:
        checks: verdict counts by (rule, model, prefix_model, depth_bucket, verdict).
        transitions: by (rule, model, handoff, from_verdict, to_verdict).
        turns: by (model, prefix_model, depth_bucket, handoff).
        attributions: earlier-message attributions by method (chain/content/unknown).
        monitor_errors: handoffmon's own failures by stage.
        dropped: turns dropped because the queue was full.
        session_lengths: histogram of final depth per finished/expired conversation
            (depth → count); optional, feeds ``shapes export``.
        baseline_checks: verdicts of **clean** same-author turns (prefix = author and no
            other model's text anywhere in the history), keyed like ``checks`` with
            ``prefix_model == model``; the refit's B→B baseline. Empty for sources that
            predate it (the refit then falls back to every same-author turn).
        cell_stats: per-cell sums for clustered intervals and the depth adjustment
            (see ``CellStatKey``); empty for sources that predate them.
        shadow: paired shadow-continuation tables and their cluster sums (see
            ``ShadowKey``); empty unless shadow continuation ran.
    """

    checks: Mapping[CheckKey, int] = field(default_factory=dict)
    transitions: Mapping[TransitionKey, int] = field(default_factory=dict)
    turns: Mapping[TurnKey, int] = field(default_factory=dict)
    attributions: Mapping[str, int] = field(default_factory=dict)
    monitor_errors: Mapping[str, int] = field(default_factory=dict)
    dropped: int = 0
    session_lengths: Mapping[int, int] = field(default_factory=dict)
    baseline_checks: Mapping[CheckKey, int] = field(default_factory=dict)
    cell_stats: Mapping[CellStatKey, int] = field(default_factory=dict)
    shadow: Mapping[ShadowKey, int] = field(default_factory=dict)

    def merge(self, other: Counts) -> Counts:
        """Sum two snapshots (e.g. two replicas)."""

        def add(a: Mapping, b: Mapping) -> dict:  # type: ignore[type-arg]
            c: Counter = Counter(a)  # type: ignore[type-arg]
            c.update(b)
            return dict(c)

        return Counts(
            checks=add(self.checks, other.checks),
            transitions=add(self.transitions, other.transitions),
            turns=add(self.turns, other.turns),
            attributions=add(self.attributions, other.attributions),
            monitor_errors=add(self.monitor_errors, other.monitor_errors),
            dropped=self.dropped + other.dropped,
            session_lengths=add(self.session_lengths, other.session_lengths),
            baseline_checks=add(self.baseline_checks, other.baseline_checks),
            cell_stats=add(self.cell_stats, other.cell_stats),
            shadow=add(self.shadow, other.shadow),
        )

    @property
    def total_turns(self) -> int:
        """Number of turns counted."""
        return sum(self.turns.values())
