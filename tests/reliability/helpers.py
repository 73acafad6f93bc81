"""Reliability helpers: soak duration, resident-memory and store-size sampling, flatness checks, reports."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"
MIB = 1024 * 1024


def soak_seconds() -> float:
    """Soak length per soak test: ``HANDOFFMON_SOAK_S`` (seconds), default 60."""
    return float(os.environ.get("HANDOFFMON_SOAK_S") or 60.0)


def warmup_s(duration_s: float) -> float:
    """Warm-up excluded from the flatness checks: half the run, at most 5 minutes."""
    return min(duration_s / 2, 300.0)


@dataclass(frozen=True)
class Sample:
    """One observation of a soaked process."""

    t_s: float
    rss_bytes: int
    store_size: int
    turns_sent: int


@dataclass
class Sampler:
    """Samples a process's resident memory and a store size on a thread every ``interval_s``.

    Args:
        pid: process to watch (the soaked one).
        store_size: callable returning the store's size (keys or conversations).
        turns_sent: callable returning the turns the traffic generator has completed.
        interval_s: sampling period.
    """

    pid: int
    store_size: Callable[[], int]
    turns_sent: Callable[[], int]
    interval_s: float = 1.0
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._proc = psutil.Process(self.pid)
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """Take one sample now."""
        self.samples.append(
            Sample(
                time.monotonic() - self._t0,
                self._proc.memory_info().rss,
                int(self.store_size()),
                int(self.turns_sent()),
            )
        )

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()


@dataclass(frozen=True)
class Growth:
    """Change of a sampled quantity between the end of warm-up and the end of the run.

    ``start``/``end`` are medians of the first/last three post-warm-up samples (a single
    garbage-collection spike does not decide); ``peak`` is the post-warm-up maximum and
    ``slope_per_h`` the least-squares trend in units per hour.
    """

    start: float
    end: float
    peak: float
    slope_per_h: float

    @property
    def delta(self) -> float:
        """``end - start``."""
        return self.end - self.start


def growth(samples: list[Sample], warmup_s: float, attr: str) -> Growth:
    """Growth of ``attr`` over the samples taken after ``warmup_s``."""
    post = [s for s in samples if s.t_s >= warmup_s]
    if len(post) < 6:
        raise AssertionError(f"only {len(post)} samples after a {warmup_s:.0f}s warm-up; run longer")
    values = [float(getattr(s, attr)) for s in post]
    times = [s.t_s for s in post]
    mt, mv = statistics.fmean(times), statistics.fmean(values)
    var = sum((t - mt) ** 2 for t in times)
    slope = sum((t - mt) * (v - mv) for t, v in zip(times, values, strict=True)) / var if var else 0.0
    return Growth(statistics.median(values[:3]), statistics.median(values[-3:]), max(values), slope * 3600)


def recent_turns(samples: list[Sample], window_s: float) -> list[tuple[Sample, int]]:
    """Each sample taken at least ``window_s`` into the run, with the turns sent in the window before it.

    The window starts at the latest sample taken ``window_s`` or more before, so it is
    never shorter than ``window_s``.
    """
    out = []
    for s in samples:
        earlier = [e for e in samples if e.t_s <= s.t_s - window_s]
        if earlier:
            out.append((s, s.turns_sent - earlier[-1].turns_sent))
    return out


def write_report(name: str, report: dict[str, Any], samples: list[Sample]) -> Path:
    """Write the soak's report and samples as JSON under bench-results/ (gitignored)."""
    RESULTS.mkdir(exist_ok=True)
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    path = RESULTS / f"soak-{name}-{round(report['duration_s'])}s-{py}.json"
    doc = {
        **report,
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
        "samples": [asdict(s) for s in samples],
    }
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(json.dumps(report, indent=1, default=str))
    return path
