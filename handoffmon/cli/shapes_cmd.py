"""``handoffmon shapes export``: production decay shapes for the eval feedback loop."""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.core import ParameterSource

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable
from handoffmon.cli.params import FiniteRange
from handoffmon.cli.refit_cmd import MATCH_OPTION
from handoffmon.config import StoreConfig
from handoffmon.errors import HandoffmonError, NoDataError

DEFAULT_SOURCE = f"sqlite://{StoreConfig().path}"
"""The SQLite file a monitor with ``store.backend: sqlite`` writes by default (relative to the cwd).

The default backend is ``memory``, which writes no file: without ``--source`` and without
that file, the error says so and points to ``--source``.
"""


@click.group("shapes")
def shapes() -> None:
    """Production decay shapes (adherence by depth, Markov, session lengths, pairs)."""


@shapes.command("export")
@click.option(
    "--source",
    default=DEFAULT_SOURCE,
    show_default=True,
    help=(
        "sqlite://PATH (sqlite://handoffmon.db relative, sqlite:///abs/path.db absolute), "
        "prometheus://HOST:PORT, refit.json, cells.csv or a turn log (.jsonl/.csv/.parquet); "
        "the default is the file a monitor with store.backend: sqlite writes"
    ),
)
@MATCH_OPTION
@click.option("--out", required=True, help="shapes.json ('-' for stdout)")
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=FiniteRange(0, 1, min_open=True, max_open=True),
    help="confidence level of the Wilson intervals and Markov fits",
)
def export(source: str, match: str | None, out: str, confidence: float) -> None:
    """Write versioned production shapes ("schema": "handoffmon.shapes", "version": 1) to --out.

    Exit status 4 when the source holds no checks (e.g. a Prometheus whose targets went
    stale): nothing is written then.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.cli.files import write_text_atomic
    from handoffmon.evals.shapes import export_shapes

    defaulted = click.get_current_context().get_parameter_source("source") is ParameterSource.DEFAULT
    if defaulted and not Path(source[len("sqlite://") :]).exists():
        fail(
            f"no --source given and the default {source} does not exist (only a monitor with "
            "store.backend: sqlite writes it; the default backend, memory, writes no file): pass "
            "--source sqlite://PATH, prometheus://HOST:PORT, refit.json, cells.csv or a turn log"
        )
    try:
        check_writable(out, "--out")  # before reading the source (a Prometheus query can take a while)
        result = export_shapes(source, confidence=confidence, match=match)
        write_text_atomic(out, result.to_json())
    except NoDataError as exc:
        fail(str(exc), ExitCode.NO_DATA)
    except (HandoffmonError, ValueError) as exc:
        fail(str(exc))
    rules = {r.rule for r in result.rules}
    s = result.session_lengths
    click.echo(
        f"shapes: {len(rules)} rule(s), {len(result.handoff_pairs)} handoff pair(s), session length "
        f"p50={s.get('p50')} p90={s.get('p90')} ({s.get('method')}) -> {out}",
        err=True,
    )
