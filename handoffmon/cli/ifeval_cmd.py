"""``handoffmon ifeval``: the IFEval verifier (strict or loose) on a responses file."""

from __future__ import annotations

import functools
import json
from collections import Counter

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable, write_text_atomic
from handoffmon.errors import HandoffmonError


@click.command("ifeval")
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="IFEval input_data.jsonl: {key, prompt, instruction_id_list, kwargs}.",
)
@click.option(
    "--responses",
    "responses_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="JSONL of {prompt, response}.",
)
@click.option(
    "--mode",
    type=click.Choice(["strict", "loose"]),
    default="strict",
    show_default=True,
    help="IFEval's strict scoring, or loose (each response also with its first, last or both lines "
    "dropped, and with its asterisks removed)",
)
@click.option(
    "--output",
    "output_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Write the reference's eval_results fields per prompt (JSONL); '-': stdout, and the "
    "accuracy goes to stderr.",
)
@click.option("--by-instruction", is_flag=True, help="Also print accuracy per instruction id.")
def ifeval(input_path: str, responses_path: str, mode: str, output_path: str, by_instruction: bool) -> None:
    """Score RESPONSES against INPUT's instructions; print prompt- and instruction-level accuracy.

    Exit status 1 on bad input, 4 when INPUT holds no prompts (nothing is written then).
    """
    from handoffmon.checkers.ifeval.evaluate import accuracy, read_inputs, read_responses, run

    path = input_path
    try:
        check_writable(output_path, "--output")  # before the scoring, not after it
        inputs = read_inputs(input_path)
        path = responses_path
        responses = read_responses(responses_path)
        missing = next((i for i in inputs if i.prompt not in responses), None)
        if missing is not None:
            fail(f"{responses_path}: no response for the prompt of {input_path} key {missing.key}")
        results = run(inputs, responses, mode)  # type: ignore[arg-type]
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except RecursionError:
        fail(f"{path}: nested too deeply to read")
    except HandoffmonError as exc:
        fail(str(exc))
    if not results:  # nothing scored: no accuracy of 0, no output file
        fail(f"{input_path}: no prompts", ExitCode.NO_DATA)
    try:
        write_text_atomic(output_path, "\n".join(json.dumps(r.to_json()) for r in results))
    except HandoffmonError as exc:
        fail(str(exc))
    say = functools.partial(click.echo, err=output_path == "-")  # stdout carries the results
    acc = accuracy(results)
    say(f"mode: {mode}  prompts: {acc.prompts}  instructions: {acc.instructions}")
    say(f"prompt-level: {acc.prompt_level:.4f}")
    say(f"instruction-level: {acc.instruction_level:.4f}")
    if by_instruction:
        total: Counter[str] = Counter()
        followed: Counter[str] = Counter()
        for r in results:
            for iid, ok in zip(r.instruction_id_list, r.follow_instruction_list, strict=True):
                total[iid] += 1
                followed[iid] += ok
        for iid in sorted(total):
            say(f"{iid:48} {followed[iid] / total[iid]:.4f}  (n={total[iid]})")
