"""A busy port ends `handoffmon serve` with exit 1 and one error line, before any banner."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.cli.exits import ExitCode
from handoffmon.cli.listen import cannot_listen


def test_cannot_listen_names_a_busy_port_and_passes_a_free_one() -> None:
    """A port someone listens on is "address already in use"; once closed it is free; 0 always is."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        assert cannot_listen("127.0.0.1", port) == "address already in use"
        assert cannot_listen("0.0.0.0", port) == "address already in use"  # covers 127.0.0.1
    assert cannot_listen("127.0.0.1", port) is None
    assert cannot_listen("127.0.0.1", 0) is None


def test_serve_on_a_busy_port_exits_1_without_the_banner() -> None:
    """Not the banner, uvicorn's errno 98 and exit 3 (FLAGGED): one error line and exit 1."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        args = ["serve", "--upstream", "http://127.0.0.1:9", "--host", "127.0.0.1", "--port", str(port)]
        res = CliRunner().invoke(main, args)
    assert res.exit_code == ExitCode.ERROR, res.output
    assert res.stderr == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_serve_reports_uvicorns_startup_failure_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port taken between the check and uvicorn's bind (uvicorn exits 3, its STARTUP_FAILURE)
    still ends with exit 1: 3 is handoffmon's "flagged"."""
    import handoffmon.proxy.server

    def startup_failure(*args: object, **kwargs: object) -> None:
        raise SystemExit(3)

    monkeypatch.setattr(handoffmon.proxy.server, "serve", startup_failure)
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed
    res = CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9", "--port", str(port)])
    assert res.exit_code == ExitCode.ERROR and "the server did not start" in res.stderr, res.output


def test_serve_with_a_busy_metrics_port_exits_1_naming_the_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """telemetry.metrics_port taken: before, the banner, then uvicorn's traceback of the runtime's
    ConfigError and "the server did not start (the reason is logged above)"."""
    cfg = tmp_path / "h.yaml"
    with socket.create_server(("127.0.0.1", 0)) as held, socket.create_server(("127.0.0.1", 0)) as proxy:
        port = held.getsockname()[1]
        proxy_port = proxy.getsockname()[1]
        proxy.close()
        cfg.write_text(f"telemetry:\n  metrics_port: {port}\n")
        args = ["serve", "--upstream", "http://127.0.0.1:9", "--port", str(proxy_port), "--config", str(cfg)]
        res = CliRunner().invoke(main, args)
    assert res.exit_code == ExitCode.ERROR, res.output
    assert "Traceback" not in res.output and "handoffmon serve:" not in res.stderr  # no banner
    assert res.stderr.startswith(f"error: {cfg}") and "'telemetry.metrics_port'" in res.stderr
    assert "address already in use" in res.stderr


def test_serve_refuses_a_metrics_port_equal_to_its_own_port(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    cfg = tmp_path / "h.yaml"
    cfg.write_text(f"telemetry:\n  metrics_port: {port}\n")
    args = ["serve", "--upstream", "http://127.0.0.1:9", "--port", str(port), "--config", str(cfg)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == ExitCode.ERROR, res.output
    assert "'telemetry.metrics_port'" in res.stderr and "is also proxy.port" in res.stderr


def test_serve_config_errors_are_error_lines_like_every_command() -> None:
    """'Error:' (click's exception) in serve, 'error:' everywhere else."""
    res = CliRunner().invoke(main, ["serve", "--upstream", "router:4000", "--port", "1"])
    assert res.exit_code == ExitCode.ERROR and res.stderr.startswith("error: ")


def test_serve_refuses_an_unknown_log_level_as_a_usage_error() -> None:
    """--log-level bogus: uvicorn's KeyError traceback after the app was built; now exit 2
    naming the option and the levels, before anything starts."""
    res = CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9", "--log-level", "bogus"])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "--log-level" in res.output and "warning" in res.output and "Traceback" not in res.output
    import uvicorn.config

    from handoffmon.cli.serve_cmd import LOG_LEVELS

    assert set(LOG_LEVELS) == set(uvicorn.config.LOG_LEVELS)


def test_serve_blames_a_metrics_host_that_is_no_address_here(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    for host in ("no-such-host.invalid", "192.0.2.1"):
        cfg = tmp_path / "h.yaml"
        cfg.write_text(f"telemetry:\n  metrics_port: 9\n  metrics_host: {host}\n")
        args = ["serve", "--upstream", "http://127.0.0.1:9", "--port", str(port), "--config", str(cfg)]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == ExitCode.ERROR, res.output
        assert "'telemetry.metrics_host'" in res.stderr and host in res.stderr, res.stderr


def test_serve_help_lists_the_log_levels_it_accepts() -> None:
    """`serve --help` showed `--log-level TEXT` and refused all but six names; it lists them."""
    res = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert res.exit_code == 0
    assert "--log-level [critical|error|warning|info|debug|trace]" in res.output
