"""Population turn rows replayed through the live pipeline: the live counterpart of
``sim.counting.counts_from_rows``.

Every turn becomes a real request (the conversation's history so far, its id as the
session id) and a real reply whose text passes or fails real checkers exactly as the rows'
verdicts say: ``rule_0`` is ``no_commas`` (a failing reply carries a comma) and ``rule_1``
``keywords_present`` of "ticket". The ``Monitor`` attributes the history (the prefix model
and whether any other model's text is in it), runs the checkers, folds each conversation's
partial counts into the cells' cluster sums and counts everything into its aggregates —
what ``handoffmon refit`` reads from the local snapshot, the SQLite file or Prometheus.
Rows must have pass/fail verdicts only (``Population.not_applicable_rate = 0``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from handoffmon.config import HandoffmonConfig, config_from_mapping
from handoffmon.depth import DepthBuckets
from handoffmon.ingress import Outcome, RequestParser
from handoffmon.pipeline.monitor import Monitor
from handoffmon.sim.population import TurnRows

LIVE_RULES: tuple[dict[str, Any], ...] = (
    {"name": "rule_0", "check": "no_commas"},
    {"name": "rule_1", "check": "keywords_present", "params": {"keywords": ["ticket"]}},
)
"""The checkers standing in for population rules ``rule_0`` and ``rule_1``."""


def live_config(rows: TurnRows, buckets: DepthBuckets | None = None, **sections: Any) -> HandoffmonConfig:
    """A config whose rules are the rows' rules (at most two) and whose buckets are ``buckets``."""
    if (
        len(rows.rules) > len(LIVE_RULES)
        or tuple(rows.rules) != tuple(r["name"] for r in LIVE_RULES)[: len(rows.rules)]
    ):
        raise ValueError(f"live replay supports rules {[r['name'] for r in LIVE_RULES]}, got {rows.rules}")
    data: dict[str, Any] = {"rules": list(LIVE_RULES[: len(rows.rules)])}
    if buckets is not None:
        data["depth_buckets"] = list(buckets.edges)
    data["pipeline"] = {
        "check_budget_s": 10.0,
        "queue_size": 100_000,
        "attribution_queue_size": 100_000,
        **sections.pop("pipeline", {}),
    }
    data.update(sections)
    return config_from_mapping(data)


def reply_text(conversation: int, depth: int, passes: dict[int, bool]) -> str:
    """A reply unique to (conversation, depth) with the given verdict per rule index."""
    text = f"reply {conversation} {depth}"
    if not passes.get(0, True):
        text += ", with a comma"
    if passes.get(1, False):
        text += " about the ticket"
    return text


def replay(rows: TurnRows, monitor: Monitor, *, flush_every: int = 200) -> None:
    """Send every conversation of ``rows`` through ``monitor``, turn by turn, in depth order;
    returns once every turn is counted (the queues are drained every ``flush_every``
    conversations and at the end).

    Raises:
        ValueError: a row's verdict is neither pass nor fail.
    """
    if np.any(rows.verdict >= 2):
        raise ValueError("live replay needs pass/fail verdicts only (not_applicable_rate = 0)")
    parser = RequestParser.from_config(monitor.config)
    order = np.lexsort((rows.rule, rows.depth, rows.conversation))
    conv, depth, model, rule, verdict = (
        a[order].tolist() for a in (rows.conversation, rows.depth, rows.model, rows.rule, rows.verdict)
    )
    history: list[dict[str, str]] = []
    i, sent = 0, 0
    while i < len(conv):
        c, d, m = conv[i], depth[i], model[i]
        if d == 1:
            history = []
            sent += 1
            if sent % flush_every == 0:
                monitor.flush()
        passes: dict[int, bool] = {}
        while i < len(conv) and conv[i] == c and depth[i] == d:
            passes[rule[i]] = verdict[i] == 0
            i += 1
        send_turn(monitor, parser, history, c, d, rows.names[m], passes)
    monitor.flush()


def send_turn(
    monitor: Monitor,
    parser: RequestParser,
    history: list[dict[str, str]],
    conversation: int,
    depth: int,
    author: str,
    passes: dict[int, bool],
) -> None:
    """One turn of ``conversation`` at ``depth``: its question appended to ``history`` (the
    conversation's messages so far, updated in place), sent through ``monitor`` with the reply
    ``reply_text`` gives for ``passes``, written by ``author``."""
    history.append({"role": "user", "content": f"conversation {conversation} question {depth}"})
    text = reply_text(conversation, depth, passes)
    cap = monitor.capture(parser.parse(list(history), "group", session_id=f"c{conversation}"))
    monitor.finish(cap, text, Outcome(authors=(author,)))
    history.append({"role": "assistant", "content": text})
