"""Instructions per request of ``handoffmon serve`` and the bare pass-through floor, under callgrind.

``bench_proxy`` measures time, which on a shared 2-core VM moves by tens of percent from one
minute to the next. Instruction counts do not: valgrind's callgrind counts the user-space
instructions each thread executes, whatever else the host is doing, so the same code and
input give the same count (kernel time — the socket system calls — is not counted; it is
about the same for both servers). Each server runs under ``callgrind --separate-threads=yes``
in front of ``bench_proxy``'s mock upstream (not under valgrind); one keep-alive client sends
``bench_proxy``'s 2 KB chat request ``--warmup`` times, the counters are zeroed, then ``--requests``
more are sent one after another and ``serve``'s pipeline is flushed (``POST /admin/flush``)
before the counters are dumped. What is printed: instructions per request, per thread (the
event loop is the main thread; ``serve``'s pipeline is the attribution thread).

    .venv/bin/python -m tests.benchmarks.bench_instructions [--requests 300]

Needs valgrind (``apt-get install valgrind``); each server takes ~1-2 minutes under it.
``BENCH_PROXY_BEFORE`` (source trees, ``os.pathsep``-separated) adds their ``serve``, as in
``bench_proxy``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.benchmarks.bench_proxy import REQUEST, _handoffmon_config, _start, _stop
from tests.conftest import free_port, port_open


@dataclass
class Count:
    """Instructions per request of one server, by thread (``main`` first)."""

    name: str
    threads: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.threads.values())


def _request_bytes(port: int) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(REQUEST)}\r\n\r\n"
    )
    return head.encode() + REQUEST


def _send(sock: socket.socket, request: bytes) -> None:
    """One request on a keep-alive connection; returns once the whole 200 reply is read."""
    sock.sendall(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"not a 200: {head[:60]!r}")
    match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if match is None:
        raise RuntimeError("no content-length in the reply")
    while len(body) < int(match.group(1)):
        body += sock.recv(65536)


def _thread_totals(out_dir: Path, prefix: str) -> dict[str, float]:
    """Instructions per thread in the dump after the zeroing (callgrind's part 1 files)."""
    totals: dict[str, float] = {}
    for f in sorted(out_dir.glob(f"{prefix}*")):
        text = f.read_text(errors="replace")
        part = re.search(r"^part:\s*(\d+)", text, re.MULTILINE)
        thread = re.search(r"^thread:\s*(\d+)", text, re.MULTILINE)
        summary = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.MULTILINE)
        if part is None or part.group(1) == "0" or thread is None or summary is None:
            continue
        n = int(summary.group(1))
        if n:
            totals["main" if thread.group(1) == "1" else f"thread {thread.group(1)}"] = float(n)
    return totals


def measure(
    name: str,
    cmd: list[str],
    port: int,
    requests: int,
    warmup: int,
    tmp: Path,
    env: dict[str, str],
    cwd: str | None,
) -> Count:
    """Run ``cmd`` (listening on ``port``) under callgrind and count ``requests`` requests."""
    prefix = f"cg-{port}.out"
    vg = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={tmp / prefix}"]
    proc = _start([*vg, *cmd], {**env, "PYTHONHASHSEED": "0"}, cwd)
    try:
        deadline = time.monotonic() + 600
        while not port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start under valgrind")
            time.sleep(1)
        request = _request_bytes(port)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            for _ in range(warmup):
                _send(sock, request)
            if name.startswith("handoffmon"):
                httpx.post(f"http://127.0.0.1:{port}/admin/flush", timeout=300)
            subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
            for _ in range(requests):
                _send(sock, request)
        if name.startswith("handoffmon"):
            r = httpx.post(f"http://127.0.0.1:{port}/admin/flush", timeout=300)
            if r.json() != {"flushed": True}:
                raise RuntimeError(f"{name}: the pipeline did not drain: {r.text}")
        subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
        time.sleep(1)
        totals = _thread_totals(tmp, prefix)
    finally:
        _stop(proc)
    if not totals:
        raise RuntimeError(f"{name}: callgrind wrote no counts")
    return Count(name, {k: v / requests for k, v in totals.items()})


def run(requests: int = 300, warmup: int = 100) -> list[Count]:
    """The floor, ``serve`` (memory store, ``bench_proxy``'s three rules), and any before trees."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench_instructions needs valgrind: apt-get install valgrind")
    py = sys.executable
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    counts: list[Count] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        mock_port = free_port()
        mock = _start([py, "-m", "tests.benchmarks.bench_proxy", "--serve", "mock", "--port", str(mock_port)])
        try:
            upstream = f"http://127.0.0.1:{mock_port}"
            deadline = time.monotonic() + 60
            while not port_open("127.0.0.1", mock_port):
                if time.monotonic() > deadline:
                    raise RuntimeError("the mock upstream did not start")
                time.sleep(0.2)
            config = str(_handoffmon_config(tmp))
            servers: list[tuple[str, list[str], str | None, dict[str, str]]] = [
                (
                    "bare pass-through, aiohttp client (the floor)",
                    [
                        py,
                        "-m",
                        "tests.benchmarks.bench_proxy",
                        "--serve",
                        "bare-aiohttp",
                        "--upstream",
                        upstream,
                    ],
                    None,
                    {},
                ),
                (
                    "handoffmon serve (3 rules checked)",
                    [py, "-m", "handoffmon", "serve", "--upstream", upstream],
                    None,
                    {},
                ),
            ]
            befores = [b for b in os.environ.get("BENCH_PROXY_BEFORE", "").split(os.pathsep) if b]
            for b in befores:
                servers.append(
                    (
                        f"handoffmon serve from BENCH_PROXY_BEFORE={b}",
                        [py, "-m", "handoffmon", "serve", "--upstream", upstream],
                        b,
                        {"PYTHONPATH": b},
                    )
                )
            for name, cmd, cwd, extra in servers:
                port = free_port()
                args = [*cmd, "--port", str(port)]
                if name.startswith("handoffmon"):
                    args += ["--config", config]
                counts.append(measure(name, args, port, requests, warmup, tmp, {**env, **extra}, cwd))
                print(f"  counted {name}: {counts[-1].total:,.0f} instructions/request", flush=True)
        finally:
            _stop(mock)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    counts = run(args.requests, args.warmup)
    floor = counts[0].total
    print(f"\ninstructions per request under callgrind ({args.requests} requests after {args.warmup})")
    print("| server | total | ÷ floor | by thread |")
    print("|---|---|---|---|")
    for c in counts:
        threads = ", ".join(f"{k} {v:,.0f}" for k, v in c.threads.items())
        print(f"| {c.name} | {c.total:,.0f} | {c.total / floor:.2f} | {threads} |")


if __name__ == "__main__":
    main()
