"""wrap(litellm.Router): fallback authorship, depth/prefix/handoff over 10 turns, faults, streams."""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest

from handoffmon.counts import TurnKey
from handoffmon.integrations import wrap
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import Monitor
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, CANONICAL, Spy, fallback_router
from tests.pipeline.helpers import (
    BrokenStore,
    HangingExporter,
    make_config,
    monitor,
    raising_rules,
)

CONFIG = make_config(attribution={"canonical_models": CANONICAL})
GROUPS_4_7 = ["alpha"] * 3 + ["primary"] * 3 + ["alpha"] * 4
"""Turns 4-6 ask for ``primary``, which falls back to ``backup``: the author changes at 4 and 7."""


def _text_of(response: Any) -> str:
    return response.choices[0].message.content  # type: ignore[no-any-return]


async def _call(wrapped: Any, mode: str, model: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    """One turn through the wrapper in ``mode`` (sync, async, stream, astream); returns the reply text."""
    if mode == "sync":
        return _text_of(wrapped.completion(model=model, messages=messages, **kw))
    if mode == "async":
        return _text_of(await wrapped.acompletion(model=model, messages=messages, **kw))
    if mode == "stream":
        stream = wrapped.completion(model=model, messages=messages, stream=True, **kw)
        return "".join(c.choices[0].delta.content or "" for c in stream)
    stream = await wrapped.acompletion(model=model, messages=messages, stream=True, **kw)
    return "".join([c.choices[0].delta.content or "" async for c in stream])


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
async def test_fallback_author_is_the_deployment_that_served(mode: str) -> None:
    """primary rate-limits and backup serves: the recorded author is backup's canonical name."""
    exp = RecordingExporter()
    router = fallback_router()
    spy = Spy(router)
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)
        text = await _call(wrapped, mode, "primary", [{"role": "user", "content": "hi"}])
        m.flush(10)
    assert text == BACKUP_REPLY
    rec = exp.results[0].record
    assert (rec.author, rec.deployment_id, rec.fallbacks, rec.retries) == ("model-b", "dep-b", 1, 0)
    assert rec.requested_model == "primary"
    assert rec.streamed is mode.endswith("stream")
    assert rec.reply_chars == len(BACKUP_REPLY)
    assert len(spy.returned) == 1


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
async def test_ten_turn_conversation_depth_prefix_handoff(mode: str) -> None:
    """Ten turns whose author changes at 4 (fallback) and 7: depth, prefix, handoff and counts exact."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(fallback_router(), m)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
        for i, group in enumerate(GROUPS_4_7):
            text = await _call(wrapped, mode, group, messages, metadata={"conversation_id": f"conv-{mode}"})
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {i}"}]
        m.flush(10)
        snap = m.snapshot()
    ctxs = [r.context for r in exp.results]
    assert [c.depth for c in ctxs] == list(range(1, 11))
    assert {c.conversation_id for c in ctxs} == {f"conv-{mode}"}
    b, c = "model-b", "model-c"
    assert [x.prefix_model for x in ctxs] == ["none", c, c, c, b, b, b, c, c, c]
    assert [r.record.author for r in exp.results] == [c] * 3 + [b] * 3 + [c] * 4
    assert [i + 1 for i, r in enumerate(exp.results) if r.record.handoff] == [4, 7]
    assert snap.turns == {
        TurnKey(c, "none", "1", "false"): 1,
        TurnKey(c, c, "2", "false"): 1,
        TurnKey(c, c, "3-4", "false"): 1,
        TurnKey(b, c, "3-4", "true"): 1,
        TurnKey(b, b, "5-8", "false"): 2,
        TurnKey(c, b, "5-8", "true"): 1,
        TurnKey(c, c, "5-8", "false"): 1,
        TurnKey(c, c, "9-12", "false"): 2,
    }
    # the ≤5-word rule passes alpha's "ok" and fails backup's long reply
    verdicts = [r.checks[0].verdict for r in exp.results]
    assert verdicts == ["pass"] * 3 + ["fail"] * 3 + ["pass"] * 4
    assert sum(snap.transitions.values()) == 9
    assert snap.attributions == {"chain": 45}
    assert snap.monitor_errors == {} and snap.dropped == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kwargs", [{}, {"temperature": 0.0}, {"metadata": {"conversation_id": "c-1"}}])
async def test_turn_is_what_the_call_returned_whatever_the_app_edits_after(
    mode: str, kwargs: dict[str, Any]
) -> None:
    """Read before the attribution thread runs (queued: workers not started), a turn keeps the
    history as sent and the reply text as returned, although the app then edits its message
    list, its metadata and the response in place (with or without metadata, which decides
    whether the request is parsed on the request path or on the attribution thread)."""
    exp = RecordingExporter()
    m = monitor(CONFIG, exporters=[exp], start=False)
    wrapped = RouterWrapper(fallback_router(), m)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    call = {k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()}  # params are shared
    if mode == "sync":
        response = wrapped.completion(model="alpha", messages=messages, **call)
    else:
        response = await wrapped.acompletion(model="alpha", messages=messages, **call)
    response.choices[0].message.content = "edited by the app after the call, much longer"
    messages += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]
    if "metadata" in call:
        call["metadata"]["conversation_id"] = "changed"
    m.start()
    m.flush(10)
    m.close()
    (result,) = exp.results
    assert result.record.reply_chars == len(ALPHA_REPLY)
    assert result.checks[0].verdict == "pass"  # the ≤5-word rule saw "ok", not the edit
    assert result.context.depth == 1
    if "metadata" in kwargs:
        assert result.context.conversation_id == "c-1"
    assert result.context.requested_model == "alpha" and result.record.author == "model-c"


def test_a_call_that_cannot_be_read_later_is_counted_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """When reading a queued call fails on the attribution thread, the app already has its
    response; monitor_errors{integration} counts the turn and nothing is recorded."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(fallback_router(), m)

        def broken(*args: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(wrapped, "_read_call", broken)
        response = wrapped.completion(model="alpha", messages=[{"role": "user", "content": "q"}])
        assert _text_of(response) == ALPHA_REPLY
        m.flush(10)
        assert m.snapshot().monitor_errors == {"integration": 1}
    assert exp.results == []


def _faulty_monitor(kind: str) -> tuple[Monitor, Any]:
    if kind == "checker":
        return monitor(CONFIG, rules=raising_rules()), None
    if kind == "store":
        store = BrokenStore(fail=["get_many", "put_many", "get_state", "put_state"])
        config = make_config(
            attribution={"canonical_models": CANONICAL}, store={"backoff_after": 3, "backoff_s": 60}
        )
        return monitor(config, store=store), None
    if kind == "queue":
        return monitor(make_config(pipeline={"queue_size": 1}), start=False), None
    hung = HangingExporter()
    return monitor(make_config(pipeline={"export_queue_size": 1}), exporters=[hung]), hung


EXPECTED_FAULT = {
    "checker": ("check", 3),
    "store": ("store", 3),  # then the guard backs off (skipped calls are not errors)
    "queue": ("dropped", 2),
    # one per turn not exported: refused by the full queue, left in it at close, held by the hung exporter
    "exporter": ("export", 3),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED_FAULT))
