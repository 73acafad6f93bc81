"""A real Prometheus server (Debian ``prometheus``) for tests: temp TSDB, loopback port, HTTP API helpers.

Usage::

    with prometheus_server(tmp_path, targets=["127.0.0.1:9101"], rule_files=[rules]) as prom:
        prom.wait_for(lambda: prom.query("up") != [], timeout_s=10)
        prom.query('sum(handoffmon_turns_total)')

Skips locally (fails under ``CI=true``) when the binary is missing.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port, require_binary


class PromQueryError(AssertionError):
    """Prometheus answered a query with an error (bad PromQL, timeout)."""


@dataclass
class PromServer:
    """A running Prometheus process and thin wrappers over its HTTP API."""

    url: str
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request of these helpers (basic auth when the server requires it)."""

    def api(self, path: str, params: dict[str, str] | None = None, timeout_s: float = 10.0) -> Any:
        """GET ``/api/v1/<path>``; returns ``data`` or raises ``PromQueryError`` with the error text."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{self.url}/api/v1/{path}{query}", headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise PromQueryError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query at ``at`` (UNIX seconds; default now); the result list (vector) or
        ``[scalar]`` wrapped in a list."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self.api("query", params)
        result = data["result"]
        return result if data["resultType"] in ("vector", "matrix") else [{"value": result}]

    def alerts(self) -> list[dict[str, Any]]:
        """Active (pending and firing) alerts."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule."""
        out = []
        for group in self.api("rules")["groups"]:
            for rule in group["rules"]:
                out.append((rule["name"], rule.get("health", ""), rule.get("lastError", "")))
        return out

    def target_health(self) -> str:
        """One line per scrape target: health, share of scrapes up over the last 2 minutes,
        last scrape duration and error (for assertion messages: a target whose scrapes time
        out has stale series, which reads as "no data")."""
        up = {s["metric"].get("instance"): s["value"][1] for s in self.query("avg_over_time(up[2m])")}
        lines = []
        for t in self.api("targets")["activeTargets"]:
            instance = t["labels"].get("instance")
            lines.append(
                f"{t['scrapeUrl']}: {t['health']}, up {up.get(instance, '?')} of scrapes in 2m, "
                f"last {t['lastScrapeDuration']:.2f} s of {t.get('scrapeTimeout', '?')} "
                f"{t.get('lastError', '')}"
            )
        return "\n".join(lines)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
        """Poll ``predicate`` until it is true or ``timeout_s`` passes; returns its last value."""
        deadline = time.monotonic() + timeout_s
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval_s)

    def log_tail(self, n: int = 30) -> str:
        """Last lines of the server's log (for assertion messages)."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def write_config(
    path: Path,
    targets: Sequence[str],
    rule_files: Sequence[Path] = (),
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    job: str = "handoffmon",
    scrape_configs: Sequence[dict[str, Any]] | None = None,
    alertmanagers: Sequence[str] = (),
) -> Path:
    """A minimal prometheus.yml scraping ``targets`` as one job (or ``scrape_configs`` as given),
    sending alerts to ``alertmanagers`` (``host:port``) when any."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": list(scrape_configs)
        if scrape_configs is not None
        else [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@contextmanager
def prometheus_server(
    tmp_path: Path,
    targets: Sequence[str],
    rule_files: Sequence[Path] = (),
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    start_timeout_s: float = 30.0,
    scrape_configs: Sequence[dict[str, Any]] | None = None,
    alertmanagers: Sequence[str] = (),
    basic_auth: tuple[str, str, str] | None = None,
) -> Iterator[PromServer]:
    """Start Prometheus on a free loopback port with a temp TSDB; stop it on exit.

    Args:
        tmp_path: directory for the config, the TSDB and the log.
        targets: ``host:port`` scrape targets (job ``handoffmon``).
        rule_files: rule files to load (absolute paths).
        scrape_interval: global scrape interval.
        evaluation_interval: rule evaluation interval.
        start_timeout_s: how long to wait for ``/-/ready``.
        scrape_configs: full scrape configs instead of one job over ``targets``.
        alertmanagers: Alertmanager ``host:port`` addresses to send alerts to.
        basic_auth: (user, password, its bcrypt hash): every endpoint then requires HTTP basic
            auth (``--web.config.file``); the helpers send it.
    """
    binary = require_binary("prometheus")
    port = free_port()
    config = write_config(
        tmp_path / "prometheus.yml",
        targets,
        rule_files,
        scrape_interval=scrape_interval,
        evaluation_interval=evaluation_interval,
        scrape_configs=scrape_configs,
        alertmanagers=alertmanagers,
    )
    data_dir = tmp_path / "tsdb"
    log_path = tmp_path / "prometheus.log"
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        "--log.level=warn",
    ]
    headers: dict[str, str] = {}
    if basic_auth is not None:
        user, password, hashed = basic_auth
        web = tmp_path / "web.yml"
        web.write_text(yaml.safe_dump({"basic_auth_users": {user: hashed}}), encoding="utf-8")
        args.append(f"--web.config.file={web}")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    server = PromServer(f"http://127.0.0.1:{port}", proc, data_dir, log_path, headers)
    try:
        if not server.wait_for(lambda: _ready(server), start_timeout_s, 0.2):
            raise AssertionError(f"prometheus did not become ready:\n{server.log_tail()}")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _ready(server: PromServer) -> bool:
    if server.proc.poll() is not None:
        raise AssertionError(f"prometheus exited with {server.proc.returncode}:\n{server.log_tail()}")
    try:
        request = urllib.request.Request(f"{server.url}/-/ready", headers=server.headers)
        with urllib.request.urlopen(request, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
