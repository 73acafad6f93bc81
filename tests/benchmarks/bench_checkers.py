"""Checker cost: p50/p99 µs per checker on 500-character and 5 KB replies, and rule-pack throughput.

Run: ``.venv/bin/python -m tests.benchmarks.bench_checkers [--quick]``. Replies are slices of
real model answers (tests/data/ifeval). Single thread, so figures are one core's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from handoffmon.checkers import CheckContext, CheckFn, CheckOutcome, RuleSet, default_registry
from handoffmon.checkers.pack import default_rule_pack

DATA = Path(__file__).parent.parent / "data" / "ifeval" / "responses_llama31_8b.jsonl"

CHECKERS: list[tuple[str, str, dict[str, object]]] = [
    ("regex_must_match", "regex_must_match", {"pattern": r"(?i)\b(?:therefore|in summary)\b"}),
    ("regex_must_not_match", "regex_must_not_match", {"pattern": r"\{\{[^}]*\}\}"}),
    ("keywords_present(3,all)", "keywords_present", {"keywords": ["data", "model", "result"]}),
    ("keywords_absent(3)", "keywords_absent", {"keywords": ["as an ai", "sorry", "cannot"]}),
    ("starts_with", "starts_with", {"prefix": "Sure", "case_sensitive": False}),
    ("ends_with", "ends_with", {"suffix": "questions?"}),
    ("letter_case", "letter_case", {"case": "lower"}),
    ("no_commas", "no_commas", {}),
    ("length:chars", "length", {"unit": "chars", "max": 4000}),
    ("length:words", "length", {"unit": "words", "max": 800}),
    ("length:sentences", "length", {"unit": "sentences", "max": 40}),
    ("length:paragraphs", "length", {"unit": "paragraphs", "max": 10}),
    ("length:bullets", "length", {"unit": "bullets", "max": 10}),
    ("valid_json", "valid_json", {}),
    ("json_schema", "json_schema", {"schema": {"type": "object", "required": ["a"]}}),
    ("pydantic_model", "pydantic_model", {"model": "handoffmon.config:ScopeConfig"}),
    ("answer_tag", "answer_tag", {}),
    ("answer_flip", "answer_flip", {}),
    ("language", "language", {"languages": ["en"]}),
    (
        "ifeval:number_words",
        "ifeval:length_constraints:number_words",
        {"num_words": 300, "relation": "at least"},
    ),
    (
        "ifeval:number_sentences",
        "ifeval:length_constraints:number_sentences",
        {"num_sentences": 10, "relation": "less than"},
    ),
    (
        "ifeval:capital_word_frequency",
        "ifeval:change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at least"},
    ),
    (
        "ifeval:highlighted_sections",
        "ifeval:detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
    ),
    (
        "ifeval_loose:number_words",
        "ifeval_loose:length_constraints:number_words",
        {"num_words": 300, "relation": "at least"},
    ),
    ("ifeval:response_language", "ifeval:language:response_language", {"language": "en"}),
]


def _replies(size: int, count: int) -> list[str]:
    text = "\n\n".join(json.loads(line)["response"] for line in DATA.read_text(encoding="utf-8").splitlines())
    step = max(1, (len(text) - size) // count)
    out = [text[i * step : i * step + size] for i in range(count)]
    # give the answer checkers something to find
    return [r[: size - 40] + " <answer>42</answer>" if i % 2 else r for i, r in enumerate(out)]


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples_s, n=100, method="inclusive")
    return q[49] * 1e6, q[98] * 1e6


def bench_checker(
    kind: str, params: dict[str, object], replies: list[str], repeat: int
) -> tuple[float, float, float]:
    """(p50, p99) wall µs per call and mean CPU µs per call of one checker.

    Per-call wall times give the distribution; the CPU mean (process time over all calls)
    is the one-core cost, unaffected by other processes on a shared machine.
    """
    checker = default_registry().build(kind, params)
    ctx = CheckContext(user_message="Are you sure?", previous={"": "41"})
    for r in replies[:5]:
        checker(r, ctx)
    samples = []
    clock = time.perf_counter
    cpu0 = time.process_time()
    for _ in range(repeat):
        for r in replies:
            t0 = clock()
            checker(r, ctx)
            samples.append(clock() - t0)
    cpu_mean = (time.process_time() - cpu0) / len(samples) * 1e6
    return (*_percentiles(samples), cpu_mean)


def _py3langid_language(languages: frozenset[str]) -> CheckFn:
    """The ``language`` checker as it was before the vectorized scorer: py3langid's own classify."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = reply.strip()[:2000]
        if len(text) < 20:
            return CheckOutcome("not_applicable", "too_short")
        lang, prob = ident.classify(text)
        if prob < 0.5:
            return CheckOutcome("not_applicable", "low_confidence")
        return CheckOutcome("pass") if lang in languages else CheckOutcome("fail", f"language:{lang}")

    return check


def _langdetect_only_response_language(language: str) -> CheckFn:
    """``ifeval:language:response_language`` as it was: seeded langdetect decides every reply."""
    from handoffmon.checkers.ifeval import langdetect_checks

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        found = langdetect_checks._langdetect(reply)
        ok = found is None or found == language
        return CheckOutcome("pass") if ok else CheckOutcome("fail", "not_followed")

    return check


LANGUAGE_PAIRS: list[tuple[str, str, dict[str, object], Callable[[], CheckFn]]] = [
    ("language", "language", {"languages": ["en"]}, lambda: _py3langid_language(frozenset({"en"}))),
    (
        "ifeval:response_language",
        "ifeval:language:response_language",
        {"language": "en"},
        lambda: _langdetect_only_response_language("en"),
    ),
]
"""(label, checker, params, the old implementation): timed side by side, call by call."""


