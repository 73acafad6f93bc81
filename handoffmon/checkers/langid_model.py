"""py3langid's model scored with vectorized numpy: the same answers as ``py3langid.classify``, 3× faster.

py3langid walks its byte n-gram automaton one byte at a time in Python and multiplies a
float16 table, which numpy converts element by element; together that is ~170 µs on a
500-character reply. The automaton is an Aho-Corasick machine (langid.py builds it that
way), so the state after any text is the state reached from the root by its last
``window`` bytes, ``window`` being the deepest trie node: every position's state comes
from ``window`` vectorized steps instead of one Python step per byte. The table is kept
as float32 (≈57 MB instead of 28 MB) so the per-reply gather needs no conversion.
Scores, the length-scaled softmax and the folding of aliased columns (``srl`` → ``sr``)
follow py3langid, so labels agree and probabilities agree to float32 rounding.
"""

from __future__ import annotations

import functools
import math
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np

_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Automaton:
    """The feature extractor: byte DFA plus which feature (or -1) each state emits."""

    next_state: Any  # uint32[rows * 256]
    row_base: Any  # intp[state] = row << 8
    feature: Any  # intp[state]
    window: int
    one_byte: Any = None  # intp[b]: the state after byte b from the root
    two_bytes: Any = None  # intp[b1 << 8 | b2]: the state after bytes b1, b2 from the root

    def features(self, data: bytes) -> tuple[Any, Any]:
        """(distinct feature ids, their counts) in ``data``.

        ``window`` vectorized steps, the first two of them one lookup in ``two_bytes``
        (and ``one_byte`` for the one position with a single byte before it). ``take``
        instead of fancy indexing: the indices are in range by construction.
        """
        raw = np.frombuffer(data, dtype=np.uint8).astype(np.intp)
        n, window = raw.size, self.window
        row_base, next_state = self.row_base, self.next_state
        states = np.zeros(n, dtype=np.intp)
        steps = min(window, n)
        if self.two_bytes is not None and n >= window >= 3:
            first = window - 1  # positions ≥ first: window bytes, the first two looked up at once
            pairs = raw[: n - first] << 8
            pairs += raw[1 : n - first + 1]
            states[first:] = self.two_bytes.take(pairs)
            states[first - 1] = self.one_byte[raw[0]]
            steps = window - 2
        for back in range(steps - 1, -1, -1):
            tail = states[back:]
            step = row_base.take(tail)
            step += raw[: n - back]
            tail[:] = next_state.take(step)
        found = self.feature.take(states)
        found = found[found >= 0]
        if not found.size:
            return found, found
        return _distinct_counts(found)


def _distinct_counts(found: Any) -> tuple[Any, Any]:
    """``np.unique(found, return_counts=True)`` for a non-empty 1-d int array (sorted in
    place), without its general-purpose bookkeeping: ~10 numpy calls fewer on a reply."""
    found.sort()
    n = found.size
    edge = np.empty(n, dtype=bool)
    edge[0] = True
    np.not_equal(found[1:], found[:-1], out=edge[1:])
    starts = np.flatnonzero(edge)
    counts = np.empty(starts.size, dtype=np.intp)
    np.subtract(starts[1:], starts[:-1], out=counts[:-1])
    counts[-1] = n - starts[-1]
    return found[starts], counts


def _start_states(next_state: Any, row_base: Any) -> tuple[Any, Any]:
    """(state after one byte from the root [b], state after two bytes [b1 << 8 | b2])."""
    every = np.arange(256)
    one = next_state[row_base[0] + every].astype(np.intp)
    two = next_state[(row_base[one][:, None] + every).ravel()].astype(np.intp)
    return one, two


def _trie_depth(next_state: Any, row_base: Any) -> int:
    """The deepest state's distance from the root (breadth-first over all 256 bytes)."""
    seen = np.zeros(row_base.size, dtype=bool)
    seen[0] = True
    frontier, depth, every_byte = np.zeros(1, dtype=np.intp), 0, np.arange(256)
    while True:
        reached = np.zeros_like(seen)
        reached[next_state[(row_base[frontier][:, None] + every_byte).ravel()]] = True
        reached &= ~seen
        if not reached.any():
            return depth
        seen |= reached
        frontier, depth = np.flatnonzero(reached), depth + 1


