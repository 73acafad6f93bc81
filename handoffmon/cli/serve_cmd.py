"""``handoffmon serve``: run the OpenAI-compatible monitoring proxy in front of an upstream router."""

from __future__ import annotations

import os

import click

from handoffmon.cli.exits import fail
from handoffmon.cli.listen import cannot_listen
from handoffmon.config import HandoffmonConfig, load_config
from handoffmon.errors import ConfigError

STARTUP_FAILURE = 3
"""uvicorn's exit status when the server could not start (``uvicorn.config.STARTUP_FAILURE``):
handoffmon's 3 means "flagged", so serve reports it as an error (1) instead."""


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's levels (``uvicorn.config.LOG_LEVELS``): another name was a KeyError traceback
from inside uvicorn, after the app was built and the banner printed."""


@click.command("serve")
@click.option("--upstream", help="Upstream OpenAI-compatible base URL (overrides proxy.upstream).")
@click.option("--host", help="Listen address (overrides proxy.host).")
@click.option("--port", type=int, help="Listen port (overrides proxy.port).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML/TOML config file.")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="uvicorn log level.",
)
def serve(
    upstream: str | None, host: str | None, port: int | None, config_path: str | None, log_level: str
) -> None:
    """Proxy /v1/* to UPSTREAM unchanged, monitoring chat completions; /metrics, /healthz, /readyz.

    Exit status 1 when the config is bad or the address cannot be listened on.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        config = load_config(config_path)
        overrides = {
            k: v for k, v in (("upstream", upstream), ("host", host), ("port", port)) if v is not None
        }
        if overrides:
            from handoffmon.config import config_from_mapping

            data = config.model_dump()
            data["proxy"] = {**data["proxy"], **overrides}
            config = config_from_mapping(data, source=f"{config_path or '<defaults>'} + command line")
        if not config.proxy.upstream:
            raise ConfigError("no upstream: pass --upstream URL or set proxy.upstream", key="proxy.upstream")
        from handoffmon.proxy.server import check_exposure, check_limits
        from handoffmon.proxy.server import serve as run

        source = f"{config_path or '<defaults>'}" + (" + command line" if overrides else "")
        check_exposure(config, source)  # config errors first: they are what the user must fix
        check_limits(config, source)
        host, port = config.proxy.host, config.proxy.port
        # before the app is built (seconds) and its banner printed: a busy port comes alone
        reason = cannot_listen(host, port)
        if reason is not None:
            fail(f"cannot listen on {host}:{port}: {reason}")
        _check_metrics_port(config, source)
        where = f"http://{host}:{port}/v1"
        upstream_url, backend = config.proxy.upstream, config.store.backend
        banner = f"handoffmon serve: {where} -> {upstream_url} (store: {backend})"
        # announced once the app (rules compiled, store opened) is built: a config error comes alone
        run(config, log_level=log_level, source=source, announce=lambda: click.echo(banner, err=True))
    except ConfigError as exc:
        fail(str(exc))
    except SystemExit as exc:
        if exc.code != STARTUP_FAILURE:
            raise
        fail("the server did not start (the reason is logged above)")


_ANY_HOST = frozenset({"", "0.0.0.0", "::"})
_HOST_FAULTS = ("name or service not known", "cannot assign requested address", "no address associated")


def _check_metrics_port(config: HandoffmonConfig, source: str) -> None:
    """``telemetry.metrics_port`` (the library-mode /metrics server the runtime also starts) must
    be free too, and not the proxy's own address: else the app fails after its banner, with
    uvicorn's traceback. Raises ``ConfigError`` naming the key."""
    tel, proxy = config.telemetry, config.proxy
    if not tel.metrics_port:  # unset, or 0: any free port
        return
    hosts = {tel.metrics_host, proxy.host}
    if tel.metrics_port == proxy.port and (len(hosts) == 1 or hosts & _ANY_HOST):
        raise ConfigError(
            f"{tel.metrics_port} is also proxy.port: serve answers /metrics on its own port; "
            "unset telemetry.metrics_port or pick another",
            key="telemetry.metrics_port",
            source=source,
        )
    reason = cannot_listen(tel.metrics_host, tel.metrics_port)
    if reason is not None:
        host_fault = reason.startswith(_HOST_FAULTS)  # as the runtime names it (exposure.serve_port)
        raise ConfigError(
            f"cannot serve /metrics on {tel.metrics_host}:{tel.metrics_port}: {reason}",
            key="telemetry.metrics_host" if host_fault else "telemetry.metrics_port",
            source=source,
        )
