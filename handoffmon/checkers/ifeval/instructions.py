"""The 25 active IFEval instructions, with the reference's ids, kwargs names and verdict logic.

Each builder reads the instruction's kwargs through ``Params`` (unknown or ill-typed
kwargs fail at build time naming the key) and returns ``check(response) -> bool``.
Deliberate differences from google-research ``instruction_following_eval``:
- kwargs are required; the reference fills missing ones at random.
- keyword-like kwargs are matched literally (the reference splices them into regexes
  unescaped, so ``C++`` crashes it and a hostile keyword could backtrack for ever);
  on the benchmark's own kwargs the two are identical.
- a non-letter ``letter`` is counted as given (the reference draws a random letter).
- langdetect is seeded, and asked only when py3langid is less than 99% sure (same
  instruction-level agreement on the IFEval set, ~100× cheaper; ``langdetect_checks``);
  JSON nested too deep is "not JSON" instead of a crash.
- sentence counts come from a Punkt re-implementation (``sentences``), not NLTK data.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable

from handoffmon.checkers.base import ParamError, Params
from handoffmon.checkers.ifeval import langdetect_checks, scan
from handoffmon.checkers.ifeval.sentences import count_sentences
from handoffmon.checkers.ifeval.words import count_capital_words

InstructionCheck = Callable[[str], bool]
Builder = Callable[[Params], InstructionCheck]

RELATIONS = ("less than", "at least")
CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_WORD = re.compile(r"\w+")


def _compare(count: int, relation: str, threshold: int) -> bool:
    return count < threshold if relation == RELATIONS[0] else count >= threshold


def _relation(p: Params, key: str = "relation") -> str:
    return str(p.choice(key, RELATIONS))


def response_language(p: Params) -> InstructionCheck:
    """``language:response_language``: langdetect finds ``language``."""
    language = p.str("language")
    langdetect_checks.warm()
    if language not in langdetect_checks.known_codes():
        raise ParamError("language", f"langdetect does not know language {language!r}")
    return lambda v: langdetect_checks.is_language(v, language)


def number_sentences(p: Params) -> InstructionCheck:
    """``length_constraints:number_sentences``: Punkt sentence count vs ``num_sentences``."""
    n, relation = p.int("num_sentences", min_value=0), _relation(p)
    return lambda v: _compare(count_sentences(v), relation, n)


def number_placeholders(p: Params) -> InstructionCheck:
    """``detectable_content:number_placeholders``: at least n ``[...]`` on one line."""
    n = p.int("num_placeholders", min_value=0)
    return lambda v: scan.count_placeholders(v) >= n


def number_bullet_lists(p: Params) -> InstructionCheck:
    """``detectable_format:number_bullet_lists``: exactly n ``*``/``-`` bullet lines."""
    n = p.int("num_bullets", min_value=0)
    return lambda v: scan.count_bullets(v) == n


def constrained_response(p: Params) -> InstructionCheck:
    """``detectable_format:constrained_response``: contains "My answer is yes/no/maybe."."""
    return lambda v: any(option in v.strip() for option in CONSTRAINED_RESPONSES)


def number_highlighted_sections(p: Params) -> InstructionCheck:
    """``detectable_format:number_highlighted_sections``: at least n ``*x*``/``**x**``."""
    n: int = p.int("num_highlights", min_value=0)
    single, double = re.compile(r"\*[^\n\*]*\*"), re.compile(r"\*\*[^\n\*]*\*\*")

    def check(v: str) -> bool:
        found = sum(1 for h in single.findall(v) if h.strip("*").strip())
        found += sum(1 for h in double.findall(v) if h.removeprefix("**").removesuffix("**").strip())
        return found >= n

    return check


def multiple_sections(p: Params) -> InstructionCheck:
    """``detectable_format:multiple_sections``: at least n ``<spliter> <number>`` markers."""
    splitter = p.str("section_spliter").strip()
    n = p.int("num_sections", min_value=0)
    rx = re.compile(r"\s?" + re.escape(splitter) + r"\s?\d+\s?")
    return lambda v: len(rx.split(v)) - 1 >= n


def number_paragraphs(p: Params) -> InstructionCheck:
    """``length_constraints:number_paragraphs``: exactly n ``***``-separated paragraphs."""
    n: int = p.int("num_paragraphs", min_value=0)
    rx = re.compile(r"\s?\*\*\*\s?")

    def check(v: str) -> bool:
        paragraphs = rx.split(v)
        count = len(paragraphs)
        for i, para in enumerate(paragraphs):
            if not para.strip():
                if i in (0, len(paragraphs) - 1):
                    count -= 1
                else:
                    return False
        return count == n

    return check


def postscript(p: Params) -> InstructionCheck:
    """``detectable_content:postscript``: a postscript starting with the marker."""
    marker = p.str("postscript_marker").strip()
    # The reference's r"\s*<marker>.*$" (MULTILINE) matches wherever <marker> does; the
    # leading \s* and trailing .*$ only add quadratic backtracking on long whitespace runs.
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    rx = re.compile(pattern)
    return lambda v: rx.search(v.lower()) is not None


def keyword_existence(p: Params) -> InstructionCheck:
    """``keywords:existence``: every keyword occurs (case-insensitive)."""
    keywords = sorted(p.str_list("keywords"))
    patterns = [re.compile(re.escape(k), re.IGNORECASE) for k in keywords]
    return lambda v: all(rx.search(v) for rx in patterns)


def keyword_frequency(p: Params) -> InstructionCheck:
    """``keywords:frequency``: keyword occurrences vs ``frequency``."""
    keyword = p.str("keyword").strip()
    n, relation = p.int("frequency", min_value=0), _relation(p)
    rx = re.compile(re.escape(keyword), re.IGNORECASE)
    return lambda v: _compare(len(rx.findall(v)), relation, n)


def number_words(p: Params) -> InstructionCheck:
    """``length_constraints:number_words``: ``\\w+`` word count vs ``num_words``."""
    n, relation = p.int("num_words", min_value=0), _relation(p)
    return lambda v: _compare(sum(1 for _ in _WORD.finditer(v)), relation, n)


def json_format(p: Params) -> InstructionCheck:
    """``detectable_format:json_format``: the reply (fence stripped) parses as JSON."""

    def check(v: str) -> bool:
        body = v.strip()
        for fence in ("```json", "```Json", "```JSON", "```"):
            body = body.removeprefix(fence)
        body = body.removesuffix("```").strip()
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            return False
        return True

    return check


def nth_paragraph_first_word(p: Params) -> InstructionCheck:
    """``length_constraints:nth_paragraph_first_word``: paragraph count and a first word."""
    total: int = p.int("num_paragraphs", min_value=1)
    nth: int = p.int("nth_paragraph", min_value=1)
    first_word: str = p.str("first_word").lower()
    if nth > total:
        raise ParamError("nth_paragraph", f"must be <= num_paragraphs ({total})")

    def check(v: str) -> bool:
        paragraphs = v.split("\n\n")
        count = sum(1 for para in paragraphs if para.strip())
        if nth > count:
            return False
        para = paragraphs[nth - 1].strip()
        if not para:
            return False
        word = para.split()[0].strip().lstrip("'").lstrip('"')
        head = []
        for ch in word:
            if ch in {".", ",", "?", "!", "'", '"'}:
                break
            head.append(ch.lower())
        return count == total and "".join(head) == first_word

    return check


def forbidden_words(p: Params) -> InstructionCheck:
    """``keywords:forbidden_words``: no forbidden word as a whole word."""
    words = sorted(set(p.str_list("forbidden_words")))
    patterns = [re.compile(r"\b" + re.escape(w) + r"\b", re.IGNORECASE) for w in words]
    return lambda v: not any(rx.search(v) for rx in patterns)


def two_responses(p: Params) -> InstructionCheck:
    """``combination:two_responses``: two different responses separated by ``******``."""

    def check(v: str) -> bool:
        parts = v.split("******")
        valid = []
        for i, part in enumerate(parts):
            if not part.strip():
                if i not in (0, len(parts) - 1):
                    return False
            else:
                valid.append(part)
        return len(valid) == 2 and valid[0].strip() != valid[1].strip()

    return check


def repeat_prompt(p: Params) -> InstructionCheck:
    """``combination:repeat_prompt``: the reply starts with the prompt (case-insensitive)."""
    prompt = p.str("prompt_to_repeat").strip().lower()
    return lambda v: v.strip().lower().startswith(prompt)


def end_checker(p: Params) -> InstructionCheck:
    """``startend:end_checker``: the reply ends with ``end_phrase``."""
    phrase = p.str("end_phrase").strip().lower()
    return lambda v: v.strip().strip('"').lower().endswith(phrase)


def title(p: Params) -> InstructionCheck:
    """``detectable_format:title``: a non-empty ``<<title>>``."""
    return scan.has_title


def letter_frequency(p: Params) -> InstructionCheck:
    """``keywords:letter_frequency``: occurrences of ``letter`` vs ``let_frequency``."""
    letter = p.str("letter").strip().lower()
    if len(letter) != 1:
        raise ParamError("letter", "must be a single character")
    n, relation = p.int("let_frequency", min_value=0), _relation(p, "let_relation")
    return lambda v: _compare(collections.Counter(v.lower())[letter], relation, n)


def english_capital(p: Params) -> InstructionCheck:
    """``change_case:english_capital``: all upper case and English."""
    langdetect_checks.warm()
    return lambda v: v.isupper() and langdetect_checks.is_language(v, "en")


def english_lowercase(p: Params) -> InstructionCheck:
    """``change_case:english_lowercase``: all lower case and English."""
    langdetect_checks.warm()
    return lambda v: v.islower() and langdetect_checks.is_language(v, "en")


def no_comma(p: Params) -> InstructionCheck:
    """``punctuation:no_comma``: no comma."""
    return lambda v: "," not in v


def capital_word_frequency(p: Params) -> InstructionCheck:
    """``change_case:capital_word_frequency``: all-capital words vs ``capital_frequency``."""
    n, relation = p.int("capital_frequency", min_value=0), _relation(p, "capital_relation")
    return lambda v: _compare(count_capital_words(v), relation, n)


def quotation(p: Params) -> InstructionCheck:
    """``startend:quotation``: wrapped in double quotes."""

    def check(v: str) -> bool:
        s = v.strip()
        return len(s) > 1 and s[0] == '"' and s[-1] == '"'

    return check


INSTRUCTIONS: dict[str, Builder] = {
    "keywords:existence": keyword_existence,
    "keywords:frequency": keyword_frequency,
    "keywords:forbidden_words": forbidden_words,
    "keywords:letter_frequency": letter_frequency,
    "language:response_language": response_language,
    "length_constraints:number_sentences": number_sentences,
    "length_constraints:number_paragraphs": number_paragraphs,
    "length_constraints:number_words": number_words,
    "length_constraints:nth_paragraph_first_word": nth_paragraph_first_word,
    "detectable_content:number_placeholders": number_placeholders,
    "detectable_content:postscript": postscript,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "detectable_format:constrained_response": constrained_response,
    "detectable_format:number_highlighted_sections": number_highlighted_sections,
    "detectable_format:multiple_sections": multiple_sections,
    "detectable_format:json_format": json_format,
    "detectable_format:title": title,
    "combination:two_responses": two_responses,
    "combination:repeat_prompt": repeat_prompt,
    "startend:end_checker": end_checker,
    "change_case:capital_word_frequency": capital_word_frequency,
    "change_case:english_capital": english_capital,
    "change_case:english_lowercase": english_lowercase,
    "punctuation:no_comma": no_comma,
    "startend:quotation": quotation,
}
"""Instruction id → builder. The 25 ids the reference registry marks active."""

LANGDETECT_IDS = frozenset(
    {"language:response_language", "change_case:english_capital", "change_case:english_lowercase"}
)
"""Instructions whose verdict depends on langdetect (reported separately in conformance)."""


def build_instruction(instruction_id: str, kwargs: dict[str, object] | None) -> InstructionCheck:
    """Build one instruction check; raises ``KeyError`` (unknown id) or ``ParamError``."""
    builder = INSTRUCTIONS[instruction_id]
    p = Params({k: v for k, v in (kwargs or {}).items() if v is not None})
    check = builder(p)
    p.finish()
    return check
