"""The real LiteLLM Proxy (subprocess on loopback) with handoffmon registered in its config.yaml."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from handoffmon.counts import Counts, TurnKey
from handoffmon.errors import StoreError
from handoffmon.pipeline.aggregates import load_counts_sqlite
from tests.conftest import free_port, require
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "litellm_proxy_callback"
"""The shipped example's config.yaml / handoffmon.yaml: the documented lines are what is tested."""
MASTER_KEY = yaml.safe_load((EXAMPLE / "config.yaml").read_text())["general_settings"]["master_key"]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A LiteLLM Proxy subprocess; yields (base URL, handoffmon SQLite file)."""
    litellm_bin = Path(sys.executable).with_name("litellm")
    require(litellm_bin.exists(), "litellm CLI (litellm[proxy]) not installed")
    tmp = tmp_path_factory.mktemp("proxy")
    db = tmp / "handoffmon.db"  # handoffmon.yaml's relative store.path, under the proxy's cwd
    for name in ("config.yaml", "handoffmon.yaml"):
        shutil.copy(EXAMPLE / name, tmp / name)
    port = free_port()
    env = {
        **os.environ,
        "HANDOFFMON_CONFIG": str(tmp / "handoffmon.yaml"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    log = open(tmp / "proxy.log", "wb")  # noqa: SIM115 - closed after the process ends
    proc = subprocess.Popen(
        [str(litellm_bin), "--config", str(tmp / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp / "proxy.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "LiteLLM Proxy did not start in 90 s"
            time.sleep(0.3)
        yield url, db
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _wait_counts(db: Path, turns: int, timeout_s: float = 30.0) -> Counts:
    deadline = time.monotonic() + timeout_s
    counts = Counts()
    while time.monotonic() < deadline:
        with contextlib.suppress(StoreError):  # the proxy may not have written aggregates yet
            counts = load_counts_sqlite(db)
        if counts.total_turns >= turns:
            return counts
        time.sleep(0.2)
    return counts


def test_proxy_records_authorship_and_depth_for_a_four_turn_conversation(proxy: tuple[str, Path]) -> None:
    """OpenAI SDK → LiteLLM Proxy, 4 turns (2 streamed, 2 by fallback): authors, prefixes, depths."""
    url, db = proxy
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello proxy"}]
    plan = [("alpha", False), ("primary", False), ("alpha", True), ("primary", True)]
    for i, (group, stream) in enumerate(plan):
        if stream:
            chunks = client.chat.completions.create(model=group, messages=messages, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(model=group, messages=messages).choices[0].message.content
        assert text == (ALPHA_REPLY if group == "alpha" else BACKUP_REPLY)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {i}"}]
    counts = _wait_counts(db, 4)
    b, c = "model-b", "model-c"
    assert counts.turns == {
        TurnKey(c, "none", "1", "false"): 1,
        TurnKey(b, c, "2", "true"): 1,
        TurnKey(c, b, "3-4", "true"): 1,
        TurnKey(b, c, "3-4", "true"): 1,
    }
    assert counts.attributions == {"chain": 0 + 1 + 2 + 3}
    assert counts.monitor_errors == {} and counts.dropped == 0
    # the example's "brief" rule (≤ 5 words) passes alpha's "ok" and fails backup's long reply
    verdicts: dict[tuple[str, str], int] = {}
    for k, n in counts.checks.items():
        verdicts[k.model, k.verdict] = verdicts.get((k.model, k.verdict), 0) + n
    assert verdicts == {(c, "pass"): 2, (b, "fail"): 2}
