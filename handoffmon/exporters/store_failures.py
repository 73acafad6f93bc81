"""The store's own counters, read at scrape time: ``handoffmon_store_failures_total{op, kind}``
(the store guard's failures) and ``handoffmon_store_evictions_total{what}`` (what the memory
store's caps dropped)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

EVICTIONS_HELP = (
    "Conversations and keys the memory store dropped to stay within store.max_conversations "
    "and store.max_keys_per_conversation, by what."
)


FAILURES_HELP = "Attribution store operations that failed or were skipped (fail-open), by op and kind."


class StoreStatsCollector(Collector):
    """Exposes a store's ``stats()`` as ``handoffmon_store_failures_total{op, kind}`` at scrape time.

    ``kind`` is ``errors`` (the backend failed), ``timeouts``, ``corrupt``, ``conflicts`` or
    ``skipped`` (not tried while the store was backing off after a failure). With
    ``evictions`` (``GuardedStore.evictions``), a backend that evicts by its own caps (the
    memory store) also exposes ``handoffmon_store_evictions_total{what}``: ``conversations``
    (the least recently used, past ``store.max_conversations``; the next turn of one starts
    without its history) and ``keys`` (a conversation's oldest, past
    ``store.max_keys_per_conversation``). Reads counters only; adds nothing to the request path.
    """

    def __init__(
        self, stats: Callable[[], dict[str, int]], evictions: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self._stats = stats
        self._evictions = evictions

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("handoffmon_store_failures", FAILURES_HELP, labels=["op", "kind"])
        for name, value in sorted(self._stats().items()):
            family.add_metric(list(_op_kind(name)), value)
        yield family
        evicted = self._evictions() if self._evictions is not None else {}
        if evicted:  # only a backend with caps of its own has the series
            family = CounterMetricFamily("handoffmon_store_evictions", EVICTIONS_HELP, labels=["what"])
            for what, value in sorted(evicted.items()):
                family.add_metric([what], value)
            yield family


def _op_kind(name: str) -> tuple[str, str]:
    """``(op, kind)`` of a ``stats()`` key such as ``put_state_timeouts``."""
    op, _, kind = name.rpartition("_")
    return op, kind


class StoreStatsMirror:
    """The same two counters written into prometheus_client's ``PROMETHEUS_MULTIPROC_DIR`` files.

    A multiprocess ``/metrics`` (LiteLLM Proxy with several workers, gunicorn) serves the files
    only, never a worker's registry, so ``StoreStatsCollector`` is not read there and the
    store's failures and evictions were missing. :meth:`sync` adds what ``stats()`` and
    ``evictions()`` gained since the last sync to file-backed counters (unregistered: the
    worker's own registry keeps serving the collector); the ``PrometheusExporter`` calls it
    after each turn, which is when the store is used. After a fork the child's files start at 0
    and it adds only what its own store counted on top of the parent's values.
    """

    def __init__(
        self, stats: Callable[[], dict[str, int]], evictions: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self._stats = stats
        self._evictions = evictions
        self._failures = Counter("handoffmon_store_failures", FAILURES_HELP, ("op", "kind"), registry=None)
        self._evicted = Counter("handoffmon_store_evictions", EVICTIONS_HELP, ("what",), registry=None)
        self._seen: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Add the counters' growth since the last call (creating new series at 0). Raises what
        ``stats()`` or ``evictions()`` raise."""
        with self._lock:
            for name, value in self._stats().items():
                self._add(self._failures, ("failures", *_op_kind(name)), value)
            for what, value in (self._evictions() if self._evictions is not None else {}).items():
                self._add(self._evicted, ("evictions", what), value)

    def _add(self, counter: Counter, key: tuple[str, ...], value: float) -> None:
        child = counter.labels(*key[1:])
        seen = self._seen.get(key, 0.0)
        if value > seen:
            child.inc(value - seen)
            self._seen[key] = value
