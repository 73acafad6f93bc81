"""The vectorized py3langid scorer: same answers as py3langid itself, and the window it relies on holds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from handoffmon.checkers.langid_model import encode, full_identifier, identifier

DATA = Path(__file__).parent.parent / "data" / "ifeval"
MIXED = [
    "Le comité publiera ses conclusions la semaine prochaine après avoir examiné chaque contribution.",
    "Der Ausschuss wird seine Ergebnisse nächste Woche veröffentlichen, nachdem er alles geprüft hat.",
    "El comité publicará sus conclusiones la próxima semana después de revisar cada contribución.",
    "Комитет опубликует свои выводы на следующей неделе после рассмотрения всех материалов.",
    "委员会将在审查每一份意见后于下周公布其调查结果。",
    "委員会は来週、すべての提出物を検討した後に調査結果を公表します。",
    "위원회는 모든 제출물을 검토한 후 다음 주에 결과를 발표할 것입니다.",
    "सभी प्रस्तुतियों की समीक्षा के बाद समिति अगले सप्ताह अपने निष्कर्ष प्रकाशित करेगी।",
    "THE COMMITTEE WILL PUBLISH ITS FINDINGS NEXT WEEK.",
    "1234 5678 9012 3456 7890 !!!",
    "",
    "   ",
    "x",
    "start \ud800 mid \udfff end, lone surrogates",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code, not prose",
]


def _texts() -> list[str]:
    responses = [
        json.loads(line)["response"]
        for line in (DATA / "responses_llama31_8b.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    rng = random.Random(7)
    noise = [bytes(rng.randrange(256) for _ in range(300)).decode("latin-1") for _ in range(20)]
    return responses[:60] + [r[:500] for r in responses] + [r[:60] for r in responses] + MIXED + noise


@pytest.fixture(scope="module")
def reference() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def test_same_language_and_probability_as_py3langid(reference: LanguageIdentifier) -> None:
    """Every IFEval response (whole, 500- and 60-character heads), other scripts, hostile and
    random text: the label is py3langid's and the probability matches to float32 rounding
    (2e-5: the softmax is summed in doubles, py3langid sums float32)."""
    fast = identifier(())
    texts = _texts()
    for text in texts:
        want_lang, want_prob = reference.classify(text)
        got_lang, got_prob = fast.classify(text)
        assert got_lang == want_lang, text[:80]
        assert got_prob == pytest.approx(want_prob, abs=2e-5), text[:80]
    assert len(texts) > 1100


def test_candidates_match_py3langid_set_languages() -> None:
    """A candidate set chooses as py3langid restricted with ``set_languages`` does (aliases folded)."""
    candidates = ("de", "en", "fr", "sr")
    ref = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ref.set_languages(list(candidates))
    fast = identifier(candidates)
    assert set(fast.labels) == set(candidates)
    for text in _texts()[:300] + MIXED:
        want, got = ref.classify(text), fast.classify(text)
        assert got[0] == want[0]
        assert got[1] == pytest.approx(want[1], abs=1e-4)


@pytest.mark.parametrize("exhaustive", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_window_property_holds_for_every_state_and_byte(exhaustive: bool) -> None:
    """The vectorized walk is exact: from every state, every byte leads where the last ``window``
    bytes of (that state's string + the byte), read from the root, lead (Aho-Corasick).
    The default run checks 24 byte values (ASCII letters, space, UTF-8 lead/continuation
    bytes); the slow run all 256."""
    automaton = full_identifier().automaton
    step, rows, window = automaton.next_state, automaton.row_base, automaton.window
    n = rows.size
    depth = np.full(n, -1)
    depth[0] = 0
    tail = np.zeros((n, window), dtype=np.intp)  # last `window` bytes of each state's string
    frontier = np.zeros(1, dtype=np.intp)
    while frontier.size:  # breadth-first: a state's first visit spells its trie string
        src = np.repeat(frontier, 256)
        byte = np.tile(np.arange(256), frontier.size)
        dst = step[rows[src] + byte]
        fresh = depth[dst] < 0
        dst, first = np.unique(dst[fresh], return_index=True)
        src, byte = src[fresh][first], byte[fresh][first]
        depth[dst] = depth[src] + 1
        tail[dst] = np.concatenate([tail[src][:, 1:], byte[:, None]], axis=1)
        frontier = dst
    assert depth.max() == window and (depth >= 0).all()
    used = np.minimum(depth + 1, window)
    for b in range(256) if exhaustive else (*b" aeinorstEST.,", 0x0A, 0x80, 0xA9, 0xC3, 0xD0, 0xE3, 0xFF):
        spelled = np.concatenate([tail[:, 1:], np.full((n, 1), b)], axis=1)
        state = np.zeros(n, dtype=np.intp)
        for k in range(window):
            state = np.where(window - k <= used, step[rows[state] + spelled[:, k]], state)
        assert np.array_equal(state, step[rows + b]), f"byte {b}"


def test_encode_follows_py3langid() -> None:
    """All-caps text is lowered, NFC applied, lone surrogates kept (surrogatepass)."""
    assert encode("HELLO THERE") == b"hello there"
    assert encode("e\u0301") == "é".encode()
    assert encode("a\ud800") == "a\ud800".encode("utf-8", "surrogatepass")


def test_repeated_text_is_walked_once_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rules on one reply share the feature walk; a different text is walked afresh."""
    fast = identifier(())
    kind = type(fast.automaton)
    original = kind.features
    calls: list[bytes] = []

    def counting(self: object, data: bytes) -> object:
        calls.append(data)
        return original(self, data)  # type: ignore[arg-type]

    monkeypatch.setattr(kind, "features", counting)
    text = "Bonjour à tous, voici le compte rendu de la réunion de ce matin."
    first = fast.classify(text)
    assert identifier(("en", "fr")).classify(text)[0] == "fr"
    assert fast.classify(text) == first
    fast.classify(text + " Merci.")
    assert len(calls) == 2


def test_two_byte_start_table_walks_as_the_byte_steps() -> None:
    """The first two steps looked up at once (``two_bytes``, read through the overlapping 2-byte
    view) give the same feature at every position as walking every byte from the root, at
    every length around the window (0 to window + 2 bytes) and on replies, other scripts and
    random bytes; and the per-feature counts are ``np.unique``'s."""
    from dataclasses import replace

    fast = full_identifier().automaton
    assert fast.two_bytes is not None
    plain = replace(fast, two_bytes=None)
    rng = random.Random(3)
    texts = [encode(t) for t in _texts()[:200] + MIXED]
    texts += [bytes(rng.randrange(256) for _ in range(n)) for n in range(fast.window + 3) for _ in range(20)]
    texts += [b"the"[:n] for n in range(4)] + [b"\x00" * n for n in range(9)]
    for data in texts:
        got, want = fast.positions(data), plain.positions(data)
        assert got.size == len(data) and np.array_equal(got, want), data[:40]
        ids, counts = fast.features(data)
        order = np.argsort(ids)
        want_ids, want_counts = np.unique(want, return_counts=True)
        assert np.array_equal(ids[order], want_ids) and np.array_equal(counts[order], want_counts), data[:40]


def test_positions_follow_py3langids_walk() -> None:
    """The feature at each byte is the one py3langid's own byte-by-byte walk emits there
    (``none`` where it emits nothing): the NUL prefix leaves the walk at the root."""
    automaton = full_identifier().automaton
    ref = LanguageIdentifier.from_model_file(MODEL_FILE)
    rows = [r << 8 for r in ref.tk_row]
    for text in _texts()[:80] + MIXED:
        data = encode(text)
        state, want = 0, []
        for byte in data:
            state = ref.tk_nextmove[rows[state] + byte]
            feature = ref.tk_output[state]
            want.append(feature if feature >= 0 else automaton.none)
        assert automaton.positions(data).tolist() == want, text[:40]


def test_int16_table_is_the_float16_model_exactly() -> None:
    """The table holds 512 × py3langid's float16 log-probabilities as int16 without loss, plus a
    zero row for "no feature"; restricted identifiers copy its columns."""
    fast = full_identifier()
    ref = LanguageIdentifier.from_model_file(MODEL_FILE)
    assert fast.table.dtype == np.int16 and fast.scale == 512.0
    assert np.array_equal(fast.table[:-1].astype(np.float32) / 512, np.asarray(ref.nb_ptc, dtype=np.float32))
    assert not fast.table[-1].any() and fast.automaton.none == fast.table.shape[0] - 1
    assert fast.log1p[3] * 512 == np.log1p(np.float32(3))
    sub = identifier(("de", "en"))
    assert sub.table.shape == (fast.table.shape[0], 2) and sub.scale == fast.scale
