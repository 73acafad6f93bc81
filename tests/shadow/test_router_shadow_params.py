"""A shadow call to a Router deployment whose ``litellm_params`` set what the shadow call sets itself.

Production deployments often carry their own ``timeout``, ``max_tokens``, ``num_retries`` or
``metadata``; the shadow call's arguments must override them (as the Router's own call
arguments do), not collide with them.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon.attribution import ModelNames
from handoffmon.counts import ShadowKey
from handoffmon.integrations import wrap
from handoffmon.integrations.router_shadow import RouterShadow
from tests.shadow.helpers import record_completions
from tests.shadow.test_runner import _converse, _runtime, _sample

MODEL = "openai/gpt-4o-mini"
HI = [{"role": "user", "content": "hi"}]


def _source(**params: Any) -> RouterShadow:
    from litellm import Router

    router = Router(
        model_list=[
            {
                "model_name": "g",
                "litellm_params": {"model": MODEL, "api_key": "k", "mock_response": "fine", **params},
                "model_info": {"id": "d1"},
            }
        ]
    )
    return RouterShadow(router, ModelNames({}))


@pytest.mark.parametrize(
    "params",
    [{"timeout": 30}, {"max_tokens": 50}, {"num_retries": 2}, {"metadata": {"team": "x"}}],
    ids=lambda p: next(iter(p)),
)
def test_a_deployment_setting_a_shadow_argument_is_still_called(params: dict[str, Any]) -> None:
    """Each of these made every shadow call to the deployment raise ``TypeError`` (a keyword
    given twice), counted as ``error``, so the target was never shadowed."""
    reply = _source(**params).call(MODEL, HI, max_tokens=10, timeout_s=5)
    assert (reply.text, reply.author) == ("fine", MODEL)


def test_the_shadow_call_overrides_the_deployments_limits_and_streaming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What reaches ``litellm.completion``: the shadow's own ``max_tokens`` (no deployment
    ``max_completion_tokens`` beside it, which could exceed the bound the budget reserved),
    timeout, no retries of either kind, not streamed (a streamed reply read as text was empty,
    so the pair got the verdicts of an empty reply), and the deployment's metadata tagged."""
    seen = record_completions(monkeypatch)
    source = _source(
        timeout=300, max_completion_tokens=4096, max_retries=5, num_retries=3,
        stream=True, metadata={"team": "x"},
    )  # fmt: skip
    reply = source.call(MODEL, HI, max_tokens=10, timeout_s=5)
    assert reply.text == "fine"
    (kw,) = seen
    assert (kw["max_tokens"], kw["timeout"], kw["num_retries"], kw["max_retries"], kw["stream"]) == (
        10, 5, 0, 0, False,
    )  # fmt: skip
    assert "max_completion_tokens" not in kw
    metadata = kw["metadata"]  # litellm adds its own keys to the dict during the call
    assert (metadata["team"], metadata["handoffmon_shadow"]) == ("x", True)


def test_a_router_whose_deployments_set_a_timeout_gets_its_shadow_pairs() -> None:
    """End to end through a wrapped Router whose every deployment sets ``timeout``: the handoff
    turn's shadow call is made (``ok``) and paired, not counted as ``error``."""
    from litellm import Router

    from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, RATE_LIMITED
    from tests.shadow.test_runner import _dep

    def dep(group: str, name: str, reply: str) -> dict[str, Any]:
        d = _dep(group, name, reply)
        d["litellm_params"]["timeout"] = 30
        return d

    router = Router(
        model_list=[
            dep("primary", "a", RATE_LIMITED),
            dep("backup", "b", BACKUP_REPLY),
            dep("alpha", "c", ALPHA_REPLY),
        ],
        fallbacks=[{"primary": ["backup"]}],
        num_retries=0,
    )
    with _runtime(enabled=True, targets=["model-c"], arms=["handoff"]) as rt:
        client = wrap(router, runtime=rt)
        assert _converse(client, rt, ["alpha", "primary"], "t") == [ALPHA_REPLY, BACKUP_REPLY]
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="handoff", outcome="error") == 0
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="handoff", outcome="ok") == 1
        assert rt.snapshot().shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1


def _priced(group: str, dep_id: str, model: str, price: tuple[float, float] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"id": dep_id}
    if price is not None:
        info.update(input_cost_per_token=price[0], output_cost_per_token=price[1])
    return {
        "model_name": group,
        "litellm_params": {"model": model, "api_key": "k", "mock_response": "fine"},
        "model_info": info,
    }


def test_a_model_served_at_several_prices_is_reserved_at_the_dearest() -> None:
    """Two deployments canonically one model (``canonical_models``) at different prices: the
    budget reserves before it knows which deployment the call goes to, so at the dearest price
    (the first deployment's, 5x cheaper, before); one deployment without a price makes the price
    unknown (under a money cap: ``no_price``), not the other's."""
    from litellm import Router

    names = ModelNames({"dep-x": "m", "dep-y": "m", "dep-z": "n", "dep-w": "n"})
    router = Router(
        model_list=[
            _priced("g", "dep-x", "openai/gpt-x", (1e-6, 2e-6)),
            _priced("g", "dep-y", "openai/gpt-y", (5e-6, 1e-5)),
            _priced("h", "dep-z", "openai/gpt-z", (1e-6, 2e-6)),
            _priced("h", "dep-w", "openai/gpt-w", None),
        ]
    )
    source = RouterShadow(router, names)
    assert source.prices("m") == (5e-6, 1e-5)
    assert source.prices("n") is None
    reply = source.call("m", HI, max_tokens=10, timeout_s=5)  # dep-x answers: spent at its prices
    assert reply.tokens and reply.usd is not None and 0 < reply.usd <= reply.tokens * 2e-6
