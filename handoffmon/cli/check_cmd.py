"""``handoffmon check --rules RULES.yaml --input replies.jsonl``: try rules on recorded replies."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable
from handoffmon.cli.params import PositiveFinite
from handoffmon.errors import HandoffmonError

VERDICT_COLUMNS = ("pass", "fail", "not_applicable", "error")


@click.command("check")
@click.option(
    "--rules",
    "rules_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="YAML/TOML file: a handoffmon config with 'rules:' or a bare list of rules.",
)
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="JSONL, one reply per line: {reply, depth?, user_message?, model_group?, route?, "
    "tags?, previous?, conversation_id?, metadata?}.",
)
@click.option(
    "--output",
    "output_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every verdict as JSONL (line, rule, verdict, reason); '-': stdout, and the summary "
    "goes to stderr.",
)
@click.option(
    "--budget-s", type=PositiveFinite(), default=0.05, show_default=True, help="Per-check time budget."
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-rule summary as JSON.")
def check(rules_path: str, input_path: str, output_path: str | None, budget_s: float, as_json: bool) -> None:
    """Print per-rule pass rates of RULES on the replies in INPUT (exit 1 on bad input, 4 if it is empty)."""
    # empty: no reply in INPUT, or no rule in scope of any reply (every rule's ``scope`` left
    # every reply out): there is no verdict to report then, and no --output is written
    from handoffmon.checkers.offline import load_rules_file, read_replies, replay
    from handoffmon.cli.files import write_text_atomic

    path = rules_path
    try:
        check_writable(output_path, "--output")
        rules = load_rules_file(rules_path, budget_s=budget_s)
        path = input_path
        tally, per_line = replay(rules, read_replies(input_path), input_path)
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except RecursionError:
        fail(f"{path}: nested too deeply to read")
    except HandoffmonError as exc:
        fail(str(exc))
    if not per_line:  # an empty file checks nothing: no all-clear, no output file
        fail(f"{input_path}: no replies", ExitCode.NO_DATA)
    if not any(sum(c.values()) for c in tally.counts.values()):
        fail(
            f"{input_path}: no rule applied to any of its {len(per_line)} replies (every reply is outside "
            "every rule's scope: depth, model_groups, routes, tags); no verdicts",
            ExitCode.NO_DATA,
        )
    if output_path:
        lines = [
            json.dumps({"line": lineno, "rule": r.rule, "verdict": r.verdict, "reason": r.reason})
            for lineno, results in per_line
            for r in results
        ]
        try:
            write_text_atomic(output_path, "\n".join(lines))
        except HandoffmonError as exc:
            fail(str(exc))
    say = functools.partial(click.echo, err=output_path == "-")  # stdout carries the verdicts
    names = list(rules.names) + sorted(set(tally.counts) - set(rules.names))
    summary: list[dict[str, Any]] = []
    for name in names:
        counts: Mapping[str, int] = tally.counts.get(name, {})
        summary.append(
            {
                "rule": name,
                **{v: counts.get(v, 0) for v in VERDICT_COLUMNS},
                "pass_rate": tally.pass_rate(name),
            }
        )
    if as_json:
        say(json.dumps({"replies": len(per_line), "rules": summary}, indent=2))
        return
    say(f"{len(per_line)} replies, {len(names)} rules  (pass rate = pass / (pass + fail))")
    say(f"{'rule':32} {'pass':>6} {'fail':>6} {'n/a':>6} {'error':>6}  pass rate")
    for row in summary:
        rate = "-" if row["pass_rate"] is None else f"{row['pass_rate']:.1%}"
        say(
            f"{row['rule'][:32]:32} {row['pass']:>6} {row['fail']:>6} {row['not_applicable']:>6} "
            f"{row['error']:>6}  {rate:>9}"
        )
