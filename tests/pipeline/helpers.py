"""Test helpers for the pipeline: conversations, failing stores, exporters and checkers."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from handoffmon.checkers import RuleSet, default_registry
from handoffmon.config import HandoffmonConfig, RuleConfig, config_from_mapping
from handoffmon.ingress import Outcome, Request, RequestParser
from handoffmon.pipeline.monitor import Monitor
from handoffmon.protocols import Authorship
from handoffmon.runtime import Runtime, build_runtime
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import RecordingExporter
from handoffmon.types import TurnResult

SHORT_RULE = {"name": "short", "check": "length", "params": {"unit": "words", "max": 5}}

AUTHORS_4_7 = ["a"] * 3 + ["b"] * 3 + ["a"] * 4
"""A 10-turn conversation whose model changes at turns 4 and 7."""


def make_config(**sections: Any) -> HandoffmonConfig:
    """A config with the ``short`` rule (≤ 5 words) unless ``rules`` is given.

    The check budget is generous (10 s) unless given: these tests count verdicts, and a
    loaded CI machine must not turn a slow ``length`` check into an ``error`` verdict.
    """
    data: dict[str, Any] = {"rules": [SHORT_RULE]}
    data.update(sections)
    data["pipeline"] = {"check_budget_s": 10.0, **sections.get("pipeline", {})}
    return config_from_mapping(data)


def monitor(config: HandoffmonConfig | None = None, **kwargs: Any) -> Monitor:
    """A monitor on a fresh memory store."""
    kwargs.setdefault("store", MemoryStore())
    return Monitor(config if config is not None else make_config(), **kwargs)


def runtime(config: HandoffmonConfig | None = None, **kwargs: Any) -> Runtime:
    """A started runtime on a fresh memory store whose series stay private (``registry=None``)."""
    kwargs.setdefault("store", MemoryStore())
    kwargs.setdefault("registry", None)
    return build_runtime(config if config is not None else make_config(), **kwargs)


def request(m: Monitor, messages: Sequence[Any], **kwargs: Any) -> Request:
    """``messages`` parsed as the adapters do (``RequestParser`` built from the monitor's config)."""
    kwargs.setdefault("model", "group")
    model = kwargs.pop("model")
    return RequestParser.from_config(m.config).parse(messages, model, **kwargs)


def turn(m: Monitor, messages: Sequence[Any], reply: Any, author: str | None, **kwargs: Any) -> None:
    """One turn through the request-path protocol: ``capture`` then ``finish``."""
    cap = m.capture(request(m, messages, **kwargs))
    m.finish(cap, reply, Outcome(authors=(author,) if author else ()))


def run_conversation(
    m: Monitor,
    authors: Sequence[str],
    replies: Sequence[str] | None = None,
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = None,
    user: str = "hello",
) -> None:
    """Drive one conversation through ``capture``/``finish`` (read results from an exporter)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for i, author in enumerate(authors):
        reply = replies[i] if replies is not None else f"reply {i} from {author}"
        meta = metadata[i] if metadata is not None else None
        turn(m, history, {"role": "assistant", "content": reply}, author, metadata=meta)
        history = [*history, {"role": "assistant", "content": reply}]
        history.append({"role": "user", "content": f"next {i}"})


class HangingExporter(RecordingExporter):
    """Blocks in ``export`` until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def export(self, result: TurnResult) -> bool:
        self.entered.set()
        self.release.wait(30)
        return super().export(result)


class RaisingExporter(RecordingExporter):
    """Raises on every export."""

    def export(self, result: TurnResult) -> bool:
        raise RuntimeError("exporter bug")


class FailingExporter(RecordingExporter):
    """Returns False on every export."""

    def export(self, result: TurnResult) -> bool:
        return False


def raising_rules() -> RuleSet:
    """One rule, ``boom``, whose checker raises on every reply."""
    reg = default_registry()

    def factory(p: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            raise RuntimeError("checker bug")

        return check

    reg.register("boom", factory)
    return RuleSet.from_config([RuleConfig(name="boom", check="boom")], registry=reg)


class BrokenStore(MemoryStore):
    """A memory store whose selected operations raise."""

    def __init__(self, *, fail: Sequence[str]) -> None:
        super().__init__()
        self.fail = set(fail)

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        if "get_many" in self.fail:
            raise ConnectionError("store down")
        return super().get_many(keys)

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        if "put_many" in self.fail:
            raise ConnectionError("store down")
        super().put_many(items)

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        if "get_state" in self.fail:
            raise ConnectionError("store down")
        return super().get_state(conversation_id)

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        if "put_state" in self.fail:
            raise ConnectionError("store down")
        super().put_state(conversation_id, state)
