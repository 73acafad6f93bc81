"""A fake Prometheus HTTP API (real /api/v1/query JSON bodies) for source and CLI tests."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _vector(series: list[tuple[dict[str, str], str]]) -> dict[str, Any]:
    """A real /api/v1/query success body (resultType vector, values as strings)."""
    result = [{"metric": m, "value": [1700000000.123, v]} for m, v in series]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


CANNED = {
    "handoffmon_checks_total": _vector(
        [
            (
                {"rule": "json", "model": "b", "prefix_model": "a", "depth_bucket": "3-4", "verdict": "pass"},
                "7",
            ),
            (
                {"rule": "json", "model": "b", "prefix_model": "a", "depth_bucket": "3-4", "verdict": "fail"},
                "2.9999",
            ),
            (
                {"rule": "json", "model": "b", "prefix_model": "b", "depth_bucket": "2", "verdict": "pass"},
                "0",
            ),
        ]
    ),
    "handoffmon_rule_transitions_total": _vector(
        [
            (
                {
                    "rule": "json",
                    "model": "b",
                    "handoff": "true",
                    "from_verdict": "pass",
                    "to_verdict": "fail",
                },
                "4",
            )
        ]
    ),
    "handoffmon_turns_total": _vector(
        [
            ({"model": "b", "prefix_model": "a", "depth_bucket": "3-4"}, "10"),
            ({"model": "b", "prefix_model": "unknown", "depth_bucket": "2"}, "1"),
        ]
    ),
    "handoffmon_baseline_checks_total": _vector(
        [({"rule": "json", "model": "b", "depth_bucket": "2", "verdict": "pass"}, "4")]
    ),
    "handoffmon_cell_stats_total": _vector(
        [
            (
                {"rule": "json", "model": "b", "prefix_model": "a", "depth_bucket": "3-4", "stat": "depth"},
                "33",
            ),
            ({"rule": "all", "model": "b", "prefix_model": "a", "depth_bucket": "*", "stat": "y2"}, "12"),
        ]
    ),
    "handoffmon_shadow_pair_stats_total": _vector(
        [
            ({"rule": "json", "prefix_model": "a", "model": "b", "stat": "prefix_only"}, "5"),
            ({"rule": "all", "prefix_model": "a", "model": "b", "stat": "n2"}, "0"),
        ]
    ),
    "handoffmon_attributions_total": _vector([({"method": "chain"}, "9")]),
    "handoffmon_monitor_errors_total": _vector([({"stage": "checker"}, "2")]),
    "handoffmon_queue_dropped_total": _vector([({}, "5")]),
}


@contextmanager
def fake_prometheus() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback HTTP server answering /api/v1/query with canned vectors; records queries."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
            seen.append(params)
            query = params.get("query", "")
            metric = next((m for m in CANNED if re.search(rf"(?<![a-z_]){m}(?![a-z_])", query)), None)
            if url.path != "/api/v1/query" or metric is None:
                body, code = {"status": "error", "errorType": "bad_data", "error": "unknown"}, 400
            else:
                body, code = CANNED[metric], 200
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"prometheus://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
