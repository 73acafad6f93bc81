"""``handoffmon refit``: one-shot refit from SQLite, Prometheus or CSV counts, written as JSON."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from handoffmon.errors import HandoffmonError


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file and rename (``-`` = stdout)."""
    if path == "-":
        click.echo(text)
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)


@click.command("refit")
@click.option("--source", "source", required=True, help="sqlite:///PATH, prometheus://HOST:PORT or FILE.csv")
@click.option("--transitions", type=click.Path(dir_okay=False), help="transitions.csv to merge in")
@click.option("--window", help="Prometheus duration for increase(), e.g. 1h (default: counter totals)")
@click.option("--out", required=True, help="output JSON file ('-' for stdout)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="config file (buckets, refit)")
@click.option("--min-n", type=int, help="override refit.min_n")
@click.option("--confidence", type=float, help="override refit.confidence")
@click.option("--ridge", type=float, help="override refit.ridge")
def refit(
    source: str,
    transitions: str | None,
    window: str | None,
    out: str,
    config_path: str | None,
    min_n: int | None,
    confidence: float | None,
    ridge: float | None,
) -> None:
    """Refit handoff effects, π/σ, risk and Markov decay from SOURCE counts into --out JSON.

    Without --config the depth buckets are read off the bucket labels in the counts.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.config import RefitConfig, load_config
    from handoffmon.refit import refit as run
    from handoffmon.sources.spec import infer_buckets, load_source

    try:
        cfg = load_config(config_path) if config_path else None
        loaded = load_source(source, transitions=transitions, window=window)
        buckets = cfg.buckets if cfg else infer_buckets(loaded.counts)
        overrides = {"min_n": min_n, "confidence": confidence, "ridge": ridge}
        base = cfg.refit if cfg else None
        settings = RefitConfig.model_validate(
            {**(base.model_dump() if base else {}), **{k: v for k, v in overrides.items() if v is not None}}
        )
        result = run(
            loaded.counts, buckets=buckets, settings=settings, source=loaded.label, window_s=loaded.window_s
        )
        write_text_atomic(out, result.to_json())
    except (HandoffmonError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    fit = result.rules["all"]
    observed = [p for p in fit.pairs if p.observed]
    click.echo(
        f"refit: {len(result.rules) - 1} rule(s), {len(fit.models)} model(s), "
        f"{len(observed)} observed pair(s), {sum(p.significant for p in observed)} significant; "
        f"mu={fit.mu:.4f} r2={fit.r2:.3f} -> {out}",
        err=True,
    )
