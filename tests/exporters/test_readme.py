"""The README's metrics section: its Python example runs, and its metric table lists every metric."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.refit_series import REFIT_GAUGES
from tests.exporters.refits import make_refit
from tests.exporters.turns import make_result

README = Path(__file__).resolve().parents[2] / "README.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("<!-- section:metrics -->") : text.index("<!-- /section:metrics -->")]


def test_python_example_runs() -> None:
    """The library-mode example starts a /metrics server and closes cleanly (on a free port)."""
    (code,) = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("port=9464", "port=0"), "README.md", "exec"), {})
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics\n", out.getvalue())


def test_table_documents_every_exported_metric() -> None:
    """Every family the Prometheus exporter exposes has a row in the README table, and no row is stale."""
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    exp.export(make_result(checks=[("r", "pass")], transitions=[("r", "pass", "pass")], fallbacks=1))
    exp.observe_overhead("x", 0.1)
    exp.count_error("x")
    exp.publish_refit(make_refit())
    exposed = set()
    for family in exp.registry.collect():
        kind = family.type
        exposed.add(f"{family.name}_total" if kind == "counter" else family.name)
    documented = set(re.findall(r"^\| `(handoffmon_[a-z0-9_]+)` \|", section(), flags=re.M))
    assert documented == exposed
    assert {spec.name for spec in REFIT_GAUGES} <= documented
