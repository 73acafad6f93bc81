"""The real LiteLLM Proxy (subprocess on loopback) with handoffmon registered in its config.yaml.

One proxy (the shipped example: LiteLLM's prometheus callback and handoffmon's) serves most
tests: authorship recorded by the callback, handoffmon's series and refit on the proxy's own
/metrics, the README quickstart's curl line, and the same conversations giving the same series
through wrap, this callback and ``handoffmon serve``. A second, the example's callback in front
of an OpenAI-shaped Responses upstream, serves the Responses chain test."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from handoffmon.counts import Counts, TurnKey
from handoffmon.errors import StoreError
from handoffmon.integrations.responses_calls import litellm_forwards_conversation
from handoffmon.pipeline.aggregates import load_counts_sqlite
from tests.conftest import free_port, require, require_binary
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY
from tests.proxy.conftest import serve_process
from tests.proxy.messages_upstream import TOOL_WORDS, MessagesUpstream
from tests.proxy.mock_upstream import ServerThread
from tests.proxy.responses_upstream import ResponsesUpstream

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "litellm_proxy_callback"
"""The shipped example's config.yaml / handoffmon.yaml: the documented lines are what is tested."""
START_TIMEOUT_S = 240.0
"""Importing the proxy stack takes seconds idle and minutes on a loaded 2-core machine."""
MASTER_KEY = f"sk-{secrets.token_hex(16)}"

CHAIN3 = {
    TurnKey("model-c", "none", "1", "false"): 1,
    TurnKey("model-b", "model-c", "2", "true"): 1,
    TurnKey("model-c", "model-b", "3-4", "true"): 1,
}
"""The turns of a three-turn conversation alpha → backup → alpha (authors model-c, model-b, model-c)."""
"""Generated per run (the example reads it from LITELLM_MASTER_KEY; LiteLLM refuses well-known keys)."""


