"""The ``language`` checker agrees with py3langid on real replies and prompts: same labels,
probabilities within 2e-5, same verdicts (a sample of the full comparison, which covers every
IFEval response and Multi-IF prompt: 5,819 texts, 0 labels or verdicts differing, largest
probability difference 4.3e-6)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from handoffmon.checkers import CheckContext, default_registry
from handoffmon.checkers.langid_model import identifier

DATA = Path(__file__).parent.parent / "data"
OTHER = [
    "Le comité publiera ses conclusions la semaine prochaine après avoir examiné chaque contribution.",
    "Der Ausschuss wird seine Ergebnisse nächste Woche veröffentlichen, nachdem er alles geprüft hat.",
    "El comité publicará sus conclusiones la próxima semana después de revisar cada contribución.",
    "Комитет опубликует свои выводы на следующей неделе после рассмотрения всех материалов.",
]


def _sample() -> list[str]:
    responses = [
        json.loads(line)["response"]
        for line in (DATA / "ifeval" / "responses_llama31_8b.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    prompts = [
        json.loads(line)["prompt"]
        for line in (DATA / "ifeval" / "input_data.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    turns = []
    with (DATA / "multi-if" / "multiIF_20241018_english.csv").open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            for k in (1, 2, 3):
                if row.get(f"turn_{k}_prompt"):
                    turns.append(json.loads(row[f"turn_{k}_prompt"])["content"])
    # every 4th: whole responses and their 500- and 40-character heads (short, unsure text)
    texts = [t for r in responses[::4] for t in (r, r[:500], r[:40])]
    return texts + prompts[::4] + turns[::12] + OTHER


@pytest.fixture(scope="module")
def sample() -> list[str]:
    texts = _sample()
    assert len(texts) > 700
    return texts


@pytest.fixture(scope="module")
def reference() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def test_labels_and_probabilities_match_py3langid(sample: list[str], reference: LanguageIdentifier) -> None:
    """Label identical, probability within 2e-5, on every text of the sample."""
    fast = identifier(())
    worst = 0.0
    for text in sample:
        want_lang, want_prob = reference.classify(text)
        got_lang, got_prob = fast.classify(text)
        assert got_lang == want_lang, text[:80]
        worst = max(worst, abs(got_prob - want_prob))
    assert worst <= 2e-5


def _py3langid_checker(
    reference: LanguageIdentifier, allowed: frozenset[str], min_conf: float
) -> Callable[[str], tuple[str, str]]:
    """The checker's rules (strip, 2000 chars, 20-char minimum, confidence) over py3langid."""

    def check(reply: str) -> tuple[str, str]:
        text = reply.strip()[:2000]
        if len(text) < 20:
            return "not_applicable", "too_short"
        lang, prob = reference.classify(text)
        if prob < min_conf:
            return "not_applicable", "low_confidence"
        return ("pass", "") if lang in allowed else ("fail", f"language:{lang}")

    return check


@pytest.mark.parametrize(
    "params",
    [{"languages": ["en"]}, {"languages": ["en"], "min_confidence": 0.95}, {"languages": ["fr", "de"]}],
)
def test_verdicts_match_py3langid(
    sample: list[str], reference: LanguageIdentifier, params: dict[str, object]
) -> None:
    """Verdict and reason identical to the same rules over py3langid's classify, reply by reply;
    the sample has passes, fails and not-applicables."""
    check = default_registry().build("language", params)
    languages = params["languages"]
    assert isinstance(languages, list)
    want = _py3langid_checker(reference, frozenset(languages), float(params.get("min_confidence", 0.5)))  # type: ignore[arg-type]
    seen = set()
    for text in sample:
        out = check(text, CheckContext())
        assert (out.verdict, out.reason) == want(text), text[:80]
        seen.add(out.verdict)
    assert seen == {"pass", "fail", "not_applicable"}
