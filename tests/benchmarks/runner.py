"""The benchmark runner: every benchmark in one run, one table, machine facts and parameters as JSON."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.benchmarks.suites import SUITES, Row, to_json

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"
PACKAGES = (
    "handoffmon",
    "litellm",
    "numpy",
    "scipy",
    "prometheus_client",
    "opentelemetry-sdk",
    "redis",
    "aiohttp",
    "uvicorn",
    "starlette",
    "google-re2",
    "xxhash",
    "psutil",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(args: list[str]) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else None


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return {}
    return {"commit": head, "dirty": bool(dirty)}


def machine_facts() -> dict[str, Any]:
    """CPU, cores, memory, OS, Python, package and tool versions, load average, niceness."""
    import psutil

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "packages": versions,
        "tools": {"wrk": _version(["wrk", "-v"]), "redis-server": _version(["redis-server", "--version"])},
        "load_average": list(os.getloadavg()),
        "niceness": os.nice(0),
        "git": _git(),
    }


def run_suites(names: list[str], quick: bool) -> tuple[list[Row], list[dict[str, Any]]]:
    """Run the named suites in order; a failing suite becomes an error row, the rest still run."""
    rows: list[Row] = []
    log: list[dict[str, Any]] = []
    for name in names:
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {name} …", flush=True)
        error: str | None = None
        try:
            got = SUITES[name](quick)
        except Exception as exc:  # the runner reports a broken benchmark and carries on
            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}"
            got = [Row(name, f"FAILED: {error}", None, None, "")]
        elapsed = time.perf_counter() - t0
        rows.extend(got)
        log.append(
            {
                "suite": name,
                "seconds": round(elapsed, 1),
                "load_before": list(load0),
                "load_after": list(os.getloadavg()),
                "error": error,
            }
        )
        print(f"    {name}: {elapsed:.0f}s, load average {os.getloadavg()[0]:.1f}", flush=True)
    return rows, log


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 1000:
        return f"{x:,.0f}"
    if mag >= 100:
        return f"{x:.0f}"
    if mag >= 10:
        return f"{x:.1f}"
    if mag >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def markdown_table(rows: list[Row], *, all_rows: bool = False) -> str:
    """The table as GitHub markdown (headline rows unless ``all_rows``)."""
    out = [
        "| benchmark | case | p50 | p99 | unit | ratio (side by side) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not (r.headline or all_rows):
            continue
        ratio = f"{_fmt(r.ratio)} ({r.ratio_of})" if r.ratio is not None else "—"
        out.append(
            f"| {r.bench} | {r.case} | {_fmt(r.p50)} | {_fmt(r.p99)} | {r.unit} | {ratio} | {r.note} |"
        )
    return "\n".join(out)


def summary_line(facts: dict[str, Any], started: float, log: list[dict[str, Any]]) -> str:
    """One line with the machine, the load average before/after and the wall time."""
    loads = [entry["load_before"][0] for entry in log] + [log[-1]["load_after"][0]] if log else []
    span = f"{min(loads):.1f}–{max(loads):.1f}" if loads else "?"
    return (
        f"{facts['cpu_model']}, {facts['logical_cores']} logical cores, {facts['memory_gib']} GiB, "
        f"Python {facts['python']}, litellm {facts['packages'].get('litellm')}; 1-min load average "
        f"{span} during the run; {time.perf_counter() - started:.0f} s wall"
    )


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m tests.benchmarks [--quick] [--only …] [--skip …] [--markdown FILE]``."""
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, shorter wrk runs, no LiteLLM Proxy"
    )
    parser.add_argument("--only", nargs="+", choices=list(SUITES), help="run only these benchmarks")
    parser.add_argument("--skip", nargs="+", choices=list(SUITES), default=[], help="skip these benchmarks")
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown to this file")
    parser.add_argument("--all-rows", action="store_true", help="print every row, not just the headline ones")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="directory for the JSON (default bench-results/)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    names = [n for n in (args.only or list(SUITES)) if n not in args.skip]
    started = time.perf_counter()
    facts = machine_facts()
    rows, log = run_suites(names, args.quick)
    table = markdown_table(rows, all_rows=args.all_rows)
    line = summary_line(facts, started, log)
    print("\n" + table + "\n\n" + line)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    doc = {
        "started_utc": stamp,
        "parameters": {"quick": args.quick, "suites": names},
        "machine": facts,
        "machine_after": {"load_average": list(os.getloadavg())},
        "suites": log,
        "rows": to_json(rows),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    for path in (args.out / f"bench-{stamp}.json", args.out / "bench-latest.json"):
        path.write_text(json.dumps(doc, indent=1))
    print(f"JSON: {args.out / f'bench-{stamp}.json'}")
    if args.markdown:
        args.markdown.write_text(table + "\n\n" + line + "\n")
    return 1 if any(entry["error"] for entry in log) else 0
