"""A tiny exporter replaying a recorded handoffmon /metrics snapshot as live traffic.

Counters and histogram series grow linearly from 0: at ``t`` seconds after start they read
``recorded × t / replay_s`` (and keep growing at that rate), so ``rate()``/``increase()``
see the recorded traffic mix at a steady pace — exactly, since Prometheus' extrapolation is
linear too, whichever moment a server scrapes. Gauges are served as recorded, except the
refit's success timestamp, which reads the replay's start (a refit that just ran).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_GROWING = ("counter", "histogram", "summary")
REFIT_TIMESTAMP = "handoffmon_refit_last_success_timestamp_seconds"


@dataclass(frozen=True)
class Sample:
    """One recorded sample and whether it grows with time."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    grows: bool


def load_snapshot(path: Path) -> list[Sample]:
    """The samples of a Prometheus text exposition file."""
    out = []
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append(Sample(s.name, tuple(sorted(s.labels.items())), s.value, family.type in _GROWING))
    return out


def _fmt(sample: Sample, value: float) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sample.labels)
    return f"{sample.name}{{{labels}}} {value!r}" if labels else f"{sample.name} {value!r}"


def render(samples: list[Sample], elapsed_s: float, replay_s: float, started_at: float) -> str:
    """The exposition at ``elapsed_s`` seconds into the replay."""
    lines = []
    for s in samples:
        if s.name == REFIT_TIMESTAMP:
            value = started_at
        elif s.grows:
            value = s.value * elapsed_s / replay_s
        else:
            value = s.value
        lines.append(_fmt(s, value))
    return "\n".join(lines) + "\n"


@dataclass
class Replay:
    """A running replay exporter.

    Attributes:
        server: the HTTP server.
        started_at: when the counters began to grow (``None``: held at 0 until ``start``).
    """

    server: ThreadingHTTPServer
    started_at: float | None

    def start(self) -> None:
        """Let the counters grow from now (a held replay serves zeros until then)."""
        if self.started_at is None:
            self.started_at = time.time()

    @property
    def target(self) -> str:
        """``127.0.0.1:PORT`` for a scrape config."""
        return f"127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def replay_exporter(snapshot: Path, replay_s: float = 30.0, *, hold: bool = False) -> Iterator[Replay]:
    """Serve ``snapshot`` at ``/metrics`` on a free loopback port until the block exits.

    With ``hold`` the counters read 0 until ``Replay.start``: servers that begin scraping at
    different moments then hold identical histories from the start on (a ``rate`` over a
    window longer than a server's uptime divides by the whole window, so without a common
    zero two servers' rates differ by the ratio of their uptimes).
    """
    samples = load_snapshot(snapshot)
    created = time.time()
    replay: Replay

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            started = replay.started_at
            elapsed = 0.0 if started is None else time.time() - started
            body = render(samples, elapsed, replay_s, created if started is None else started).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are not worth a log line each."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    replay = Replay(server=server, started_at=None if hold else created)
    try:
        yield replay
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
