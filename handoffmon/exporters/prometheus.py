"""Prometheus exporter: turn/check/transition counters, monitor health, refit gauges (registry injected)."""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from bisect import bisect_left
from collections import Counter as _Tally
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from handoffmon._version import __version__
from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, PLAN_CACHE, add_cluster_sums, in_cell, turn_shape
from handoffmon.errors import HandoffmonError
from handoffmon.exporters.file_refresh import SYNC_FAILURE_STAGE, FileRefresher
from handoffmon.exporters.logs import get_logger, log_error
from handoffmon.exporters.refit_series import FIT_LABEL, REFIT_GAUGES, GaugeSpec, Series, refit_series
from handoffmon.exporters.serving import FileMirror, sync_file_mirrors
from handoffmon.exporters.store_failures import StoreStatsCollector
from handoffmon.labels import (
    BASELINE_LABELS,
    CELL_STAT_LABELS,
    SHADOW_PAIR_LABELS,
    LabelGuard,
    refit_input_labels,
)
from handoffmon.types import (
    ATTRIBUTION_METHODS,
    MONITOR_STAGES,
    NO_REPLY_STATUSES,
    VERDICTS,
    TurnResult,
    check_error_reason,
)

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.config import HandoffmonConfig
    from handoffmon.counts import ShadowKey
    from handoffmon.refit.result import RefitResult

OVERHEAD_BUCKETS: tuple[float, ...] = (
    1e-5,
    2.5e-5,
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
"""10 µs … 1 s: attribution sits in the tens of µs, checkers have a 50 ms budget."""

HISTORY_TOKEN_BUCKETS: tuple[float, ...] = (256, 1024, 4096, 16384, 65536, 262144, 1048576)

_EXEMPLAR_CHARS = 100  # OpenMetrics caps an exemplar's label set at 128 characters
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
FILE_SYNC_S = 1.0
"""Under ``PROMETHEUS_MULTIPROC_DIR``, how often at most a busy check thread writes the
scrape-time counters' growth (store failures, routing decisions, shadow calls) to the files
(``serving.FileMirror``): every turn, it cost 81-103 µs a turn on the check thread. The rest
is written on the thread's idle turn (``idle``), at a shadow pair, a refit and ``force_flush``,
and every ``FILE_REFRESH_S`` by the process's ``FILE_REFRESHER``."""
_now = time.monotonic
FILE_REFRESHER = FileRefresher(sync_file_mirrors)
"""The process's timer that writes the scrape-time series to the multiprocess files without
turns; held by every multiprocess exporter from its first write to its ``shutdown``."""


_METHOD_KEYS = 64
_TablePlan = tuple[
    tuple[str, str, str],
    tuple[tuple[tuple[str, ...], tuple[str], str | None], ...],
    tuple[tuple[str, ...], ...],
    tuple[tuple[str, ...], ...],
    tuple[tuple[tuple[str, ...], ...], ...],
    tuple[tuple[str, ...], ...],
]


FALLBACK_LABELS: tuple[str, ...] = ("requested_model", "model")
"""Labels of ``handoffmon_fallbacks`` (``fallback_labels``), in order."""


def method_label(method: str) -> str:
    """The ``method`` label of an attribution method (``ATTRIBUTION_METHODS``, else ``unknown``).

    Shared with the OpenTelemetry exporter so both export the same values."""
    return method if method in ATTRIBUTION_METHODS else "unknown"


def fallback_labels(result: TurnResult, guard: LabelGuard, model: str) -> tuple[str, str]:
    """``(requested_model, model)`` of ``handoffmon_fallbacks`` for a turn whose ``model`` label
    is already known (shared with the OpenTelemetry exporter)."""
    rec, ctx = result.record, result.context
    return guard.requested_model(rec.requested_model or ctx.requested_model), model


class _Children:
    """``metric.labels(*values)``, memoized per exporter.

    prometheus_client validates the values and takes the metric's lock on every ``labels``
    call (several µs, ~30 times per turn); the per-turn counters' children are never removed
    and the guard caps their label values, so the cache is bounded like the series.
    """

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: MetricWrapperBase) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:  # Counter or Histogram child: .inc / .observe
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class _CounterTable:
    """A labelled counter's values in a plain dict, served as its family at scrape time.

    The per-turn counters used to be prometheus_client children: ~30 ``inc`` calls per turn,
    each validating and taking the child's lock (issue 21). Here a turn adds to dict entries
    under one exporter lock, and ``family`` builds the same samples prometheus_client would
    (``<name>_total`` per label set, in creation order, float values, the last exemplar).
    """

    __slots__ = ("_labelnames", "_metric", "exemplars", "values")

    def __init__(self, metric: MetricWrapperBase) -> None:
        self._metric = metric
        self._labelnames: tuple[str, ...] = tuple(metric._labelnames)
        # a missing key reads as 0.0 (``values[key] += n`` inserts it: the creation order);
        # only the owner's increments and ``setdefault`` write, only ``items`` reads
        self.values: dict[tuple[str, ...], float] = defaultdict(float)
        self.exemplars: dict[tuple[str, ...], Exemplar] = {}

    def snapshot(self) -> tuple[list[tuple[tuple[str, ...], float]], dict[tuple[str, ...], Exemplar]]:
        """The values and exemplars (call under the owner's lock)."""
        return list(self.values.items()), dict(self.exemplars)

    def family(
        self, values: list[tuple[tuple[str, ...], float]], exemplars: Mapping[tuple[str, ...], Exemplar]
    ) -> Metric:
        """The metric family of a snapshot, as the prometheus_client counter would expose it."""
        (out,) = self._metric.describe()
        name, names = out.name + "_total", self._labelnames
        for key, value in values:
            out.add_sample(name, dict(zip(names, key, strict=True)), float(value), None, exemplars.get(key))
        return out


