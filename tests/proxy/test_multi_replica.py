"""Two ``handoffmon serve`` processes sharing attribution through real Redis; a Redis outage mid-run.

A replica stores a reply's authorship on its background thread right after answering; a
turn reaching another replica before that write could see ``unknown`` (the consistency
window, docs/guides/stores.md). Real users are seconds slower; to keep these tests
deterministic on a loaded machine, each turn waits for the answering replica's queue to
drain (``POST /admin/flush``) before the next turn goes to the other replica.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, require_redis
from tests.proxy.mock_upstream import MockUpstream, ServerThread, reply_text, schedule
from tests.stores.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class Replica:
    """One ``python -m handoffmon serve`` subprocess."""

    def __init__(self, config_path: Path, upstream: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "handoffmon", "serve", "--upstream", upstream]
        args += ["--port", str(self.port), "--config", str(config_path)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("serve did not become ready")

    def flush(self) -> None:
        """Wait until every answered turn is processed (authorship written to the store)."""
        assert httpx.post(f"{self.url}/admin/flush", timeout=15).json() == {"flushed": True}

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """All metric samples after draining the replica's queue."""
        self.flush()
        text = httpx.get(f"{self.url}/metrics").text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }

    def stop(self) -> int:
        """SIGTERM (graceful drain) and the exit code."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _sum(replicas: list[Replica], name: str, **labels: str) -> float:
    total = 0.0
    for r in replicas:
        for (n, lbls), v in r.samples().items():
            if n == name and all(dict(lbls).get(k) == val for k, val in labels.items()):
                total += v
    return total


@contextmanager
def replicas(tmp_path: Path, redis_url: str, n: int = 2) -> Iterator[tuple[list[Replica], MockUpstream]]:
    cfg = {
        "store": {
            "backend": "redis",
            "url": redis_url,
            "key_prefix": f"hm-e2e:{uuid.uuid4().hex}:",
            "timeout_s": 0.5,  # a loaded test machine must not turn a slow reply into an outage
        },
        "attribution": {"canonical_models": {"dep-a-1": "model-a", "dep-b-1": "model-b"}},
        "telemetry": {"log_turns": False},
        "refit": {"interval_s": 0},
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    mock = MockUpstream()
    with ExitStack() as stack:
        up = stack.enter_context(ServerThread(mock, free_port()))
        reps = [Replica(path, up.url) for _ in range(n)]
        for r in reps:
            stack.callback(r.stop)
        for r in reps:
            r.wait_ready()
        yield reps, mock


def converse(reps: list[Replica], turns: int, tag: str, stream: bool = False) -> None:
    """One conversation, turn k sent to replica k mod len(reps); asserts every reply."""
    clients = [openai.OpenAI(base_url=f"{r.url}/v1", api_key="sk-x", max_retries=0) for r in reps]
    messages: list[dict[str, str]] = []
    for d in range(1, turns + 1):
        messages.append({"role": "user", "content": f"{tag} question {d}"})
        client = clients[(d - 1) % len(clients)]
        if stream:
            chunks = client.chat.completions.create(model="g", messages=messages, stream=True)  # type: ignore[arg-type]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            resp = client.chat.completions.create(model="g", messages=messages)  # type: ignore[arg-type]
            text = resp.choices[0].message.content or ""
        assert text == reply_text(schedule(d), d)
        messages.append({"role": "assistant", "content": text})
        reps[(d - 1) % len(reps)].flush()
    for c in clients:
        c.close()


@pytest.mark.slow
def test_two_replicas_share_attribution_through_redis(tmp_path: Path) -> None:
    """Turns alternating between two serve processes: every earlier message attributed, none unknown."""
    require_redis()
    with replicas(tmp_path, "redis://127.0.0.1:6379/0") as (reps, _):
        converse(reps, 10, "json")
        converse(reps, 10, "sse", stream=True)
        assert _sum(reps, "handoffmon_attributions_total", method="unknown") == 0
        attributed = sum(_sum(reps, "handoffmon_attributions_total", method=m) for m in ("chain", "content"))
        assert attributed == 2 * 45
        assert _sum(reps, "handoffmon_turns_total") == 20
        # the handoff cells are right on both replicas together: model-a → model-b at depths 3, 6, 9
        assert _sum(reps, "handoffmon_turns_total", model="model-b", prefix_model="model-a") == 2 * 3
        assert all(r.samples() for r in reps)
    for r in reps:  # SIGTERM: uvicorn drains, then re-raises the signal (exit status -15)
        assert r.proc.returncode in (0, -signal.SIGTERM)
        assert b"Traceback" not in r.proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.slow
def test_redis_outage_fails_open_and_recovers(tmp_path: Path) -> None:
    """Redis stopped mid-run: requests all succeed, unknowns counted; after restart, full attribution."""
    with RedisServer() as server, replicas(tmp_path, server.url) as (reps, _):
        converse(reps, 4, "before")
        assert _sum(reps, "handoffmon_attributions_total", method="unknown") == 0
        server.stop()
        converse(reps, 6, "during")  # asserts every reply arrives intact
        unknown_during = _sum(reps, "handoffmon_attributions_total", method="unknown")
        assert unknown_during > 0
        assert _sum(reps, "handoffmon_store_failures_total", kind="errors") >= 1
        ready = httpx.get(f"{reps[0].url}/readyz").json()
        assert ready["status"] == "ready"
        server.start()
        time.sleep(1.2)  # past the store's retry_after_s: the next call probes Redis again
        base_unknown = _sum(reps, "handoffmon_attributions_total", method="unknown")
        base_attr = _sum(reps, "handoffmon_attributions_total", method="chain")
        converse(reps, 8, "after")
        assert _sum(reps, "handoffmon_attributions_total", method="unknown") == base_unknown
        assert _sum(reps, "handoffmon_attributions_total", method="chain") - base_attr == 28
