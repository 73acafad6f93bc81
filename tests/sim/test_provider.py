"""The fleet behind a real litellm.Router: sync/async/streaming, failures, fallbacks, prefix bookkeeping."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from handoffmon.sim.fleet import Fleet, default_fleet
from handoffmon.sim.provider import SimProvider, history_key
from handoffmon.sim.router import build_router, unregister_provider

USER = [{"role": "system", "content": "customer 1"}, {"role": "user", "content": "Where is my order?"}]


def _with(fleet: Fleet, **per_model: dict[str, float]) -> Fleet:
    models = tuple(dataclasses.replace(m, **per_model.get(m.name, {})) for m in fleet.models)
    return dataclasses.replace(fleet, models=models)


@pytest.fixture
def sim() -> Iterator[tuple[SimProvider, object]]:
    fleet = _with(
        default_fleet(),
        **{m.name: {"rate_limit_rate": 0.0, "timeout_rate": 0.0} for m in default_fleet().models},
    )
    provider = SimProvider(fleet, seed=4, record=True)
    router = build_router(fleet, provider)
    yield provider, router
    unregister_provider(provider.provider_name or "")


def _text(resp: object) -> str:
    return resp.choices[0].message.content  # type: ignore[attr-defined]


def test_sync_completion_is_served_by_the_group_deployment_and_recorded(sim) -> None:
    """Router.completion on group 'reasoning' is answered by cedar with the text the sim wrote."""
    provider, router = sim
    resp = router.completion(model="reasoning", messages=USER)
    assert resp._hidden_params["model_id"] == "cedar"
    assert provider.truth[-1].author == "cedar" and provider.truth[-1].depth == 1
    assert _text(resp) == provider.truth[-1].text


async def test_async_and_streamed_replies_round_trip_exactly(sim) -> None:
    """acompletion, and sync/async streams, reassemble to exactly the written text."""
    provider, router = sim
    resp = await router.acompletion(model="fast", messages=USER)
    assert _text(resp) == provider.truth[-1].text
    reply = {"role": "assistant", "content": _text(resp)}
    history = [*USER, reply, {"role": "user", "content": "Are you sure?"}]
    stream = await router.acompletion(model="fast", messages=history, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream]
    assert len(parts) > 2 and "".join(parts) == provider.truth[-1].text
    sync_parts = [
        c.choices[0].delta.content or ""
        for c in router.completion(model="fast", messages=history, stream=True)
    ]
    assert "".join(sync_parts) == provider.truth[-1].text


async def test_provider_learns_prefix_author_from_its_own_history_bookkeeping(sim) -> None:
    """Turn 2 on another group knows turn 1's author and depth; an unseen history has no prefix."""
    provider, router = sim
    first = await router.acompletion(model="experimental", messages=USER)
    history = [*USER, {"role": "assistant", "content": _text(first)}, {"role": "user", "content": "ok"}]
    await router.acompletion(model="general", messages=history)
    turn = provider.truth[-1]
    assert (turn.author, turn.prefix, turn.depth) == ("atlas", "ember", 2)
    edited = [*USER, {"role": "assistant", "content": "something else"}, {"role": "user", "content": "ok"}]
    await router.acompletion(model="general", messages=edited)
    assert provider.truth[-1].prefix is None and provider.truth[-1].depth == 2


async def test_same_history_same_reply_regardless_of_call_order(sim) -> None:
    """Decisions are seeded by (seed, history, deployment): repeating a request reproduces it."""
    _, router = sim
    a = _text(await router.acompletion(model="budget", messages=USER))
    b = _text(await router.acompletion(model="budget", messages=USER))
    other = [{"role": "system", "content": "customer 2"}, USER[1]]
    c = _text(await router.acompletion(model="budget", messages=other))
    assert a == b and a != c


@pytest.mark.parametrize("failure", ["rate_limit_rate", "timeout_rate"])
async def test_injected_failures_make_the_router_fall_back_to_another_deployment(failure: str) -> None:
    """A primary that always fails (429 or timeout) is replaced by its fallback group's deployment."""
    base = default_fleet()
    fleet = _with(base, **{m.name: {"rate_limit_rate": 0.0, "timeout_rate": 0.0} for m in base.models})
    fleet = _with(fleet, dune={failure: 1.0})
    provider = SimProvider(fleet, seed=1, record=True)
    router = build_router(fleet, provider)
    try:
        resp = await router.acompletion(model="budget", messages=USER)
        headers = resp._hidden_params["additional_headers"]
        assert resp._hidden_params["model_id"] == "birch"  # budget falls back to fast
        assert int(headers["x-litellm-attempted-fallbacks"]) >= 1
        kind = "rate_limit" if failure == "rate_limit_rate" else "timeout"
        assert provider.stats[f"{kind}:dune"] == 1 and provider.stats["reply:birch"] == 1
        resp = router.completion(model="budget", messages=USER)  # sync path falls back too
        assert resp._hidden_params["model_id"] == "birch"
    finally:
        unregister_provider(provider.provider_name or "")


def test_history_key_depends_on_roles_and_content_only() -> None:
    """Extra fields do not change the key; content and role do."""
    a = [{"role": "user", "content": "hi"}]
    assert history_key(a) == history_key([{"role": "user", "content": "hi", "name": "x"}])
    assert history_key(a) != history_key([{"role": "assistant", "content": "hi"}])
    assert history_key(a) != history_key([{"role": "user", "content": "hi!"}])
