"""The store's own counters, read at scrape time: ``handoffmon_store_operations_total{op}`` and
``handoffmon_store_failures_total{op, kind}`` (the store guard's calls and failures) and
``handoffmon_store_evictions_total{what}`` (what the memory store's caps dropped)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

EVICTIONS_HELP = (
    "Conversations and keys the memory store dropped to stay within store.max_conversations, "
    "store.max_keys and store.max_keys_per_conversation, by what."
)


FAILURES_HELP = "Attribution store operations that failed or were skipped (fail-open), by op and kind."

OPERATIONS_HELP = (
    "Attribution store operations (backend calls, made or skipped; a Redis batch of many turns is "
    "one), by op: the denominator of handoffmon_store_failures_total."
)


class StoreStatsCollector(Collector):
    """Exposes a store's ``stats()`` as ``handoffmon_store_failures_total{op, kind}`` at scrape time.

    ``kind`` is ``errors`` (the backend failed), ``timeouts``, ``corrupt``, ``conflicts`` or
    ``skipped`` (not tried while the store was backing off after a failure). With
    ``operations`` (``GuardedStore.operations``), ``handoffmon_store_operations_total{op}``: every
    call the guard made or skipped, one per call whatever it carries, the unit failures are
    counted in (failures / operations is the share of calls that failed). With
    ``evictions`` (``GuardedStore.evictions``), a backend that evicts by its own caps (the
    memory store) also exposes ``handoffmon_store_evictions_total{what}``: ``conversations``
    (the least recently used, past ``store.max_conversations``; the next turn of one starts
    without its history) and ``keys`` (a conversation's oldest, past
    ``store.max_keys_per_conversation``). Reads counters only; adds nothing to the request path.
    """

    def __init__(
        self,
        stats: Callable[[], dict[str, int]],
        evictions: Callable[[], dict[str, int]] | None = None,
        operations: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self._stats = stats
        self._evictions = evictions
        self._operations = operations

    def collect(self) -> Iterator[Metric]:
        if self._operations is not None:
            family = CounterMetricFamily("handoffmon_store_operations", OPERATIONS_HELP, labels=["op"])
            for op, value in sorted(self._operations().items()):
                family.add_metric([op], value)
            yield family
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
