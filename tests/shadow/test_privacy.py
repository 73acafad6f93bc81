"""Where a shadow call's content goes: to the target only, not to LiteLLM's logging callbacks."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon.integrations import wrap
from tests.shadow.test_target_faults import _router, _runtime, _second_turns


def test_litellms_logging_callbacks_never_see_a_shadow_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """An application logging its LiteLLM calls (Langfuse, S3, its own ``CustomLogger``) got every
    shadow call too — the history sent to the target and the target's reply, which the application
    never asked for — since a shadow call to a Router deployment is a ``litellm.completion``. Made
    with LiteLLM's ``no-log``, it reaches the target alone; the application's calls log as before."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    seen: list[tuple[bool, Any]] = []

    class Logger(CustomLogger):  # type: ignore[misc]
        def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
            seen.append((bool(metadata.get("handoffmon_shadow")), kwargs.get("messages")))

    logger = Logger()
    for name in ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
                 "_async_failure_callback", "input_callback", "service_callback"):  # fmt: skip
        monkeypatch.setattr(litellm, name, [])
    monkeypatch.setattr(litellm, "callbacks", [logger])
    router = _router({})
    with _runtime(True) as rt:
        _second_turns(wrap(router, runtime=rt), rt, 1, wait_shadow=True)
        assert rt.shadow.stats.calls == {("no_handoff", "ok"): 1}
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:  # LiteLLM logs on its own threads
        time.sleep(0.02)
    time.sleep(0.2)
    assert [shadow for shadow, _ in seen] == [False, False]
