"""Word tokens as NLTK's ``word_tokenize`` (Treebank rules) yields them, for capital-word counts."""

from __future__ import annotations

import re

_SPLIT = (
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"--"), r" -- "),
    (re.compile(r"[;@#$%&?!*\[\](){}<>\"]"), r" \g<0> "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"([^'])' "), r"\1 ' "),
)
_CONTRACTIONS = (
    re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "),
    re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "),
)
_SPLIT_WORDS = (
    re.compile(r"(?i)\b(can)(not)\b"),
    re.compile(r"(?i)\b(d)('ye)\b"),
    re.compile(r"(?i)\b(gim)(me)\b"),
    re.compile(r"(?i)\b(gon)(na)\b"),
    re.compile(r"(?i)\b(got)(ta)\b"),
    re.compile(r"(?i)\b(lem)(me)\b"),
    re.compile(r"(?i)\b(more)('n)\b"),
    re.compile(r"(?i)\b(wan)(na)(?=\s)"),
    re.compile(r"(?i) ('t)(is)\b"),
    re.compile(r"(?i) ('t)(was)\b"),
)


def word_tokens(text: str) -> list[str]:
    """Treebank-style tokens: punctuation split off, contractions split (``DON'T`` → ``DO``, ``N'T``)."""
    t = f" {text} "
    for rx, repl in _SPLIT:
        t = rx.sub(repl, t)
    t = f" {t} "
    for rx in _CONTRACTIONS:
        t = rx.sub(r"\1 \2 ", t)
    for rx in _SPLIT_WORDS:
        t = rx.sub(r" \1 \2 ", t)
    return t.split()


def count_capital_words(text: str) -> int:
    """Tokens whose cased characters are all upper case (``str.isupper``)."""
    return sum(1 for tok in word_tokens(text) if tok.isupper())
