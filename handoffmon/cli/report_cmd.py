"""``handoffmon report REFIT.json --out report.html``: the refit as a self-contained HTML page."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from handoffmon.errors import HandoffmonError


def _read_truth(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"{path}: cannot read planted truth: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise click.ClickException(f"{path}: not a truth document (expected a 'models' mapping)")
    return data


@click.command("report")
@click.argument("refit_json", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default="handoffmon-report.html",
    show_default=True,
    help="HTML file to write.",
)
@click.option(
    "--truth",
    "truth_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Planted truth (handoffmon-truth.json from `handoffmon demo`) drawn as markers.",
)
@click.option("--title", default="handoffmon — handoff risk report", show_default=True, help="Page title.")
def report(refit_json: str, out: str, truth_path: str | None, title: str) -> None:
    """Render REFIT_JSON (from `handoffmon refit` or `handoffmon demo`) as one offline HTML page."""
    from handoffmon.refit.result import RefitResult
    from handoffmon.report import render_report

    try:
        result = RefitResult.from_json(Path(refit_json).read_text(encoding="utf-8"), source=refit_json)
    except HandoffmonError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    html = render_report(result, truth=_read_truth(truth_path), title=title)
    target = Path(out)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(target)
    click.echo(f"wrote {target} ({len(html) // 1024} KiB, {len(result.rules)} fits)")
