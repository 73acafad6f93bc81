"""Shadow budget windows: every limit holds under more traffic than it allows."""

from __future__ import annotations

import random
import time

from handoffmon.config import ShadowConfig
from handoffmon.shadow import Budget, Reservation
from handoffmon.shadow.budget import MAX_CONVERSATIONS
from handoffmon.testing import FakeClock

PRICES = (1e-6, 4e-6)


def _drive(
    budget: Budget, clock: FakeClock, seconds: float, rate_per_s: float
) -> list[tuple[float, Reservation]]:
    """Offer calls at ``rate_per_s`` with random prompt sizes; settle each to a random usage within
    its bound (a call's money at the prices it was reserved at)."""
    rng = random.Random(1)
    admitted = []
    t = 0.0
    while t < seconds:
        clock.advance(1.0 / rate_per_s)
        t += 1.0 / rate_per_s
        pair = (rng.choice("abc"), rng.choice("de"))
        tokens = budget.upper_bound_tokens(rng.randint(100, 4000), 5)
        r = budget.reserve(pair, tokens, PRICES, tokens - 256)
        if isinstance(r, Reservation):
            share = rng.uniform(0.2, 1.0)  # of the bound, in tokens and so in money
            budget.settle(r, share * tokens, share * r.usd)
            admitted.append((clock(), r))
    return admitted


def test_no_window_is_ever_exceeded() -> None:
    """10 offers/s for 3 h against 20 calls/min, 60k tokens/h, $0.05/day, 15 calls/pair/h:
    at every moment each sliding window holds at most its limit, and calls were refused."""
    cfg = ShadowConfig(calls_per_minute=20, tokens_per_hour=60_000, usd_per_day=0.05, pair_calls_per_hour=15,
                       max_output_tokens=256)  # fmt: skip
    clock = FakeClock(0.0)
    budget = Budget(cfg, clock)
    admitted = _drive(budget, clock, 3 * 3600, 10.0)
    assert 0 < len(admitted) < 3 * 3600 * 10
    times = [t for t, _ in admitted]
    for i, t in enumerate(times):
        in_minute = sum(1 for u in times[: i + 1] if u > t - 60)
        assert in_minute <= 20
    assert budget.tokens.used(clock()) <= 60_000 and budget.usd.used(clock()) <= 0.05
    per_pair: dict[tuple[str, str], list[float]] = {}
    for t, r in admitted:
        per_pair.setdefault(r.pair, []).append(t)
    for ts in per_pair.values():
        assert all(sum(1 for u in ts if t - 3600 < u <= t) <= 15 for t in ts)


def test_settling_refunds_the_unused_reservation() -> None:
    """A token window full of upper bounds admits again once calls report their real usage."""
    cfg = ShadowConfig(tokens_per_hour=10_000, usd_per_day=None, max_output_tokens=1000)
    budget = Budget(cfg, FakeClock(0.0))
    r1 = budget.reserve(("a", "b"), 6000.0, None, 5000.0)
    assert isinstance(r1, Reservation)
    assert budget.reserve(("a", "b"), 6000.0, None, 5000.0) == "budget_tokens"
    budget.settle(r1, 1500.0, None)
    assert isinstance(budget.reserve(("a", "b"), 6000.0, None, 5000.0), Reservation)


def test_money_cap_needs_a_price() -> None:
    """With a money cap, a target without a known price is refused (never spent blind)."""
    budget = Budget(ShadowConfig(usd_per_day=1.0), FakeClock(0.0))
    assert budget.reserve(("a", "b"), 100.0, None, 50.0) == "no_price"


def test_the_per_conversation_cap_is_given_back_with_a_cancelled_reservation() -> None:
    """A call that was never sent (``busy``, ``no_route``) gives its conversation's slot back too."""
    budget = Budget(ShadowConfig(usd_per_day=None, max_calls_per_conversation=1), FakeClock(0.0))
    r = budget.reserve(("a", "b"), 100.0, None, 50.0, "conv")
    assert isinstance(r, Reservation)
    assert budget.reserve(("a", "b"), 100.0, None, 50.0, "conv") == "conversation_quota"
    budget.cancel(r)
    assert isinstance(budget.reserve(("a", "b"), 100.0, None, 50.0, "conv"), Reservation)


