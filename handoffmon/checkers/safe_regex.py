"""Linear-time regular expressions (google-re2) with load-time errors and surrogate-safe matching."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import re2

from handoffmon.checkers.base import ParamError

_UNSUPPORTED_HINTS = (
    ("(?<", "lookbehind"),
    ("(?=", "lookahead"),
    ("(?!", "negative lookahead"),
    ("\\1", "backreference"),
    ("(?P=", "backreference"),
    ("(?>", "atomic group"),
    ("*+", "possessive quantifier"),
    ("++", "possessive quantifier"),
)


_WARM_UP = "Warm-up text: Are you sure? 123, ÄÖÜ éè ñ ß — «ok» 你好.\n- item\n"

_PROBE = (
    "a" * 400 + "abc déf ghi ע ت 你好 " * 15 + "The quick brown fox, e.g. Mr. Smith, jumps. 3.5? Yes!\n" * 6
)
"""Text a pattern is timed on at load: runs of one letter, non-ASCII words and prose, the shapes
that made RE2 leave its DFA for its NFA in the checks audit."""
REGEX_COST = 300.0
"""The regex checkers' cost (ns per character) unless their pattern measures slower."""
PROBE_MARGIN = 4.0
"""How much slower than on ``_PROBE`` a pattern was found on 1 MB replies (its DFA cache fills up;
measured 1-3.4x)."""


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so it can be UTF-8 encoded."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


# Characters that are literal in RE2 syntax outside a character class (ASCII only).
_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-,:;'\"!@%&=<>~/#")
_FLAG_GROUP = frozenset("ims")


def ascii_literal_finder(pattern: str, *, ignore_case: bool = False) -> Callable[[str], bool] | None:
    """For a pattern that is a plain ASCII literal (after leading ``(?i)``/``(?m)``/``(?s)``
    groups): ``found(text)``, whether it occurs in an ASCII ``text``; otherwise ``None``.

    RE2's Python wrapper releases the GIL around every match, and taking it back costs a
    busy process ~40 µs of thread CPU, against ~1 µs for ``in``. The answer is RE2's for ASCII
    text: an ASCII literal has no ``m``/``s`` semantics, and RE2's case folding maps an ASCII
    letter only to its ASCII pair within ASCII text (its other fold partners, the Kelvin sign
    and long s, are not ASCII). Non-ASCII text must still go to RE2.
    """
    body = pattern
    while body.startswith("(?"):
        end = body.find(")")
        flags = body[2:end]
        if end < 0 or not flags or not _FLAG_GROUP.issuperset(flags):
            return None
        ignore_case = ignore_case or "i" in flags
        body = body[end + 1 :]
    if not body or not _LITERAL.issuperset(body):
        return None
    if ignore_case:
        folded = body.lower()
        return lambda text: folded in text.lower()
    return lambda text: body in text


def compile_safe(
    pattern: str,
    *,
    key: str,
    ignore_case: bool = False,
    multiline: bool = False,
    dotall: bool = False,
    max_mem: int | None = None,
) -> Any:
    """Compile ``pattern`` with RE2 (linear time: no catastrophic backtracking), in at most
    ``max_mem`` bytes (``BuildLimits.regex_max_mem``; default RE2's 8 MiB): compile time grows
    with the program, so a smaller budget refuses a pattern that would take long to compile.

    Raises:
        ParamError: naming ``key`` for invalid syntax, a pattern too large for ``max_mem``, or
            constructs RE2 does not support (backreferences, lookaround, atomic groups,
            possessive quantifiers).
    """
    flags = "".join(f for f, on in (("i", ignore_case), ("m", multiline), ("s", dotall)) if on)
    source = f"(?{flags}){pattern}" if flags else pattern
    options = re2.Options()
    options.log_errors = False
    if max_mem is not None:
        options.max_mem = max_mem
    try:
        compiled = re2.compile(clean_text(source), options)
    except re2.error as exc:
        detail = (
            exc.args[0].decode("utf-8", "replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else str(exc)
        )
        construct = next((name for marker, name in _UNSUPPORTED_HINTS if marker in pattern), None)
        if construct:
            raise ParamError(
                key,
                f"regex uses a {construct}, which the linear-time RE2 engine does not "
                f"support; rewrite the pattern without it ({detail})",
            ) from exc
        raise ParamError(key, f"invalid regex: {detail}") from exc
    # RE2 builds its automata lazily: the first search can take tens of ms (Unicode classes,
    # case folding). Pay that at load time, not against the first reply's time budget.
    compiled.search(_WARM_UP)
    return compiled


def regex_cost(compiled: Any, *, key: str = "pattern", max_ns: float | None = None) -> float:
    """A compiled pattern's worst CPU cost per character (ns) for ``Checker.cost``: RE2 is linear,
    but a pattern whose DFA outgrows its memory runs on the NFA at up to ~30 µs per character
    (``(?s)(.{0,100}){10}z`` took 24 s on 1 MB), so a reply it would spend seconds on must be
    refused as ``too_large``. Measured on ``_PROBE`` (~0.1 s for the worst patterns) the second
    time (the first builds DFA states a long reply reuses: ``\\w{1000}`` read 25 µs per character
    then, 0.02 on 1 MB), times ``PROBE_MARGIN``; ``REGEX_COST`` at least.

    Raises:
        ParamError: naming ``key`` when the cost is over ``max_ns`` (``BuildLimits.max_cost_ns``).
    """
    data = _PROBE.encode("utf-8")
    compiled.search(data)
    start = time.thread_time()
    compiled.search(data)
    ns_per_char = (time.thread_time() - start) * 1e9 / len(_PROBE)
    cost = max(REGEX_COST, PROBE_MARGIN * ns_per_char)
    if max_ns is not None and cost > max_ns:
        raise ParamError(
            key,
            f"regex too slow: measured {cost / 1000:.0f} µs per character of reply (RE2 left its "
            f"DFA for its NFA), over the {max_ns / 1000:.0f} µs a rule may take to check a "
            f"{MIN_REPLY_CHARS:,}-character reply within its budget; simplify the pattern "
            "(nested or long counted repetitions) or raise pipeline.check_budget_s",
        )
    return cost


MIN_REPLY_CHARS = 4_000
"""A regex rule must be able to check a reply this long (about 1,000 tokens) within
``OVERRUN`` × its check budget; a costlier pattern is refused when the rule is built."""


def max_cost_ns(budget_s: float, overrun: float) -> float:
    """``BuildLimits.max_cost_ns`` for a check budget: :data:`MIN_REPLY_CHARS` in ``overrun`` ×
    ``budget_s`` of CPU."""
    return budget_s * overrun * 1e9 / MIN_REPLY_CHARS