@contextlib.contextmanager
def running_proxy(tmp: Path, env: dict[str, str]) -> Iterator[str]:
    """A LiteLLM Proxy subprocess on ``tmp/config.yaml`` (cwd ``tmp``); yields its base URL."""
    litellm_bin = Path(sys.executable).with_name("litellm")
    require(litellm_bin.exists(), "litellm CLI (litellm[proxy]) not installed")
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": MASTER_KEY, **env}
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
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, (tmp / "proxy.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"LiteLLM Proxy did not start in {START_TIMEOUT_S:.0f} s"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A LiteLLM Proxy subprocess; yields (base URL, handoffmon SQLite file)."""
    tmp = tmp_path_factory.mktemp("proxy")
    db = tmp / "handoffmon.db"  # handoffmon.yaml's relative store.path, under the proxy's cwd
    for name in ("config.yaml", "handoffmon.yaml"):
        shutil.copy(EXAMPLE / name, tmp / name)
    env = {
        "HANDOFFMON_CONFIG": str(tmp / "handoffmon.yaml"),
        "HANDOFFMON_REFIT__INTERVAL_S": "1",  # the runtime's periodic refit, in the proxy process
    }
    with running_proxy(tmp, env) as url:
        yield url, db


def _before(db: Path) -> Counts:
    """The proxy's aggregates so far; empty when none are written yet (the test ran first)."""
    try:
        return load_counts_sqlite(db)
    except StoreError:
        return Counts()


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
    assert counts.turns == {**CHAIN3, TurnKey(b, c, "3-4", "true"): 1}
    assert counts.attributions == {"chain": 0 + 1 + 2 + 3}
    assert counts.monitor_errors == {} and counts.dropped == 0
    # the example's "brief" rule (≤ 5 words) passes alpha's "ok" and fails backup's long reply
    verdicts: dict[tuple[str, str], int] = {}
    for k, n in counts.checks.items():
        verdicts[k.model, k.verdict] = verdicts.get((k.model, k.verdict), 0) + n
    assert verdicts == {(c, "pass"): 2, (b, "fail"): 2}
    # the logging hooks see these calls too: in the proxy, no "SDK call not monitored" warning
    assert "handoffmon.wrap(litellm)" not in (db.parent / "proxy.log").read_text(errors="replace")


# -- handoffmon's series on LiteLLM's /metrics; the same series in every mode ------------------------


def _added(before: Counts, counts: Counts) -> tuple[dict[Any, int], dict[str, int]]:
    """The turns and the attribution methods counted since ``before`` (nonzero entries only)."""
    turns = {k: n - before.turns.get(k, 0) for k, n in counts.turns.items() if n - before.turns.get(k, 0)}
    methods = {k: n - before.attributions.get(k, 0) for k, n in counts.attributions.items()}
    return turns, {k: n for k, n in methods.items() if n}


def _series(text: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Non-zero samples of one family from an exposition (label sets sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[tuple[str, str], ...], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == family and s.value:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _delta(after: dict[Any, float], before: dict[Any, float]) -> dict[Any, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def _metrics(url: str, headers: dict[str, str] | None = None) -> str:
    r = httpx.get(f"{url}/metrics", headers=headers, follow_redirects=True, timeout=30)
    assert r.status_code == 200, r.text[:500]
    return r.text


def _total(text: str) -> float:
    return sum(_series(text, "handoffmon_turns_total").values())


def test_handoffmon_series_and_refit_on_the_proxys_own_metrics(proxy: tuple[str, Path]) -> None:
    """LiteLLM's prometheus callback and handoffmon's in one config.yaml: /metrics shows LiteLLM's series
    and handoffmon's turns, checks, store failures and refit gauges (the refit runs in the proxy)."""
    url, _ = proxy
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "metrics please"}])
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        text = _metrics(url)
        if _total(text) > 0 and "handoffmon_refit_last_success_timestamp_seconds " in text:
            break
        time.sleep(0.3)
    assert any(line.startswith("litellm_") for line in text.splitlines())
    assert _total(text) > 0 and _series(text, "handoffmon_checks_total")
    assert "handoffmon_refit_last_success_timestamp_seconds " in text
    assert 'handoffmon_store_failures_total{kind="errors",op="get"} 0.0' in text


def _curl(command: str, url: str) -> dict[str, float]:
    """Run a README curl line against ``url``; its output lines as {series: value}."""
    out = subprocess.run(
        ["bash", "-c", command.replace("http://127.0.0.1:4000", url)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode in (0, 1), out.stderr  # grep exits 1 when nothing matches yet
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.stdout.splitlines()}


def test_readme_quickstart_curl_shows_the_turn(proxy: tuple[str, Path]) -> None:
    """The README's LiteLLM Proxy quickstart: after one new conversation, its curl line prints
    handoffmon_turns_total lines only, and the series written under it rose by exactly 1."""
    from tests.docs.snippets import claimed, expected_output, shell_commands

    require_binary("curl")
    (block,) = claimed("README.md", "tests/integrations/test_litellm_proxy.py", "bash")
    (curl,) = [c for c in shell_commands(block.code) if c.startswith("curl ")]
    (documented,) = expected_output(block.code)
    series = documented.rsplit(" ", 1)[0]
    url, _ = proxy
    before = _curl(curl, url).get(series, 0.0)
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "README quickstart"}])
    deadline = time.monotonic() + 30
    after = _curl(curl, url)
    while after.get(series, 0.0) == before and time.monotonic() < deadline:
        time.sleep(0.2)
        after = _curl(curl, url)
    assert after and all(s.startswith("handoffmon_turns_total{") for s in after)
    assert after.get(series, 0.0) == before + 1


PLANS = [
    [("alpha", False), ("primary", False), ("alpha", True), ("primary", True)],
    [("primary", True), ("primary", False), ("alpha", False)],
    [("alpha", True), ("alpha", False), ("primary", False), ("alpha", True)],
]
"""Three conversations (11 turns): alpha is model-c, primary falls back to model-b; some streamed."""


def _converse(send: Any, tag: str) -> int:
    """Drive PLANS through ``send(group, messages, stream) -> text``; returns the turns sent."""
    turns = 0
    for i, plan in enumerate(PLANS):
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {i} ({tag}) starts"}]
        for j, (group, stream) in enumerate(plan):
            text = send(group, messages, stream)
            assert text == (ALPHA_REPLY if group == "alpha" else BACKUP_REPLY)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"then {j}"}]
            turns += 1
    return turns


