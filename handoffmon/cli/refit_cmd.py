"""``handoffmon refit``: one-shot refit from SQLite, Prometheus, CSV counts or turn logs, written as JSON."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable, replace_text, write_text_atomic
from handoffmon.cli.params import Finite
from handoffmon.errors import HandoffmonError, NoDataError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from prometheus_client import CollectorRegistry

    from handoffmon.config import HandoffmonConfig, RefitConfig
    from handoffmon.refit.result import PairEffect, RefitResult


def refit_registry(result: RefitResult, config: HandoffmonConfig | None = None) -> CollectorRegistry:
    """A fresh registry holding only the refit gauges, set from ``result``.

    Same names, labels and label caps as the in-process exporter, so dashboards and
    alert rules work whether the gauges come from a replica or from a refit job; the label
    ``fit="pooled"`` says a job fitted them over the deployment's counts (a replica's own
    refit says ``fit="local"``), and the alert rules stand on it where it is fresh.
    """
    from prometheus_client import CollectorRegistry, Gauge

    from handoffmon.config import HandoffmonConfig
    from handoffmon.exporters.refit_series import POOLED, REFIT_GAUGES, refit_series
    from handoffmon.labels import LabelGuard

    registry = CollectorRegistry()
    series = refit_series(result, LabelGuard.from_config(config or HandoffmonConfig()), POOLED)
    for spec in REFIT_GAUGES:
        gauge = Gauge(spec.name, spec.help, spec.labels, registry=registry)
        for labels, value in series[spec.name].items():
            (gauge.labels(*labels) if labels else gauge).set(value)
    return registry


REFIT_FAILURE_GAUGE = "handoffmon_refit_last_failure_timestamp_seconds"


def _push_key(labels: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """``--push-label KEY=VALUE`` pairs → (job, grouping key); job defaults to ``handoffmon``."""
    key: dict[str, str] = {}
    for item in labels:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise HandoffmonError(f"--push-label {item!r}: expected KEY=VALUE")
        key[name] = value
    return key.pop("job", "handoffmon"), key


def publish_gauges(
    result: RefitResult,
    config: HandoffmonConfig | None,
    *,
    metrics_file: str | None = None,
    pushgateway: str | None = None,
    push_labels: tuple[str, ...] = (),
) -> None:
    """Write the refit gauges to a textfile-collector file and/or push them to a Pushgateway.

    The push replaces the group ``job``/``push_labels`` (PUT) on a private registry, so the
    Pushgateway holds exactly this refit. Scrape it with ``honor_labels: true``: the pushed
    ``job`` (default ``handoffmon``, the deployment's scrape job) and labels such as
    ``namespace`` are then the series' identity, which the alert rules join on.

    Raises:
        OSError: the file cannot be written or the Pushgateway is unreachable/refuses.
    """
    from prometheus_client import push_to_gateway, write_to_textfile

    registry = refit_registry(result, config)
    if metrics_file:
        write_to_textfile(metrics_file, registry)
    if pushgateway:
        job, key = _push_key(push_labels)
        url, handler = push_target(pushgateway)
        push_to_gateway(url, job=job, grouping_key=key, registry=registry, timeout=10, handler=handler)


def push_target(pushgateway: str) -> tuple[str, Callable[..., Callable[[], None]]]:
    """The ``--pushgateway`` address without credentials, and the prometheus_client handler that
    sends them: ``https://user:password@host:9091`` pushes with HTTP basic auth (the
    Pushgateway's ``--web.config.file``); the credentials appear in no message.

    Raises:
        SourceError: the address's port is not a number.
    """
    from prometheus_client.exposition import basic_auth_handler, default_handler

    from handoffmon.sources.prometheus import url_credentials

    url, credentials = url_credentials(pushgateway if "://" in pushgateway else f"http://{pushgateway}")
    if credentials is None:
        return pushgateway, default_handler
    user, password = credentials

    def handler(
        url: str, method: str, timeout: float | None, headers: list[tuple[str, str]], data: bytes
    ) -> Callable[[], None]:
        return basic_auth_handler(url, method, timeout, headers, data, user, password)

    return url, handler


def failure_registry(at: float) -> CollectorRegistry:
    """A fresh registry holding only the failed-refit gauge, set to ``at`` (what a failed
    ``refit --pushgateway`` pushes and ``--metrics-file`` adds; the metrics reference lists it
    from here)."""
    from prometheus_client import CollectorRegistry, Gauge

    from handoffmon.exporters.refit_series import FIT_LABEL, POOLED

    registry = CollectorRegistry()
    gauge = Gauge(REFIT_FAILURE_GAUGE, "UNIX time of the last failed refit.", (FIT_LABEL,), registry=registry)
    gauge.labels(POOLED).set(at)  # the same fit label as the job's success gauges (RefitFailing)
    return registry


def push_failure(pushgateway: str, push_labels: tuple[str, ...], at: float) -> None:
    """Record a failed refit in the Pushgateway group without touching its last success.

    POST (``pushadd``) replaces only this gauge, so the success gauges of the last good refit
    stay and RefitFailing compares the two timestamps.
    """
    from prometheus_client import pushadd_to_gateway

    job, key = _push_key(push_labels)
    url, handler = push_target(pushgateway)
    registry = failure_registry(at)
    pushadd_to_gateway(url, job=job, grouping_key=key, registry=registry, timeout=10, handler=handler)


def write_failure_file(path: str, at: float) -> None:
    """Record a failed refit in the ``--metrics-file``, as :func:`push_failure` does in the
    Pushgateway: the last success's gauges in the file stay, the failure gauge is added (or
    replaced), so RefitFailing compares the two timestamps. Written via a temp file and rename,
    so the textfile collector never reads half a file.

    Raises:
        OSError: the file cannot be read or written.
    """
    from prometheus_client import generate_latest

    target = Path(path)
    kept = ""
    if target.exists():
        own = (REFIT_FAILURE_GAUGE, f"# HELP {REFIT_FAILURE_GAUGE} ", f"# TYPE {REFIT_FAILURE_GAUGE} ")
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = "".join(line for line in lines if not line.startswith(own))
    replace_text(path, kept + generate_latest(failure_registry(at)).decode())


MATCH_OPTION = click.option(
    "--match",
    metavar="SELECTOR",
    help='Prometheus source only: label selector of the deployment to read, e.g. {job="prod",namespace="llm"}'
    " (default: every series, all deployments summed)",
)


@click.command("refit")
@click.option(
    "--source",
    "source",
    required=True,
    help="sqlite://PATH (sqlite://handoffmon.db relative, sqlite:///abs/path.db absolute), "
    "prometheus://HOST:PORT, cells.csv or a turn log (.jsonl, .csv, .parquet)",
)
@click.option("--transitions", type=click.Path(dir_okay=False), help="transitions.csv to merge in")
@MATCH_OPTION
@click.option("--window", help="Prometheus duration, e.g. 1h: count its increments (default: counter totals)")
@click.option("--out", required=True, help="output JSON file ('-' for stdout)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="config file (buckets, refit)")
@click.option("--min-n", type=int, help="override refit.min_n")
@click.option("--confidence", type=Finite(), help="override refit.confidence")
@click.option("--prior-sd-pp", type=Finite(), help="override refit.prior_sd_pp (decomposition prior SD, pp)")
@click.option("--fdr", type=Finite(), help="override refit.fdr (Benjamini-Hochberg level of 'significant')")
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    help="also write the refit gauges in Prometheus text format (node_exporter textfile collector; "
    "relabel job there, see the refit-jobs guide); a failed refit adds its time",
)
@click.option("--compact", is_flag=True, help="write JSON without indentation (about half the size)")
@click.option(
    "--pushgateway",
    help="also push the refit gauges to this Pushgateway (host:port, or a URL; "
    "https://user:password@host:port pushes with basic auth); a failed refit pushes its time",
)
@click.option(
    "--push-label",
    "push_labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pushgateway grouping label (repeatable); job=… sets the job (default: handoffmon)",
)
def refit(
    source: str,
    transitions: str | None,
    window: str | None,
    match: str | None,
    out: str,
    config_path: str | None,
    min_n: int | None,
    confidence: float | None,
    prior_sd_pp: float | None,
    fdr: float | None,
    metrics_file: str | None,
    compact: bool,
    pushgateway: str | None,
    push_labels: tuple[str, ...],
) -> None:
    """Refit handoff effects, π/σ, risk and Markov decay from SOURCE counts into --out JSON.

    Without --config the depth buckets are read off the bucket labels in the counts.
    With many replicas, run this as a job against Prometheus and publish the gauges
    with --metrics-file or --pushgateway (each replica's own periodic refit would only
    see its local counts). Exit status 4 when the source holds no checks: no refit is
    written, so a stale refit.json keeps aging and RefitStale fires; a failed refit adds its
    time to --metrics-file and pushes it to --pushgateway (RefitFailing).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # a bad flag is no failed refit: nothing is pushed or written for it, and it stops before
    # the source is read (a malformed --push-label was found only after the refit, then used
    # to push the failure too)
    if push_labels and not pushgateway:
        raise click.UsageError("--push-label needs --pushgateway")
    try:
        _push_key(push_labels)
    except HandoffmonError as exc:
        raise click.BadParameter(str(exc).removeprefix("--push-label "), param_hint="--push-label") from exc
    from handoffmon.config import load_config
    from handoffmon.refit import refit as run
    from handoffmon.sources.spec import infer_buckets, load_source

    try:
        cfg = load_config(config_path) if config_path else None
        # bad flags and outputs stop before the source is read (a Prometheus query can take long)
        overrides = {"min_n": min_n, "confidence": confidence, "prior_sd_pp": prior_sd_pp, "fdr": fdr}
        settings = _settings(cfg.refit if cfg else None, overrides)
        check_writable(out, "--out")
        check_writable(metrics_file, "--metrics-file")
        loaded = load_source(
            source,
            transitions=transitions,
            window=window,
            match=match,
            buckets=cfg.buckets if cfg else None,
        )
        if not any(loaded.counts.checks.values()):  # no key, or only keys counting 0 checks
            raise NoDataError(f"{loaded.label}: no checks to refit (empty store or stale scrape target)")
        buckets = cfg.buckets if cfg else infer_buckets(loaded.counts)
        result = run(
            loaded.counts,
            buckets=buckets,
            settings=settings,
            source=loaded.label,
            window_s=loaded.window_s,
            exact=loaded.exact,
            repair=loaded.repair,
        )
        write_text_atomic(out, result.to_json(indent=None if compact else 2))
        if metrics_file or pushgateway:
            publish_gauges(
                result, cfg, metrics_file=metrics_file, pushgateway=pushgateway, push_labels=push_labels
            )
    except (HandoffmonError, ValueError, OSError) as exc:
        import time

        failed_at = time.time()
        if metrics_file:  # a refit with no data failed too: RefitFailing must see it
            try:
                write_failure_file(metrics_file, failed_at)
            except OSError as file_exc:
                click.echo(f"error: could not write the failure to {metrics_file}: {file_exc}", err=True)
        if pushgateway:
            try:
                push_failure(pushgateway, push_labels, failed_at)
            except (HandoffmonError, OSError) as push_exc:
                click.echo(f"error: could not push the failure: {push_exc}", err=True)
        fail(str(exc), ExitCode.NO_DATA if isinstance(exc, NoDataError) else ExitCode.ERROR)
    fit = result.rules["all"]
    observed = [p for p in fit.pairs if p.observed]
    # not estimable (one model, no observed pair, as many parameters as pairs): said, not "nan"
    mu = f"{fit.mu:.4f}" if math.isfinite(fit.mu) else "n/a (no observed pair)"
    r2 = adjusted_r2_text(fit.r2_adjusted)
    click.echo(
        f"refit: {len(result.rules) - 1} rule(s), {len(fit.models)} model(s), "
        f"{len(observed)} observed pair(s), {sum(p.significant for p in observed)} significant; "
        f"mu={mu} adjusted r2={r2} -> {out}",
        err=True,
    )
    if not observed:
        click.echo(_too_thin_hint(fit.pairs, settings.min_n), err=True)
    for warning in _repair_warnings(result):
        click.echo(warning, err=True)


