"""IFEval language detection: py3langid decides when it is sure, seeded langdetect otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handoffmon.checkers.ifeval import langdetect_checks

DATA = Path(__file__).parent.parent / "data" / "ifeval"
EN = "The committee will publish its findings next week after reviewing every submission carefully."


def test_sure_answers_skip_langdetect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear prose in a language both know is answered without langdetect."""

    def forbidden(text: str) -> str | None:
        raise AssertionError("langdetect was asked")

    monkeypatch.setattr(langdetect_checks, "_langdetect", forbidden)
    assert langdetect_checks.detect_language(EN) == "en"
    assert langdetect_checks.is_language(EN.upper(), "en")
    assert not langdetect_checks.is_language(EN, "fr")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # py3langid answers zh, which is not a langdetect code
        ("委员会将在审查每一份意见后于下周公布其调查结果。", "zh-cn"),
        ("1234 5678 !!!", None),  # no features: undetectable, counts as following
    ],
)
def test_unsure_or_foreign_codes_fall_back_to_langdetect(text: str, expected: str | None) -> None:
    """A code langdetect lacks, or a low probability, is left to langdetect (its codes, its None)."""
    asked: list[str] = []
    original = langdetect_checks._langdetect

    def spy(t: str) -> str | None:
        asked.append(t)
        return original(t)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(langdetect_checks, "_langdetect", spy)
        assert langdetect_checks.detect_language(text) == expected
    assert asked == [text]


@pytest.mark.slow
def test_fast_path_agrees_with_langdetect_on_ifeval_texts() -> None:
    """On the 2,048 IFEval texts (responses, their heads, prompts) the combined detector and
    seeded langdetect alone disagree on at most 0.2% (2 seen: quoted German, Korean+English)."""
    rows = [json.loads(line) for line in (DATA / "responses_llama31_8b.jsonl").read_text().splitlines()]
    responses = [r["response"] for r in rows]
    prompts = [json.loads(line)["prompt"] for line in (DATA / "input_data.jsonl").read_text().splitlines()]
    texts = responses + [r[:500] for r in responses if len(r) > 500] + [r[:100] for r in responses] + prompts
    texts = [t for t in texts if t.strip()]
    differ = sum(langdetect_checks.detect_language(t) != langdetect_checks._langdetect(t) for t in texts)
    assert len(texts) > 2000
    assert differ <= 0.002 * len(texts)
