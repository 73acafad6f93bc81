"""Label values a client chose that are not valid UTF-8 (a lone surrogate: JSON ``"\\ud800"``,
text decoded with ``surrogateescape``) or not printable (controls, bidi overrides, zero-width
characters) are exported spelled as their escape. prometheus_client
encodes the exposition as UTF-8, so one such model or rule name made every ``/metrics`` scrape
of the process raise ``UnicodeEncodeError``, in the text and the OpenMetrics format alike."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import MAX_LABEL_CHARS, LabelGuard, exportable
from tests.exporters.turns import L, counted, make_result, only, parse_exposition


def test_a_lone_surrogate_in_a_model_or_rule_name_does_not_break_the_scrape() -> None:
    reg = CollectorRegistry()
    exp = PrometheusExporter(reg, guard=LabelGuard())
    assert exp.export(make_result(author="gpt\ud800", checks=[("rule\udc00", "pass")]))
    assert exp.export(make_result(author="gpt\udbff", checks=[("rule\udc00", "fail")]))
    assert exp.export(make_result(author="gpt\ud800", checks=[("rule\udc00", "pass")]))
    s = parse_exposition(generate_latest(reg).decode("utf-8"))
    assert generate_openmetrics(reg).decode("utf-8").endswith("# EOF\n")
    turns = only(s, "handoffmon_turns_total")
    # two names stay two, each spelled as its escape; the same name maps to the same series
    assert turns == {
        L(model="gpt\\ud800", prefix_model="none", depth_bucket="1"): 2,
        L(model="gpt\\udbff", prefix_model="none", depth_bucket="1"): 1,
    }
    checks = counted(s, "handoffmon_checks_total")
    cell = {"model": "gpt\\ud800", "prefix_model": "none", "depth_bucket": "1"}
    assert checks[L(rule="rule\\udc00", **cell, verdict="pass")] == 2


def test_exportable_keeps_valid_text_and_bounds_what_it_escapes() -> None:
    assert exportable("plain") == "plain"
    text = "modèle-日本-🙂"
    assert exportable(text) is text  # valid UTF-8 is returned as is
    assert exportable("a\ud800b") == "a\\ud800b"
    # controls and format characters: a newline or ESC in a name, a bidi override that shows it
    # reversed, a zero-width space that makes two names look alike
    assert exportable("gpt\n4\x1b[31m\x00") == "gpt\\x0a4\\x1b[31m\\x00"
    assert exportable("\u202egpt") == "\\u202egpt" and exportable("g\u200bpt") == "g\\u200bpt"
    assert LabelGuard().model("g\u200bpt") != LabelGuard().model("gpt")
    guard = LabelGuard()
    long = guard.model("\udfff" * 1000)
    assert long == "\\udfff" * MAX_LABEL_CHARS  # cut to MAX_LABEL_CHARS characters, then escaped
    assert guard.model("\udfff" * 1000) == long
    assert guard.rule("r\ud800") == "r\\ud800" and guard.requested_model("g\ud800") == "g\\ud800"
