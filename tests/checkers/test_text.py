"""General text checkers: regex, keywords, start/end phrases, letter case, commas."""

from __future__ import annotations

import pytest

from handoffmon.checkers import CheckContext, ParamError, Rule, default_registry

CTX = CheckContext()
REG = default_registry()


def verdict(kind: str, reply: str, **params: object) -> str:
    return REG.build(kind, params)(reply, CTX).verdict


def test_regex_must_match_and_must_not_match() -> None:
    """RE2 patterns with flags; min_count counts occurrences."""
    assert verdict("regex_must_match", "Order #123 shipped", pattern=r"#\d+") == "pass"
    assert verdict("regex_must_match", "no number", pattern=r"#\d+") == "fail"
    assert verdict("regex_must_match", "HELLO", pattern="hello", ignore_case=True) == "pass"
    assert verdict("regex_must_match", "HELLO", pattern="hello") == "fail"
    assert verdict("regex_must_match", "a1 a2", pattern=r"a\d", min_count=3) == "fail"
    assert verdict("regex_must_match", "a1 a2 a3", pattern=r"a\d", min_count=3) == "pass"
    assert verdict("regex_must_match", "x\nyz", pattern="^yz$", multiline=True) == "pass"
    assert verdict("regex_must_not_match", "I apologize", pattern=r"(?i)\bsorry\b") == "pass"
    assert verdict("regex_must_not_match", "So SORRY!", pattern=r"(?i)\bsorry\b") == "fail"


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("(a", "invalid regex"),
        (r"(\w)\1", "backreference"),
        ("(?<=a)b", "lookbehind"),
        ("a(?=b)", "lookahead"),
    ],
)
def test_bad_or_unsupported_regex_fails_at_build(pattern: str, fragment: str) -> None:
    """Invalid patterns and constructs RE2 cannot run fail at build, naming the 'pattern' key."""
    with pytest.raises(ParamError) as e:
        REG.build("regex_must_match", {"pattern": pattern})
    assert e.value.key == "pattern"
    assert fragment in str(e.value)


def test_keywords_present_whole_word_and_case() -> None:
    """Whole-word by default, case-insensitive by default, all/any requirement."""
    assert verdict("keywords_present", "The Cat sat.", keywords=["cat"]) == "pass"
    assert verdict("keywords_present", "Concatenate", keywords=["cat"]) == "fail"
    assert verdict("keywords_present", "Concatenate", keywords=["cat"], whole_word=False) == "pass"
    assert verdict("keywords_present", "The Cat sat.", keywords=["cat"], case_sensitive=True) == "fail"
    assert verdict("keywords_present", "cat only", keywords=["cat", "dog"]) == "fail"
    assert verdict("keywords_present", "cat only", keywords=["cat", "dog"], require="any") == "pass"
    assert verdict("keywords_present", "uses C++ daily", keywords=["C++"]) == "pass"
    assert verdict("keywords_present", "café au lait", keywords=["café"]) == "pass"


def test_keywords_absent() -> None:
    """Any listed keyword present → fail; substrings of other words do not count."""
    assert verdict("keywords_absent", "As an AI model", keywords=["as an ai"]) == "fail"
    assert verdict("keywords_absent", "Bass guitar", keywords=["ass"]) == "pass"
    assert verdict("keywords_absent", "", keywords=["x"]) == "pass"


def test_starts_and_ends_with() -> None:
    """Surrounding whitespace ignored by default; case options."""
    assert verdict("starts_with", "  Dear Sir,", prefix="Dear") == "pass"
    assert verdict("starts_with", "dear Sir", prefix="Dear") == "fail"
    assert verdict("starts_with", "dear Sir", prefix="Dear", case_sensitive=False) == "pass"
    assert verdict("starts_with", " Dear", prefix="Dear", strip=False) == "fail"
    assert verdict("ends_with", "Bye. Any questions?\n", suffix="Any questions?") == "pass"
    assert verdict("ends_with", "Any questions? ok", suffix="Any questions?") == "fail"
    assert verdict("ends_with", "ANY QUESTIONS?", suffix="any questions?", case_sensitive=False) == "pass"


def test_letter_case() -> None:
    """Lower/upper case; a reply with no cased letters is not applicable."""
    assert verdict("letter_case", "all lower 123", case="lower") == "pass"
    assert verdict("letter_case", "Not lower", case="lower") == "fail"
    assert verdict("letter_case", "ALL UPPER!", case="upper") == "pass"
    assert verdict("letter_case", "ALL UPPEr", case="upper") == "fail"
    assert verdict("letter_case", "123 !!", case="upper") == "not_applicable"