def bench_versus_old(
    kind: str, params: dict[str, object], old: CheckFn, replies: list[str], repeat: int
) -> tuple[float, float, int]:
    """(new p50 µs, old p50 µs, verdicts that differ): passes over all replies alternate
    between the two (old first), so both see the same load, each with its own warm caches."""
    new = default_registry().build(kind, params)
    ctx = CheckContext()
    clock = time.perf_counter
    samples: dict[str, list[float]] = {"new": [], "old": []}
    verdicts: dict[str, list[str]] = {"new": [], "old": []}
    for _ in range(repeat):
        for which, fn in (("old", old), ("new", new)):
            for r in replies[:5]:
                fn(r, ctx)
            for r in replies:
                t0 = clock()
                out = fn(r, ctx)
                samples[which].append(clock() - t0)
                verdicts[which].append(out.verdict)
    differ = sum(a != b for a, b in zip(verdicts["new"], verdicts["old"], strict=True)) // repeat
    return statistics.median(samples["new"]) * 1e6, statistics.median(samples["old"]) * 1e6, differ


SWEEP_BYTES = 8 << 20
"""Bytes summed between calls in the cache-cold rows: more than L2, as other pipeline work between
two replies would touch; it evicts the checker's code, numpy's and the model's rows."""


def bench_cold(
    check: CheckFn, replies: list[str], repeat: int, sweep: Callable[[], object] | None = None
) -> tuple[float, float, float]:
    """(cold p50, cold p99, warm p50) µs per call of ``check``: passes alternate between calls
    back to back (warm) and calls each preceded by summing a ``SWEEP_BYTES`` buffer (cold: the
    checker running between other work, as in the pipeline). Only the call is timed."""
    if sweep is None:
        import numpy as np

        sweep = np.ones(SWEEP_BYTES, dtype=np.uint8).sum
    ctx = CheckContext()
    for r in replies[:5]:
        check(r, ctx)
    cold: list[float] = []
    warm: list[float] = []
    clock = time.perf_counter
    for _ in range(repeat):
        for r in replies:
            t0 = clock()
            check(r, ctx)
            warm.append(clock() - t0)
        for r in replies:
            sweep()
            t0 = clock()
            check(r, ctx)
            cold.append(clock() - t0)
    p50, p99 = _percentiles(cold)
    return p50, p99, statistics.median(warm) * 1e6


def bench_pack(replies: list[str], *, with_language: bool, seconds: float) -> tuple[float, float, int]:
    """Checks per second of the default rule pack through RuleSet.evaluate, single thread.

    Returns (per wall second, per CPU second of this process, rules). CPU time is what
    "one core" means on a shared machine: time the process was descheduled is not counted.
    """
    rules = default_rule_pack(languages=("en",) if with_language else ())
    rs = RuleSet.from_config(rules, budget_s=1.0)
    ctx = CheckContext()
    checks = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < seconds:
        for r in replies:
            checks += len(rs.evaluate(r, ctx))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return checks / wall, checks / cpu, len(rules)


def main() -> None:
    """Print the per-checker table and the pack throughput."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = parser.parse_args()
    repeat, seconds = (2, 0.5) if args.quick else (10, 3.0)
    short, long = _replies(500, 100), _replies(5000, 100)
    head = f"{'500 ch p50':>11} {'p99':>9} {'cpu':>8} {'5 KB p50':>10} {'p99':>9} {'cpu':>8}"
    print(f"{'checker (µs)':34} {head}")
    for label, kind, params in CHECKERS:
        s50, s99, scpu = bench_checker(kind, params, short, repeat)
        l50, l99, lcpu = bench_checker(kind, params, long, max(1, repeat // 2))
        print(f"{label:34} {s50:>11.1f} {s99:>9.1f} {scpu:>8.1f} {l50:>10.1f} {l99:>9.1f} {lcpu:>8.1f}")
    print()
    for label, kind, params, old in LANGUAGE_PAIRS:
        for name, replies in (("500 ch", short), ("5 KB", long)):
            new50, old50, differ = bench_versus_old(kind, params, old(), replies, max(1, repeat // 2))
            print(
                f"{label + ', ' + name:34} new p50 {new50:8.1f} µs, old p50 {old50:9.1f} µs, "
                f"new/old {new50 / old50:.3f}; verdicts differing {differ}/{len(replies)}"
            )
    print()
    for label, kind, params, old in LANGUAGE_PAIRS[:1]:
        new_cold = bench_cold(default_registry().build(kind, params), short, max(1, repeat // 2))
        old_cold = bench_cold(old(), short, max(1, repeat // 2))
        print(
            f"{label + ', 500 ch, cache-cold':34} new p50 {new_cold[0]:8.1f} µs (p99 {new_cold[1]:.1f}, warm "
            f"{new_cold[2]:.1f}), old p50 {old_cold[0]:9.1f} µs (warm {old_cold[2]:.1f}); "
            f"{SWEEP_BYTES >> 20} MiB swept between calls"
        )
    print()
    for with_language in (False, True):
        for name, replies in (("500 ch", short), ("5 KB", long)):
            wall_rate, cpu_rate, n = bench_pack(replies, with_language=with_language, seconds=seconds)
            label = f"default pack ({n} rules{', with language' if with_language else ''}), {name}"
            print(
                f"{label:52} {cpu_rate:>10,.0f} checks/CPU-s ({cpu_rate / n:,.0f} replies/s); "
                f"{wall_rate:,.0f} checks/wall-s"
            )


if __name__ == "__main__":
    main()
