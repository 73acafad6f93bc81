"""Reply language with py3langid: allowed set, confidence threshold, short replies."""

from __future__ import annotations

import pytest

from handoffmon.checkers import CheckContext, ParamError, default_registry

REG = default_registry()
EN = "The committee will publish its findings next week after reviewing every submission carefully."
FR = "Le comité publiera ses conclusions la semaine prochaine après avoir examiné chaque contribution."


def run(reply: str, **params: object) -> tuple[str, str]:
    out = REG.build("language", params)(reply, CheckContext())
    return out.verdict, out.reason


def test_allowed_languages() -> None:
    """English passes an English rule; French fails it with the detected code as reason."""
    assert run(EN, languages=["en"]) == ("pass", "")
    assert run(FR, languages=["en"]) == ("fail", "language:fr")
    assert run(FR, languages=["en", "fr"])[0] == "pass"


def test_not_applicable_when_short_or_unsure() -> None:
    """Too short, or below the confidence threshold → not_applicable, never a guess."""
    assert run("ok thanks", languages=["en"]) == ("not_applicable", "too_short")
    assert run("1234 5678 9012 3456 7890 !!!", languages=["en"], min_chars=5) == (
        "not_applicable",
        "low_confidence",
    )
    assert run(EN, languages=["en"], min_confidence=1.0)[0] == "not_applicable"


def test_candidates_restrict_the_detector() -> None:
    """With candidates, the detector chooses among them only."""
    assert run(EN, languages=["en"], candidates=["en", "de"])[0] == "pass"


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"languages": ["xx"]}, "languages"),
        ({"languages": ["en"], "candidates": ["de", "fr"]}, "candidates"),
        ({"languages": ["en"], "min_confidence": 2}, "min_confidence"),
    ],
)
def test_bad_params(params: dict[str, object], key: str) -> None:
    """Unknown codes and impossible settings fail at build naming the key."""
    with pytest.raises(ParamError) as e:
        REG.build("language", params)
    assert e.value.key == key


def test_cache_cold_benchmark_times_warm_and_swept_passes() -> None:
    """``bench_cold`` (the benchmark's cache-cold row) sweeps before every call of its cold passes
    and never in its warm ones, and reports the two apart."""
    import time

    from handoffmon.checkers import CheckOutcome
    from tests.benchmarks.bench_checkers import bench_cold

    events: list[str] = []

    def sweep() -> None:
        events.append("sweep")

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        if events and events[-1] == "sweep":
            time.sleep(0.003)  # a "cold" call is slow
        events.append(reply)
        return CheckOutcome("pass")

    replies = ["a", "b", "c"]
    cold50, cold99, warm50 = bench_cold(check, replies, 2, sweep=sweep)
    assert events[:3] == ["a", "b", "c"]  # warm-up, no sweep
    assert events[3:] == ["a", "b", "c", "sweep", "a", "sweep", "b", "sweep", "c"] * 2
    assert cold99 >= cold50 >= 3000 > warm50


def test_invisible_characters_do_not_hide_the_language() -> None:
    """Zero-width spaces inside words, a BOM, bidi controls: the reader sees English, and so
    does the check (a zero-width space in each word read as low confidence); invisible
    characters alone are too short, not a language."""
    english = "This is an English sentence about the weather in the city today."
    zero_width = " ".join(w[:2] + "\u200b" + w[2:] for w in english.split())
    assert run(zero_width, languages=["en"]) == ("pass", "")
    assert run("\ufeff\u202e" + english + "\u202c\u200d", languages=["en"]) == ("pass", "")
    assert run("\u200b" * 100 + "hi", languages=["en"]) == ("not_applicable", "too_short")


def test_emoji_only_is_no_language_not_a_failure() -> None:
    """Emoji and symbols (the model's ``zxx``) are no language: not_applicable, not a reply in
    the wrong language; a rule that allows ``zxx`` passes them."""
    emoji = "😀🎉👍🔥" * 10
    assert run(emoji, languages=["en"]) == ("not_applicable", "no_language")
    assert run(emoji, languages=["en", "zxx"]) == ("pass", "")
