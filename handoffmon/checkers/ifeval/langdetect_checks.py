"""The three langdetect-based IFEval checks: py3langid decides when sure, else a private seeded langdetect."""

from __future__ import annotations

import functools
import threading
from typing import Any

_LOCK = threading.Lock()

FAST_MIN_CONFIDENCE = 0.99
"""py3langid's answer is taken when at least this sure (and langdetect knows the code).

langdetect costs ~6 ms on a 500-character reply (seven random-walk trials); py3langid
~60 µs. On the IFEval texts (541 responses, their 500- and 100-character heads, the
prompts: 2,048 texts) py3langid is this sure for 1,680 of them and disagrees with seeded
langdetect on 2 (German quoted inside English, Korean mixed with English), and the
instruction-level agreement with the reference verifier is unchanged.
"""


@functools.lru_cache(maxsize=1)
def _factory() -> Any:
    """A langdetect factory of our own (profiles ship in the wheel), seeded with 0.

    The reference verifier uses langdetect's module factory unseeded, so its verdicts
    on short or ambiguous text vary between runs; ours do not.
    """
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    with _LOCK:
        factory = DetectorFactory()
        factory.load_profile(PROFILES_DIRECTORY)
        factory.set_seed(0)
    return factory


def warm() -> None:
    """Load both language models now (about two seconds), not during the first checked reply."""
    from handoffmon.checkers.langid_model import full_identifier

    _factory()
    full_identifier()


def _langdetect(text: str) -> str | None:
    from langdetect.lang_detect_exception import LangDetectException

    detector = _factory().create()
    try:
        detector.append(text)
        return str(detector.detect())
    except LangDetectException:
        return None


def detect_language(text: str) -> str | None:
    """The language of ``text`` in langdetect's codes; ``None`` when it cannot tell (no features)."""
    from handoffmon.checkers.langid_model import full_identifier

    lang, prob = full_identifier().classify(text)
    if prob >= FAST_MIN_CONFIDENCE and lang in known_codes():
        return lang
    return _langdetect(text)


def is_language(text: str, language: str) -> bool:
    """Reference semantics: detected == language; undetectable text counts as following."""
    found = detect_language(text)
    return True if found is None else found == language


@functools.lru_cache(maxsize=1)
def known_codes() -> frozenset[str]:
    """Language codes langdetect knows."""
    return frozenset(_factory().get_lang_list())
