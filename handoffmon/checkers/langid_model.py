"""py3langid's model scored with vectorized numpy: the same answers as ``py3langid.classify``, 3× faster.

py3langid walks its byte n-gram automaton one byte at a time in Python and multiplies a
float16 table, which numpy converts element by element; together that is ~170 µs on a
500-character reply. The automaton is an Aho-Corasick machine (langid.py builds it that
way), so the state after any text is the state reached from the root by its last
``window`` bytes, ``window`` being the deepest trie node: every position's state comes
from ``window`` vectorized steps instead of one Python step per byte.

Cold caches (the checker runs between other pipeline work, not in a tight loop): after an
8 MiB sweep a call costs ~2-3× its warm time, partly for the walk's and the table's data
(a one-call C version of the same steps, tried as a probe, loses ~80 µs too), partly for
fetching back the code of each distinct numpy call. So a reply is scored with few kinds of
calls (``take``, ``+=``, ``put``, ``bincount``, ``dot``) and smaller tables: the text is
prefixed with ``window - 1`` NUL bytes (NUL leads from the root back to the root) so every
position takes the same steps; each feature's count is found by scattering positions (no
sort); and the table is kept as int16 holding 512 × the float16 log-probabilities, which
is exact (every entry is a multiple of 2⁻⁹), half the float32 table's bytes, and gives the
float32 products exactly once the weights carry the 1/512. Scores, the length-scaled
softmax and the folding of aliased columns (``srl`` → ``sr``) follow py3langid, so labels
agree and probabilities agree to float32 rounding.
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
_LOG1P_SIZE = 1 << 13  # log1p(count) looked up for counts below this, computed above


@dataclass(frozen=True, slots=True)
class _Automaton:
    """The feature extractor: byte DFA plus which feature each state emits."""

    next_state: Any  # uint32[rows * 256]
    row_base: Any  # int32[state] = row << 8
    feature: Any  # int32[state]: feature id, or ``none`` for a state that emits none
    window: int
    none: int  # the feature id of "no feature" (one past the last real one; its table row is 0)
    two_bytes: Any = None  # uint32[b1 | b2 << 8]: the state after bytes b1, b2 from the root

    def positions(self, data: bytes) -> Any:
        """The feature emitted at each byte of ``data`` (int32, ``none`` where none).

        ``data`` is read behind ``window - 1`` NUL bytes (NUL from the root stays at the
        root), so every position is ``window`` vectorized steps from the root, the first
        two of them one ``two_bytes`` lookup through a 2-byte view overlapping each next
        byte. ``take`` instead of fancy indexing: the indices are in range by construction.
        """
        n, window = len(data), self.window
        padded = b"\0" * (window - 1) + data
        byte = _BYTE.take(np.frombuffer(padded, dtype=np.uint8))
        row_base, next_state = self.row_base, self.next_state
        if self.two_bytes is not None and window >= 2:
            pairs = np.ndarray((n,), dtype="<u2", buffer=padded, strides=(1,))
            state, first = self.two_bytes.take(pairs), 2
        else:
            state, first = np.zeros(n, dtype=np.uint32), 0
        for k in range(first, window):
            step = row_base.take(state)
            step += byte[k : k + n]
            state = next_state.take(step)
        return self.feature.take(state)

    def features(self, data: bytes) -> tuple[Any, Any]:
        """(distinct feature ids, their counts) in ``data``, in no particular order; the id
        ``none`` stands for the positions without a feature (its table row is zero).

        Counting without a sort: every occurrence of a feature writes its position into a
        per-thread scratch slot of that feature, so all its occurrences then read one
        representative position, and ``bincount`` over those gives each feature's count at
        its representative (0 elsewhere)."""
        found = self.positions(data)
        n = found.size
        scratch = _scratch(self.none + 1)
        scratch.put(found, _ARANGE[:n] if n <= _ARANGE.size else np.arange(n))
        counts = np.bincount(scratch.take(found), minlength=n)
        at = counts.nonzero()[0]
        return found.take(at), counts.take(at)


_BYTE = np.arange(256, dtype=np.int32)
_ARANGE = np.arange(1 << 14, dtype=np.int32)
_SCRATCH = threading.local()


def _scratch(size: int) -> Any:
    """This thread's int32 scratch of ``size`` slots (contents never need resetting: every
    slot read in ``features`` was written just before)."""
    have = getattr(_SCRATCH, "array", None)
    if have is None or have.size < size:
        have = _SCRATCH.array = np.zeros(size, dtype=np.int32)
    return have


def _two_bytes(next_state: Any, row_base: Any) -> Any:
    """uint32[b1 | b2 << 8]: the state after bytes b1 then b2 from the root."""
    every = np.arange(256)
    one = next_state[row_base[0] + every]  # [b1]
    two = next_state[(row_base[one][:, None] + every).ravel()]  # [b1 << 8 | b2]
    return np.ascontiguousarray(two.reshape(256, 256).T).ravel().astype(np.uint32)


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


def _exact_int16(table: Any) -> tuple[Any, float]:
    """(table × 512 as int16 plus a zero row for ``none``, 512) when that is exact, else
    (float32 copy plus a zero row, 1.0). Converted in slices to keep the load's peak low."""
    rows, columns = table.shape
    out = np.zeros((rows + 1, columns), dtype=np.int16)
    for start in range(0, rows, 8192):
        part = np.multiply(table[start : start + 8192], 512, dtype=np.float32)
        out[start : start + part.shape[0]] = part
        if not np.array_equal(out[start : start + part.shape[0]], part):
            full = np.zeros((rows + 1, columns), dtype=np.float32)
            full[:rows] = table
            return full, 1.0
    return out, 512.0


