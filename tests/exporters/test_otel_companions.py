"""A Monitor given an OTelExporter registers its events exporter too, once, whatever the list.

The counting (``OTelExporter``) and the spans/events (``OTelExporter.events``) are two exporters
of the pipeline; a Monitor built by hand with only the ``OTelExporter`` (the documented
``exporters=`` argument) silently emitted no span and no event before ``companions``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handoffmon.exporters import build_exporters
from handoffmon.exporters.otel import EVALUATION_EVENT, OTelEvents, OTelExporter
from handoffmon.protocols import Exporter
from tests.pipeline.helpers import make_config, monitor, run_conversation

RULES = [{"name": "json", "check": "valid_json"}]


def _config(span: str) -> object:
    return make_config(
        telemetry={"otel": True, "otel_span": span, "prometheus": False, "log_turns": False},
        rules=RULES,
        refit={"interval_s": 0},
    )


Lists = Callable[[OTelExporter], list[Exporter]]
LISTS: dict[str, Lists] = {
    "alone": lambda otel: [otel],
    "events after": lambda otel: [otel, otel.events],
    "events first": lambda otel: [otel.events, otel],
    "twice": lambda otel: [otel, otel],
}


@pytest.mark.parametrize("span", ["own", "join"])
@pytest.mark.parametrize("listing", list(LISTS))
def test_a_hand_built_monitor_emits_the_events_once(span: str, listing: str) -> None:
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp = LoggerProvider(shutdown_on_exit=False)
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    otel = OTelExporter(
        tracer_provider=tp,
        meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False),
        logger_provider=lp,
        span=span,  # type: ignore[arg-type]
    )
    with monitor(_config(span), exporters=LISTS[listing](otel)) as m:
        # the events' exporter first, so at close it drains before the counting flushes
        assert m.exporters == (otel.events, otel)
        run_conversation(m, ["a", "b", "a"], ["{}", "{}", "not json"])
        assert m.flush(10)
    evaluations = [r for r in logs.get_finished_logs() if r.log_record.event_name == EVALUATION_EVENT]
    assert len(evaluations) == 3  # one rule, three turns: once each
    assert len(spans.get_finished_spans()) == (3 if span == "own" else 0)


def test_build_exporters_and_the_monitor_register_the_events_once() -> None:
    config = _config("own")
    with monitor(config, exporters=build_exporters(config, tracer_provider=TracerProvider())) as m:
        kinds = [type(e) for e in m.exporters]
        m.add_exporter(m.exporters[-1])  # again, later: still once
        assert [type(e) for e in m.exporters] == kinds == [OTelEvents, OTelExporter]
