"""Word tokens as NLTK's ``word_tokenize`` yields them (Punkt sentences, then the NLTK Treebank
rules), for the reference's capital-word counts. No NLTK needed; linear-time rules only."""

from __future__ import annotations

import re

from handoffmon.checkers.ifeval.sentences import split_sentences

_Rule = tuple[re.Pattern[str], str]


def _rules(*pairs: tuple[str, str]) -> tuple[_Rule, ...]:
    return tuple((re.compile(p), r) for p, r in pairs)


_STARTING_QUOTES = _rules(
    ("([«“‘„]|[`]+)", r" \1 "),
    (r'^"', r"``"),
    (r"(``)", r" \1 "),
    (r"""([ (\[{<])("|'{2})""", r"\1 `` "),
    (r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 "),
)
_PUNCTUATION = _rules(
    (r"""([^.])(\.)([\])}>"'»”’ ]*)\s*$""", r"\1 \2 \3 "),
    (r"([:,])([^\d])", r" \1 \2"),
    (r"([:,])$", r" \1 "),
    (r"\.{2,}", r" \g<0> "),
    (r"[;@#$%&]", r" \g<0> "),
    ("[\u2012-\u2015]", r" \g<0> "),
    (r"""([^.])(\.)([\])}>"']*)\s*$""", r"\1 \2\3 "),
    (r"[?!]", r" \g<0> "),
    (r"([^'])' ", r"\1 ' "),
    (r"[*]", r" \g<0> "),
    (r"[\]\[(){}<>]", r" \g<0> "),
    (r"--", r" -- "),
)
_ENDING_QUOTES = _rules(
    ("([»”’])", r" \1 "),
    (r"''", " '' "),
    (r'"', " '' "),
    (r"\s+", " "),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 "),
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 "),
)
_CONTRACTIONS = _rules(
    (r"(?i)\b(can)(not)\b", r" \1 \2 "),
    (r"(?i)\b(d)('ye)\b", r" \1 \2 "),
    (r"(?i)\b(gim)(me)\b", r" \1 \2 "),
    (r"(?i)\b(gon)(na)\b", r" \1 \2 "),
    (r"(?i)\b(got)(ta)\b", r" \1 \2 "),
    (r"(?i)\b(lem)(me)\b", r" \1 \2 "),
    (r"(?i)\b(more)('n)\b", r" \1 \2 "),
    (r"(?i)\b(wan)(na)(?=\s)", r" \1 \2 "),
    (r"(?i) ('t)(is)\b", r" \1 \2 "),
    (r"(?i) ('t)(was)\b", r" \1 \2 "),
)


def treebank_tokens(sentence: str) -> list[str]:
    """NLTK's ``NLTKWordTokenizer`` rules applied to one sentence."""
    text = sentence
    for rx, repl in _STARTING_QUOTES + _PUNCTUATION:
        text = rx.sub(repl, text)
    text = f" {text} "
    for rx, repl in _ENDING_QUOTES + _CONTRACTIONS:
        text = rx.sub(repl, text)
    return text.split()


def word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: Treebank tokens of every Punkt sentence."""
    return [tok for sentence in split_sentences(text) for tok in treebank_tokens(sentence)]


def count_capital_words(text: str) -> int:
    """Tokens whose cased characters are all upper case (``str.isupper``), as the reference counts."""
    return sum(1 for tok in word_tokens(text) if tok.isupper())