class _HistogramTable:
    """A labelled histogram's bucket counts and sum in a plain dict (see ``_CounterTable``).

    A row is the per-bucket (non-cumulative) counts followed by the sum, updated as
    prometheus_client's ``Histogram.observe`` does: the sum always, the first bucket whose
    bound is ≥ the amount (none for NaN).
    """

    __slots__ = ("_bounds", "_labelnames", "_les", "_metric", "values")

    def __init__(self, metric: MetricWrapperBase, buckets: tuple[float, ...]) -> None:
        self._metric = metric
        self._labelnames: tuple[str, ...] = tuple(metric._labelnames)
        bounds = [float(b) for b in buckets]
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._les = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        self.values: dict[tuple[str, ...], list[float]] = {}

    def observe(self, key: tuple[str, ...], amount: float) -> None:
        """Add one observation (call under the owner's lock)."""
        row = self.values.get(key)
        if row is None:
            row = self.values[key] = [0.0] * (len(self._bounds) + 1)
        row[-1] += amount
        bounds = self._bounds
        i = bisect_left(bounds, amount)
        if i < len(bounds) and amount <= bounds[i]:
            row[i] += 1

    def observe_many(self, keyed: Iterable[tuple[tuple[str, ...], float]]) -> None:
        """:meth:`observe` for each ``(key, amount)``, in order (call under the owner's lock)."""
        values, bounds = self.values, self._bounds
        n = len(bounds)
        for key, amount in keyed:
            row = values.get(key)
            if row is None:
                row = values[key] = [0.0] * (n + 1)
            row[-1] += amount
            i = bisect_left(bounds, amount)
            if i < n and amount <= bounds[i]:
                row[i] += 1

    def snapshot(self) -> list[tuple[tuple[str, ...], list[float]]]:
        """Copies of the rows (call under the owner's lock)."""
        return [(key, row[:]) for key, row in self.values.items()]

    def family(self, rows: list[tuple[tuple[str, ...], list[float]]]) -> Metric:
        """The metric family of a snapshot, as the prometheus_client histogram would expose it."""
        (out,) = self._metric.describe()
        name, names, les = out.name, self._labelnames, self._les
        with_sum = self._bounds[0] >= 0
        for key, row in rows:
            labels = list(zip(names, key, strict=True))
            acc = 0.0
            for le, n in zip(les, row, strict=False):
                acc += n
                out.add_sample(name + "_bucket", dict([*labels, ("le", le)]), acc)
            out.add_sample(name + "_count", dict(labels), acc)
            if with_sum:
                out.add_sample(name + "_sum", dict(labels), row[-1])
        return out


class _Tables:
    """The per-turn metrics' values, one lock for all (see ``_CounterTable``)."""

    def __init__(self, m: _Counters) -> None:
        self.lock = threading.Lock()
        self.turns = _CounterTable(m.turns)
        self.checks = _CounterTable(m.checks)
        self.check_seconds = _CounterTable(m.check_seconds)
        self.check_errors = _CounterTable(m.check_errors)
        self.baseline_checks = _CounterTable(m.baseline_checks)
        self.cell_stats = _CounterTable(m.cell_stats)
        self.transitions = _CounterTable(m.transitions)
        self.attributions = _CounterTable(m.attributions)
        self.overhead = _HistogramTable(m.overhead, OVERHEAD_BUCKETS)
        self.history_tokens = _HistogramTable(m.history_tokens, HISTORY_TOKEN_BUCKETS)
        self.counters = {
            "handoffmon_turns": self.turns,
            "handoffmon_checks": self.checks,
            "handoffmon_check_seconds": self.check_seconds,
            "handoffmon_check_errors": self.check_errors,
            "handoffmon_baseline_checks": self.baseline_checks,
            "handoffmon_cell_stats": self.cell_stats,
            "handoffmon_rule_transitions": self.transitions,
            "handoffmon_attributions": self.attributions,
        }
        self.histograms = {
            "handoffmon_overhead_seconds": self.overhead,
            "handoffmon_history_tokens": self.history_tokens,
        }

    def family(self, name: str) -> Metric | None:
        """The family of the metric ``name`` if a table holds it, else None."""
        counter = self.counters.get(name)
        if counter is not None:
            with self.lock:
                values, exemplars = counter.snapshot()
            return counter.family(values, exemplars)
        histogram = self.histograms.get(name)
        if histogram is not None:
            with self.lock:
                rows = histogram.snapshot()
            return histogram.family(rows)
        return None


@dataclass(frozen=True)
class _Counters:
    turns: Counter
    checks: Counter
    check_seconds: Counter
    check_errors: Counter
    transitions: Counter
    baseline_checks: Counter
    cell_stats: Counter
    shadow_pair_stats: Counter
    attributions: Counter
    fallbacks: Counter
    errors: Counter
    no_reply: Counter
    dropped: Counter
    overhead: Histogram
    history_tokens: Histogram
    label_values: Gauge
    label_limit: Gauge
    label_overflows: Counter
    build_info: Gauge


_PER_TURN = (
    "turns",
    "checks",
    "check_seconds",
    "check_errors",
    "baseline_checks",
    "cell_stats",
    "transitions",
    "attributions",
    "history_tokens",
    "overhead",
)
"""Metrics labelled on every turn (their children are memoized: ``_Children``)."""


