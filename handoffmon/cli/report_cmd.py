"""``handoffmon report REFIT.json --out report.html``: the refit as a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable, write_text_atomic
from handoffmon.errors import HandoffmonError, InputError, parse_json_document


def _read_truth(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = parse_json_document(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read planted truth: {exc}")
    except InputError as exc:  # a syntax error, a key given twice, nesting too deep
        fail(str(exc))
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        fail(f"{path}: not a truth document (expected a 'models' mapping)")
    try:
        _check_truth(data, path)
    except InputError as exc:
        fail(str(exc))
    return data


OTHER_REPORTS = {
    "handoffmon.switch_matrix": (
        "a switch matrix (from `handoffmon eval switch-matrix` or `stats switch-matrix`); its HTML "
        "report is `handoffmon eval switch-matrix ... --html PATH` (rerun with the same --cache, "
        "its cells are read back, not generated again)"
    ),
    "handoffmon.eval": (
        "an eval run result (from `handoffmon eval run`); its HTML report is `eval run ... --html "
        "PATH`, or with production overlaid `handoffmon eval compare ... --html PATH`"
    ),
}
"""Documents of other commands that have HTML reports of their own, by their ``schema``."""


def _refuse_other_reports(data: Any, path: str) -> None:
    """Exit 1 pointing to the right command when ``data`` is another command's document."""
    schema = data.get("schema") if isinstance(data, dict) else None
    what = OTHER_REPORTS.get(schema) if isinstance(schema, str) else None
    if what is not None:
        fail(f"{path}: not a handoffmon.refit document: this is {what}")


def _check_truth(data: dict[str, Any], path: str) -> None:
    """The keys the report draws are of the types ``Truth.to_dict`` writes (others are ignored):
    a model entry of another type was a traceback, a planted value of another type no marker."""
    from handoffmon.evals.docread import DocReader

    doc = DocReader(path)
    if "mu" in data:
        doc.number(data["mu"], "mu")
    for name, entry in data["models"].items():
        where = f"models.{name}"
        entry = doc.mapping(entry, where)
        for key in ("prefix_influence", "suffix_susceptibility"):
            if key in entry:
                doc.number(entry[key], f"{where}.{key}")
        for key in ("p_tf", "p_ft", "stationary"):
            for rule, value in doc.mapping(entry.get(key, {}), f"{where}.{key}").items():
                doc.probability(value, f"{where}.{key}.{rule}")
    for i, cost in enumerate(doc.array(data.get("switch_costs", []), "switch_costs")):
        cost = doc.mapping(cost, f"switch_costs[{i}]")
        for key in ("rule", "prefix_model", "model"):
            doc.string(doc.key(cost, key, f"switch_costs[{i}]"), f"switch_costs[{i}].{key}")
        doc.number(doc.key(cost, "planted", f"switch_costs[{i}]"), f"switch_costs[{i}].planted")


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
    """Render REFIT_JSON (from `handoffmon refit` or `handoffmon demo`) as one offline HTML page.

    Exit status 1 on an unreadable or malformed REFIT_JSON or --truth, or an --out that cannot
    be written; 4 when REFIT_JSON holds no fit or no model. Nothing is written then.
    """
    from handoffmon.refit.result import RefitResult
    from handoffmon.report import render_report

    try:
        check_writable(out, "--out")
        data = parse_json_document(Path(refit_json).read_text(encoding="utf-8"), refit_json)
        _refuse_other_reports(data, refit_json)
        result = RefitResult.from_dict(data, source=refit_json)
    except UnicodeDecodeError as exc:
        fail(f"{refit_json}: not a handoffmon.refit document (not UTF-8 text: {exc.reason})")
    except RecursionError:
        fail(f"{refit_json}: not a handoffmon.refit document (nested too deeply to read)")
    except HandoffmonError as exc:
        fail(str(exc))
    if not result.rules:  # an empty page is no report: say so instead of writing one
        fail(
            f"{refit_json}: the refit holds no fit (no rule was refitted); nothing written", ExitCode.NO_DATA
        )
    if not any(f.models or f.pairs or f.curves or f.markov for f in result.rules.values()):
        fail(
            f"{refit_json}: the refit holds no model (no checked turn was counted); nothing written",
            ExitCode.NO_DATA,
        )
    truth = _read_truth(truth_path)
    fitted = {m for f in result.rules.values() for m in f.models}
    if truth is not None and not fitted & set(truth["models"]):
        # markers keyed by model name: a truth from another fleet would silently draw none
        fail(
            f"{truth_path}: the planted truth names none of the refit's {len(fitted)} models; nothing written"
        )
    html = render_report(result, truth=truth, title=title)
    try:
        write_text_atomic(out, html.rstrip("\n"))
    except HandoffmonError as exc:
        fail(str(exc))
    click.echo(f"wrote {out} ({len(html) // 1024} KiB, {len(result.rules)} fits)", err=True)  # as refit
