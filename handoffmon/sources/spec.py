"""Resolve a ``--source`` spec (sqlite://PATH, prometheus://HOST:PORT, http(s)://…, cells.csv, turn logs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from handoffmon.counts import CELL_TOTAL, Counts
from handoffmon.depth import BUCKET_LABEL, DepthBuckets
from handoffmon.sources import SourceError


@dataclass(frozen=True)
class Loaded:
    """Counts plus where they came from, the window they cover and whether they are exact.

    ``exact``: totals at rest (a SQLite file, a turn log, a cells CSV), whose cluster sums the
    refit refuses when no conversations can give them; Prometheus answers are approximate
    (series read one by one while turns land) and are repaired and
    reported instead (``handoffmon.refit.inputs``).

    ``repair``: an exact source whose contradictory cells are repaired and reported rather than
    refused, because a crash can leave them so (a SQLite file: ``refit.inputs``).
    """

    counts: Counts
    label: str
    window_s: float | None = None
    exact: bool = False
    repair: bool = False


def infer_buckets(counts: Counts) -> DepthBuckets:
    """Depth buckets that reproduce the labels found in ``counts`` (default buckets if none).

    Edges are 1, every label's lower bound and, for closed labels such as ``3-4``, the
    depth after its upper bound; so ``1, 2, 3-4`` → edges 1, 2, 3, 5 (labels 1, 2, 3-4, 5+).
    The labels are those of every counter keyed by depth bucket (checks, clean-baseline checks,
    turns, cell sums): a depth no rule was checked at still has turns, which count toward the
    session lengths; inferred from the checks alone, turns in bucket ``2`` beside checks in
    ``3-4`` fell into an inferred ``1-2`` no turn is labelled with and were dropped.
    """
    labels = {
        k.depth_bucket
        for keys in (counts.checks, counts.baseline_checks, counts.turns, counts.cell_stats)
        for k in keys
        if k.depth_bucket != CELL_TOTAL
    }
    if not labels:
        return DepthBuckets()
    edges = {1}
    for label in labels:
        if not BUCKET_LABEL.match(label):
            raise SourceError(f"depth bucket {label[:80]!r} is not a bucket label like 1, 3-4 or 97+")
        edges.add(DepthBuckets.lower_bound(label))
        if not label.endswith("+"):
            edges.add(int(label.split("-")[-1]) + 1)
    return DepthBuckets(tuple(sorted(edges)))


def is_turn_log(spec: str) -> bool:
    """A turn-level log: ``.jsonl``/``.ndjson``/``.parquet``, or a ``.csv`` whose header has
    ``conversation_id`` (a cells CSV has none)."""
    path = Path(spec)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".parquet"):
        return True
    if suffix != ".csv" or not path.is_file():
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline()
    return "conversation_id" in {h.strip() for h in header.split(",")}


def load_source(
    spec: str,
    *,
    transitions: str | None = None,
    window: str | None = None,
    match: str | None = None,
    timeout_s: float = 10.0,
    buckets: DepthBuckets | None = None,
) -> Loaded:
    """Read counts from ``spec``; ``transitions`` (a CSV) is merged in when given.

    Turn logs (``turns.jsonl``, ``turns.csv``, ``turns.parquet``) are aggregated with
    ``buckets`` (default: the default depth buckets). ``match`` is a Prometheus label
    selector (``{job="prod",namespace="llm"}``) restricting a Prometheus source to one
    deployment.

    Raises:
        SourceError: unknown spec, or a ``window`` or ``match`` for a source that is not
            Prometheus, or a malformed ``match``.
        InputError: a malformed CSV file.
        StoreError: an unreadable SQLite file.
    """
    is_prometheus = spec.startswith(("prometheus://", "http://", "https://"))
    if window and not is_prometheus:
        raise SourceError("--window only applies to a Prometheus source")
    if match and not is_prometheus:
        raise SourceError("--match only applies to a Prometheus source")
    if spec.startswith("sqlite://"):
        from handoffmon.sources.sqlite import read_sqlite

        path = spec[len("sqlite://") :]
        loaded = Loaded(read_sqlite(path), f"sqlite://{path}", exact=True, repair=True)
    elif is_prometheus:
        from handoffmon.sources.prometheus import PrometheusSource

        src = PrometheusSource(spec, window=window, match=match, timeout_s=timeout_s)
        loaded = Loaded(src.snapshot(), src.label, src.window_s)
    elif is_turn_log(spec):
        from handoffmon.sources.turns import read_turns

        loaded = Loaded(read_turns(spec, buckets), spec, exact=True)
    elif Path(spec).suffix.lower() == ".csv":
        from handoffmon.sources.csv import read_cells_csv

        loaded = Loaded(read_cells_csv(spec), spec, exact=True)
    elif Path(spec).suffix.lower() in (".db", ".sqlite", ".sqlite3"):
        raise SourceError(f"unknown source {spec!r}: a SQLite file is read as sqlite://{spec}")
    else:
        raise SourceError(
            f"unknown source {spec!r}: use sqlite://PATH (sqlite://handoffmon.db relative, "
            "sqlite:///abs/path.db absolute), prometheus://HOST:PORT, cells.csv or a turn log "
            "(.jsonl, .csv, .parquet)"
        )
    if transitions:
        from handoffmon.sources.csv import read_transitions_csv

        extra = read_transitions_csv(transitions)
        loaded = Loaded(
            loaded.counts.merge(extra),
            f"{loaded.label}+{transitions}",
            loaded.window_s,
            loaded.exact,
            loaded.repair,
        )
    return loaded
