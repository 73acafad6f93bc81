"""An application that configures its OpenTelemetry SDK after handoffmon was built.

``handoffmon.wrap(router)`` at import time and ``set_tracer_provider``/``set_logger_provider``
in ``main()`` is a common order. The exporter then runs on the API's proxy providers, which
forward to the SDK once it is set; ``force_flush`` (called at ``Monitor.close``) must flush
that SDK too, not the proxies (which have nothing to flush). Global providers can be set
once per process, so the scenario runs in a child interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.exporters.turns import make_result

SCRIPT = textwrap.dedent(
    """
    from opentelemetry import _logs, trace
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, InMemoryLogRecordExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from handoffmon.exporters.otel import OTelExporter
    from handoffmon.labels import LabelGuard
    from tests.exporters.turns import export_turn, make_result

    joined = OTelExporter(guard=LabelGuard())  # built first: the globals are still the proxies
    own = OTelExporter(guard=LabelGuard(), span="own")
    spans, events = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    hour = 3_600_000  # nothing leaves a batch processor unless flushed
    tp.add_span_processor(BatchSpanProcessor(spans, schedule_delay_millis=hour))
    lp.add_log_record_processor(BatchLogRecordProcessor(events, schedule_delay_millis=hour))
    trace.set_tracer_provider(tp)
    _logs.set_logger_provider(lp)

    assert export_turn(joined, make_result()) and export_turn(own, make_result())
    assert spans.get_finished_spans() == () and events.get_finished_logs() == ()
    assert joined.force_flush(5.0) and own.force_flush(5.0)
    print(len(spans.get_finished_spans()), len(events.get_finished_logs()))
    """
)


def test_force_flush_reaches_an_sdk_configured_after_the_exporter() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    # own: one chat span; events: join's turn event + its evaluation, own's evaluation
    checks = len(make_result().checks)
    assert out.stdout.split() == ["1", str(1 + 2 * checks)]
