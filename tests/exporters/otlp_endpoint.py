"""A real OTLP/HTTP endpoint for tests that needs a collector to stall: it holds each export."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def stalled_otlp_endpoint(stall_s: float) -> Iterator[str]:
    """Base URL of an OTLP/HTTP endpoint that answers each export (200) after ``stall_s``, or
    when the block ends; the SDK's log lines about failed exports are silenced meanwhile."""
    release = threading.Event()

    class Stalled(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            release.wait(stall_s)
            try:
                self.send_response(200)
                self.end_headers()
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stalled)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    otel_log = logging.getLogger("opentelemetry")
    level = otel_log.level
    otel_log.setLevel(logging.CRITICAL)  # the SDK logs every failed export
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        otel_log.setLevel(level)
        server.shutdown()
        server.server_close()