@pytest.mark.parametrize("mode", ["sync", "stream"])
async def test_faults_return_the_routers_exact_response(kind: str, mode: str) -> None:
    """Raising checker/store, full queue, hung exporter: the app gets the router's own objects; counted."""
    router = fallback_router()
    spy = Spy(router)
    m, hung = _faulty_monitor(kind)
    wrapped = RouterWrapper(router, m)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for _ in range(3):
        if mode == "sync":
            response = wrapped.completion(model="alpha", messages=messages)
            assert response is spy.returned[-1]
            text = _text_of(response)
        else:
            before = len(spy.chunks)
            got = list(wrapped.completion(model="alpha", messages=messages, stream=True))
            mine = spy.chunks[before:]
            assert len(got) == len(mine) and all(a is b for a, b in zip(got, mine, strict=True))
            text = "".join(c.choices[0].delta.content or "" for c in got)
        assert text == ALPHA_REPLY
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    if hung is not None:
        assert hung.entered.wait(5)
    m.close(0.5)
    if hung is not None:
        hung.release.set()
    snap = m.snapshot()
    what, n = EXPECTED_FAULT[kind]
    assert (snap.dropped if what == "dropped" else snap.monitor_errors.get(what)) == n


def test_router_error_propagates_unchanged_and_records_nothing() -> None:
    """When the router itself fails (no fallback), the same exception reaches the app; no turn counted."""
    import litellm

    with monitor(CONFIG) as m:
        wrapped = RouterWrapper(fallback_router(), m)
        with pytest.raises(litellm.RateLimitError):
            wrapped.completion(model="primary", messages=[{"role": "user", "content": "x"}], fallbacks=[])
        m.flush(10)
        assert m.snapshot().total_turns == 0


