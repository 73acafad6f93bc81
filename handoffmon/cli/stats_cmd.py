"""``handoffmon stats``: offline statistics (the switch matrix of an eval run)."""

from __future__ import annotations

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable
from handoffmon.cli.params import RESAMPLES_OPTION, FiniteRange
from handoffmon.cli.refit_cmd import adjusted_r2_text
from handoffmon.errors import HandoffmonError, NoDataError


@click.group("stats")
def stats() -> None:
    """Offline statistics."""


@stats.command("switch-matrix")
@click.option(
    "--scores", required=True, type=click.Path(dir_okay=False), help="episode,prefix_model,suffix_model,score"
)
@click.option("--out", required=True, help="output matrix.json ('-' for stdout)")
@RESAMPLES_OPTION
@click.option("--seed", type=int, help="RNG seed for reproducible intervals")
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=FiniteRange(0, 1, min_open=True, max_open=True),
    help="interval confidence level",
)
@click.option(
    "--ridge",
    default=1.0,
    show_default=True,
    type=FiniteRange(min=0),
    help="ridge strength of the π/σ decomposition (0: plain least squares)",
)
@click.option(
    "--min-n", default=20, show_default=True, type=click.IntRange(min=2), help="min paired episodes"
)
@click.option(
    "--fdr", default=0.05, show_default=True, type=FiniteRange(0, 1, min_open=True, max_open=True),
    help="Benjamini-Hochberg false-discovery rate of 'significant'",
)  # fmt: skip
def switch_matrix_cmd(
    scores: str,
    out: str,
    resamples: int,
    seed: int | None,
    confidence: float,
    ridge: float,
    min_n: int,
    fdr: float,
) -> None:
    """Paired BCa Δ per cell, BCa cell means and the π/σ decomposition of a switch matrix.

    Exit status 1 on a malformed SCORES file, 4 when it holds no rows (nothing is written then).
    """
    # 4 too when no prefix→suffix pair reaches --min-n paired episodes, as `eval switch-matrix`
    from handoffmon.cli.files import write_text_atomic
    from handoffmon.refit.switch_matrix import ScoreTable, switch_matrix
    from handoffmon.sources.csv import read_scores_csv

    try:
        check_writable(out, "--out")
        table = ScoreTable.from_rows(read_scores_csv(scores))
        result = switch_matrix(
            table,
            resamples=resamples,
            seed=seed,
            confidence=confidence,
            ridge=ridge,
            min_n=min_n,
            fdr=fdr,
            source=scores,
        )
        if not any(p.observed for p in result.fit.pairs):  # as `eval switch-matrix`: no Δ is no result
            raise NoDataError(
                f"{scores}: no prefix->suffix pair reached --min-n {min_n} paired episodes "
                f"({len(table.episodes)} episode(s), {len(table.models)} model(s)); "
                "add episodes or lower --min-n"
            )
        write_text_atomic(out, result.to_json())
    except HandoffmonError as exc:
        fail(str(exc), ExitCode.NO_DATA if isinstance(exc, NoDataError) else ExitCode.ERROR)
    fit = result.fit
    sig = sum(p.significant for p in fit.pairs)
    observed = sum(p.observed for p in fit.pairs)
    # adjusted, as `handoffmon refit` prints: the raw R² of a saturated fit (2 models) is 1.000
    r2 = adjusted_r2_text(fit.r2_adjusted)
    click.echo(
        f"switch matrix: {len(table.models)} models, {len(table.episodes)} episodes, "
        f"{sig}/{observed} observed pairs significant, adjusted r2={r2} -> {out}",
        err=True,
    )
