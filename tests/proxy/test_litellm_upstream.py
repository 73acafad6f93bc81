"""``handoffmon serve`` in front of a real LiteLLM Proxy (``litellm --config``), itself in front of the mock.

Pins that the headers the proxy reads are the ones LiteLLM really sends: the serving
deployment is the author after LiteLLM's own fallback, and the fallback is counted.
Slow (LiteLLM Proxy takes 10-30 s to start).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from handoffmon.depth import DepthBuckets
from tests.conftest import free_port, require
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.mock_upstream import MockUpstream, ServerThread, reply_text

pytestmark = [pytest.mark.slow, pytest.mark.integration]

MASTER_KEY = "sk-test-master"


def _litellm_config(upstream: str) -> dict[str, object]:
    def deployment(group: str, model: str, **extra: object) -> dict[str, object]:
        params = {"model": f"openai/{model}", "api_base": f"{upstream}/v1", "api_key": "sk-mock", **extra}
        return {"model_name": group, "litellm_params": params}

    return {
        "model_list": [
            deployment("chat-a", "model-a"),
            deployment("chat-b", "model-b"),
            # always fails (the mock answers 500), so LiteLLM falls back to chat-b
            deployment("chat-flaky", "model-a", extra_headers={"x-mock-status": "500"}),
        ],
        "router_settings": {"num_retries": 0, "fallbacks": [{"chat-flaky": ["chat-b"]}]},
        "general_settings": {"master_key": MASTER_KEY},
    }


@pytest.fixture(scope="module")
def litellm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = Path(sys.executable).with_name("litellm")
    require(binary.exists(), "litellm proxy CLI not installed (pip install 'litellm[proxy]')")
    with ServerThread(MockUpstream(), free_port()) as mock:
        path = tmp_path_factory.mktemp("litellm") / "config.yaml"
        path.write_text(yaml.safe_dump(_litellm_config(mock.url)))
        port = free_port()
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        args = [str(binary), "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, "litellm proxy exited during startup"
                try:
                    if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "litellm proxy did not start in 120 s"
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def proxy(litellm_url: str) -> Iterator[Proxy]:
    canonical = {"model-a": "model-a", "model-b": "model-b"}
    with running_proxy(proxy_config(litellm_url, attribution={"canonical_models": canonical})) as p:
        yield p


def test_authors_fallbacks_and_handoffs_through_real_litellm(proxy: Proxy) -> None:
    """chat-a, chat-flaky (falls back to chat-b), chat-a, chat-b streamed: authors a, b, a, b; 1 fallback."""
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=MASTER_KEY, max_retries=0)
    messages: list[dict[str, str]] = []
    plan = [("chat-a", "model-a"), ("chat-flaky", "model-b"), ("chat-a", "model-a")]
    for depth, (group, served_by) in enumerate(plan, start=1):
        messages.append({"role": "user", "content": f"litellm question {depth}"})
        raw = client.chat.completions.with_raw_response.create(model=group, messages=messages)  # type: ignore[arg-type]
        assert raw.headers["x-litellm-model-name"] == f"openai/{served_by}"
        text = raw.parse().choices[0].message.content or ""
        assert text == reply_text(served_by, depth)
        messages.append({"role": "assistant", "content": text})
    # a fourth turn streamed through both proxies: LiteLLM re-chunks the SSE, handoffmon rebuilds it
    messages.append({"role": "user", "content": "litellm question 4"})
    with client.chat.completions.with_streaming_response.create(
        model="chat-b",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
    ) as resp:
        assert resp.headers["x-litellm-model-name"] == "openai/model-b"
        text = "".join(c.choices[0].delta.content or "" for c in resp.parse() if c.choices)
    assert text == reply_text("model-b", 4)
    client.close()
    assert proxy.monitor.flush(10)
    snap = proxy.monitor.snapshot()
    b = DepthBuckets((1, 2, 3, 5, 9, 17, 33)).bucket
    assert {(k.model, k.prefix_model, k.depth_bucket, k.handoff): v for k, v in snap.turns.items()} == {
        ("model-a", "none", b(1), "false"): 1,
        ("model-b", "model-a", b(2), "true"): 1,
        ("model-a", "model-b", b(3), "true"): 1,
        ("model-b", "model-a", b(4), "true"): 1,
    }
    assert snap.attributions.get("unknown", 0) == 0
    fallbacks = {"requested_model": "chat-flaky", "model": "model-b"}  # labelled by the group asked for
    assert proxy.registry.get_sample_value("handoffmon_fallbacks_total", fallbacks) == 1
