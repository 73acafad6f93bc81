"""serve's shadow calls never wait in line with the clients' requests for an upstream slot."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("aiohttp")

from handoffmon.attribution import ModelNames
from handoffmon.proxy.shadow import UpstreamShadow
from handoffmon.proxy.upstream import Upstream
from handoffmon.shadow.turns import NoRoute


def test_a_shadow_call_takes_no_slot_a_client_is_waiting_for() -> None:
    """With every slot (``proxy.max_upstream_requests``) taken, a shadow call queued behind the
    slots like a client's request: the next slot freed went to it first, and a client arriving
    after it waited a whole shadow call (up to ``shadow.timeout_s``). Now it is not sent: it
    raises ``NoRoute`` at once (``UpstreamFull``: skipped as ``busy``, its reservation given back), and the
    slots' queue holds only the clients."""

    async def run() -> tuple[type[BaseException] | None, float, int]:
        upstream = Upstream("http://127.0.0.1:9", timeout_s=5, max_requests=1, queue_timeout_s=2.0)
        assert upstream.slots.try_take()  # a client's request holds the only slot
        source = UpstreamShadow(upstream, ModelNames({}), asyncio.get_running_loop(), [], {}, 1 << 20)
        started = time.monotonic()
        shadow = asyncio.ensure_future(source._post("alpha", [{"role": "user", "content": "hi"}], 16))
        await asyncio.sleep(0.05)
        waiting = len(upstream.slots._waiters)
        try:
            await shadow
        except BaseException as exc:  # the test reports which
            return type(exc), time.monotonic() - started, waiting
        return None, time.monotonic() - started, waiting

    raised, took, waiting = asyncio.run(run())
    assert raised is not None and issubclass(raised, NoRoute)
    assert waiting == 0 and took < 1.0
