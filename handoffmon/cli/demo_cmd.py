"""``handoffmon demo``: simulated fleet behind a real litellm Router, monitored, refit, reported."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from handoffmon._extras import requires_extra


def _progress(total_turns: int, enabled: bool) -> Any:
    with requires_extra("demo", "handoffmon demo"):
        from tqdm import tqdm

    return tqdm(
        total=total_turns,
        unit="turn",
        file=sys.stderr,
        disable=not enabled,
        smoothing=0.1,
        desc="simulated traffic",
        leave=False,
    )


def _serving_exporters(port: int, holder: dict[str, Any]) -> Any:
    """Exporter factory for ``--serve``: Prometheus on a fresh registry, served on ``port``."""

    def build(config: Any) -> list[Any]:
        from handoffmon.exporters import build_exporters, prometheus_exporter
        from handoffmon.exporters.serving import start_metrics_server

        exporters = build_exporters(config)
        try:
            holder["server"] = start_metrics_server(prometheus_exporter(exporters).registry, port)
        except OSError as exc:
            raise click.ClickException(
                f"--serve {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
            ) from exc
        return exporters

    return build


async def _keep_driving(world: Any, stop: asyncio.Event, duration_s: float | None) -> None:
    """Run further batches of fresh conversations until a signal arrives or ``duration_s`` passes."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if duration_s is not None:
        loop.call_later(duration_s, stop.set)
    start = world.settings.conversations
    batch = max(world.settings.concurrency * 2, 20)
    while not stop.is_set():
        await world.driver.run(batch, start=start, stop=stop)
        start += batch


def _serve(world: Any, holder: dict[str, Any], duration_s: float | None, refit_interval_s: float) -> None:
    from handoffmon.refit.periodic import PeriodicRefit

    periodic = PeriodicRefit.for_monitor(world.monitor, interval_s=refit_interval_s)
    periodic.start()
    until = "until Ctrl-C" if duration_s is None else f"for {duration_s:.0f} s"
    click.echo(
        f"\nserving {holder['server'].url} with live traffic {until} (refit every {refit_interval_s:.0f} s)",
        err=True,
    )
    try:
        asyncio.run(_keep_driving(world, asyncio.Event(), duration_s))
    finally:
        periodic.stop()
        periodic.run_once()


@click.command("demo")
@click.option(
    "--size",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Scale of the simulated traffic (1.0 ≈ 600 conversations, ~4,600 turns).",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seeds the fleet, traffic and replies.")
@click.option(
    "--models",
    type=click.IntRange(2, 12),
    default=6,
    show_default=True,
    help="Fleet size (6 = the hand-planted fleet with one risky model).",
)
@click.option(
    "--rules",
    type=click.IntRange(1, 7),
    default=4,
    show_default=True,
    help="Rules to check (5: + keyword, 6: + JSON envelope, 7: + answer kept when challenged).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 512),
    default=32,
    show_default=True,
    help="Conversations in flight at once.",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Where handoffmon-report.html, handoffmon-refit.json and handoffmon-truth.json go.",
)
@click.option(
    "--serve",
    "serve_port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Keep /metrics up on this port with live traffic (until Ctrl-C/SIGTERM or --duration).",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0),
    default=None,
    help="With --serve: stop the live traffic after this many seconds.",
)
@click.option(
    "--refit-interval",
    type=click.FloatRange(min=1),
    default=15.0,
    show_default=True,
    help="With --serve: seconds between refits published as gauges.",
)
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bar on stderr.")
def demo(
    size: float,
    seed: int,
    models: int,
    rules: int,
    concurrency: int,
    out_dir: str,
    serve_port: int | None,
    duration: float | None,
    refit_interval: float,
    progress: bool,
) -> None:
    """Simulate a fleet of models behind a real litellm Router and show what handoffmon finds.

    Planted prefix influence, susceptibility and decay are printed beside the refit's
    estimates; the HTML report is written to OUT_DIR/handoffmon-report.html.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.sim.demo import DemoSettings, build_world, close_world, run_initial, write_outputs
    from handoffmon.sim.summary import render_summary

    settings = DemoSettings(size=size, seed=seed, models=models, rules=rules, concurrency=concurrency)
    expected_turns = round(settings.conversations * settings.policy.mean_length())
    bar = _progress(expected_turns, progress)
    holder: dict[str, Any] = {}
    exporters = _serving_exporters(serve_port, holder) if serve_port is not None else None
    world = build_world(settings, exporters=exporters, on_turn=lambda: bar.update(1))
    try:
        if "server" in holder:
            click.echo(f"metrics: {holder['server'].url}", err=True)
        outcome = run_initial(world)
        bar.close()
        world.driver.on_turn = None
        if serve_port is not None:
            from handoffmon.exporters import refit_publisher

            refit_publisher(world.monitor.exporters)(outcome.result)
        paths = write_outputs(outcome, world, Path(out_dir))
        click.echo(render_summary(outcome, world.truth))
        click.echo(f"\nreport: {paths['report']}   refit: {paths['refit']}   truth: {paths['truth']}")
        if serve_port is not None:
            _serve(world, holder, duration, refit_interval)
    finally:
        bar.close()
        close_world(world)
        if "server" in holder:
            holder["server"].close()