async def test_stream_cut_off_is_still_recorded() -> None:
    """A consumer that stops after one chunk and drops the stream still produces a (partial) turn."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(fallback_router(), m)
        stream = wrapped.completion(model="primary", messages=[{"role": "user", "content": "x"}], stream=True)
        first = next(iter(stream))
        del stream
        gc.collect()
        messages = [{"role": "user", "content": "y"}]
        astream = await wrapped.acompletion(model="alpha", messages=messages, stream=True)
        async for _ in astream:
            break
        await astream.aclose()
        m.flush(10)
    assert first.choices[0].delta.content
    recs = sorted((r.record for r in exp.results), key=lambda r: r.author)
    assert [(r.author, r.streamed) for r in recs] == [("model-b", True), ("model-c", True)]
    assert 0 < recs[0].reply_chars < len(BACKUP_REPLY)
    # half a reply says nothing about adherence: counted as a turn, its rule not judged
    checks = [(c.rule, c.verdict, c.reason) for r in exp.results for c in r.checks]
    assert checks == [("short", "not_applicable", "incomplete")] * 2


async def test_a_stream_read_to_its_finish_reason_is_judged_even_if_not_drained() -> None:
    """A consumer that stops after the chunk carrying the finish reason has the whole reply:
    its rule is checked (pass or fail), as for a stream read to the end."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(fallback_router(), m)
        messages = [{"role": "user", "content": "z"}]
        astream = await wrapped.acompletion(model="alpha", messages=messages, stream=True)
        async for chunk in astream:
            if chunk.choices[0].finish_reason is not None:
                break
        await astream.aclose()
        again = [{"role": "user", "content": "w"}]
        whole = await wrapped.acompletion(model="alpha", messages=again, stream=True)
        async for _ in whole:
            pass
        m.flush(10)
    verdicts = [c.verdict for r in exp.results for c in r.checks]
    assert len(verdicts) == 2 and set(verdicts) <= {"pass", "fail"}


def test_other_attributes_pass_through() -> None:
    """Everything but completion/acompletion is the router's own attribute."""
    router = fallback_router()
    with monitor(CONFIG) as m:
        wrapped = RouterWrapper(router, m)
        assert isinstance(wrapped, RouterWrapper)
        assert wrapped.model_list is router.model_list
        assert sorted(wrapped.get_model_names()) == ["alpha", "backup", "primary"]
        assert wrapped.router is router and wrapped.monitor is m
        copied = copy.copy(wrapped)  # an instance made without __init__ on the way: no recursion
        assert type(copied) is RouterWrapper and copied.router is router and copied.monitor is m


def test_wrapping_a_wrapped_router_again_is_the_same_wrapper() -> None:
    """``wrap(wrap(router))`` in one runtime: the same wrapper (one layer of monitoring); for
    another runtime, a wrapper of the same router recording there."""
    router = fallback_router()
    with build_runtime(CONFIG, registry=None) as rt, build_runtime(CONFIG, registry=None) as other:
        wrapped = wrap(router, runtime=rt)
        assert wrap(wrapped, runtime=rt) is wrapped
        moved = wrap(wrapped, runtime=other)
        assert type(moved) is RouterWrapper and moved.router is router and moved.monitor is other.monitor


def test_wrap_without_config_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """wrap(router) with no config or runtime builds the shared runtime from HANDOFFMON_* variables."""
    monkeypatch.setenv("HANDOFFMON_PIPELINE__QUEUE_SIZE", "123")
    monkeypatch.setenv("HANDOFFMON_REFIT__INTERVAL_S", "0")
    wrapped = wrap(fallback_router())
    try:
        assert wrapped.monitor.config.pipeline.queue_size == 123
        assert wrapped.runtime is not None and wrapped.monitor is wrapped.runtime.monitor
    finally:
        wrapped.runtime.close()


def test_wrap_rejects_unknown_targets() -> None:
    """wrap() of something that is neither a router nor a client raises TypeError naming it."""
    with pytest.raises(TypeError, match="int"):
        wrap(3)


class _Unreadable:
    """A response whose fields raise when read."""

    @property
    def choices(self) -> Any:
        raise RuntimeError("no choices for you")


class _OddRouter:
    def completion(self, model: str, messages: list[Any], **kw: Any) -> Any:
        return self.last

    async def acompletion(self, model: str, messages: list[Any], **kw: Any) -> Any:
        return self.last

    def __init__(self) -> None:
        self.last = _Unreadable()


