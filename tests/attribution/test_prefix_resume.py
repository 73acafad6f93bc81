"""The attributor's resumed scans (``PrefixCache``) agree with full scans, whatever the client edits."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.attribution import Attributor
from handoffmon.attribution.fingerprint import PrefixCache
from handoffmon.stores.memory import MemoryStore

TEXTS = ("Sure!", "OK.", "a  b\tc", "x" * 40, "hello world " * 5, "", "   ")
ROLES = ("user", "assistant", "system", "tool", "developer")


class _Str(str):
    """An equal string of another type (takes raw_digest's path)."""


def _fields(a: Attributor, messages: Any) -> tuple[Any, ...]:
    s = a._scan(messages)
    return (s.fingerprint, s.chars, s.tail, s.indices, s.chains, s.contents)


def _edit(rng: random.Random, history: list[Any]) -> None:
    """One random client-side change of an earlier message (in place or by replacement)."""
    i = rng.randrange(len(history))
    m = history[i]
    kind = rng.randrange(-2, 7)
    if kind <= 0 and type(m) is dict:
        m["content"] = rng.choice(TEXTS) + "!"  # in place: the remembered copy must not follow
    elif kind == 1 and type(m) is dict:
        m["role"] = rng.choice(ROLES)
    elif kind == 2:
        history[i] = {"role": "assistant", "content": "edited", "name": "x"}
    elif kind == 3:
        history[i] = {"role": "user", "content": _Str(rng.choice(TEXTS))}
    elif kind == 4:
        history[i] = {"role": "user", "content": [{"type": "text", "text": "part"}]}
    elif kind == 5:
        history[i] = rng.choice(TEXTS)  # a bare string message
    else:
        del history[i]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_resumed_scans_equal_full_scans(seed: int) -> None:
    rng = random.Random(seed)
    cached = Attributor(MemoryStore(), text_cache_bytes=rng.choice((2_000, 50_000, 16_000_000)))
    reference = Attributor(MemoryStore())
    histories: list[list[Any]] = [[{"role": "system", "content": "sys"}] for _ in range(rng.choice((1, 3)))]
    for _ in range(40):
        h = histories[rng.randrange(len(histories))]
        r = rng.random()
        if r < 0.55:  # the usual next turn: the reply, then a new user message
            if h and rng.random() < 0.3:  # edited since the previous turn was scanned
                _edit(rng, h)
            h.append({"role": rng.choice(("assistant", "assistant", "tool")), "content": rng.choice(TEXTS)})
            h.append({"role": "user", "content": rng.choice(TEXTS) + str(rng.randrange(5))})
        elif r < 0.85 and h:
            _edit(rng, h)
        elif r < 0.93:
            h.append({"role": "user", "content": rng.choice(TEXTS)})
        else:  # a retry of the same history, or a copy of it
            h[:] = [dict(m) if type(m) is dict else m for m in h]
        sent = list(h)
        assert _fields(cached, sent) == _fields(reference, tuple(sent))  # a tuple is never resumed
        assert cached._prefixes._bytes <= cached._prefixes.max_bytes


def test_a_conversation_resumes_and_holds_one_entry() -> None:
    a = Attributor(MemoryStore())
    history: list[dict[str, str]] = [{"role": "system", "content": "s"}]
    for t in range(5):
        history += [{"role": "user", "content": f"question {t}"}]
        a._scan([dict(m) for m in history])
        assert len(a._prefixes) == 1
        history += [{"role": "assistant", "content": f"answer {t}"}]
    calls: list[int] = []
    a._resume = lambda messages: calls.append(1) or Attributor._resume(a, messages)  # type: ignore[method-assign]
    history.append({"role": "user", "content": "last"})
    assert _fields(a, history) == _fields(Attributor(MemoryStore()), tuple(history))
    assert calls == [1]


def test_prefix_cache_bounds() -> None:
    cache = PrefixCache(100_000)
    for i in range(1_000):
        cache.remember([{"role": "user", "content": f"m{i}"}], 3, ())
        assert cache._bytes <= cache.max_bytes
    assert len(cache) < 1_000
    big = [{"role": "user", "content": "x"}] * 20
    cache.remember(big, 10_000, ())  # over max_bytes / 16: not kept
    assert cache.take("x", 20) is None
    cache.remember([{"role": "user", "content": "y"}], 1, ("state",))
    assert cache.take("y", 2) is None  # another length: dropped
    cache.remember([{"role": "user", "content": "y"}], 1, ("state",))
    assert cache.take("y", 1) == ([{"role": "user", "content": "y"}], ("state",))
    assert cache.take("y", 1) is None  # taken once


def test_a_repeated_history_resumes() -> None:
    a = Attributor(MemoryStore())
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "r"},
    ]
    first = _fields(a, [dict(m) for m in history])
    resumed: list[object] = []
    a._resume = lambda m: resumed.append(Attributor._resume(a, m)) or resumed[-1]  # type: ignore[method-assign]
    assert _fields(a, [dict(m) for m in history]) == first
    assert resumed[0] is not None
    history[1] = {"role": "assistant", "content": "edited"}
    assert _fields(a, history) == _fields(Attributor(MemoryStore()), tuple(history))


def test_a_history_too_long_to_keep_is_not_copied() -> None:
    """The scan copied every history for the resume cache and only then found it too large to
    keep: 50,000 messages held ~9.6 MB more while they were scanned (~190 MB for a million).
    A history that cannot fit is not copied (its texts cached, the scan holds ~1 KB)."""
    import tracemalloc

    attributor = Attributor(MemoryStore())
    history = [{"role": "user", "content": f"m{i % 500}"} for i in range(50_000)]
    attributor.attribute(history)  # the texts cached, as a client's next turn finds them
    tracemalloc.start()
    try:
        ctx = attributor.attribute(history)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ctx.history_chars == sum(len(m["content"]) for m in history) and not ctx.degraded
    assert peak < 1_000_000
