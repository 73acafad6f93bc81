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
from handoffmon.cli.params import FiniteRange


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


def _port_taken(port: int | None, reason: str) -> click.ClickException:
    return click.ClickException(f"--serve {port}: cannot listen on 127.0.0.1:{port}: {reason}")


def _check_port_free(port: int) -> None:
    """Fail in a second on a busy ``--serve`` port, before importing litellm and building the
    world costs several seconds. The runtime binds the port itself afterwards (and reports a
    port taken in between the same way)."""
    from handoffmon.cli.listen import cannot_listen

    reason = cannot_listen("127.0.0.1", port)
    if reason is not None:
        raise _port_taken(port, reason)


def _check_out_dir(out_dir: str) -> None:
    """Make ``out_dir`` (as the outputs would) and fail now if files cannot be written there,
    not after the whole simulation."""
    from handoffmon.cli.exits import fail
    from handoffmon.cli.files import check_writable
    from handoffmon.errors import InputError

    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        check_writable(str(Path(out_dir) / "handoffmon-report.html"), "--out-dir")
    except OSError as exc:
        fail(f"--out-dir {out_dir}: cannot create it ({exc.strerror or exc})")
    except InputError as exc:
        fail(str(exc))


def _serve(world: Any, duration_s: float | None, refit_interval_s: float) -> None:
    server = world.runtime.metrics_server
    until = "until Ctrl-C" if duration_s is None else f"for {duration_s:.0f} s"
    click.echo(
        f"\nserving {server.url} with live traffic {until} (refit every {refit_interval_s:.0f} s)",
        err=True,
    )
    try:
        asyncio.run(_keep_driving(world, asyncio.Event(), duration_s))
    finally:
        world.monitor.flush(world.config.pipeline.shutdown_timeout_s)
        world.runtime.refit_now()


def _compare_routing(world: Any, outcome: Any) -> Any:
    """Both orders on as many fresh conversations as the initial run (``sim.routing_compare``)."""
    from handoffmon.sim.routing_compare import compare_routing

    click.echo("comparing fallback orders on fresh conversations (two more runs) ...", err=True)
    return compare_routing(world.settings, world.fleet, outcome.result, world.settings.conversations)


@click.command("demo")
@click.option(
    "--size",
    type=FiniteRange(min=0.01),
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
    type=FiniteRange(min=0),
    default=None,
    help="With --serve: stop the live traffic after this many seconds.",
)
@click.option(
    "--refit-interval",
    type=FiniteRange(min=1),
    default=15.0,
    show_default=True,
    help="With --serve: seconds between refits published as gauges.",
)
@click.option(
    "--compare-routing",
    is_flag=True,
    help="Then run the same fresh conversations twice, router's fallback order vs the risk-aware "
    "order from this run's refit, and report the adherence after fallbacks it saved.",
)
@click.option(
    "--shadow",
    "shadow_rate",
    type=FiniteRange(0, 1),
    default=0.0,
    show_default=True,
    help="Shadow continuation: this share of eligible turns is continued by a second model in the "
    "background; the refit gets experimental switch costs, compared with the planted ones.",
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
    compare_routing: bool,
    shadow_rate: float,
    progress: bool,
) -> None:
    """Simulate a fleet of models behind a real litellm Router and show what handoffmon finds.

    Planted prefix influence, susceptibility and decay are printed beside the refit's
    estimates; the HTML report is written to OUT_DIR/handoffmon-report.html.
    """
    if serve_port is not None:
        _check_port_free(serve_port)
    _check_out_dir(out_dir)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.errors import ConfigError
    from handoffmon.sim.demo import DemoSettings, build_world, close_world, run_initial, write_outputs
    from handoffmon.sim.summary import render_summary

    settings = DemoSettings(
        size=size, seed=seed, models=models, rules=rules, concurrency=concurrency, shadow_rate=shadow_rate
    )
    expected_turns = round(settings.conversations * settings.policy.mean_length())
    bar = _progress(expected_turns, progress)
    try:
        world = build_world(
            settings,
            metrics_port=serve_port,
            refit_interval_s=refit_interval if serve_port is not None else 0.0,
            on_turn=lambda: bar.update(1),
        )
    except ConfigError as exc:
        bar.close()
        reason = getattr(exc.__cause__, "strerror", None) or str(exc)
        raise _port_taken(serve_port, reason) from exc
    try:
        if world.runtime.metrics_server is not None:
            click.echo(f"metrics: {world.runtime.metrics_server.url}", err=True)
        outcome = run_initial(world)
        bar.close()
        world.driver.on_turn = None
        if serve_port is not None:
            from handoffmon.exporters import refit_publisher

            refit_publisher(world.runtime.exporters)(outcome.result)
        reordering = _compare_routing(world, outcome) if compare_routing else None
        paths = write_outputs(outcome, world, Path(out_dir), reordering=reordering)
        click.echo(render_summary(outcome, world.truth))
        if reordering is not None:
            click.echo(reordering.line())
        if outcome.shadow is not None:
            click.echo(outcome.shadow.line())
        click.echo(f"\nreport: {paths['report']}   refit: {paths['refit']}   truth: {paths['truth']}")
        if serve_port is not None:
            _serve(world, duration, refit_interval)
    finally:
        bar.close()
        close_world(world)