def test_the_per_conversation_map_stays_bounded_whatever_ids_clients_send() -> None:
    """More conversations than ``MAX_CONVERSATIONS`` within the hour, each with a 10 kB id: the map
    keeps the most recently shadowed ``MAX_CONVERSATIONS`` (as 16-byte digests, so id length costs
    nothing), and forgets every conversation whose calls left the hour."""
    limits = {"calls_per_minute": 1e9, "tokens_per_hour": 10**12, "pair_calls_per_hour": 10**9}
    clock = FakeClock(0.0)
    budget = Budget(ShadowConfig(usd_per_day=None, max_calls_per_conversation=1, **limits), clock)  # type: ignore[arg-type]
    pad = "x" * 10_000
    for i in range(MAX_CONVERSATIONS + 50):
        assert isinstance(budget.reserve(("a", "b"), 10.0, None, 5.0, f"{i}{pad}"), Reservation)
    assert len(budget._conversations) == MAX_CONVERSATIONS
    assert {len(k) for k in budget._conversations} == {16}
    last = f"{MAX_CONVERSATIONS + 49}{pad}"
    assert budget.reserve(("a", "b"), 10.0, None, 5.0, last) == "conversation_quota"  # still held
    clock.advance(3601)
    assert isinstance(budget.reserve(("a", "b"), 10.0, None, 5.0, last), Reservation)
    assert len(budget._conversations) == 1


def test_a_call_that_used_more_than_its_bound_is_kept_as_used() -> None:
    """A chat history referring to an image by URL is a few bytes whose tokens its bytes do not
    bound (an image is ~1,500 tokens). Settling cut the reported use to the reservation's bound,
    so the windows never saw what such calls spent and every one of them could pass the daily
    money cap. Kept as reported, the overrun stops further calls until it drains."""
    cfg = ShadowConfig(tokens_per_hour=10_000, usd_per_day=0.01, max_output_tokens=100)
    clock = FakeClock(0.0)
    budget = Budget(cfg, clock)
    bound = budget.upper_bound_tokens(200, 2)  # an image_url message: 200 bytes
    r = budget.reserve(("a", "b"), bound, PRICES, bound - 100)
    assert isinstance(r, Reservation)
    budget.settle(r, 12_000.0, 0.02)  # what the provider reported
    used, _ = budget.usage()
    assert (used["tokens"], used["usd"]) == (12_000.0, 0.02)
    assert budget.reserve(("a", "b"), bound, PRICES, bound - 100) == "budget_tokens"
    clock.advance(3601)
    assert budget.reserve(("a", "b"), bound, PRICES, bound - 100) == "budget_money"  # the day still holds it


def test_a_days_window_stays_small_and_settles_in_constant_time() -> None:
    """The money window spans a day: it kept one entry per admitted call (432,000 at 300 calls per
    minute, 58 MB) and settling a reservation searched them all under the budget's lock (36 ms per
    shadow call; at 1,000 calls per minute the lock was held longer than the calls came). Entries
    closer together than a thousandth of the window share one, so a window holds about a thousand
    whatever the rate, and a settle touches only its own."""
    from handoffmon.shadow.budget import WINDOW_SLOTS, SlidingWindow

    window = SlidingWindow(float("inf"), 86400.0)
    handles = [window.add(1.0, i * 0.2) for i in range(200_000)]  # 300 calls/min, 11 hours
    assert len(window._items) <= WINDOW_SLOTS + 1
    start = time.perf_counter()
    for h in handles[-2000:]:
        window.settle(h, 0.5)
    assert time.perf_counter() - start < 0.05
    assert window.used(40_000.0) == 200_000 - 1000.0
    for h in handles[-2000:]:  # settling twice is settling to the last amount
        window.settle(h, 0.0)
    assert window.used(40_000.0) == 200_000 - 2000.0


def test_coalesced_amounts_leave_no_earlier_than_each_would_alone() -> None:
    """Sharing an entry may hold an amount up to a slot (window / WINDOW_SLOTS) longer, never
    shorter: a window never holds less than what was admitted within it. A settle after its
    entry left the window changes nothing."""
    from handoffmon.shadow.budget import SlidingWindow

    window = SlidingWindow(10.0, 60.0)
    first = window.add(4.0, 0.0)
    window.add(5.0, 0.05)  # same slot (60 / 1000 = 0.06 s)
    assert window.used(60.0) == 9.0  # the first amount is held with the second, 0.05 s longer
    assert window.used(60.04) == 9.0
    assert window.used(60.06) == 0.0
    window.settle(first, 0.0)  # gone already: nothing to give back
    assert window.used(60.06) == 0.0
    window.add(1.0, 61.0)
    assert window.used(61.0) == 1.0