@dataclass(frozen=True, slots=True)
class Identifier:
    """A naive-Bayes language identifier over a set of candidate columns."""

    automaton: _Automaton
    table: Any  # float32[features, columns]
    prior: Any  # float32[columns]
    label_of_column: Any  # intp[columns] → index into labels
    labels: tuple[str, ...]

    def classify(self, text: str) -> tuple[str, float]:
        """(language code, probability) of ``text``, as ``py3langid`` with ``norm_probs=True``."""
        data = encode(text)
        ids, counts = _cached_features(self.automaton, data)
        if ids.size:
            scores = np.log1p(counts.astype(np.float32)) @ self.table.take(ids, axis=0)
            scores += self.prior
        else:  # featureless: uniform, as py3langid (a low probability → not_applicable)
            scores = np.zeros(self.prior.size, dtype=np.float32)
        scores *= 1.0 / math.sqrt(len(data) or 1)
        scores -= scores.max()
        np.exp(scores, out=scores)
        probs = np.bincount(self.label_of_column, weights=scores, minlength=len(self.labels))
        best = int(probs.argmax())
        return self.labels[best], float(probs[best] / probs.sum())

    def restricted(self, candidates: tuple[str, ...]) -> Identifier:
        """The same model choosing among ``candidates`` only (their columns copied once)."""
        wanted = frozenset(candidates)
        columns = [i for i, c in enumerate(self.label_of_column) if self.labels[c] in wanted]
        classes = [self.labels[self.label_of_column[i]] for i in columns]
        return _identifier_over(self.automaton, self.table[:, columns], self.prior[columns], classes)


def _identifier_over(automaton: _Automaton, table: Any, prior: Any, classes: list[str]) -> Identifier:
    labels = tuple(dict.fromkeys(classes))
    index = {label: i for i, label in enumerate(labels)}
    return Identifier(
        automaton,
        np.ascontiguousarray(table, dtype=np.float32),
        np.asarray(prior, dtype=np.float32),
        np.array([index[c] for c in classes], dtype=np.intp),
        labels,
    )


def encode(text: str) -> bytes:
    """py3langid's input normalization: all-caps lowered, NFC, UTF-8 (lone surrogates kept)."""
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf-8", "surrogatepass")


_LAST = threading.local()


def _cached_features(automaton: _Automaton, data: bytes) -> tuple[Any, Any]:
    """Features of ``data``, remembered per thread for the last text: several language rules
    on one reply (configured plus per-request, or different candidate sets) walk it once."""
    last = getattr(_LAST, "entry", None)
    if last is not None and last[0] is automaton and last[1] == data:
        return last[2]  # type: ignore[no-any-return]
    found = automaton.features(data)
    _LAST.entry = (automaton, data, found)
    return found


@functools.lru_cache(maxsize=1)
def full_identifier() -> Identifier:
    """The identifier over every language of the model shipped in py3langid's wheel (loaded once)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    with _LOAD_LOCK:
        model = LanguageIdentifier.from_model_file(MODEL_FILE)
        # copied into numpy's own (huge-page advised) memory: the walk reads it at random, and
        # 4 KiB pages of array.array's buffer cost a TLB miss per byte; py3langid's copy is freed
        next_state = np.array(model.tk_nextmove, dtype=np.uint32)
        row_base = np.asarray(model.tk_row, dtype=np.intp) << 8
        automaton = _Automaton(
            next_state,
            row_base,
            np.asarray(model.tk_output, dtype=np.intp),
            _trie_depth(next_state, row_base),
            *_start_states(next_state, row_base),
        )
        return _identifier_over(automaton, model.nb_ptc, model.nb_pc, list(model.nb_classes))


@functools.lru_cache(maxsize=64)
def identifier(candidates: tuple[str, ...] = ()) -> Identifier:
    """The identifier restricted to ``candidates`` (``()`` = all languages); one per set."""
    full = full_identifier()
    return full.restricted(candidates) if candidates else full
