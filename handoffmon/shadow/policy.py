"""Which finished turns get a shadow continuation, and by which model."""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Callable, Sequence
from typing import NamedTuple

from handoffmon.config import ShadowConfig
from handoffmon.shadow.breaker import Breaker
from handoffmon.shadow.budget import Budget, Reservation
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL


class Decision(NamedTuple):
    """A shadow call to make: ``target`` continues the history whose last author is ``prefix_model``.

    The pair it yields is (prefix_model → model): ``model`` is B, the served author in the
    handoff arm and ``target`` in the no-handoff arm.
    """

    arm: str
    prefix_model: str
    model: str
    target: str
    reservation: Reservation | None


_SAMPLE = b"hm-shadow-sample"
_PICK = b"hm-shadow-pick"


def draw_secret(seed: str | None) -> bytes:
    """The key of the sampling draws: derived from ``shadow.seed``, or 32 random bytes when it is
    unset (a secret of this policy, so of this process; forked workers share their parent's)."""
    if seed is None:
        return secrets.token_bytes(32)
    return hashlib.blake2b(
        seed.encode("utf-8", "surrogatepass"), digest_size=32, person=b"hm-shadow-seed"
    ).digest()


def _unit(key: str, secret: bytes, purpose: bytes) -> float:
    """A uniform draw in [0, 1) fixed by ``key`` and ``secret`` (keyed BLAKE2b, a PRF): the same
    turn gets the same draw under the same secret, and without the secret nobody can tell which
    keys draw low (the conversation id in ``key`` is the caller's to choose)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, key=secret, person=purpose)
    return int.from_bytes(digest.digest(), "big") / 2.0**64


class Skip(NamedTuple):
    """No shadow call, and why (a bounded set of reasons, usable as a metric label)."""

    reason: str


SKIP_REASONS: tuple[str, ...] = (
    "disabled", "not_eligible", "history_stored", "history_not_chat", "not_sampled", "arm_off",
    "no_candidate", "not_allowed", "breaker_open", "budget_calls", "budget_tokens", "budget_money",
    "no_price", "quota", "conversation_quota", "busy", "no_route", "no_verdict", "shutdown",
)  # fmt: skip
"""``conversation_quota``: the conversation had ``max_calls_per_conversation`` shadow calls in the
last hour (checked with the budget, after the breaker).
``no_route``: the integration cannot send a call to the target (a Router with no group serving
only that model); checked before the breaker and the budget, so it holds no budget. Also when the
call found no way out after the decision (the Router's groups changed): nothing was sent, and the
reservation is given back.
``busy``: the runtime's shadow queue was full, or ``serve``'s upstream slots were all taken when
the call was to be sent (``UpstreamFull``): nothing was sent, the decision's reservation is given
back.
``shutdown``: the runtime was closing: a turn offered after ``close``, or a queued call not started
within ``close``'s timeout (never made after it; its reservation is given back).
``history_stored``, ``history_not_chat``: an eligible Responses or Messages API turn whose history
cannot be continued through chat completions (``turns.unsent_history``); counted before sampling,
so their share of eligible turns shows whatever the sample rate.
``no_verdict``: an eligible turn whose served reply got no ``pass`` or ``fail`` (every rule
``not_applicable`` or errored): no shadow reply could pair with it; also counted before sampling."""


class ShadowPolicy:
    """Decides per finished turn; thread-safe (the budget and breaker lock themselves).

    Args:
        config: the ``shadow`` section.
        budget: the windows to reserve in.
        breaker: per-target circuit breaker.
        candidates: model → no-handoff candidates when ``config.candidates`` has none for it
            (the integration's default: the router's fallbacks of that model group).
        prices: model → (USD per input token, USD per output token) or None.
        rng: sampling source for a turn decided without a ``key`` (injectable for tests).

    A turn decided with a ``key`` draws from keyed BLAKE2b under ``config.seed`` (or a random
    secret of this policy when unset).
    """

    def __init__(
        self,
        config: ShadowConfig,
        budget: Budget,
        breaker: Breaker,
        *,
        candidates: Callable[[str], Sequence[str]] = lambda _m: (),
        prices: Callable[[str], tuple[float, float] | None] = lambda _m: None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.budget = budget
        self.breaker = breaker
        self._candidates = candidates
        self._prices = prices
        self._rng = rng or random.Random()
        self._allowed = frozenset(config.targets)
        self._secret = draw_secret(config.seed)

    def decide(
        self,
        prefix_model: str,
        author: str,
        prompt_bytes: int | Callable[[], int],
        messages: int,
        *,
        candidates: Callable[[str], Sequence[str]] | None = None,
        prices: Callable[[str], tuple[float, float] | None] | None = None,
        unsent: str | None = None,
        key: str | None = None,
        routable: Callable[[str], bool] | None = None,
        conversation: str | None = None,
    ) -> Decision | Skip:
        """Decision for a finished turn whose history was last written by ``prefix_model``.

        Args:
            prefix_model: A, author of the history's last assistant message.
            author: who served the turn.
            prompt_bytes: the prompt's UTF-8 bytes, or a function computing them (called
                only for a sampled turn that reaches the budget).
            messages: number of messages in the prompt.
            candidates: this turn's integration's candidates (default: the policy's).
            prices: this turn's integration's prices (default: the policy's).
            unsent: why this eligible turn is not to be sent (``ShadowOffer.unsent``).
            key: the turn's identity (its conversation and position): whether it is sampled,
                and which candidate a no-handoff arm takes, are then fixed by it and the
                secret (``shadow.seed``: the same on every replica and every run, so a seeded
                demo or replay reproduces its shadow pairs) instead of drawn from ``rng``.
            routable: whether this turn's integration can send a call to a target (default: it can).
            conversation: the turn's conversation, held to ``max_calls_per_conversation``
                (None: no per-conversation cap).
        """
        c = self.config
        if not c.enabled:
            return Skip("disabled")
        if prefix_model in (NO_PREFIX, UNKNOWN_MODEL) or author == UNKNOWN_MODEL:
            return Skip("not_eligible")
        if unsent is not None:
            return Skip(unsent)
        draw = self._rng.random() if key is None else _unit(key, self._secret, _SAMPLE)
        if draw >= c.sample_rate:
            return Skip("not_sampled")
        arm = "handoff" if author != prefix_model else "no_handoff"
        if arm not in c.arms:
            return Skip("arm_off")
        if arm == "handoff":
            target, model = prefix_model, author
        else:
            default = candidates or self._candidates
            options = [m for m in (c.candidates.get(author) or default(author)) if m != author]
            if not options:
                return Skip("no_candidate")
            allowed = [m for m in options if m in self._allowed] or options
            pick = (
                self._rng.randrange(len(allowed))
                if key is None
                else int(_unit(key, self._secret, _PICK) * len(allowed))
            )
            target = model = allowed[pick]
        if target not in self._allowed:
            return Skip("not_allowed")
        if routable is not None and not routable(target):
            return Skip("no_route")
        if not self.breaker.allow(target):
            return Skip("breaker_open")
        try:  # from here on a half-open breaker's probe is this turn's: given back on any failure
            size = prompt_bytes() if callable(prompt_bytes) else prompt_bytes
            tokens = self.budget.upper_bound_tokens(size, messages)
            prompt = tokens - c.max_output_tokens
            reserved = self.budget.reserve(
                (prefix_model, model), tokens, (prices or self._prices)(target), prompt, conversation
            )
        except BaseException:
            self.breaker.release(target)
            raise
        if isinstance(reserved, str):
            self.breaker.release(target)
            return Skip(reserved)
        return Decision(arm, prefix_model, model, target, reserved)
