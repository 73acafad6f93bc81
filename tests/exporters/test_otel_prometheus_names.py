"""An OTel → Prometheus pipeline names every instrument like the native exporter's series.

The collector's ``prometheus``/``prometheusremotewrite`` exporters and Prometheus' own OTLP
receiver (``UnderscoreEscapingWithSuffixes``, the default) name a metric with
``prometheus/otlptranslator``: the unit's Prometheus word is appended unless the name already
has it, ``_total`` to monotonic sums, and ``_ratio`` to gauges whose unit is ``1``. The
rules are re-stated below (``_translated``) from ``metric_namer.go``.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry

from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard

_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "", "%": "percent"}
_PER_UNIT = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_MONOTONIC = {"create_counter", "create_observable_counter"}
_GAUGES = {"create_gauge", "create_observable_gauge"}


def _translated(name: str, unit: str, create: str) -> str:
    """otlptranslator's ``normalizeName`` for the units handoffmon uses."""
    tokens = [t for t in re.split(r"[^a-zA-Z0-9:]", name) if t]
    unit_no_annotations = re.sub(r"\{[^}]*\}", "", unit)
    main, _, per = unit_no_annotations.partition("/")
    main_word = _UNIT_WORDS.get(main, main)
    per_word = f"per_{_PER_UNIT.get(per, per)}" if per else ""
    for word in (main_word, per_word):
        if word and word not in tokens:
            tokens.append(word)
    if create in _MONOTONIC:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and create in _GAUGES:
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


class _SpyMeter:
    """A real SDK meter that also remembers each instrument's (name, unit, create method)."""

    def __init__(self, meter: Any, seen: list[tuple[str, str, str]]) -> None:
        self._meter, self._seen = meter, seen

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._meter, attr)
        if not attr.startswith("create_"):
            return fn

        def create(*args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            self._seen.append((bound.arguments["name"], bound.arguments.get("unit", ""), attr))
            return fn(*args, **kwargs)

        return create


class _SpyProvider(MeterProvider):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str]] = []

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return _SpyMeter(super().get_meter(*args, **kwargs), self.seen)


def _prometheus_names() -> dict[str, str]:
    """Family name → the name of its samples' series in the native exporter."""
    registry = CollectorRegistry()
    PrometheusExporter(registry, guard=LabelGuard())
    suffix = {"counter": "_total"}
    return {f.name: f.name + suffix.get(f.type, "") for f in registry.collect()}


def test_every_instrument_translates_to_the_native_series_name() -> None:
    provider = _SpyProvider()
    OTelExporter(meter_provider=provider, guard=LabelGuard())
    native = _prometheus_names()
    twins = [(name, unit, create) for name, unit, create in provider.seen if name in native]
    assert len(twins) >= 30, provider.seen  # every counter, histogram, label gauge and refit gauge
    wrong = {
        name: (_translated(name, unit, create), native[name])
        for name, unit, create in twins
        if _translated(name, unit, create) != native[name]
    }
    assert wrong == {}


def test_translation_rules_as_restated() -> None:
    """The re-statement agrees with otlptranslator's documented examples."""
    assert _translated("http.server.duration", "s", "create_histogram") == "http_server_duration_seconds"
    assert _translated("requests.count", "1", "create_counter") == "requests_count_total"
    assert _translated("memory.usage", "By", "create_observable_gauge") == "memory_usage_bytes"
    assert _translated("cpu.utilization", "1", "create_observable_gauge") == "cpu_utilization_ratio"
    assert _translated("handoffmon_turns", "{turn}", "create_counter") == "handoffmon_turns_total"