def _counters() -> _Counters:
    r = None  # unregistered: OwnMetrics serves them (without ``_created``)
    return _Counters(
        turns=Counter(
            "handoffmon_turns",
            "Assistant turns seen, by author, prefix model and depth bucket.",
            ("model", "prefix_model", "depth_bucket"),
            registry=r,
        ),
        checks=Counter(
            "handoffmon_checks",
            "Rule verdicts on turns by author (model) after prefix_model.",
            ("rule", "model", "prefix_model", "depth_bucket", "verdict"),
            registry=r,
        ),
        check_seconds=Counter(
            "handoffmon_check_seconds", "Time spent in each rule's checker.", ("rule",), registry=r
        ),
        check_errors=Counter(
            "handoffmon_check_errors",
            "Error verdicts by rule and reason: limits at work (too_large: reply too long to check, "
            "turn_budget: declared rules past the turn's CPU share, over_budget: a check over its CPU "
            "budget) and failures (raised, bad_outcome, scope_error, invalid_rule, other), which "
            "alone count in handoffmon_monitor_errors_total{stage='check'}.",
            ("rule", "reason"),
            registry=r,
        ),
        transitions=Counter(
            "handoffmon_rule_transitions",
            "Consecutive verdicts of a rule in one conversation (Markov refit input).",
            ("rule", "model", "handoff", "from_verdict", "to_verdict"),
            registry=r,
        ),
        baseline_checks=Counter(
            "handoffmon_baseline_checks",
            "Rule verdicts on clean same-author turns (no other model's text in the history): "
            "the refit's no-handoff baseline.",
            BASELINE_LABELS,
            registry=r,
        ),
        cell_stats=Counter(
            "handoffmon_cell_stats",
            "Per-cell sums for the refit's conversation-clustered intervals: stat=depth is the sum of "
            "depths of checked turns per depth bucket; stat=conversations|y2|yn|n2 (depth_bucket='*') "
            "are G, sum y^2, sum y*n, sum n^2 over conversations with y passes in n checks of the cell "
            "(rule='all': every rule together). The diagonal holds clean same-author turns only.",
            CELL_STAT_LABELS,
            registry=r,
        ),
        shadow_pair_stats=Counter(
            "handoffmon_shadow_pair_stats",
            "Shadow continuation pairs of (rule, prefix_model A, model B) for the switch-cost refit: "
            "stat=both_pass|model_only|prefix_only|both_fail is the paired table of B's and A's "
            "verdicts continuing the same prefix; stat=handoff_arm the pairs whose served turn was "
            "the handoff; stat=conversations|b2|c2|bc|bn|cn|n2 the conversation-cluster sums "
            "(rule='all': every rule together).",
            SHADOW_PAIR_LABELS,
            registry=r,
        ),
        attributions=Counter(
            "handoffmon_attributions",
            "Earlier assistant messages attributed, by method.",
            ("method",),
            registry=r,
        ),
        fallbacks=Counter(
            "handoffmon_fallbacks",
            "Router fallbacks taken before model served a request for requested_model.",
            FALLBACK_LABELS,
            registry=r,
        ),
        errors=Counter(
            "handoffmon_monitor_errors",
            "handoffmon's own failures (fail-open), by stage.",
            ("stage",),
            registry=r,
        ),
        no_reply=Counter(
            "handoffmon_responses_without_reply",
            "Answers that finished without a reply, by status, of every API (Responses: failed, "
            "cancelled, incomplete with no output text and no tool call; Messages: refusal before any "
            "text, incomplete; error: a Chat Completions, Responses or Messages stream the upstream ended "
            "with an error before any text; unreadable: a response with no reply to read, no choice or a "
            "choice without a message): recorded as no turn and checked by no rule.",
            ("status",),
            registry=r,
        ),
        dropped=Counter(
            "handoffmon_queue_dropped",
            "Turns dropped unrecorded: a queue or the byte budget was full, or lost at shutdown (still "
            "queued when close() ran out of time, or finished after it).",
            registry=r,
        ),
        overhead=Histogram(
            "handoffmon_overhead_seconds",
            "Time handoffmon spent per turn, by stage.",
            ("stage",),
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        ),
        history_tokens=Histogram(
            "handoffmon_history_tokens",
            "Approximate request history size in tokens, by depth bucket.",
            ("depth_bucket",),
            buckets=HISTORY_TOKEN_BUCKETS,
            registry=r,
        ),
        label_values=Gauge(
            "handoffmon_label_values",
            "Distinct values admitted per capped label.",
            ("label",),
            multiprocess_mode="livemax",
            registry=r,
        ),
        label_limit=Gauge(
            "handoffmon_label_limit",
            "Cap per label; values beyond it are exported as 'other'.",
            ("label",),
            multiprocess_mode="livemax",
            registry=r,
        ),
        label_overflows=Counter(
            "handoffmon_label_overflows",
            "Distinct names mapped to 'other' because a label cap was reached (in-process counters "
            "and labels), each counted once per process at its first rejection.",
            ("label",),
            registry=r,
        ),
        build_info=Gauge(
            "handoffmon_build_info",
            "Always 1; the handoffmon version as a label.",
            ("version",),
            multiprocess_mode="livemax",
            registry=r,
        ),
    )


_file_counters_lock = threading.Lock()
_process_counters: list[_Counters] = []


