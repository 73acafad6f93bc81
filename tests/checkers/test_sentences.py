"""The Punkt-compatible sentence splitter and Treebank-style word tokens (no NLTK data)."""

from __future__ import annotations

import time

import pytest

from handoffmon.checkers.ifeval.sentences import count_sentences, split_sentences
from handoffmon.checkers.ifeval.words import count_capital_words, word_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello world. How are you?", ["Hello world.", "How are you?"]),
        ("Mr. Smith went to Washington. He arrived.", ["Mr. Smith went to Washington.", "He arrived."]),
        ("I live in the U.S. It is big.", ["I live in the U.S.", "It is big."]),
        ("Pi is 3.14 roughly. Yes.", ["Pi is 3.14 roughly.", "Yes."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Use tools, e.g. this one. And that.", ["Use tools, e.g.", "this one.", "And that."]),  # 'e.g' is no
        ("Dr. Who left at 5 p.m. The rain came.", ["Dr. Who left at 5 p.m.", "The rain came."]),  # starter
        ("Dr. Who left at 5 p.m. Then rain.", ["Dr. Who left at 5 p.m. Then rain."]),  # 'then': no evidence
        ("What?! Really.", ["What?!", "Really."]),
        ("Wait... what happened", ["Wait... what happened"]),
        ("1. First item\n2. Second item", ["1.", "First item\n2.", "Second item"]),
        ("Title\n\nBody text here. More text.", ["Title\n\nBody text here.", "More text."]),
        ("(See the note.) Next one.", ["(See the note.)", "Next one."]),
        ("J. Smith wrote it.", ["J. Smith wrote it."]),
    ],
)
def test_punkt_english_behaviour(text: str, expected: list[str]) -> None:
    """NLTK English Punkt's splits (checked against nltk itself): abbreviations, initials, numbers,
    quotes, newlines."""
    assert split_sentences(text) == expected


def test_empty_and_blank() -> None:
    """No text, no sentences."""
    assert count_sentences("") == 0
    assert count_sentences(" \n\t ") == 0


def test_linear_time_on_long_unbroken_input() -> None:
    """No quadratic blow-up on 200 KB without spaces or with many periods (the old Punkt ReDoS)."""
    start = time.process_time()
    assert count_sentences("a" * 200_000 + ". B") == 2
    assert count_sentences("." * 200_000) == 1
    assert time.process_time() - start < 1.0


def test_word_tokens_split_contractions_and_punctuation() -> None:
    """nltk word_tokenize: sentence-final period, contractions, '&', quotes, dashes, brackets split off."""
    assert word_tokens("I'M HERE. DON'T GO, WELL-KNOWN AT&T?") == [
        "I",
        "'M",
        "HERE",
        ".",
        "DO",
        "N'T",
        "GO",
        ",",
        "WELL-KNOWN",
        "AT",
        "&",
        "T",
        "?",
    ]
    assert word_tokens("'TIS “QUOTED” -- (X)") == ["'", "TIS", "“", "QUOTED", "”", "--", "(", "X", ")"]
    assert count_capital_words("I'M HERE. DON'T GO") == 6
    assert count_capital_words("CANNOT stop") == 2
    assert count_capital_words("no capitals, 123") == 0


def test_fast_path_agrees_with_full_decision() -> None:
    """The plain-word / '?!' shortcut gives the same counts as the full Punkt annotation."""
    import json
    from pathlib import Path

    from handoffmon.checkers.ifeval import sentences

    path = Path(__file__).parent.parent / "data" / "ifeval" / "responses_llama31_8b.jsonl"
    responses = [json.loads(line)["response"] for line in path.read_text(encoding="utf-8").splitlines()]
    fast = [sentences.count_sentences(r) for r in responses]

    def full(match: object, word: str, params: sentences.PunktParams) -> bool:
        context = word + match.group() + match.group("after_tok")  # type: ignore[attr-defined]
        return sentences._contains_sentbreak(context, params)

    original = sentences._is_break
    sentences._is_break = full  # type: ignore[assignment]
    try:
        slow = [sentences.count_sentences(r) for r in responses]
    finally:
        sentences._is_break = original
    assert fast == slow
    assert sum(fast) > 5000
