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


WINDOW_QUERY = re.compile(r"\[[0-9a-z]+:[0-9a-z]+\]")
"""A windowed read's subquery (``metric[1h:30000ms]``)."""


def as_window(body: dict[str, Any], query: str) -> dict[str, Any]:
    """``body`` (a vector answer) as a windowed read (``WINDOW_QUERY``) gets it: each series a
    matrix from 0 at the window's start to its value, so its window increment is that value;
    other queries get ``body`` itself."""
    data = body.get("data")
    if not WINDOW_QUERY.search(query) or not isinstance(data, dict) or data.get("resultType") != "vector":
        return body
    result = [
        {"metric": s["metric"], "values": [[s["value"][0] - 3600, "0"], s["value"]]} for s in data["result"]
    ]
    return {**body, "data": {"resultType": "matrix", "result": result}}


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
            # one conversation holding the 5 pairs (the sums a source must carry beside its tables)
            *(
                ({"rule": "json", "prefix_model": "a", "model": "b", "stat": stat}, value)
                for stat, value in (("conversations", "1"), ("c2", "25"), ("cn", "25"), ("n2", "25"))
            ),
            ({"rule": "all", "prefix_model": "a", "model": "b", "stat": "n2"}, "0"),
        ]
    ),
    "handoffmon_attributions_total": _vector([({"method": "chain"}, "9")]),
    "handoffmon_monitor_errors_total": _vector([({"stage": "checker"}, "2")]),
    "handoffmon_queue_dropped_total": _vector([({}, "5")]),
}


def reply(
    handler: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str = "application/json"
) -> None:
    """Send ``body`` with ``code`` from a request handler."""
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on a free loopback port (yielded) in a thread; shut down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def fake_prometheus() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback HTTP server answering /api/v1/query with canned vectors; records queries."""
    seen: list[dict[str, str]] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
            seen.append(params)
            query = params.get("query", "")
            metric = next((m for m in CANNED if re.search(rf"(?<![a-z_]){m}(?![a-z_])", query)), None)
            if url.path != "/api/v1/query" or metric is None:
                body, code = {"status": "error", "errorType": "bad_data", "error": "unknown"}, 400
            else:
                body, code = as_window(CANNED[metric], query), 200
            reply(self, code, json.dumps(body).encode())

    with loopback_server(Handler) as port:
        yield f"prometheus://127.0.0.1:{port}", seen
