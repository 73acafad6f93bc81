"""``handoffmon refit``: one-shot refit from SQLite, Prometheus, CSV counts or turn logs, written as JSON."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from handoffmon.errors import HandoffmonError

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client import CollectorRegistry

    from handoffmon.config import HandoffmonConfig
    from handoffmon.refit.result import RefitResult


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file and rename (``-`` = stdout)."""
    if path == "-":
        click.echo(text)
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)


def refit_registry(result: RefitResult, config: HandoffmonConfig | None = None) -> CollectorRegistry:
    """A fresh registry holding only the refit gauges, set from ``result``.

    Same names, labels and label caps as the in-process exporter, so dashboards and
    alert rules work whether the gauges come from a replica or from a refit job.
    """
    from prometheus_client import CollectorRegistry, Gauge

    from handoffmon.config import HandoffmonConfig
    from handoffmon.exporters.cardinality import LabelGuard
    from handoffmon.exporters.refit_series import REFIT_GAUGES, refit_series

    registry = CollectorRegistry()
    series = refit_series(result, LabelGuard.from_config(config or HandoffmonConfig()))
    for spec in REFIT_GAUGES:
        gauge = Gauge(spec.name, spec.help, spec.labels, registry=registry)
        for labels, value in series[spec.name].items():
            (gauge.labels(*labels) if labels else gauge).set(value)
    return registry


def publish_gauges(
    result: RefitResult,
    config: HandoffmonConfig | None,
    *,
    metrics_file: str | None = None,
    pushgateway: str | None = None,
) -> None:
    """Write the refit gauges to a textfile-collector file and/or push them to a Pushgateway.

    Raises:
        OSError: the file cannot be written or the Pushgateway is unreachable/refuses.
    """
    from prometheus_client import push_to_gateway, write_to_textfile

    registry = refit_registry(result, config)
    if metrics_file:
        write_to_textfile(metrics_file, registry)
    if pushgateway:
        push_to_gateway(pushgateway, job="handoffmon_refit", registry=registry, timeout=10)


@click.command("refit")
@click.option(
    "--source",
    "source",
    required=True,
    help="sqlite:///PATH, prometheus://HOST:PORT, cells.csv or a turn log (.jsonl, .csv, .parquet)",
)
@click.option("--transitions", type=click.Path(dir_okay=False), help="transitions.csv to merge in")
@click.option("--window", help="Prometheus duration for increase(), e.g. 1h (default: counter totals)")
@click.option("--out", required=True, help="output JSON file ('-' for stdout)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="config file (buckets, refit)")
@click.option("--min-n", type=int, help="override refit.min_n")
@click.option("--confidence", type=float, help="override refit.confidence")
@click.option("--prior-sd-pp", type=float, help="override refit.prior_sd_pp (decomposition prior SD, pp)")
@click.option("--fdr", type=float, help="override refit.fdr (Benjamini-Hochberg level of 'significant')")
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    help="also write the refit gauges in Prometheus text format (node_exporter textfile collector)",
)
@click.option("--compact", is_flag=True, help="write JSON without indentation (about half the size)")
@click.option(
    "--pushgateway", help="also push the refit gauges to this Pushgateway (host:port), job handoffmon_refit"
)
def refit(
    source: str,
    transitions: str | None,
    window: str | None,
    out: str,
    config_path: str | None,
    min_n: int | None,
    confidence: float | None,
    prior_sd_pp: float | None,
    fdr: float | None,
    metrics_file: str | None,
    compact: bool,
    pushgateway: str | None,
) -> None:
    """Refit handoff effects, π/σ, risk and Markov decay from SOURCE counts into --out JSON.

    Without --config the depth buckets are read off the bucket labels in the counts.
    With many replicas, run this as a job against Prometheus and publish the gauges
    with --metrics-file or --pushgateway (each replica's own periodic refit would only
    see its local counts).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.config import RefitConfig, load_config
    from handoffmon.refit import refit as run
    from handoffmon.sources.spec import infer_buckets, load_source

    try:
        cfg = load_config(config_path) if config_path else None
        loaded = load_source(
            source, transitions=transitions, window=window, buckets=cfg.buckets if cfg else None
        )
        buckets = cfg.buckets if cfg else infer_buckets(loaded.counts)
        overrides = {"min_n": min_n, "confidence": confidence, "prior_sd_pp": prior_sd_pp, "fdr": fdr}
        base = cfg.refit if cfg else None
        settings = RefitConfig.model_validate(
            {**(base.model_dump() if base else {}), **{k: v for k, v in overrides.items() if v is not None}}
        )
        result = run(
            loaded.counts, buckets=buckets, settings=settings, source=loaded.label, window_s=loaded.window_s
        )
        write_text_atomic(out, result.to_json(indent=None if compact else 2))
        if metrics_file or pushgateway:
            publish_gauges(result, cfg, metrics_file=metrics_file, pushgateway=pushgateway)
    except (HandoffmonError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    fit = result.rules["all"]
    observed = [p for p in fit.pairs if p.observed]
    click.echo(
        f"refit: {len(result.rules) - 1} rule(s), {len(fit.models)} model(s), "
        f"{len(observed)} observed pair(s), {sum(p.significant for p in observed)} significant; "
        f"mu={fit.mu:.4f} adjusted r2={fit.r2_adjusted:.3f} -> {out}",
        err=True,
    )
