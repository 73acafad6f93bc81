"""handoffmon_label_overflows counts distinct names folded into ``other``, not lookups."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from tests.exporters.refits import make_refit
from tests.exporters.turns import make_result


def _overflows(exp: PrometheusExporter, label: str) -> float | None:
    return exp.registry.get_sample_value("handoffmon_label_overflows_total", {"label": label})


def test_repeated_lookups_and_refit_publishes_do_not_count_again() -> None:
    """With max_models 1, 'gpt' is admitted and 'claude'/'llama' fold into other: 2 names, however
    many turns and refit publishes (each looks the same names up again) follow."""
    exp = PrometheusExporter(CollectorRegistry(), guard=LabelGuard(max_models=1))
    for author in ("gpt", "claude", "llama", "claude", "claude", "llama"):
        assert exp.export(make_result(author=author, prefix_model="gpt", checks=[("json", "pass")]))
    assert _overflows(exp, "model") == 2
    assert exp.publish_refit(make_refit())  # its gauges name gpt and claude again
    after_first = _overflows(exp, "model")
    for i in range(5):
        assert exp.publish_refit(make_refit(created_at=1_800_000_200.0 + i))
        exp.export(make_result(author="claude"))
    assert _overflows(exp, "model") == after_first == 2


def test_every_new_name_of_a_flood_counts_once() -> None:
    """10,000 distinct rejected names, each looked up three times: counted (almost) exactly once each;
    the filter never overcounts and its memory is fixed."""
    guard = LabelGuard(max_models=1)
    guard.model("kept")
    for _ in range(3):
        for i in range(10_000):
            assert guard.model(f"flood-{i}") == "other"
    assert 9_990 <= guard.overflows()["model"] <= 10_000
