"""Driving ``handoffmon serve`` in tests: the subprocess, its config, a mock upstream, concurrent traffic."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port
from tests.proxy.mock_upstream import MockUpstream, ServerThread


class ServeProcess:
    """``python -m handoffmon serve`` in a subprocess."""

    def __init__(self, config: dict[str, Any], upstream: str, tmp: Path) -> None:
        path = tmp / f"serve-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "handoffmon", "serve", "--upstream", upstream]
        args += ["--port", str(self.port), "--config", str(path)]
        env = dict(os.environ)
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        self.stderr = tmp / f"serve-{self.port}.err"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Until /readyz answers 200 (raises with the process's stderr if it exits)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.stderr.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("serve did not become ready")

    def counters(self) -> dict[str, float]:
        """Sum of every ``handoffmon_*`` sample by metric name, after draining the queue."""
        assert httpx.post(f"{self.url}/admin/flush", timeout=60).json() == {"flushed": True}
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(httpx.get(f"{self.url}/metrics", timeout=10).text):
            for s in fam.samples:
                out[s.name] = out.get(s.name, 0.0) + s.value
        return out

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait; the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


PROXY_RULES = [
    {"name": "bullets", "check": "length", "params": {"unit": "bullets", "max": 3}},
    {"name": "no_commas", "check": "no_commas"},
    {"name": "mentions_turn", "check": "regex_must_match", "params": {"pattern": "(?i)turn"}},
]


def serve_config(store: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """A serve config: 3 rules, no turn logs, no periodic refit, the given store."""
    cfg: dict[str, Any] = {
        "rules": PROXY_RULES,
        "store": store,
        # small process caches: their steady state is reached during warm-up (see the wrapper soak)
        "attribution": {
            "canonical_models": {"dep-a-1": "model-a", "dep-b-1": "model-b"},
            "text_cache_bytes": 1_000_000,
            "pending_max": 2_000,
        },
        "telemetry": {"log_turns": False},
        "refit": {"interval_s": 0},
    }
    cfg.update(sections)
    return cfg


@contextmanager
def upstream_thread() -> Iterator[tuple[str, MockUpstream]]:
    """The LiteLLM-like mock upstream on a loopback thread."""
    mock = MockUpstream()
    with ServerThread(mock, free_port()) as srv:
        yield srv.url, mock


class Traffic:
    """Concurrent multi-turn conversations against a chat-completions URL, counting outcomes."""

    def __init__(self, url: str, *, concurrency: int = 16, max_turns: int = 12, seed: int = 0) -> None:
        self.url = url
        self.concurrency = concurrency
        self.max_turns = max_turns
        self.rng = random.Random(seed)
        self.ok = 0
        self.failed = 0
        self.conversations = 0

    async def _conversation(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        n = self.rng.randint(1, self.max_turns)
        tag = uuid.uuid4().hex
        messages: list[dict[str, str]] = [{"role": "system", "content": "Answer briefly."}]
        for d in range(1, n + 1):
            if stop.is_set():
                break
            messages.append({"role": "user", "content": f"{tag} question {d}"})
            try:
                r = await client.post(self.url, json={"model": "g", "messages": messages})
            except httpx.HTTPError:
                self.failed += 1
                return
            if r.status_code != 200:
                self.failed += 1
                return
            self.ok += 1
            messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
        self.conversations += 1

    async def run(self, stop: asyncio.Event) -> None:
        """Keep ``concurrency`` conversations going until ``stop`` is set."""
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:

            async def worker() -> None:
                while not stop.is_set():
                    await self._conversation(client, stop)

            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