def test_no_commas() -> None:
    """ASCII comma by default; full-width commas optionally."""
    assert verdict("no_commas", "no commas here") == "pass"
    assert verdict("no_commas", "one, two") == "fail"
    assert verdict("no_commas", "一，二") == "pass"
    assert verdict("no_commas", "一，二", include_fullwidth=True) == "fail"


def test_ascii_literal_finder_only_for_plain_ascii_literals() -> None:
    """The RE2-free path takes literals (after i/m/s flag groups) and nothing with syntax."""
    from handoffmon.checkers.safe_regex import ascii_literal_finder

    for pattern in ("ring", "(?i)ring", "(?im)(?s)Ring one", "a-b, c: 'd' #1"):
        assert ascii_literal_finder(pattern) is not None, pattern
    for pattern in ("", "(?i)", "r.ng", r"\bring", "ring$", "(?-i)ring", "(?U)ring", "(?i", "ri|ng", "ä"):
        assert ascii_literal_finder(pattern) is None, pattern
    found = ascii_literal_finder("(?i)RiNg")
    assert found is not None and found("a RING.") and not found("rin g")
    exact = ascii_literal_finder("RiNg", ignore_case=False)
    assert exact is not None and exact("xRiNgx") and not exact("ring")
    folded = ascii_literal_finder("RiNg", ignore_case=True)
    assert folded is not None and folded("ring")


@pytest.mark.parametrize("kind", ["regex_must_match", "regex_must_not_match"])
def test_literal_fast_path_agrees_with_re2(kind: str) -> None:
    """Same verdict as RE2 itself on ASCII and non-ASCII replies (Kelvin sign, long s, surrogates)."""
    import random

    from handoffmon.checkers.safe_regex import clean_text, compile_safe

    rng = random.Random(7)
    alphabet = "kKsSiIrRnNgG \n\t-_#:,'\"" + "".join(chr(c) for c in range(128))
    patterns = ["ring", "(?i)ring", "(?i)K", "(?i)s", "S", "(?m)ng", "(?s)(?i)i r", "a-b", "#1:"]
    replies = [
        "",
        "RING",
        "\u212a",  # Kelvin sign: folds to k under (?i)
        "\u017f",  # long s: folds to s under (?i)
        "bRing\ud800",  # lone surrogate, cleaned to U+FFFD
        "İstanbul ring",
        "a-b #1: x",
    ]
    replies += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(400)]
    replies += ["".join(rng.choice("rRiInNgG ") for _ in range(rng.randrange(8))) for _ in range(400)]
    hits = misses = 0
    for pattern in patterns:
        for ignore_case in (False, True):
            rx = compile_safe(pattern, key="pattern", ignore_case=ignore_case)
            check = REG.build(kind, {"pattern": pattern, "ignore_case": ignore_case})
            for reply in replies:
                hit = rx.search(clean_text(reply)) is not None
                hits, misses = hits + hit, misses + (not hit)
                want = "pass" if hit == (kind == "regex_must_match") else "fail"
                assert check(reply, CTX).verdict == want, (pattern, ignore_case, reply)
    assert hits > 300 and misses > 300  # both outcomes exercised


@pytest.mark.parametrize("case_sensitive", [False, True])
@pytest.mark.parametrize("whole_word", [True, False])
def test_keyword_prefilter_agrees_with_re2(case_sensitive: bool, whole_word: bool) -> None:
    """keywords_absent / keywords_present (any, all) give RE2's verdict whether or not the
    substring prefilter lets RE2 run: on ASCII and non-ASCII replies (Kelvin sign and long s
    fold to k and s under case-insensitive RE2), ASCII and non-ASCII keywords."""
    import random

    from handoffmon.checkers.safe_regex import clean_text
    from handoffmon.checkers.text import any_phrase_regex, phrase_prefilter

    rng = random.Random(11)
    keyword_sets = [("as an ai", "sorry"), ("Ask",), ("C++", "k8s"), ("café", "sk"), ("is",)]
    alphabet = "asAS kKiI+8cC\u212a\u017fé\n.,_-"
    replies = ["", "AS AN AI model", "sorry!", "as an aI", "\u212a8s", "a\u017fk", "caf\u00e9 sk", "task"]
    replies += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(14))) for _ in range(600)]
    outcomes = set()
    for keywords in keyword_sets:
        params = {"keywords": list(keywords), "case_sensitive": case_sensitive, "whole_word": whole_word}
        absent = REG.build("keywords_absent", params)
        any_of = REG.build("keywords_present", {**params, "require": "any"})
        all_of = REG.build("keywords_present", {**params, "require": "all"})
        rx = any_phrase_regex(keywords, key="k", case_sensitive=case_sensitive, whole_word=whole_word)
        each = [
            any_phrase_regex((k,), key="k", case_sensitive=case_sensitive, whole_word=whole_word)
            for k in keywords
        ]
        may_match = phrase_prefilter(keywords, case_sensitive=case_sensitive)
        for reply in replies:
            text = clean_text(reply)
            hit = rx.search(text) is not None
            assert may_match(text) or not hit, (keywords, reply)  # the filter never hides a match
            outcomes.add((hit, may_match(text)))
            assert absent(reply, CTX).verdict == ("fail" if hit else "pass"), (keywords, reply)
            assert any_of(reply, CTX).verdict == ("pass" if hit else "fail"), (keywords, reply)
            every = all(r.search(text) is not None for r in each)
            assert all_of(reply, CTX).verdict == ("pass" if every else "fail"), (keywords, reply)
    # matches and filtered-out misses were exercised, and misses RE2 had to decide wherever they
    # can happen (a case-sensitive substring without word boundaries is exactly the match)
    assert {(True, True), (False, False)} <= outcomes
    assert ((False, True) in outcomes) == (whole_word or not case_sensitive)


