"""``handoffmon check --rules RULES.yaml --input replies.jsonl``: try rules on recorded replies."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable
from handoffmon.cli.params import PositiveFinite
from handoffmon.errors import HandoffmonError

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.types import CheckResult

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
    from handoffmon.checkers.offline import Tally, load_rules_file, read_replies, replay_lines

    path = rules_path
    tally = Tally()
    try:
        check_writable(output_path, "--output")
        rules = load_rules_file(rules_path, budget_s=budget_s)
        path = input_path
        # one reply's verdicts at a time: a file of any size, and no growing heap for the
        # garbage collector to walk inside the checks' CPU budget (over_budget verdicts)
        verdicts = replay_lines(rules, read_replies(input_path), tally, input_path)
        replies = _stream(verdicts, output_path, input_path)
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except RecursionError:
        fail(f"{path}: nested too deeply to read")
    except _Empty as exc:
        fail(str(exc), ExitCode.NO_DATA)
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
        say(json.dumps({"replies": replies, "rules": summary}, indent=2))
        return
    say(f"{replies} replies, {len(names)} rules  (pass rate = pass / (pass + fail))")
    say(f"{'rule':32} {'pass':>6} {'fail':>6} {'n/a':>6} {'error':>6}  pass rate")
    for row in summary:
        rate = "-" if row["pass_rate"] is None else f"{row['pass_rate']:.1%}"
        say(
            f"{row['rule'][:32]:32} {row['pass']:>6} {row['fail']:>6} {row['not_applicable']:>6} "
            f"{row['error']:>6}  {rate:>9}"
        )


class _Empty(HandoffmonError):
    """Nothing to report: no reply in the input, or no rule applied to any (exit 4, no output)."""


def _stream(
    verdicts: Iterator[tuple[int, tuple[CheckResult, ...]]], output_path: str | None, input_path: str
) -> int:
    """Write every verdict as a JSONL line to ``output_path`` (``-``: stdout; a file: complete or
    not at all) as it comes; the number of replies. ``_Empty`` when there is nothing to report:
    an empty file checks nothing (no all-clear), and neither does a file no rule applied to."""
    from handoffmon.cli.files import open_atomic

    with contextlib.ExitStack() as stack:
        out: TextIO | None = None
        if output_path == "-":
            out = sys.stdout
        elif output_path:
            out = stack.enter_context(open_atomic(output_path))
        replies = decided = 0
        for lineno, results in verdicts:
            replies += 1
            decided += len(results)
            if out is not None:
                for r in results:
                    line = {"line": lineno, "rule": r.rule, "verdict": r.verdict, "reason": r.reason}
                    out.write(json.dumps(line) + "\n")
        if not replies:
            raise _Empty(f"{input_path}: no replies")
        if not decided:
            raise _Empty(
                f"{input_path}: no rule applied to any of its {replies} replies (every reply is outside "
                "every rule's scope: depth, model_groups, routes, tags); no verdicts"
            )
    return replies