def _file_counters() -> _Counters:
    """The process's one set of per-turn metrics under ``PROMETHEUS_MULTIPROC_DIR``, shared by
    every exporter of the process. Each prometheus_client value writes its own running total
    into the process's file entry for its series, so two exporters of one process (two runtimes,
    two wrapped routers) with their own metrics overwrote each other's counts: 6 turns counted
    through two exporters read 4. After a fork the child keeps the set; prometheus_client moves
    its values to the child's own files."""
    with _file_counters_lock:
        if not _process_counters:
            _process_counters.append(_counters())
        return _process_counters[0]


def _refit_gauge(spec: GaugeSpec) -> Gauge:
    # mostrecent: under PROMETHEUS_MULTIPROC_DIR the last process that published wins.
    return Gauge(spec.name, spec.help, spec.labels, multiprocess_mode="mostrecent", registry=None)


def _refit_gauges() -> dict[str, Gauge]:
    """The refit gauges labelled by more than ``fit``. A gauge of a refit's own (the last
    success timestamp) is served from its creation, as 0 without labels (and, in multiprocess
    mode, written to the files as 0): "a refit succeeded in 1970"; with ``fit`` only its HELP
    line, while alert rules and tests tell "no refit yet" by its absence.
    ``PrometheusExporter`` creates those at their first publish."""
    return {spec.name: _refit_gauge(spec) for spec in REFIT_GAUGES if spec.labels != (FIT_LABEL,)}


class OwnMetrics(Collector):
    """A registry entry serving handoffmon's metric objects without their ``_created`` samples.

    prometheus_client gives every counter, histogram and summary child a ``<name>_created``
    sample unless its process-global switch (``disable_created_metrics()`` or
    ``PROMETHEUS_DISABLE_CREATED_SERIES``) is flipped. handoffmon lives in other people's
    processes and must not flip it, so its metrics are created unregistered and registered
    through this view, which drops ``_created`` from handoffmon's families only (the
    application's own metrics keep whatever the switch says). Under
    ``PROMETHEUS_MULTIPROC_DIR`` the multiprocess collector serves the files instead (and
    writes no ``_created`` either).

    Args:
        metrics: the metric objects (created with ``registry=None``).
        tables: serves some of them from plain tables instead (``PrometheusExporter``'s
            per-turn metrics; the metric objects then only name and describe them).
        late: families (name, help, type) of metrics that do not exist yet: described (so the
            registry reserves their names) but served only once :meth:`add` adds them.
    """

    def __init__(
        self,
        metrics: Iterable[MetricWrapperBase],
        tables: _Tables | None = None,
        late: Iterable[Metric] = (),
    ) -> None:
        self._metrics = tuple(metrics)
        self._tables = tables
        self._late = tuple(late)

    def add(self, metric: MetricWrapperBase) -> None:
        """Serve ``metric`` from now on (one of the ``late`` families)."""
        self._metrics = (*self._metrics, metric)  # one assignment: a scrape sees before or after

    def describe(self) -> Iterator[Metric]:
        """The families' names (the registry uses them to refuse duplicates)."""
        for metric in self._metrics:
            yield from metric.describe()
        served = {m._name for m in self._metrics}
        yield from (family for family in self._late if family.name not in served)

    def collect(self) -> Iterator[Metric]:
        """Every family's samples except ``*_created``."""
        tables = self._tables
        for metric in self._metrics:
            if tables is not None:
                table = tables.family(metric._name)
                if table is not None:
                    yield table
                    continue
            for family in metric.collect():
                if family.type in ("counter", "histogram", "summary"):
                    family = copy.copy(family)
                    family.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield family


def register_metrics(
    registry: CollectorRegistry,
    metrics: Iterable[MetricWrapperBase],
    tables: _Tables | None = None,
    late: Iterable[Metric] = (),
) -> OwnMetrics:
    """Register unregistered ``metrics`` (and the names of ``late`` ones) on ``registry``
    through an ``OwnMetrics`` view.

    Raises:
        ValueError: ``registry`` already serves one of the names.
    """
    view = OwnMetrics(metrics, tables, late)
    registry.register(view)
    return view


