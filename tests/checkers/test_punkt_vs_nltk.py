"""Our Punkt decision procedure equals NLTK's, given the same parameters (runs when nltk is installed).

nltk is not a dependency; to run: ``pip install nltk`` (no data download is needed: the
tokenizer is built from our parameters, not from ``punkt/english.pickle``). Differences
from the reference verifier are then only in the parameters (abbreviation list, sentence
starters, orthographic context), which the IFEval conformance test measures.
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
    params = punkt.PunktParameters()
    params.abbrev_types = set(sentences.ABBREVIATIONS)
    params.sent_starters = set(sentences.SENT_STARTERS)
    for word in sentences._COMMON_LOWER:
        params.ortho_context[word] = punkt._ORTHO_MID_LC
    tokenizer = punkt.PunktSentenceTokenizer(params)
    texts = [json.loads(line)["response"] for line in DATA.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(0)
    alphabet = [*'aB. ?!"\')(\n*-1e.g', "Mr.", " The", " it", "U.S.", "...", " J.", " 3.", "etc."]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    mismatches = [t for t in texts if tokenizer.tokenize(t) != sentences.split_sentences(t)]
    assert mismatches == []
