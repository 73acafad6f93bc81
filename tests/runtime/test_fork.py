"""A forked child monitors: ``gunicorn --preload`` imports a module that wraps at import, then
forks its workers. A real ``os.fork`` of the test process, a real Router."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest

from handoffmon.integrations import wrap
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.integrations.routers import BACKUP_REPLY, fallback_router
from tests.pipeline.helpers import make_config

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")


def _in_child(work: Any) -> dict[str, Any]:
    """Run ``work()`` in a forked child; its JSON-able result, sent back through a pipe (the child
    leaves with ``os._exit``, running nothing of the parent's test machinery)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        try:
            out = {"ok": True, **work()}
        except BaseException as exc:
            out = {"ok": False, "error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(b"".join(chunks))
    assert result.pop("ok"), result
    return result


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_restarts_the_pipeline_and_keeps_what_the_parent_recorded() -> None:
    """The parent records a turn and forks while its pipeline threads and refit schedule run.
    In the child, three calls are turns (one continues the parent's conversation and is
    attributed from what the parent recorded), ``flush`` returns True at once, the pipeline
    and refit threads run again. The parent goes on as before. (Before: the child's turns
    sat in a queue no thread drained, ``flush`` timed out, and the queue filled up.)"""
    exp = RecordingExporter()
    config = make_config(refit={"interval_s": 300})
    rt = build_runtime(config, registry=None, exporters=[exp])
    try:
        wrapped = wrap(fallback_router(), runtime=rt)
        history: list[dict[str, Any]] = [{"role": "user", "content": "before the fork"}]
        text = wrapped.completion(model="primary", messages=history).choices[0].message.content
        assert text == BACKUP_REPLY and rt.flush(10)

        def child() -> dict[str, Any]:
            wrapped.completion(
                model="alpha",
                messages=[
                    *history,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": "go on"},
                ],
            )
            for i in range(2):
                wrapped.completion(model="alpha", messages=[{"role": "user", "content": f"child {i}"}])
            flushed = rt.flush(5)
            threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("handoffmon"))
            return {
                "flushed": flushed,
                "results": [(r.context.depth, r.context.prefix_model, r.record.author) for r in exp.results],
                "threads": threads,
                "pending": rt.monitor.stats["pending"],
            }

        got = _in_child(child)
        assert got["flushed"] is True and got["pending"] == 0
        assert got["results"] == [
            [1, "none", "openai/gpt-b"],  # the parent's, in the child's copy of the exporter
            [2, "openai/gpt-b", "openai/gpt-c"],
            [1, "none", "openai/gpt-c"],
            [1, "none", "openai/gpt-c"],
        ]
        assert "handoffmon-attribution" in got["threads"] and "handoffmon-refit" in got["threads"]
        wrapped.completion(model="alpha", messages=[{"role": "user", "content": "parent after"}])
        assert rt.flush(10) and len(exp.results) == 2  # the parent's own: the child's stayed there
    finally:
        rt.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_lock_a_parent_thread_held_at_the_fork_is_free_in_the_child() -> None:
    """Another of the parent's threads holds the aggregates' lock, the Prometheus exporter's and
    its prometheus_client registry's when the process forks: that thread does not exist in the
    child, so without a renewal the child's first count would wait forever. In the child they
    are free and a turn is counted."""
    exp = RecordingExporter()
    rt = build_runtime(make_config(), registry=None, exporters=[exp])
    try:
        wrapped = wrap(fallback_router(), runtime=rt)
        prom: Any = next(e for e in rt.exporters if type(e).__name__ == "PrometheusExporter")
        held = [rt.monitor.aggregates._lock, prom._refit_lock, prom.registry._lock]
        taken, release = threading.Event(), threading.Event()

        def hold() -> None:
            for lock in held:
                lock.acquire()
            taken.set()
            release.wait()
            for lock in held:
                lock.release()

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait()

        def child() -> dict[str, Any]:
            free = [lock.acquire(timeout=2) for lock in held]
            for lock, got in zip(held, free, strict=True):
                if got:
                    lock.release()
            wrapped.completion(model="alpha", messages=[{"role": "user", "content": "in the child"}])
            return {"free": free, "flushed": rt.flush(5), "turns": len(exp.results)}

        try:
            got = _in_child(child)
        finally:
            release.set()
            holder.join()
        assert got == {"free": [True] * len(held), "flushed": True, "turns": 1}
    finally:
        rt.close()


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_shares_the_redis_store_on_connections_of_its_own() -> None:
    """``gunicorn --preload`` with the Redis store: the parent records a turn and forks. The child's
    continuation is attributed from Redis (the child's copy of the parent's in-process state
    is dropped at the fork, so the attribution comes from the store), on connections the child
    opened itself (redis-py's pool notices the new pid), and the parent's connection still
    works afterwards: no reply of one process is read by the other."""
    import uuid

    import redis

    from tests.conftest import require_redis

    require_redis()
    prefix = f"hm-test-fork:{uuid.uuid4().hex}:"
    exp = RecordingExporter()
    config = make_config(store={"backend": "redis", "key_prefix": prefix, "timeout_s": 1.0})
    rt = build_runtime(config, registry=None, exporters=[exp])
    raw = redis.Redis(host="127.0.0.1", port=6379)
    try:
        wrapped = wrap(fallback_router(), runtime=rt)
        history: list[dict[str, Any]] = [{"role": "user", "content": "before the fork (redis)"}]
        text = wrapped.completion(model="primary", messages=history).choices[0].message.content
        assert rt.flush(10) and not rt.monitor.store.inner.ping_error
        parent_pid = os.getpid()

        def child() -> dict[str, Any]:
            reply = {"role": "assistant", "content": text}
            follow_up = [*history, reply, {"role": "user", "content": "go on"}]
            wrapped.completion(model="alpha", messages=follow_up)
            flushed = rt.flush(5)
            pool: Any = rt.monitor.store.inner._client.connection_pool
            return {
                "flushed": flushed,
                "last": [exp.results[-1].context.depth, exp.results[-1].context.prefix_model],
                "method": [a.method for a in exp.results[-1].context.attributions],
                "pool_pid_is_child": pool.pid == os.getpid() != parent_pid,
                "healthy": rt.monitor.store.healthy,
            }

        got = _in_child(child)
        assert got == {
            "flushed": True,
            "last": [2, "openai/gpt-b"],
            "method": ["chain"],
            "pool_pid_is_child": True,
            "healthy": True,
        }
        wrapped.completion(model="alpha", messages=[{"role": "user", "content": "parent after (redis)"}])
        assert rt.flush(10) and len(exp.results) == 2 and rt.monitor.store.healthy
    finally:
        rt.close()
        keys = list(raw.scan_iter(f"{prefix}*"))
        if keys:
            raw.delete(*keys)
        raw.close()