class PrometheusExporter:
    """Counts every turn into prometheus_client metrics on an injected registry.

    Implements ``Exporter`` and ``MonitorObserver``: the pipeline pushes its own health
    with ``observe_overhead(stage, s)``, ``count_error(stage)`` and ``count_drop(n)``
    (the only path for ``handoffmon_monitor_errors_total``,
    ``handoffmon_queue_dropped_total`` and ``handoffmon_overhead_seconds``; the exporter
    never reads ``Counts``). The refit pushes its result with ``publish_refit(result)``.

    Args:
        registry: where the metrics live (a fresh ``CollectorRegistry()`` in tests; pass
            ``prometheus_client.REGISTRY`` explicitly to use the global one).
        guard: label cardinality guard (share it with the OTel exporter).
        exemplars: attach ``conversation_id`` exemplars to turn/check counters
            (OpenMetrics exposition only; ignored in multiprocess mode).
        multiprocess: ``PROMETHEUS_MULTIPROC_DIR`` mode (default: detected from the
            environment). Refit series that vanish are then set to NaN, not removed.

    Raises:
        HandoffmonError: the registry already holds handoffmon metrics.
    """

    export_inline = True
    """``export`` only updates in-memory metrics (never waits on I/O): the pipeline calls it on
    its check thread rather than through a thread of its own (see ``ExporterDispatch``)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        guard: LabelGuard | None = None,
        exemplars: bool = False,
        multiprocess: bool | None = None,
        _tables: bool = True,
    ) -> None:
        self.registry = registry
        self.guard = guard or LabelGuard()
        self.multiprocess = (MULTIPROC_ENV in os.environ) if multiprocess is None else multiprocess
        self._files_dirty = False  # a turn came since the scrape-time counters were last written
        self._files_synced_at = float("-inf")
        self._closed = False  # shut down: holds the FILE_REFRESHER no more
        self._exemplars = exemplars and not self.multiprocess
        self._m = _file_counters() if self.multiprocess and os.environ.get(MULTIPROC_ENV) else _counters()
        self._refit = _refit_gauges()
        self._late = {spec.name: spec for spec in REFIT_GAUGES if spec.labels == (FIT_LABEL,)}
        """Label-less refit gauges: created, and served, from the first refit that sets them."""
        # Per-turn metrics live in plain tables served at scrape time, except under
        # PROMETHEUS_MULTIPROC_DIR, where only prometheus_client's values reach the files.
        self._t = None if self.multiprocess or not _tables else _Tables(self._m)
        try:
            own = [getattr(self._m, f.name) for f in fields(self._m)]
            late = [Metric(spec.name, spec.help, "gauge") for spec in self._late.values()]
            self._view = register_metrics(registry, [*own, *self._refit.values()], self._t, late)
        except ValueError as exc:
            raise HandoffmonError(
                "this Prometheus registry already holds handoffmon metrics; give each "
                "PrometheusExporter its own CollectorRegistry"
            ) from exc
        self._m.build_info.labels(__version__).set(1)
        self._init_known_labels()
        self._verdict_sets: set[tuple[str, str, str, str]] = set()
        self._plans: dict[tuple[Any, ...], _TablePlan] = {}
        """A turn shape's table keys (``_plan``), at most ``PLAN_CACHE``."""
        self._method_keys: dict[str, tuple[str]] = {}
        """``(method_label(method),)`` per attribution method seen, at most ``_METHOD_KEYS``."""
        self._kids = {name: _Children(getattr(self._m, name)) for name in _PER_TURN}
        self._published: dict[str, set[tuple[str, ...]]] = {spec.name: set() for spec in REFIT_GAUGES}
        self._refit_lock = threading.Lock()
        self._guard_version = -1
        self._overflows: dict[str, int] = {}
        self._overflow_total = -1
        self._stage_keys: dict[str, tuple[str]] = {}
        """``(guard.stage(stage),)`` of the stages admitted as themselves (at most ``MAX_STAGES``)."""
        self._log = get_logger("handoffmon.exporters", exporter="prometheus")
        self._store: FileMirror | None = None
        """The store's counters, written to the multiprocess files (``observe_store``)."""
        self._sync_label_usage()

    @classmethod
    def from_config(
        cls, config: HandoffmonConfig, registry: CollectorRegistry, guard: LabelGuard | None = None
    ) -> PrometheusExporter:
        """Build from ``telemetry.*`` (caps, exemplars) on ``registry``."""
        return cls(
            registry, guard=guard or LabelGuard.from_config(config), exemplars=config.telemetry.exemplars
        )

    # -- Exporter ---------------------------------------------------------------------

    def export(self, result: TurnResult) -> bool:
        """Count one turn; returns False (and logs) on failure, never raises."""
        try:
            if self._t is not None:
                self._count_tables(result, self._t)
            else:
                self._count(result)
        except Exception as exc:
            log_error(self._log, "export_failed", "export_prometheus", exc)
            return False
        if self.multiprocess:  # at most every FILE_SYNC_S here; the rest on the idle turn
            self._files_dirty = True
            if _now() - self._files_synced_at >= FILE_SYNC_S:
                self._sync_files()
        return True

    def idle(self) -> None:
        """``IdleObserver``: under ``PROMETHEUS_MULTIPROC_DIR``, write what the scrape-time
        counters gained since the last write, if any turn came since (a check thread's queue
        ran empty, or every ``pipeline`` ``idle_every`` turns). Never raises."""
        if self._files_dirty:
            self._sync_files()

    def observe_store(
        self,
        stats: Callable[[], dict[str, int]],
        evictions: Callable[[], dict[str, int]] | None = None,
        operations: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """The store's ``stats()``, ``evictions()`` and ``operations()`` (the runtime wires them).
        Under ``PROMETHEUS_MULTIPROC_DIR`` they are written to the files (``idle``,
        ``FILE_SYNC_S``) as ``handoffmon_store_failures_total``,
        ``handoffmon_store_evictions_total`` and ``handoffmon_store_operations_total`` (a
        ``FileMirror`` of their ``StoreStatsCollector``), since a multiprocess ``/metrics``
        never reads the collector that serves them otherwise; else nothing to do."""
        if self.multiprocess:
            self._store = FileMirror(StoreStatsCollector(stats, evictions, operations))
            self._sync_files()

    def _sync_files(self) -> None:
        """Write the growth of every scrape-time counter of the process (the store's, routing's,
        shadow's: ``sync_file_mirrors``) to the multiprocess files; logs a failure and counts it
        (``monitor_errors{stage="export"}``, as the ``FILE_REFRESHER`` does), never raises."""
        self._files_dirty, self._files_synced_at = False, _now()
        if os.environ.get(MULTIPROC_ENV) and not self._closed:
            FILE_REFRESHER.hold(self)  # from now on the files move without turns too
        failed = sync_file_mirrors()
        if failed is not None:
            log_error(self._log, "observe_failed", "export_prometheus", failed)
            self.count_error(SYNC_FAILURE_STAGE)

    def _count(self, result: TurnResult) -> None:
        g, m, kid = self.guard, self._m, self._kids
        ctx, rec = result.context, result.record
        model, prefix = g.model(rec.author), g.model(ctx.prefix_model)
        bucket = g.depth_bucket(result.depth_bucket, ctx.depth)
        ex = {"conversation_id": ctx.conversation_id[:_EXEMPLAR_CHARS]} if self._exemplars else None
        kid["turns"](model, prefix, bucket).inc(1, exemplar=ex)
        checks, check_seconds = kid["checks"], kid["check_seconds"]
        for check in result.checks:
            rule = g.rule(check.rule)
            if (rule, model, prefix, bucket) not in self._verdict_sets:
                self._init_verdicts(rule, model, prefix, bucket)
            verdict = g.verdict(check.verdict)
            checks(rule, model, prefix, bucket, verdict).inc(1, exemplar=ex)
            check_seconds(rule).inc(max(check.duration_s, 0.0))
            if verdict == "error":
                kid["check_errors"](rule, check_error_reason(check.reason)).inc()
        baseline, stats = refit_input_labels(result, g)
        for labels in baseline:
            kid["baseline_checks"](*labels).inc()
        cell_stats = kid["cell_stats"]
        for labels, v in stats:
            cell_stats(*labels).inc(v)
        handoff = g.handoff(rec.handoff)
        for tr in result.transitions:
            kid["transitions"](
                g.rule(tr.rule), model, handoff, g.verdict(tr.from_verdict), g.verdict(tr.to_verdict)
            ).inc()
        for method, n in _Tally(result.attribution_methods).items():
            kid["attributions"](method_label(method)).inc(n)
        if rec.fallbacks > 0:
            m.fallbacks.labels(*fallback_labels(result, g, model)).inc(rec.fallbacks)
        kid["history_tokens"](bucket).observe(ctx.history_tokens)
        if g.version != self._guard_version or g.overflow_total != self._overflow_total:
            self._sync_label_usage()

    def _count_tables(self, result: TurnResult, t: _Tables) -> None:
        """``_count`` into the plain tables, from the keys of the turn's shape (``_plan``). The
        first turn of a shape is counted by ``_count_tables_slow``, which calls the guard as
        ``_count`` does; its keys are then kept: the guard maps a name it has seen the same
        way for good (admitted: itself; over a cap: ``other``) and looking it up again changes
        nothing (an overflow counts at a name's first rejection). Same label values, side
        effects, values and series order either way."""
        if self._exemplars:
            self._count_tables_slow(result, t)
            return
        ctx, rec, g = result.context, result.record, self.guard
        bucket = g.depth_bucket(result.depth_bucket, ctx.depth)
        if bucket != result.depth_bucket:  # not one of the guard's buckets: it depends on the depth
            self._count_tables_slow(result, t)
            return
        shape, cluster, found = turn_shape(result), result.cluster, result.checks
        try:
            plan = self._plans.get(shape)
        except TypeError:  # a name or verdict that is not a string: counted as before, never kept
            self._count_tables_slow(result, t)
            return
        if plan is None:
            self._count_tables_slow(result, t)
            plans = self._plans
            if len(plans) >= PLAN_CACHE:
                plans.clear()
            plans[shape] = self._plan(result, shape)
            return
        turn, checks, baseline, depth_keys, cluster_keys, transitions = plan
        with t.lock:
            t.turns.values[turn] += 1
            if checks:
                counts, seconds = t.checks.values, t.check_seconds.values
                for (key, skey, error_rule), check in zip(checks, found, strict=True):
                    counts[key] += 1
                    seconds[skey] += max(check.duration_s, 0.0)
                    if error_rule is not None:
                        t.check_errors.values[(error_rule, check_error_reason(check.reason))] += 1
            if baseline:
                d = t.baseline_checks.values
                for key in baseline:
                    d[key] += 1
            d = t.cell_stats.values
            if depth_keys:
                depth = ctx.depth
                for key in depth_keys:
                    d[key] += depth
            add_cluster_sums(d, cluster_keys, cluster)
            if transitions:
                d = t.transitions.values
                for key in transitions:
                    d[key] += 1
            methods = result.attribution_methods
            if methods:  # one at a time: the same sums, series in order of first appearance
                d, method_keys = t.attributions.values, self._method_keys
                for method in methods:
                    mkey = method_keys.get(method)
                    if mkey is None:
                        mkey = (method_label(method),)
                        if len(method_keys) < _METHOD_KEYS:
                            method_keys[method] = mkey
                    d[mkey] += 1
            t.history_tokens.observe((bucket,), ctx.history_tokens)
        if rec.fallbacks > 0:
            self._m.fallbacks.labels(*fallback_labels(result, g, turn[0])).inc(rec.fallbacks)
        if g.version != self._guard_version or g.overflow_total != self._overflow_total:
            self._sync_label_usage()

    def _plan(self, result: TurnResult, shape: tuple[Any, ...]) -> _TablePlan:
        """The table keys of a turn of this shape, once ``_count_tables_slow`` counted one (its
        names seen by the guard, its check cells' verdicts created at 0)."""
        g = self.guard
        author, prefix_name, bucket, handoff_flag, clean = shape[:5]
        found = result.checks
        model, prefix = g.model(author), g.model(prefix_name)
        norm = g.verdict
        checks = tuple(
            (
                (g.rule(c.rule), model, prefix, bucket, norm(c.verdict)),
                (g.rule(c.rule),),
                g.rule(c.rule) if norm(c.verdict) == "error" else None,
            )
            for c in found
        )
        baseline = tuple((g.rule(c.rule), model, bucket, norm(c.verdict)) for c in found) if clean else ()
        depth_keys: tuple[tuple[str, ...], ...] = ()
        if found and in_cell(author, prefix_name, clean):
            depth_keys = tuple(
                (g.rule(c.rule), model, prefix, bucket, "depth")
                for c in found
                if c.verdict in ("pass", "fail")
            )
        cluster_keys = tuple(
            tuple((g.rule(step.rule), model, prefix, CELL_TOTAL, stat) for stat in CLUSTER_STATS)
            for step in result.cluster
        )
        handoff = g.handoff(handoff_flag)
        transitions = tuple(
            (g.rule(tr.rule), model, handoff, norm(tr.from_verdict), norm(tr.to_verdict))
            for tr in result.transitions
        )
        return ((model, prefix, bucket), checks, baseline, depth_keys, cluster_keys, transitions)

    def _count_tables_slow(self, result: TurnResult, t: _Tables) -> None:
        """``_count`` into the plain tables: the same label values, guard calls and order.

        ``refit_input_labels`` is inlined, and every guard lookup of a model or rule name
        starts with the guard's own first step (its admitted names, ``LabelGuard.admitted``),
        calling the guard only for a name not found there: the same labels and the same
        side effects (admissions, overflow counts) as calling it every time."""
        g = self.guard
        models, rules = g.admitted()
        ctx, rec = result.context, result.record
        author, prefix_name = rec.author, ctx.prefix_model
        model = models.get(author) or g.model(author)  # type: ignore[arg-type]
        prefix = models.get(prefix_name) or g.model(prefix_name)
        bucket = g.depth_bucket(result.depth_bucket, ctx.depth)
        ex = (
            Exemplar({"conversation_id": ctx.conversation_id[:_EXEMPLAR_CHARS]}, 1, time.time())
            if self._exemplars
            else None
        )
        checks = result.checks
        with t.lock:
            key: tuple[str, ...] = (model, prefix, bucket)
            d = t.turns.values
            d[key] += 1
            if ex is not None:
                t.turns.exemplars[key] = ex
            if checks:
                counts, seconds, verdict_sets = t.checks.values, t.check_seconds.values, self._verdict_sets
                for check in checks:
                    rule = rules.get(check.rule) or g.rule(check.rule)
                    if (rule, model, prefix, bucket) not in verdict_sets:
                        self._init_verdicts(rule, model, prefix, bucket)
                    verdict = check.verdict if check.verdict in VERDICTS else "error"
                    key = (rule, model, prefix, bucket, verdict)
                    counts[key] += 1
                    if ex is not None:
                        t.checks.exemplars[key] = ex
                    skey = (rule,)
                    seconds[skey] += max(check.duration_s, 0.0)
                    if verdict == "error":
                        t.check_errors.values[(rule, check_error_reason(check.reason))] += 1
            # refit_input_labels(result, g), inlined: it looks the turn's names up again
            model2 = models.get(author) or g.model(author)  # type: ignore[arg-type]
            prefix2 = models.get(prefix_name) or g.model(prefix_name)
            bucket2 = g.depth_bucket(result.depth_bucket, ctx.depth)
            if result.clean and checks:
                d = t.baseline_checks.values
                for check in checks:
                    verdict = check.verdict if check.verdict in VERDICTS else "error"
                    key = (rules.get(check.rule) or g.rule(check.rule), model2, bucket2, verdict)
                    d[key] += 1
            d = t.cell_stats.values
            if checks and in_cell(author, prefix_name, result.clean):  # type: ignore[arg-type]
                depth = ctx.depth
                cell_bucket = CELL_TOTAL if result.depth_bucket == CELL_TOTAL else bucket2
                for check in checks:
                    if check.verdict in ("pass", "fail"):
                        rule = rules.get(check.rule) or g.rule(check.rule)
                        key = (rule, model2, prefix2, cell_bucket, "depth")
                        d[key] += depth
            for step in result.cluster:
                hit = rules.get(step.rule)
                for stat, v in zip(CLUSTER_STATS, step[1:], strict=True):
                    if v:  # one lookup per key, as refit_input_labels
                        key = (hit or g.rule(step.rule), model2, prefix2, CELL_TOTAL, stat)
                        d[key] += v
            if result.transitions:
                handoff = g.handoff(rec.handoff)
                d = t.transitions.values
                for tr in result.transitions:
                    key = (
                        rules.get(tr.rule) or g.rule(tr.rule),
                        model,
                        handoff,
                        tr.from_verdict if tr.from_verdict in VERDICTS else "error",
                        tr.to_verdict if tr.to_verdict in VERDICTS else "error",
                    )
                    d[key] += 1
            if result.attribution_methods:
                d = t.attributions.values
                for method, n in _Tally(result.attribution_methods).items():
                    d[(method_label(method),)] += n
            t.history_tokens.observe((bucket,), ctx.history_tokens)
        if rec.fallbacks > 0:
            self._m.fallbacks.labels(*fallback_labels(result, g, model)).inc(rec.fallbacks)
        if g.version != self._guard_version or g.overflow_total != self._overflow_total:
            self._sync_label_usage()

    def _init_known_labels(self) -> None:
        """Children whose label values are known up front start at 0 (no "No data" panels)."""
        for stage in MONITOR_STAGES:
            self._m.errors.labels(self.guard.stage(stage))
        for status in NO_REPLY_STATUSES:
            self._m.no_reply.labels(status)
        for method in ATTRIBUTION_METHODS:
            if self._t is not None:
                self._t.attributions.values[(method,)] = 0.0
            else:
                self._m.attributions.labels(method)

    def _init_verdicts(self, rule: str, model: str, prefix: str, bucket: str) -> None:
        """Create every verdict of a new (rule, model, prefix, bucket) cell at 0.

        Bounded: the four labels are capped by the guard, so the set is too.
        """
        if self._t is not None:  # under the tables' lock (``_count_tables``)
            checks = self._t.checks.values
            for verdict in VERDICTS:
                checks.setdefault((rule, model, prefix, bucket, verdict), 0.0)
        else:
            for verdict in VERDICTS:
                self._m.checks.labels(rule, model, prefix, bucket, verdict)
        self._verdict_sets.add((rule, model, prefix, bucket))

    def _sync_label_usage(self) -> None:
        self._guard_version = self.guard.version
        self._overflow_total = self.guard.overflow_total
        for label, (used, cap) in self.guard.usage().items():
            self._m.label_values.labels(label).set(used)
            self._m.label_limit.labels(label).set(cap)
        for label, n in self.guard.overflows().items():
            seen = self._overflows.get(label, 0)
            self._m.label_overflows.labels(label).inc(max(0, n - seen))  # creates it at 0 too
            self._overflows[label] = max(n, seen)

    # -- ShadowPairObserver ------------------------------------------------------------

    def count_shadow(self, increments: Mapping[ShadowKey, int]) -> None:
        """Add a shadow pair's increments to ``handoffmon_shadow_pair_stats_total``; never raises."""
        try:
            for key, n in increments.items():
                self._m.shadow_pair_stats.labels(*key).inc(n)
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)
        if self.multiprocess:  # the shadow call behind the pair is counted by now
            self._sync_files()

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing is buffered (values are read at scrape time) but, under
        ``PROMETHEUS_MULTIPROC_DIR``, the scrape-time counters' growth not yet in the files."""
        if self.multiprocess and self._files_dirty:
            self._sync_files()
        return True

    def shutdown(self) -> None:
        """Release the process's ``FILE_REFRESHER`` (stopped with the last multiprocess exporter);
        the registry belongs to the caller."""
        self._closed = True
        FILE_REFRESHER.release(self)

    # -- MonitorObserver ----------------------------------------------------------------

    def observe_overhead(self, stage: str, seconds: float) -> None:
        """Observe ``seconds`` into ``handoffmon_overhead_seconds{stage}``; never raises."""
        try:
            t = self._t
            if t is not None:
                key = (self.guard.stage(stage),)
                with t.lock:
                    t.overhead.observe(key, max(seconds, 0.0))
                return
            self._kids["overhead"](self.guard.stage(stage)).observe(max(seconds, 0.0))
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)

    def observe_overheads(self, items: Sequence[tuple[str, float]]) -> None:
        """:meth:`observe_overhead` for each ``(stage, seconds)``, under one lock; never raises."""
        t = self._t
        if t is None:
            for stage, seconds in items:
                self.observe_overhead(stage, seconds)
            return
        try:
            keys, keyed = self._stage_keys, []
            for stage, seconds in items:
                key = keys.get(stage)
                if key is None:
                    key = (self.guard.stage(stage),)
                    if key[0] == stage:  # admitted as itself: later lookups would be plain hits
                        keys[stage] = key
                keyed.append((key, max(seconds, 0.0)))
            with t.lock:
                t.overhead.observe_many(keyed)
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)

    def count_error(self, stage: str) -> None:
        """Increment ``handoffmon_monitor_errors_total{stage}``; never raises."""
        try:
            self._m.errors.labels(self.guard.stage(stage)).inc()
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)

    def count_drop(self, n: int = 1) -> None:
        """Increment ``handoffmon_queue_dropped_total`` by ``n``; never raises."""
        try:
            self._m.dropped.inc(n)
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)

    # -- NoReplyObserver ----------------------------------------------------------------

    def count_no_reply(self, status: str) -> None:
        """Increment ``handoffmon_responses_without_reply_total{status}``; never raises."""
        try:
            self._m.no_reply.labels(status if status in NO_REPLY_STATUSES else "other").inc()
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_prometheus", exc)

    # -- refit ------------------------------------------------------------------------

    def publish_refit(self, result: RefitResult) -> bool:
        """Replace every refit gauge with ``result``'s values; returns False on failure.

        New values are set before vanished series are removed, so series present in both
        refits never disappear from a scrape in between (alerts with ``for:`` keep their
        timers). In multiprocess mode removal is not supported by prometheus_client, so
        vanished series are set to NaN instead.
        """
        try:
            series = refit_series(result, self.guard)
            with self._refit_lock:
                for name, values in series.items():
                    self._replace(name, values)
        except Exception as exc:
            log_error(self._log, "publish_refit_failed", "refit_publish", exc)
            return False
        if self.multiprocess:  # also writes the counters of an idle worker now and then
            self._sync_files()
        return True

    def _replace(self, name: str, values: Series) -> None:
        gauge = self._refit.get(name)
        if gauge is None:  # a label-less gauge never set: absent until a refit sets it
            if not values:
                return
            gauge = self._refit[name] = _refit_gauge(self._late[name])
            self._view.add(gauge)
        for labels, value in values.items():
            (gauge.labels(*labels) if labels else gauge).set(value)
        for labels in self._published[name] - values.keys():
            if self.multiprocess:
                gauge.labels(*labels).set(float("nan"))
            else:
                gauge.remove(*labels)
        self._published[name] = set(values) if not self.multiprocess else self._published[name] | set(values)
