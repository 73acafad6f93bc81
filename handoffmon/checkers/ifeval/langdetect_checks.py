"""The three langdetect-based IFEval checks, with a private seeded detector (deterministic)."""

from __future__ import annotations

import functools
import threading
from typing import Any

_LOCK = threading.Lock()


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
    """Load the language profiles now (about a second), not during the first checked reply."""
    _factory()


def detect_language(text: str) -> str | None:
    """langdetect's best language for ``text``; ``None`` when it cannot tell (no features)."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _factory().create()
    try:
        detector.append(text)
        return str(detector.detect())
    except LangDetectException:
        return None


def is_language(text: str, language: str) -> bool:
    """Reference semantics: detected == language; undetectable text counts as following."""
    found = detect_language(text)
    return True if found is None else found == language


def known_codes() -> frozenset[str]:
    """Language codes langdetect knows."""
    return frozenset(_factory().get_lang_list())
