"""Sentence splitting as NLTK's English Punkt model does it, without NLTK or its data files.

The reference verifier counts sentences with ``punkt/english.pickle``. This module
re-implements the Punkt decision procedure (potential breaks at ``.?!``; a period ends a
sentence unless its token is a known abbreviation, an ellipsis, an initial or a number
followed by a word that does not look like a sentence start) with the trained English
parameters approximated by fixed word lists. Linear time on any input.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

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


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ABBREVIATIONS = _words(
    """a.m p.m u.s u.k u.n e.g i.e etc vs mr mrs ms dr jr sr st inc ltd co corp cos no nos
    jan feb mar apr jun jul aug sep sept oct nov dec gen gov sen rep reps rev prof messrs col
    capt lt sgt maj adm cmdr ft mt ave blvd calif fla ill mass mich minn conn tenn ariz colo
    nev okla ore pa va wash wis n.y n.j d.c l.a ga ky md mo neb kan del ala ark ind vt n.h
    r.i s.c n.c w.va tex bros cie dept est fig approx ph.d u.s.a j.p"""
)
"""Token types (lower case, final period removed) Punkt treats as abbreviations."""

SENT_STARTERS = _words(
    """the a an he she it they we i you this that these those there here his her its their our
    my your but and or so yet for in on at by with from after before when while if as since
    although though because however meanwhile moreover furthermore also still then now thus
    therefore instead some many most each every both one two no not all any other such what
    which who how why where mr mrs ms dr among under during despite"""
)
"""Types Punkt's English model learned as frequent sentence starters."""

_COMMON_LOWER = SENT_STARTERS | _words(
    """is are was were be been being have has had do does did will would can could should may
    might must shall let make made get got go went see use using first next last finally
    then again also just only even very more less much few new good great best well"""
)
"""Types assumed to occur in lower case mid-sentence (Punkt's orthographic context)."""


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


def _first_pass(t: _Token) -> None:
    tok = t.tok
    if tok in (".", "?", "!"):
        t.sentbreak = True
    elif _ELLIPSIS.match(tok):
        t.ellipsis = True
    elif tok.endswith(".") and not tok.endswith(".."):
        stem = tok[:-1].lower()
        if stem in ABBREVIATIONS or stem.split("-")[-1] in ABBREVIATIONS:
            t.abbr = True
        else:
            t.sentbreak = True


def _ortho(t: _Token) -> bool | None:
    """Orthographic evidence that ``t`` starts a sentence: True, False or None (unknown)."""
    if t.tok in _ORTHO_PUNCT:
        return False
    first = t.tok[0]
    if first.isupper():
        return True if t.type_no_sentperiod in _COMMON_LOWER else None
    if first.islower():
        return False
    return None


def _second_pass(t1: _Token, t2: _Token) -> None:
    if not t1.period_final:
        return
    typ = t1.type_no_period
    is_initial = bool(_INITIAL.match(t1.tok))
    if (t1.abbr or t1.ellipsis) and not is_initial:
        if _ortho(t2) is True or (t2.tok[0].isupper() and t2.type_no_sentperiod in SENT_STARTERS):
            t1.sentbreak = True
        return
    if is_initial or typ == "##number##":
        starter = _ortho(t2)
        lower_seen = t2.type_no_sentperiod in _COMMON_LOWER
        if starter is False or (starter is None and is_initial and t2.tok[0].isupper() and not lower_seen):
            t1.sentbreak = False
            t1.abbr = True


def _contains_sentbreak(context: str) -> bool:
    tokens = [_Token(m.group()) for m in _WORD_TOKEN.finditer(context)]
    for t in tokens:
        _first_pass(t)
    for t1, t2 in itertools.pairwise(tokens):
        _second_pass(t1, t2)
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


def _is_break(match: re.Match[str], word: str) -> bool:
    """Whether Punkt ends a sentence at ``match`` (preceded by ``word``)."""
    end = match.group()
    if end != ".":
        return True  # '?'/'!' are sentence-break tokens and a token always follows (after_tok)
    if _PLAIN_WORD.fullmatch(word) and word.lower() not in ABBREVIATIONS:
        return True  # fast path: an ordinary word + '.' is a break whatever follows
    return _contains_sentbreak(word + end + match.group("after_tok"))


def _last_space(text: str, lo: int, hi: int) -> int:
    """Index of the last ASCII whitespace in ``text[lo:hi]``, or ``lo`` when there is none."""
    found = max(text.rfind(c, lo, hi) for c in _ASCII_SPACE)
    return found if found >= 0 else lo


def _slices(text: str) -> Iterator[tuple[int, int]]:
    last_break = 0
    for match, word in _end_contexts(text):
        if _is_break(match, word):
            yield last_break, match.end()
            last_break = match.start("next_tok") if match.group("next_tok") else match.end()
    yield last_break, len(text.rstrip())


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (closing quotes/brackets realigned to the sentence they end)."""
    out: list[str] = []
    slices = list(_slices(text))
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
