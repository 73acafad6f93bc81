"""Word tokens as NLTK's ``word_tokenize`` yields them (Punkt sentences, then the NLTK Treebank
rules), for the reference's capital-word counts. No NLTK needed; linear-time rules only."""

from __future__ import annotations

import re

from handoffmon.checkers.ifeval.sentences import split_sentences

_Rule = tuple[re.Pattern[str], str, tuple[str, ...]]


def _rules(*specs: tuple[str, str, str]) -> tuple[_Rule, ...]:
    """(pattern, replacement, guard): the rule can only match when one of the guard's
    space-separated substrings is present (empty guard = always run). Guards only skip
    regex passes that could not match, so the tokens are unchanged; they make the ~30
    passes per sentence cheap for ordinary prose."""
    return tuple((re.compile(p), r, tuple(g.split(" ")) if g else ()) for p, r, g in specs)


_PUNCT_CHARS = ";@#$%&"
_FINAL_PERIOD = "<final-period>"
"""Guard marker: the rule ends in ``\\.<closers>\\s*$``, so it can only match at the last period."""
_SPACES = "<spaces>"
"""Guard marker: ``\\s+`` → ``" "`` on text padded with spaces (done with str.split)."""
_STARTING_QUOTES = _rules(
    ("([«“‘„]|[`]+)", r" \1 ", "« “ ‘ „ `"),
    (r'^"', r"``", '"'),
    (r"(``)", r" \1 ", "``"),
    (r"""([ (\[{<])("|'{2})""", r"\1 `` ", "\" ''"),
    (r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 ", "'"),
)
_PUNCTUATION = _rules(
    (r"""([^.])(\.)([\])}>"'»”’ ]*)\s*$""", r"\1 \2 \3 ", _FINAL_PERIOD),
    (r"([:,])([^\d])", r" \1 \2", ": ,"),
    (r"([:,])$", r" \1 ", ": ,"),
    (r"\.{2,}", r" \g<0> ", ".."),
    (r"[;@#$%&]", r" \g<0> ", " ".join(_PUNCT_CHARS)),
    ("[\u2012-\u2015]", r" \g<0> ", "\u2012 \u2013 \u2014 \u2015"),
    (r"""([^.])(\.)([\])}>"']*)\s*$""", r"\1 \2\3 ", _FINAL_PERIOD),
    (r"[?!]", r" \g<0> ", "? !"),
    (r"([^'])' ", r"\1 ' ", "'"),
    (r"[*]", r" \g<0> ", "*"),
    (r"[\]\[(){}<>]", r" \g<0> ", "] [ ( ) { } < >"),
    (r"--", r" -- ", "--"),
)
_ENDING_QUOTES = _rules(
    ("([»”’])", r" \1 ", "» ” ’"),
    (r"''", " '' ", "''"),
    (r'"', " '' ", '"'),
    (r"\s+", " ", _SPACES),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 ", "'"),
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", "'"),
)
_CONTRACTIONS = _rules(  # guards are matched against the lower-cased text (ASCII text only)
    (r"(?i)\b(can)(not)\b", r" \1 \2 ", "cannot"),
    (r"(?i)\b(d)('ye)\b", r" \1 \2 ", "d'ye"),
    (r"(?i)\b(gim)(me)\b", r" \1 \2 ", "gimme"),
    (r"(?i)\b(gon)(na)\b", r" \1 \2 ", "gonna"),
    (r"(?i)\b(got)(ta)\b", r" \1 \2 ", "gotta"),
    (r"(?i)\b(lem)(me)\b", r" \1 \2 ", "lemme"),
    (r"(?i)\b(more)('n)\b", r" \1 \2 ", "more'n"),
    (r"(?i)\b(wan)(na)(?=\s)", r" \1 \2 ", "wanna"),
    (r"(?i) ('t)(is)\b", r" \1 \2 ", "'tis"),
    (r"(?i) ('t)(was)\b", r" \1 \2 ", "'twas"),
)


def _apply(rules: tuple[_Rule, ...], text: str, *, lower_guard: bool = False) -> str:
    if lower_guard and not text.isascii():
        # (?i) matching folds some non-ASCII letters (e.g. U+0130) differently from
        # str.lower(): run every case-insensitive rule rather than trust a guard
        for rx, repl, _ in rules:
            text = rx.sub(repl, text)
        return text
    probe = text.lower() if lower_guard else None
    for rx, repl, guard in rules:
        if guard == (_FINAL_PERIOD,):
            last = text.rfind(".")
            if last >= 1:  # the match can only start just before the last period
                text = text[: last - 1] + rx.sub(repl, text[last - 1 :])
        elif guard == (_SPACES,):
            text = " " + " ".join(text.split()) + " "
        elif not guard or any(g in (probe if probe is not None else text) for g in guard):
            text = rx.sub(repl, text)
    return text


def treebank_tokens(sentence: str) -> list[str]:
    """NLTK's ``NLTKWordTokenizer`` rules applied to one sentence."""
    text = _apply(_PUNCTUATION, _apply(_STARTING_QUOTES, sentence))
    text = _apply(_ENDING_QUOTES, f" {text} ")
    text = _apply(_CONTRACTIONS, text, lower_guard=True)
    return text.split()


def word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: Treebank tokens of every Punkt sentence."""
    return [tok for sentence in split_sentences(text) for tok in treebank_tokens(sentence)]


def count_capital_words(text: str) -> int:
    """Tokens whose cased characters are all upper case (``str.isupper``), as the reference counts."""
    return sum(1 for tok in word_tokens(text) if tok.isupper())
