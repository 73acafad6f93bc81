"""What every shadow source shares: reading the reply, and calling on the application's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from handoffmon.attribution import ModelNames
from handoffmon.ingress import describe_response, reply_message
from handoffmon.pipeline.reply import calls_tools_only, reply_text
from handoffmon.shadow.turns import ShadowReply

T = TypeVar("T")

SHADOW_HEADER = "x-handoffmon-shadow"
"""Request header of every shadow call over HTTP (value ``1``): a gateway can tell it from served traffic."""


class NoShadowReply(ValueError):
    """A shadow call answered with nothing to check: no choice, or a reply that only calls tools.

    A served call like that is no turn (no choice) or gets no verdicts (tools only), so it is
    never offered; a shadow reply like it, checked as an empty text, would pair a non-answer
    with the served reply. The runner counts it as a failed call (``error``), with no pair.
    """


class ShadowLoopGone(RuntimeError):
    """The event loop a shadow call needs is closed (the application's loop ended): not the target's fault."""


def shadow_reply(
    names: ModelNames, response: Any, served: Any, price: tuple[float, float] | None
) -> ShadowReply:
    """A shadow call's reply: its text, the canonical model that wrote it, its tokens and cost.

    Raises:
        NoShadowReply: the response holds no choice, or its reply only calls tools.
    """
    message = reply_message(response)
    text = reply_text(message)
    if message is None or calls_tools_only(message, text):
        raise NoShadowReply("no choice" if message is None else "the reply only calls tools")
    outcome = describe_response(names, response, served)
    wrote = names.canonical(outcome.authors[-1]) if outcome.authors else None
    tin, tout = outcome.input_tokens, outcome.output_tokens
    tokens = float(tin + tout) if tin is not None and tout is not None else None
    usd = (
        tin * price[0] + tout * price[1]
        if price is not None and tin is not None and tout is not None
        else None
    )
    return ShadowReply(text, wrote, tokens, usd)


def call_on_loop(
    loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, T]], timeout_s: float
) -> T:
    """Run ``make()`` on ``loop`` (the application's) from a shadow thread; wait at most ``timeout_s``.

    For clients bound to an event loop (``AsyncOpenAI``, ``serve``'s upstream pool): the call
    is one more task on that loop, never awaited by a request. The coroutine is cancelled
    on the loop when the wait times out, so a hung target holds no connection.

    Raises:
        TimeoutError: no answer within ``timeout_s`` (trips the breaker).
        ShadowLoopGone: the loop is closed (counted as ``error``; the breaker is not tripped).
    """
    if loop.is_closed():
        raise ShadowLoopGone("the application's event loop is closed")

    async def bounded() -> T:
        return await asyncio.wait_for(make(), timeout_s)

    coro = bounded()
    try:
        future = asyncio.run_coroutine_threadsafe(coro, loop)
    except RuntimeError as exc:  # closed between the check and the call
        coro.close()
        raise ShadowLoopGone("the application's event loop is closed") from exc
    try:
        # a little slack: wait_for on the loop cancels first, and its TimeoutError is the answer
        return future.result(timeout_s + 1.0)
    except TimeoutError:
        future.cancel()
        raise