def test_keyword_alternation_matches_where_one_of_its_phrases_does() -> None:
    """The grouped alternation (boundaries written once per group) finds a match exactly when
    one phrase's own pattern does: phrases starting/ending with word and non-word characters,
    case-sensitive or not."""
    import random

    from handoffmon.checkers.safe_regex import compile_safe
    from handoffmon.checkers.text import any_phrase_regex, phrase_pattern

    rng = random.Random(5)
    alphabet = "abAB_1é.+- \n"
    outcomes = set()
    for _ in range(300):
        phrases = tuple(
            "".join(rng.choice(alphabet.strip()) for _ in range(rng.randrange(1, 4)))
            for _ in range(rng.randrange(1, 5))
        )
        case_sensitive = rng.random() < 0.5
        grouped = any_phrase_regex(phrases, key="k", case_sensitive=case_sensitive)
        each = [compile_safe(phrase_pattern(ph), key="k", ignore_case=not case_sensitive) for ph in phrases]
        for _ in range(20):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
            want = any(rx.search(text) is not None for rx in each)
            assert (grouped.search(text) is not None) == want, (phrases, case_sensitive, text)
            outcomes.add(want)
    assert outcomes == {True, False}


@pytest.mark.parametrize("kind", ["keywords_absent", "keywords_present"])
def test_many_keywords_on_non_ascii_text_stay_fast(kind: str) -> None:
    """150 keywords (a request rule under 1 KB) on 200 KB of non-ASCII text: RE2 fell back to
    its NFA on one boundary pair per keyword (3.4 s, 17 s per MB); grouped, milliseconds."""
    import time

    keywords = [f"k{i}" for i in range(150)]
    params: dict[str, object] = {"keywords": keywords}
    if kind == "keywords_present":
        params["require"] = "any"
    rule = Rule("r", REG.build(kind, params), budget_s=60.0)
    text = ("abc déf ghi ע ت " * 13_000)[:200_000]
    start = time.process_time()
    result = rule.run(text, CTX)
    elapsed = time.process_time() - start
    assert result.verdict == ("pass" if kind == "keywords_absent" else "fail")
    assert elapsed < 0.3, f"{kind}: {elapsed:.2f}s"
    assert rule.run(text + " K42.", CTX).verdict == ("fail" if kind == "keywords_absent" else "pass")


def test_all_keywords_found_in_passes_as_each_keywords_own_pattern_finds_them() -> None:
    """``require: all`` looks for every keyword with one alternation per pass, each pass for the
    keywords not found yet: it finds exactly the keywords whose own pattern matches, also where
    one hides another (``ab`` inside ``ab b``, the same start), where matches overlap or touch
    (the boundary one consumes is the next one's), and past ``MAX_PASS_MATCHES`` repeats."""
    import random

    from handoffmon.checkers.safe_regex import clean_text
    from handoffmon.checkers.text import MAX_PASS_MATCHES, any_phrase_regex, phrases_present

    rng = random.Random(17)
    alphabet = "abAB_1é\u212a.+- \n"
    outcomes: set[tuple[bool, bool]] = set()
    for _ in range(300):
        phrases = tuple(
            "".join(rng.choice(alphabet.strip()) for _ in range(rng.randrange(1, 4)))
            for _ in range(rng.randrange(1, 7))
        )
        case_sensitive, whole_word = rng.random() < 0.3, rng.random() < 0.8
        each = [
            any_phrase_regex((ph,), key="k", case_sensitive=case_sensitive, whole_word=whole_word)
            for ph in phrases
        ]
        for _ in range(15):
            text = clean_text("".join(rng.choice(alphabet) for _ in range(rng.randrange(16))))
            if rng.random() < 0.1:  # a keyword repeated past one pass's matches, then the others
                text = (phrases[0] + " ") * (MAX_PASS_MATCHES + 5) + text
            want = {i for i, rx in enumerate(each) if rx.search(text) is not None}
            got = phrases_present(
                text,
                phrases,
                list(range(len(phrases))),
                case_sensitive=case_sensitive,
                whole_word=whole_word,
            )
            assert got == want, (phrases, case_sensitive, whole_word, text)
            outcomes.add((bool(want), want == set(range(len(phrases)))))
    assert outcomes == {(False, False), (True, False), (True, True)}


