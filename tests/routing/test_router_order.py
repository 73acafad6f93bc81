"""The whole chosen order reaches a real ``litellm.Router`` (``mock_response``), not only its head:
when the policy's first choice fails too, the Router tries its second choice next."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.integrations import wrap
from handoffmon.routing import PairRisk, PairRiskTable

FAIL = "litellm.RateLimitError"
TABLE = {
    ("a", "b"): PairRisk(-0.15, 0.01),
    ("a", "c"): PairRisk(0.0, 0.01),
    ("a", "d"): PairRisk(-0.05, 0.01),
}
"""After a: c is safest, then d, then b (each 5+ pp and many SEs apart): order c, d, b."""


def _router() -> Any:
    """g-p and g-c always rate-limit; g-a, g-b and g-d answer. g-p falls back to b, c, d."""
    from litellm import Router

    def dep(name: str, reply: str) -> dict[str, Any]:
        params = {"model": f"openai/gpt-{name}", "api_key": "k", "mock_response": reply}
        return {"model_name": f"g-{name}", "litellm_params": params, "model_info": {"id": f"dep-{name}"}}

    return Router(
        model_list=[dep("a", "ok"), dep("p", FAIL), dep("b", "ok"), dep("c", FAIL), dep("d", "ok")],
        fallbacks=[{"g-p": ["g-b", "g-c", "g-d"]}],
        num_retries=0,
    )


@pytest.mark.parametrize(("mode", "served"), [("enforce", "dep-d"), ("dry_run", "dep-b")])
def test_the_second_choice_serves_when_the_first_fails_too(mode: str, served: str) -> None:
    """The policy orders c, d, b; c fails as well, so d serves (the router's order would serve b,
    which dry run keeps). Which deployment served is read from the response."""
    router = _router()
    config = config_from_mapping(
        {
            "attribution": {"canonical_models": {f"dep-{m}": m for m in "apbcd"}},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "routing": {"enabled": True, "mode": mode, "return_home": False},
        }
    )
    with build_runtime(config, registry=None) as rt:
        rt.routing.holder.table = PairRiskTable(TABLE, created_at=time.time())
        client = wrap(router, runtime=rt)
        history: list[dict[str, Any]] = [{"role": "user", "content": "hola"}]
        r1 = client.completion(model="g-a", messages=history)
        assert r1._hidden_params["model_id"] == "dep-a"
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "y?"}]
        assert rt.flush(10)
        r2 = client.completion(model="g-p", messages=history)
        assert r2._hidden_params["model_id"] == served
        counts = {k: v for k, v in rt.routing.counts.snapshot().items() if v}
    assert counts == {(mode, "single"): 1, (mode, "reordered"): 1}