def _repair_warnings(result: RefitResult) -> list[str]:
    """One warning per kind of repaired input (cells, shadow pair cells), naming the first."""
    kinds = (
        (
            result.input_repaired_cells, result.input_repairs, "cell(s)", "checks", "intervals",
            "input_repairs",
        ),
        (
            result.shadow_input_repaired_cells, result.shadow_input_repairs, "shadow pair cell(s)",
            "paired tables", "switch-cost intervals", "shadow_input_repairs",
        ),
    )  # fmt: skip
    return [
        f"warning: {count} {what} had cluster sums that contradict their {against} and were read "
        f"conservatively (wider {widened}), first {repairs[0].rule} {repairs[0].prefix_model}->"
        f"{repairs[0].model} ({', '.join(repairs[0].violated)}): see {key}"
        for count, repairs, what, against, widened, key in kinds
        if count
    ]


def adjusted_r2_text(r2_adjusted: float) -> str:
    """A fit's adjusted R² as the summaries print it: "n/a (too few pairs)" when it is not
    estimable (as many parameters as pairs), never "nan"."""
    return f"{r2_adjusted:.3f}" if math.isfinite(r2_adjusted) else "n/a (too few pairs)"


def _settings(base: RefitConfig | None, overrides: dict[str, float | int | None]) -> RefitConfig:
    """``refit.*`` of the config (or the defaults) with the command-line overrides; a bad value
    raises ``ConfigError`` naming the option (``--min-n``), as a bad config key names the key."""
    from pydantic import ValidationError

    from handoffmon.config import RefitConfig
    from handoffmon.errors import ConfigError

    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return RefitConfig.model_validate({**(base.model_dump() if base else {}), **given})
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        where = f"--{name.replace('_', '-')} {given[name]}" if name in given else f"refit.{name}"
        raise ConfigError(f"{where}: {err['msg']}") from exc


def _too_thin_hint(pairs: Sequence[PairEffect], min_n: int) -> str:
    """Why Δ, π, σ and mu are NaN: no handoff cell (and its baseline) reached ``refit.min_n``."""
    biggest = max(pairs, key=lambda p: p.n, default=None)
    largest = f"{biggest.n} ({biggest.prefix_model}->{biggest.model})" if biggest else "0 (no handoffs)"
    return (
        f"hint: no handoff pair reached refit.min_n={min_n} checked turns in its cell and its "
        f"same-author baseline (largest handoff cell: {largest}), so no Δ, π, σ or mu is estimated "
        "(adherence by depth and the Markov decay are); collect more traffic or lower --min-n"
    )