def test_hidden_and_touching_keywords_are_all_found() -> None:
    """The cases one pass misses: ``new`` only as the start of ``new york`` (one match per place),
    ``cat dog`` (the space after cat is consumed), ``c++rocks`` (a keyword ending in a non-word
    character), and overlapping ``a-b`` / ``b-c``."""
    cases = [
        (["new york", "new"], "I love New York."),
        (["new", "new york"], "I love New York."),
        (["cat", "dog"], "cat dog"),
        (["c++", "rocks"], "c++rocks"),
        (["a-b", "b-c"], "a-b-c"),
    ]
    for keywords, text in cases:
        assert verdict("keywords_present", text, keywords=keywords) == "pass", (keywords, text)
    assert verdict("keywords_present", "newer york", keywords=["new york", "new"]) == "fail"


def test_a_declaration_of_many_new_keywords_compiles_in_milliseconds() -> None:
    """A client can declare 150 new keywords on every request: one pattern per keyword (each
    with its Unicode boundary classes) took 0.24-0.58 s of the check thread to compile; one
    alternation takes milliseconds, and checking a reply stays within the 50 ms budget."""
    import time

    words = [f"w{i}x{j}" for i in range(20) for j in range(20)]
    text = " ".join(words) + " é"
    for round_ in range(3):
        keywords = [f"w{round_ * 7 + i}x{i % 20}" for i in range(150)]  # new ones every round
        start = time.process_time()
        check = REG.build("keywords_present", {"keywords": keywords})
        built = time.process_time() - start
        start = time.process_time()
        outcome = check(text, CTX)
        checked = time.process_time() - start
        assert built < 0.05, f"compiling 150 keywords took {built:.3f}s"
        assert checked < 0.05, f"checking took {checked:.3f}s"
        assert outcome.verdict == "fail" and outcome.reason.startswith("missing_")


def test_a_regex_slow_per_character_is_refused_on_a_long_reply_not_run_for_seconds() -> None:
    """RE2 is linear, but a pattern whose DFA outgrows its memory runs on the NFA: ``(.{0,100}){10}z``
    took 5.3 s on a 200 kB non-ASCII reply (24 s on 1 MB) with the flat 300 ns per character.
    Its cost is now measured at load, so the long reply is ``too_large`` at once, while an
    ordinary pattern keeps the flat cost and still checks a 1 MB reply."""
    import time

    slow = REG.build("regex_must_match", {"pattern": r"(?s)(.{0,100}){10}z"})
    text = ("abc déf ghi ע ت " * 13_000)[:200_000]
    start = time.process_time()
    result = Rule("r", slow, budget_s=0.05).run(text, CTX)
    assert time.process_time() - start < 0.1
    assert (result.verdict, result.reason) == ("error", "too_large")
    assert Rule("r", slow, budget_s=0.05).run("a z", CTX).verdict == "pass"  # short replies still checked
    plain = REG.build("regex_must_match", {"pattern": r"(?i)\bsorry\b"})
    assert plain.cost == 300.0
    assert Rule("r", plain, budget_s=0.05).run("x " * 500_000 + "Sorry.", CTX).verdict == "pass"


def test_counting_matches_stops_at_min_count() -> None:
    """``min_count`` counted every match (4.4 s for ``.`` on 1 MB): now up to ``min_count``, at
    most 10,000; the reason still says how many were found when there are fewer."""
    import time

    count = REG.build("regex_must_match", {"pattern": ".", "min_count": 2})
    start = time.process_time()
    assert count("a" * 1_000_000, CTX).verdict == "pass"
    assert time.process_time() - start < 0.1
    few = REG.build("regex_must_match", {"pattern": "b", "min_count": 3})
    assert few("b a b", CTX).reason == "pattern_found_2_times"
    with pytest.raises(ParamError, match="must be <= 10000") as caught:
        REG.build("regex_must_match", {"pattern": ".", "min_count": 10_001})
    assert caught.value.key == "min_count"
