"""Shadow budgets: sliding windows that reserve an upper bound first and settle to the actual use.

A call is admitted only if every window can hold its **upper bound** (tokens: the
prompt's UTF-8 bytes — a byte-level BPE token covers at least one byte; the repeated generation
parameters' among them, ``turns.params_bytes`` — plus ``max_output_tokens``; money: that many
tokens at the target's prices). After the call the reservation is settled to the reported
usage, so a window never holds more than its limit, even with calls in flight — unless a call
used more than its bound (a history referring to an image or a file by URL or id, whose bytes
bound nothing): that use is kept as reported, and the window admits nothing until it drains
below the limit again.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handoffmon.config import ShadowConfig

Pair = tuple[str, str]

MAX_CONVERSATIONS = 10_000
"""Conversations whose shadow calls in the last hour are counted (``max_calls_per_conversation``):
the least recently shadowed are forgotten first, so the map is bounded whatever ids clients send.
Entries only come with admitted calls, so at up to ~166 calls per minute none is forgotten while
it still holds a call."""


WINDOW_SLOTS = 1000
"""A window's entries at most (about): amounts admitted within ``window_s / WINDOW_SLOTS`` of an
entry's first share it, and leave the window when its last does. So a day's money window holds
about a thousand entries at any rate (one per call was 432,000 at 300 calls per minute, 58 MB),
and an amount is held at most that slot longer than alone (86 s of a day), never shorter."""


class SlidingWindow:
    """Amounts admitted in the last ``window_s`` seconds, against ``limit``.

    Memory is bounded by ``WINDOW_SLOTS`` entries whatever the rate; ``add`` returns a handle
    that ``settle`` changes in constant time.
    """

    __slots__ = ("_items", "_slot_s", "_total", "limit", "window_s")

    def __init__(self, limit: float, window_s: float) -> None:
        self.limit, self.window_s = float(limit), float(window_s)
        self._slot_s = self.window_s / WINDOW_SLOTS
        self._items: deque[list[float]] = deque()  # [first time, last time, amount, 1.0 while inside]
        self._total = 0.0

    def used(self, now: float) -> float:
        """Amount admitted within the window ending at ``now``."""
        items = self._items
        while items and items[0][1] <= now - self.window_s:
            entry = items.popleft()
            self._total -= entry[2]
            entry[3] = 0.0  # a settle after this has nothing left to change
        if not items:
            self._total = 0.0  # no rounding left over from the settles
        return max(self._total, 0.0)

    def fits(self, amount: float, now: float) -> bool:
        return self.used(now) + amount <= self.limit

    def add(self, amount: float, now: float) -> list[Any]:
        """Admit ``amount`` at ``now``; the handle to settle it with."""
        items = self._items
        if items and now - items[-1][0] < self._slot_s:
            entry = items[-1]
            entry[1] = now
            entry[2] += amount
        else:
            entry = [now, now, float(amount), 1.0]
            items.append(entry)
        self._total += amount
        return [entry, float(amount)]

    def settle(self, handle: list[Any], amount: float) -> None:
        """Replace an admitted amount by the actual one (only while it is still inside the window)."""
        entry, old = handle
        if entry[3]:
            entry[2] += amount - old
            self._total += amount - old
        handle[1] = float(amount)


@dataclass
class Reservation:
    """What one admitted call holds in the windows, to settle after the call."""

    pair: Pair
    tokens: float
    usd: float
    _items: dict[str, tuple[SlidingWindow, list[Any]]]  # name -> (window, its handle)


class Budget:
    """Calls per minute, tokens per hour, money per day, per-pair and per-conversation calls per hour.

    Args:
        config: the ``shadow`` section.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, config: ShadowConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self.calls = SlidingWindow(config.calls_per_minute, 60.0)
        self.tokens = SlidingWindow(config.tokens_per_hour, 3600.0)
        self.usd = SlidingWindow(config.usd_per_day or float("inf"), 86400.0)
        self._pairs: dict[Pair, SlidingWindow] = {}
        self._conversations: OrderedDict[bytes, SlidingWindow] = OrderedDict()

    def upper_bound_tokens(self, prompt_bytes: int, messages: int) -> float:
        """Tokens a call can use at most: prompt bytes + 4 per message (chat framing) + max output."""
        return float(prompt_bytes + 4 * messages + self.config.max_output_tokens)

    def reserve(
        self,
        pair: Pair,
        tokens: float,
        prices: tuple[float, float] | None,
        prompt_tokens: float,
        conversation: str | None = None,
    ) -> Reservation | str:
        """Admit a call or say which limit stops it (``conversation_quota``, ``budget_calls``,
        ``budget_tokens``, ``budget_money``, ``no_price``, ``quota``).

        Args:
            pair: (prefix model, model) of the pair the call would produce.
            tokens: the call's upper bound of tokens (``upper_bound_tokens``).
            prices: (USD per input token, USD per output token), None if unknown.
            prompt_tokens: the part of ``tokens`` that is input (priced at the input rate).
            conversation: the turn's conversation id (None: no per-conversation cap).
        """
        usd = 0.0
        if self.config.usd_per_day is not None:
            if prices is None:
                return "no_price"
            usd = prompt_tokens * prices[0] + (tokens - prompt_tokens) * prices[1]
        with self._lock:
            now = self._clock()
            pair_window = self._pairs.get(pair)
            if pair_window is None:
                pair_window = SlidingWindow(self.config.pair_calls_per_hour, 3600.0)
            conv_key = conv_window = None
            if conversation is not None:  # a digest: the map's memory does not grow with id length
                conv_key = hashlib.blake2b(
                    conversation.encode("utf-8", "surrogatepass"), digest_size=16
                ).digest()
                conv_window = self._conversations.get(conv_key)
                if conv_window is not None and not conv_window.fits(1.0, now):
                    return "conversation_quota"
            checks = (("budget_calls", self.calls, 1.0), ("budget_tokens", self.tokens, tokens),
                      ("budget_money", self.usd, usd), ("quota", pair_window, 1.0))  # fmt: skip
            for reason, window, amount in checks:
                if not window.fits(amount, now):
                    return reason
            self._pairs[pair] = pair_window
            self._forget_idle(now)
            items = {name: (w, w.add(a, now)) for name, w, a in (
                ("calls", self.calls, 1.0), ("tokens", self.tokens, tokens), ("usd", self.usd, usd),
                ("pair", pair_window, 1.0))}  # fmt: skip
            if conv_key is not None:
                if conv_window is None:
                    conv_window = SlidingWindow(self.config.max_calls_per_conversation, 3600.0)
                items["conversation"] = (conv_window, conv_window.add(1.0, now))
                self._remember(conv_key, conv_window, now)
            return Reservation(pair, tokens, usd, items)

    def settle(self, r: Reservation, tokens: float | None, usd: float | None) -> None:
        """Settle a reservation to the call's reported use (None: keep the upper bound).

        A use above the bound is kept as reported, not cut to the bound: the bytes of a history
        do not bound what it costs when it refers to content by URL or id (an image by URL, a
        file by id), and a window that recorded only the bound would let every such call spend
        past the limit unseen. Kept as used, it stops further calls until it drains."""
        with self._lock:
            for name, used in (("tokens", tokens), ("usd", usd)):
                if used is not None:
                    window, item = r._items[name]
                    window.settle(item, max(used, 0.0))

    def cancel(self, r: Reservation) -> None:
        """Give a reservation back whole (no call was sent): every window settles it to 0."""
        with self._lock:
            for window, item in r._items.values():
                window.settle(item, 0.0)

    def usage(self) -> tuple[dict[str, float], dict[str, float]]:
        """(used now, limit) per window: ``calls`` per minute, ``tokens`` per hour, ``usd`` per day."""
        windows = {"calls": self.calls, "tokens": self.tokens, "usd": self.usd}
        with self._lock:
            now = self._clock()
            return {k: w.used(now) for k, w in windows.items()}, {k: w.limit for k, w in windows.items()}

    def _remember(self, key: bytes, window: SlidingWindow, now: float) -> None:
        """Keep a conversation's window as the most recently shadowed; forget those whose last call
        left the hour, and the least recently shadowed beyond ``MAX_CONVERSATIONS``."""
        self._conversations[key] = window
        self._conversations.move_to_end(key)
        conversations = self._conversations
        while conversations:
            oldest = next(iter(conversations.values()))
            if len(conversations) <= MAX_CONVERSATIONS and oldest.used(now) > 0:
                break
            conversations.popitem(last=False)

    def _forget_idle(self, now: float) -> None:
        """Drop per-pair windows with nothing inside (bounds the pair map by recent pairs)."""
        if len(self._pairs) > 256:
            for p in [p for p, w in self._pairs.items() if w.used(now) == 0]:
                del self._pairs[p]
