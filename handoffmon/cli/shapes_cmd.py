"""``handoffmon shapes export``: production decay shapes for the eval feedback loop."""

from __future__ import annotations

import os
import sys

import click

from handoffmon.errors import HandoffmonError


@click.group("shapes")
def shapes() -> None:
    """Production decay shapes (adherence by depth, Markov, session lengths, pairs)."""


@shapes.command("export")
@click.option(
    "--source",
    default="sqlite:///handoffmon.sqlite",
    show_default=True,
    help="sqlite:///PATH, prometheus://HOST:PORT, refit.json, cells.csv or a turn log (.jsonl/.csv/.parquet)",
)
@click.option("--out", required=True, help="shapes.json ('-' for stdout)")
@click.option(
    "--confidence", default=0.95, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True)
)
def export(source: str, out: str, confidence: float) -> None:
    """Write versioned production shapes (schema handoffmon.shapes/1) to --out."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.cli.refit_cmd import write_text_atomic
    from handoffmon.evals.shapes import export_shapes

    try:
        result = export_shapes(source, confidence=confidence)
        write_text_atomic(out, result.to_json())
    except (HandoffmonError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    rules = {r.rule for r in result.rules}
    s = result.session_lengths
    click.echo(
        f"shapes: {len(rules)} rule(s), {len(result.handoff_pairs)} handoff pair(s), session length "
        f"p50={s.get('p50')} p90={s.get('p90')} ({s.get('method')}) -> {out}",
        err=True,
    )
