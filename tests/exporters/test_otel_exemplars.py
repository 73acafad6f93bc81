"""handoffmon's OTel counters carry exemplars of the turn's trace, though counted on a background thread.

The SDK's default exemplar filter (``trace_based``) samples a measurement when the context it
is recorded in holds a sampled span. handoffmon counts a turn on a worker thread, where no
span is current, so the turn's own trace context (its ``traceparent``, or the own span) has to
be handed to each ``add``/``record``; a metrics backend then links e.g. a failing
``handoffmon_checks`` point to the request's trace, as the Prometheus exporter's exemplars do.
"""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from handoffmon.exporters.otel import OTelExporter
from handoffmon.labels import LabelGuard
from tests.exporters.turns import make_result

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = SAMPLED[:-2] + "00"


def _exemplar_traces(reader: InMemoryMetricReader) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    for exemplar in point.exemplars:
                        out.setdefault(metric.name, set()).add(exemplar.trace_id)
    return out


def _export_on_a_worker(exporter: OTelExporter, traceparent: str) -> None:
    result = make_result(metadata={"traceparent": traceparent}, checks=[("json", "fail")])
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(exporter.export(result)))
    worker.start()
    worker.join(10)
    assert done == [True]


@pytest.mark.parametrize("span", ["join", "own"])
def test_sampled_turns_leave_exemplars_of_their_trace(span: str) -> None:
    reader = InMemoryMetricReader()
    exporter = OTelExporter(
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[reader]),
        guard=LabelGuard(),
        span=span,  # type: ignore[arg-type]
    )
    _export_on_a_worker(exporter, SAMPLED)
    traces = _exemplar_traces(reader)
    for name in ("handoffmon_turns", "handoffmon_checks", "handoffmon_history_tokens"):
        assert traces.get(name) == {TRACE_ID}, (name, traces)


def test_unsampled_turns_leave_none() -> None:
    reader = InMemoryMetricReader()
    exporter = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=LabelGuard())
    _export_on_a_worker(exporter, UNSAMPLED)
    assert _exemplar_traces(reader) == {}
