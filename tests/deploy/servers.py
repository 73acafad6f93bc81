"""Real Alertmanager and Pushgateway processes for the deploy tests, and a webhook receiver.

Like ``tests/promserver.py``: Debian's binaries on free loopback ports with temp storage;
skipped locally (failed under ``CI=true``) when a binary is missing.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port, require_binary

ALERTMANAGER = "prometheus-alertmanager"
PUSHGATEWAY = "prometheus-pushgateway"


@dataclass
class Webhook:
    """Collects Alertmanager webhook notifications (the JSON bodies, in arrival order)."""

    server: ThreadingHTTPServer
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@contextmanager
def webhook_receiver() -> Iterator[Webhook]:
    """An HTTP server recording every POSTed notification."""
    received: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield Webhook(server=server, notifications=received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Process:
    """A running server binary."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as resp:
            return json.load(resp)


@contextmanager
def _run(
    args: list[str],
    url: str,
    log_path: Path,
    ready_path: str,
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> Iterator[Process]:
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    server = Process(url=url, proc=proc, log_path=log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{args[0]} exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                ready = urllib.request.Request(f"{url}{ready_path}", headers=headers or {})
                with urllib.request.urlopen(ready, timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{args[0]} not ready:\n{server.log_tail()}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def alertmanager_test_config(shipped: dict[str, Any], webhook_url: str) -> dict[str, Any]:
    """The shipped Alertmanager config with every receiver sent to ``webhook_url`` and the
    timers shortened for a test (grouping, routes and inhibitions unchanged)."""
    config = json.loads(json.dumps(shipped))
    config["route"].update(group_wait="5s", group_interval="10s", repeat_interval="1h")
    stack = [config["route"]]
    while stack:
        route = stack.pop()
        if "group_wait" in route:
            route["group_wait"] = "5s"
        stack.extend(route.get("routes", []))
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
    return config


@contextmanager
def alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[Process]:
    """Debian's Alertmanager with ``config``, clustering off, on a free loopback port."""
    binary = require_binary(ALERTMANAGER)
    port = free_port()
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    args = [
        binary,
        f"--config.file={path}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    with _run(args, f"http://127.0.0.1:{port}", tmp_path / "alertmanager.log", "/-/ready") as server:
        yield server


@contextmanager
def pushgateway(tmp_path: Path, basic_auth: tuple[str, str, str] | None = None) -> Iterator[Process]:
    """Debian's Pushgateway on a free loopback port, without persistence: Debian's build
    defaults ``--persistence.file`` to a machine-wide file, which would load whatever any
    earlier gateway on the machine was sent. ``basic_auth``: (user, password, its bcrypt hash):
    every request must carry them (``--web.config.file``)."""
    binary = require_binary(PUSHGATEWAY)
    port = free_port()
    args = [binary, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file=", "--log.level=warn"]
    headers: dict[str, str] = {}
    if basic_auth is not None:
        web = tmp_path / "pushgateway-web.yml"
        user, password, hashed = basic_auth
        web.write_text(yaml.safe_dump({"basic_auth_users": {user: hashed}}), encoding="utf-8")
        args.append(f"--web.config.file={web}")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    log = tmp_path / "pushgateway.log"
    with _run(args, f"http://127.0.0.1:{port}", log, "/-/ready", headers=headers) as server:
        yield server