def _openai_send(client: openai.OpenAI) -> Any:
    def send(group: str, messages: list[dict[str, Any]], stream: bool) -> str:
        if stream:
            chunks = client.chat.completions.create(model=group, messages=messages, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return client.chat.completions.create(model=group, messages=messages).choices[0].message.content or ""

    return send


def _handoffmon_config(tmp: Path) -> dict[str, Any]:
    """The example's handoffmon.yaml (rules, canonical names) on a memory store, without turn logs."""
    data: dict[str, Any] = yaml.safe_load((EXAMPLE / "handoffmon.yaml").read_text())
    data["store"] = {"backend": "memory"}
    data["telemetry"] = {"log_turns": False}
    data["refit"] = {"interval_s": 0}
    return data


def _via_wrap(tmp: Path) -> dict[str, dict[Any, float]]:
    from prometheus_client import CollectorRegistry, generate_latest

    from handoffmon.config import config_from_mapping
    from handoffmon.integrations import wrap
    from handoffmon.runtime import build_runtime

    litellm_cfg = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    from litellm import Router

    router = Router(model_list=litellm_cfg["model_list"], **litellm_cfg["router_settings"])
    rt = build_runtime(config_from_mapping(_handoffmon_config(tmp)), registry=CollectorRegistry())
    wrapped = wrap(router, runtime=rt)

    def send(group: str, messages: list[dict[str, Any]], stream: bool) -> str:
        if stream:
            return "".join(
                c.choices[0].delta.content or ""
                for c in wrapped.completion(model=group, messages=messages, stream=True)
            )
        return str(wrapped.completion(model=group, messages=messages).choices[0].message.content)

    _converse(send, "wrap")
    rt.close()
    text = generate_latest(rt.registry).decode()
    return {f: _series(text, f) for f in ("handoffmon_turns_total", "handoffmon_checks_total")}


def _via_proxy(url: str) -> dict[str, dict[Any, float]]:
    before = _metrics(url)
    sent = _converse(_openai_send(openai.OpenAI(base_url=url, api_key=MASTER_KEY)), "proxy")
    deadline = time.monotonic() + 30
    after = _metrics(url)
    while _total(after) - _total(before) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
        after = _metrics(url)
    return {
        f: _delta(_series(after, f), _series(before, f))
        for f in ("handoffmon_turns_total", "handoffmon_checks_total")
    }


def _via_serve(upstream: str, tmp: Path) -> dict[str, dict[Any, float]]:
    cfg = tmp / "serve.yaml"
    cfg.write_text(yaml.safe_dump(_handoffmon_config(tmp)))
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("HANDOFFMON_CONFIG", None)
    args = ["serve", "--upstream", upstream, "--port", str(port), "--config", str(cfg)]
    with serve_process(args, port, env) as served:
        url = served.url
        _converse(_openai_send(openai.OpenAI(base_url=f"{url}/v1", api_key=MASTER_KEY)), "serve")
        assert httpx.post(f"{url}/admin/flush", timeout=30).json() == {"flushed": True}
        text = _metrics(url)
    return {f: _series(text, f) for f in ("handoffmon_turns_total", "handoffmon_checks_total")}


@pytest.mark.e2e
@pytest.mark.slow
def test_same_conversations_give_the_same_series_in_wrap_callback_and_serve(
    proxy: tuple[str, Path], tmp_path: Path
) -> None:
    """Three conversations through wrap(litellm.Router), the LiteLLM Proxy callback and handoffmon serve
    (in front of that proxy): identical handoffmon_turns_total and handoffmon_checks_total series."""
    url, _ = proxy
    wrapped = _via_wrap(tmp_path)
    proxied = _via_proxy(url)
    served = _via_serve(url, tmp_path)
    turns = wrapped["handoffmon_turns_total"]
    assert sum(turns.values()) == sum(len(p) for p in PLANS)
    assert turns[(("depth_bucket", "2"), ("model", "model-b"), ("prefix_model", "model-c"))] == 1
    assert proxied == wrapped
    assert served == wrapped


def test_proxy_records_responses_api_turns(proxy: tuple[str, Path]) -> None:
    """OpenAI SDK ``responses.create`` → LiteLLM Proxy ``/v1/responses`` (the callback's hooks):
    three turns, authors from the deployments, every earlier output item sent back attributed."""
    url, db = proxy
    before = _before(db)
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    items: list[Any] = [{"role": "user", "content": "hello responses"}]
    for i, group in enumerate(["alpha", "backup", "alpha"]):
        resp = client.responses.create(model=group, input=items)
        assert resp.output_text == (ALPHA_REPLY if group == "alpha" else BACKUP_REPLY)
        items += [o.model_dump(exclude_none=True) for o in resp.output]
        items.append({"role": "user", "content": f"responses turn {i}"})
    counts = _wait_counts(db, before.total_turns + 3)
    turns, attributed = _added(before, counts)
    assert turns == CHAIN3
    assert "unknown" not in attributed and sum(attributed.values()) == 0 + 1 + 2


@pytest.fixture(scope="module")
def chain_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A LiteLLM Proxy with the example's callback in front of an OpenAI-shaped Responses
    upstream on loopback: LiteLLM's ``mock_response`` gives every response the same id, and a
    chain needs the unique ids a provider gives. Yields (base URL, handoffmon SQLite file)."""
    tmp = tmp_path_factory.mktemp("chain-proxy")
    shutil.copy(EXAMPLE / "handoffmon.yaml", tmp / "handoffmon.yaml")
    with ServerThread(ResponsesUpstream(), free_port()) as upstream:
        base = f"{upstream.url}/v1"
        config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
        config["model_list"] = [
            {
                "model_name": group,
                "litellm_params": {"model": f"openai/{model}", "api_key": "unused", "api_base": base},
                "model_info": {"id": dep},
            }
            for group, model, dep in (("alpha", "gpt-c", "dep-c"), ("backup", "gpt-b", "dep-b"))
        ]
        config["litellm_settings"]["callbacks"] = [
            c for c in config["litellm_settings"]["callbacks"] if c.startswith("handoffmon")
        ]
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        with running_proxy(tmp, {"HANDOFFMON_CONFIG": str(tmp / "handoffmon.yaml")}) as url:
            yield url, tmp / "handoffmon.db"


@pytest.mark.parametrize("by", ["previous_response_id", "conversation"])
@pytest.mark.slow
def test_proxy_records_responses_api_histories_kept_by_the_provider(
    chain_proxy: tuple[str, Path], by: str
) -> None:
    """Calls continuing a stored response (LiteLLM's encoded response ids, as the SDK gets
    them) or one ``conversation`` object through the real LiteLLM Proxy: the same three turns
    as the history sent in full, the hidden messages attributed from what handoffmon recorded
    (ADR 0011). A LiteLLM that drops ``conversation`` (1.108) sends three fresh conversations
    upstream, and that is what is recorded."""
    url, db = chain_proxy
    chained = by == "previous_response_id" or litellm_forwards_conversation()
    before = _before(db)
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    previous: str | None = None
    for i, group in enumerate(["alpha", "backup", "alpha"]):
        extra: dict[str, Any] = {"conversation": "conv_proxy"} if by == "conversation" else {}
        if previous and by == "previous_response_id":
            extra["previous_response_id"] = previous
        resp = client.responses.create(model=group, input=f"{by} turn {i}", **extra)
        assert resp.output_text.startswith(
            f"Response {i + 1 if chained else 1} from "
        )  # as the upstream saw it
        previous = resp.id
    counts = _wait_counts(db, before.total_turns + 3)
    b, c = "model-b", "model-c"
    turns, attributed = _added(before, counts)
    if chained:
        assert turns == CHAIN3
        assert attributed == {"response_id": 1 + 2}
    else:
        assert turns == {TurnKey(c, "none", "1", "false"): 2, TurnKey(b, "none", "1", "false"): 1}
        assert attributed == {}


@pytest.mark.slow
def test_proxy_records_streamed_responses_under_the_ids_the_next_call_names(
    chain_proxy: tuple[str, Path],
) -> None:
    """A streamed Responses API reply continued by ``previous_response_id``: LiteLLM's
    ``ResponsesIDSecurity`` encrypts the ids the client sees in its streaming hook, which runs
    before the callback's, and decrypts ``previous_response_id`` before the next call's hooks;
    the reply must be recorded under the decrypted id, as a JSON reply is, or the next turn's
    history is ``unknown``."""
    url, db = chain_proxy
    before = _before(db)
    client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
    previous: str | None = None
    for i, (group, stream) in enumerate(
        [("alpha", True), ("backup", True), ("alpha", False), ("backup", True)]
    ):
        extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        if stream:
            with client.responses.stream(model=group, input=f"streamed turn {i}", **extra) as events:
                for _ in events:
                    pass
                resp = events.get_final_response()
        else:
            resp = client.responses.create(model=group, input=f"streamed turn {i}", **extra)
        previous = resp.id
    counts = _wait_counts(db, before.total_turns + 4)
    b, c = "model-b", "model-c"
    turns, attributed = _added(before, counts)
    assert turns == {**CHAIN3, TurnKey(b, c, "3-4", "true"): 1}
    assert attributed == {"response_id": 1 + 2 + 3}


@pytest.fixture(scope="module")
def messages_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A LiteLLM Proxy with the example's callback, its two groups Anthropic deployments on an
    Anthropic-shaped loopback upstream (``/v1/messages``). Canonical names map the provider
    models, not the deployment ids: a JSON reply and a stream of one deployment must get the
    same author by the same rule (the deployment's model). Yields (base URL, SQLite file)."""
    tmp = tmp_path_factory.mktemp("messages-proxy")
    hm = yaml.safe_load((EXAMPLE / "handoffmon.yaml").read_text())
    hm["attribution"] = {
        "canonical_models": {"anthropic/claude-x": "claude-a", "anthropic/claude-y": "claude-b"}
    }
    (tmp / "handoffmon.yaml").write_text(yaml.safe_dump(hm))
    with ServerThread(MessagesUpstream(), free_port()) as upstream:
        config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
        config["model_list"] = [
            {
                "model_name": group,
                "litellm_params": {
                    "model": f"anthropic/{model}",
                    "api_key": "unused",
                    "api_base": upstream.url,
                },
                "model_info": {"id": dep},
            }
            for group, model, dep in (("claude-a", "claude-x", "dep-ca"), ("claude-b", "claude-y", "dep-cb"))
        ]
        config["router_settings"] = {"num_retries": 0}
        config["litellm_settings"]["callbacks"] = [
            c for c in config["litellm_settings"]["callbacks"] if c.startswith("handoffmon")
        ]
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        with running_proxy(tmp, {"HANDOFFMON_CONFIG": str(tmp / "handoffmon.yaml")}) as url:
            yield url, tmp / "handoffmon.db"


@pytest.mark.slow
def test_proxy_records_anthropic_messages_api_turns(messages_proxy: tuple[str, Path]) -> None:
    """The Anthropic SDK → LiteLLM Proxy ``/v1/messages`` (the callback's hooks), JSON and
    streamed (the proxy hands the hook raw SSE bytes), a tool call among them: every turn with
    its author (the serving deployment), prefix and depth, and every reply sent back
    attributed (ADR 0012)."""
    url, db = messages_proxy
    client = anthropic.Anthropic(base_url=url, api_key=MASTER_KEY, max_retries=0)
    history: list[Any] = [{"role": "user", "content": f"please {TOOL_WORDS}"}]
    plan = [("claude-a", False), ("claude-a", True), ("claude-b", True), ("claude-a", False)]
    for i, (group, stream) in enumerate(plan):
        if stream:
            with client.messages.stream(model=group, max_tokens=100, messages=history) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(model=group, max_tokens=100, messages=history)
        history.append({"role": "assistant", "content": reply.content})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if calls:
            history.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "42"}],
                }
            )
        else:
            history.append({"role": "user", "content": f"next {i}"})
    counts = _wait_counts(db, len(plan))
    a, b = "claude-a", "claude-b"
    assert dict(counts.turns) == {
        TurnKey(a, "none", "1", "false"): 1,
        TurnKey(a, a, "2", "false"): 1,
        TurnKey(b, a, "3-4", "true"): 1,
        TurnKey(a, b, "3-4", "true"): 1,
    }
    assert {k: n for k, n in counts.attributions.items() if n} == {"chain": 0 + 1 + 2 + 3}