@dataclass(frozen=True, slots=True)
class Identifier:
    """A naive-Bayes language identifier over a set of candidate columns."""

    automaton: _Automaton
    table: Any  # int16[features + 1, columns] = scale × log P(feature | column); row ``none`` = 0
    scale: float  # 512.0 for the int16 table (1.0 if a model's values were not multiples of 2⁻⁹)
    log1p: Any  # float32[count] = log1p(count) / scale
    prior: Any  # float32[columns]
    label_of_column: tuple[int, ...]  # → index into labels
    aliases: tuple[tuple[int, int], ...]  # (first column, later column) of one label
    labels: tuple[str, ...]

    def classify(self, text: str) -> tuple[str, float]:
        """(language code, probability) of ``text``, as ``py3langid`` with ``norm_probs=True``."""
        data = encode(text)
        ids, counts = _cached_features(self.automaton, data)
        if ids.size > 1 or (ids.size and ids[0] != self.automaton.none):
            weights = self.log1p.take(counts) if len(data) < _LOG1P_SIZE else self._weights(counts)
            scores = np.dot(weights, self.table.take(ids, axis=0))
            scores += self.prior
            scores *= 1.0 / math.sqrt(len(data))
            scores -= scores.max()
            np.exp(scores, out=scores)
            probs = scores.tolist()  # folded and summed as Python floats: fewer numpy calls
        else:  # featureless: uniform, as py3langid (a low probability → not_applicable)
            probs = [1.0] * self.prior.size
        for first, later in self.aliases:
            probs[first] += probs[later]
            probs[later] = 0.0
        best = max(probs)
        return self.labels[self.label_of_column[probs.index(best)]], best / sum(probs)

    def _weights(self, counts: Any) -> Any:
        return np.log1p(counts.astype(np.float32)) / np.float32(self.scale)

    def restricted(self, candidates: tuple[str, ...]) -> Identifier:
        """The same model choosing among ``candidates`` only (their columns copied once)."""
        wanted = frozenset(candidates)
        columns = [i for i, c in enumerate(self.label_of_column) if self.labels[c] in wanted]
        classes = [self.labels[self.label_of_column[i]] for i in columns]
        return _identifier_over(
            self.automaton, self.table[:, columns], self.scale, self.prior[columns], classes
        )


def _identifier_over(
    automaton: _Automaton, table: Any, scale: float, prior: Any, classes: list[str]
) -> Identifier:
    labels = tuple(dict.fromkeys(classes))
    index = {label: i for i, label in enumerate(labels)}
    first: dict[str, int] = {}
    aliases = []
    for i, c in enumerate(classes):
        if first.setdefault(c, i) != i:
            aliases.append((first[c], i))
    log1p = np.log1p(np.arange(_LOG1P_SIZE, dtype=np.float32)) / np.float32(scale)
    return Identifier(
        automaton,
        np.ascontiguousarray(table),
        scale,
        log1p,
        np.asarray(prior, dtype=np.float32),
        tuple(index[c] for c in classes),
        tuple(aliases),
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
        row_base = np.asarray(model.tk_row, dtype=np.int32) << 8
        if next_state[row_base[0]] != 0:
            raise RuntimeError("langid model: NUL does not lead from the root to the root")
        output = np.asarray(model.tk_output, dtype=np.int32)
        none = int(output.max()) + 1
        automaton = _Automaton(
            next_state,
            row_base,
            np.where(output >= 0, output, none).astype(np.int32),
            _trie_depth(next_state, row_base),
            none,
            _two_bytes(next_state, row_base),
        )
        table, scale = _exact_int16(model.nb_ptc)
        if table.shape[0] != none + 1:
            raise RuntimeError("langid model: feature ids do not match the table's rows")
        return _identifier_over(automaton, table, scale, model.nb_pc, list(model.nb_classes))


@functools.lru_cache(maxsize=64)
def identifier(candidates: tuple[str, ...] = ()) -> Identifier:
    """The identifier restricted to ``candidates`` (``()`` = all languages); one per set."""
    full = full_identifier()
    return full.restricted(candidates) if candidates else full
