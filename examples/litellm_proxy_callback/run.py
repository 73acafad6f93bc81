"""Start a LiteLLM Proxy with the handoffmon callback, drive it with the OpenAI SDK, print the record.

Run: ``python examples/litellm_proxy_callback/run.py`` (needs ``litellm[proxy]``; offline).
It copies ``config.yaml`` and ``handoffmon.yaml`` into a temporary directory, starts
``litellm --config config.yaml`` there on a free loopback port with a fresh master key,
plays a 4-turn conversation (one turn streamed, two served by fallback), reads the
aggregates the proxy's handoffmon wrote to ``handoffmon.db`` and prints the handoffmon
series on the proxy's own ``/metrics``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

from handoffmon.pipeline.aggregates import load_counts_sqlite

HERE = Path(__file__).resolve().parent
MASTER_KEY = f"sk-{secrets.token_hex(16)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the proxy exited during start-up")
        try:
            if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("the proxy did not start in time")


def _converse(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    messages = [{"role": "user", "content": "hello proxy"}]
    for i, (group, stream) in enumerate(
        [("alpha", False), ("primary", False), ("alpha", True), ("primary", True)]
    ):
        if stream:
            chunks = client.chat.completions.create(model=group, messages=messages, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = (
                client.chat.completions.create(model=group, messages=messages).choices[0].message.content
                or ""
            )
        print(f"turn {i + 1} asked {group:<7} stream={stream!s:<5} -> {text!r}")
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "go on"}]


def main() -> None:
    litellm_bin = shutil.which("litellm") or str(Path(sys.executable).with_name("litellm"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("config.yaml", "handoffmon.yaml"):
            shutil.copy(HERE / name, Path(tmp) / name)
        port = _free_port()
        env = {
            **os.environ,
            "HANDOFFMON_CONFIG": str(Path(tmp) / "handoffmon.yaml"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_MASTER_KEY": MASTER_KEY,
        }
        proc = subprocess.Popen(
            [litellm_bin, "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_up(url, proc)
            _converse(url)
            counts = load_counts_sqlite(Path(tmp) / "handoffmon.db")
            for _ in range(100):  # the proxy's background worker writes within milliseconds
                if counts.total_turns >= 4:
                    break
                time.sleep(0.1)
                counts = load_counts_sqlite(Path(tmp) / "handoffmon.db")
            metrics = httpx.get(f"{url}/metrics/", timeout=10).text
        finally:
            proc.terminate()
            proc.wait(15)
    print(f"recorded by the proxy: {counts.total_turns} turns")
    for key, n in sorted(counts.turns.items(), key=lambda kv: kv[0].depth_bucket):
        print(
            f"  author {key.model} after {key.prefix_model:<7} depth {key.depth_bucket:<4} "
            f"handoff {key.handoff}: {n}"
        )
    for key, n in sorted(counts.checks.items(), key=lambda kv: kv[0].depth_bucket):
        print(f"  check {key.rule} on {key.model} at depth {key.depth_bucket}: {key.verdict} x{n}")
    print("on the proxy's /metrics:")
    for line in metrics.splitlines():
        if line.startswith("handoffmon_turns_total"):
            print(f"  {line}")


if __name__ == "__main__":
    main()