def test_unreadable_response_is_returned_and_counted() -> None:
    """A response the wrapper cannot read reaches the app as is; monitor_errors{integration} counts it."""
    router = _OddRouter()
    with monitor(CONFIG) as m:
        wrapped = RouterWrapper(router, m)
        assert wrapped.completion(model="x", messages=[{"role": "user", "content": "q"}]) is router.last
        m.flush(10)
        assert m.snapshot().monitor_errors == {"integration": 1}


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_reply_that_only_calls_a_tool_is_a_turn_with_not_applicable_rules(mode: str) -> None:
    """A real Router answering with a tool call and empty content (LiteLLM's ``mock_tool_calls``;
    its mock streams carry no tool calls, so streamed ones are tested through ``serve`` and the
    chunk parser): the turn is counted for its deployment, and no rule judges the empty text."""
    from litellm import Router

    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    router = Router(
        model_list=[
            {
                "model_name": "tools",
                "litellm_params": {"model": "openai/gpt-4o", "mock_response": "", "mock_tool_calls": [call]},
            }
        ]
    )
    exp = RecordingExporter()
    config = make_config(
        rules=[{"name": "says_ok", "check": "regex_must_match", "params": {"pattern": "ok"}}]
    )
    messages = [{"role": "user", "content": "look x up"}]
    with monitor(config, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)
        if mode == "sync":
            got = wrapped.completion(model="tools", messages=messages)
        else:
            got = await wrapped.acompletion(model="tools", messages=messages)
        assert got.choices[0].message.tool_calls[0].id == "call_1"
        assert m.flush(10)
    [result] = exp.results
    assert result.record.author == "openai/gpt-4o"
    assert [(c.rule, c.verdict, c.reason) for c in result.checks] == [
        ("says_ok", "not_applicable", "tool_calls")
    ]


def test_a_streamed_reply_past_the_folders_cap_is_counted_and_not_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wrapper's stream folder keeps at most ``MAX_REPLY_CHARS`` (here 16): a longer reply
    reaches the application whole, and the monitor counts it instead of recording part of it."""
    from litellm import Router

    from handoffmon.ingress import ChunkFolder

    monkeypatch.setattr(ChunkFolder.__init__, "__defaults__", (16,))
    text = "a streamed reply well past sixteen characters"
    router = Router(
        model_list=[{"model_name": "m", "litellm_params": {"model": "openai/gpt-4o", "mock_response": text}}]
    )
    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        stream = RouterWrapper(router, m).completion(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream) == text
        assert m.flush(10)
        snap = m.snapshot()
    assert exp.results == [] and snap.total_turns == 0
    assert snap.monitor_errors == {"parse": 1}


@pytest.mark.parametrize("late", [False, True], ids=["prompt", "late_attribution"])
@pytest.mark.parametrize("update", ["set_model_list", "upsert_deployment"])
async def test_a_deployment_updated_under_its_id_credits_its_new_model_streamed_or_not(
    update: str, late: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment given a new model under the same id (``set_model_list`` on a config reload,
    ``upsert_deployment``) after it served streams: the next stream's author is the new model,
    as the next plain reply's is (a stream's author was read from a cache of the first lookup,
    so every later stream went on crediting the old model). ``late``: the attribution thread
    reads the streams only after the update (a loaded host): the streams served before it are
    still the old model's (their deployment's model was read on the attribution thread, so an
    update in between re-credited them to the new one)."""
    import threading

    from litellm import Router
    from litellm.types.router import Deployment

    gate = threading.Event()
    if late:
        describe = RouterWrapper._describe_stream

        def after_the_update(self: RouterWrapper, *args: Any) -> Any:
            assert gate.wait(10)
            return describe(self, *args)

        monkeypatch.setattr(RouterWrapper, "_describe_stream", after_the_update)

    def deployment(model: str, reply: str) -> dict[str, Any]:
        params = {"model": model, "api_key": "k", "mock_response": reply}
        return {"model_name": "chat", "litellm_params": params, "model_info": {"id": "dep-1"}}

    exp = RecordingExporter()
    messages = [{"role": "user", "content": "hi"}]
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(Router(model_list=[deployment("openai/gpt-old", "old reply")]), m)
        for _ in range(2):  # streamed, then not
            assert await _call(wrapped, "astream", "chat", messages) == "old reply"
            assert await _call(wrapped, "async", "chat", messages) == "old reply"
        if update == "set_model_list":
            wrapped.set_model_list([deployment("openai/gpt-new", "new reply")])
        else:
            wrapped.upsert_deployment(Deployment(**deployment("openai/gpt-new", "new reply")))
        gate.set()
        assert await _call(wrapped, "astream", "chat", messages) == "new reply"
        assert await _call(wrapped, "stream", "chat", messages) == "new reply"
        assert await _call(wrapped, "async", "chat", messages) == "new reply"
        m.flush(10)
    authors = [(r.record.author, r.record.streamed) for r in exp.results]
    assert authors == [("openai/gpt-old", True), ("openai/gpt-old", False)] * 2 + [
        ("openai/gpt-new", True),
        ("openai/gpt-new", True),
        ("openai/gpt-new", False),
    ]
