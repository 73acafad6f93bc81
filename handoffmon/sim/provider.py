"""The fleet as a litellm custom provider: sync, async and streaming, with injected failures.

The provider keeps its own bookkeeping, separate from handoffmon's attribution: after
each reply it stores ``xxh3_128(history + reply) → (author, depth, intended verdicts)``, so
the next request of that conversation (whose history ends with that reply) finds who
wrote the previous turn and applies the planted π/σ. Randomness is derived from
``(seed, history, deployment, attempt)``, so a run is reproducible whatever order the
concurrent calls arrive in.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from handoffmon._extras import requires_extra

with requires_extra("demo", "the simulated fleet"):
    from litellm.exceptions import RateLimitError, Timeout
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import GenericStreamingChunk, ModelResponse

from handoffmon.sim.dynamics import Dynamics
from handoffmon.sim.fleet import Fleet
from handoffmon.sim.writer import ReplyWriter


@dataclass(frozen=True)
class TurnTruth:
    """What the simulator intended for one produced reply (ground truth for tests).

    Attributes:
        author: model that wrote the reply.
        prefix: author of the previous turn (None at depth 1 or when unknown to the sim).
        depth: 1-based depth.
        intent: rule name → whether the reply was written to comply.
        text: the reply.
        answer: the conversation's latest tagged answer after this reply (None if none yet).
        previous: the intent of the previous turn the simulator chained from (None at depth 1
            or when the history was not one it produced).
    """

    author: str
    prefix: str | None
    depth: int
    intent: Mapping[str, bool]
    text: str
    answer: str | None = None
    previous: Mapping[str, bool] | None = None


def history_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """Stable 128-bit digest of (role, content) pairs: the provider's own bookkeeping key."""
    h = xxhash.xxh3_128()
    for m in messages:
        h.update(str(m.get("role", "")).encode("utf-8"))
        h.update(b"\x1e")
        h.update(str(m.get("content") or "").encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()


def _seed_from(*parts: object) -> int:
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


class SimProvider(CustomLLM):  # type: ignore[misc]
    """Serves every model of a ``Fleet``; ``model`` (after the provider prefix) names it.

    Args:
        fleet: the planted world.
        seed: base seed of every random decision.
        latency_s: simulated service time per call (0 = as fast as possible).
        record: keep a ``TurnTruth`` per reply in ``self.truth`` (tests).
        max_tracked: bound on remembered histories (oldest forgotten first).
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        seed: int = 0,
        latency_s: float = 0.0,
        record: bool = False,
        max_tracked: int = 500_000,
    ) -> None:
        super().__init__()
        self.fleet = fleet
        self.seed = seed
        self.latency_s = latency_s
        self.record = record
        self.max_tracked = max_tracked
        self.dynamics = Dynamics(fleet)
        self.writer = ReplyWriter(fleet.rules)
        self.provider_name: str | None = None
        """Set by ``router.register_provider``: the litellm provider prefix of the deployments."""
        self.truth: list[TurnTruth] = []
        self.stats: Counter[str] = Counter()
        self._turns: OrderedDict[str, TurnTruth] = OrderedDict()
        self._attempts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    # -- bookkeeping -----------------------------------------------------------------
    def _remember(self, store: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        store[key] = value
        store.move_to_end(key)
        while len(store) > self.max_tracked:
            store.popitem(last=False)

    def previous(self, messages: Sequence[Mapping[str, Any]]) -> tuple[int, TurnTruth | None]:
        """(depth of the reply to write, the sim's record of the previous assistant turn)."""
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        depth = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        if last < 0:
            return depth, None
        with self._lock:
            return depth, self._turns.get(history_key(messages[: last + 1]))

    def _attempt(self, key: str, model: str) -> int:
        with self._lock:
            n = self._attempts.get((key, model), 0)
            self._remember(self._attempts, (key, model), n + 1)
            return n

    # -- the model -------------------------------------------------------------------
    def _inject_failure(self, key: str, model: str) -> None:
        spec = self.fleet.model(model)
        attempt = self._attempt(key, model)
        u = np.random.default_rng(_seed_from(self.seed, "fail", key, model, attempt)).random()
        if u < spec.rate_limit_rate:
            self._count(f"rate_limit:{model}")
            raise RateLimitError(
                message=f"simulated rate limit on {model}", llm_provider="handoffsim", model=model
            )
        if u < spec.rate_limit_rate + spec.timeout_rate:
            self._count(f"timeout:{model}")
            raise Timeout(message=f"simulated timeout on {model}", model=model, llm_provider="handoffsim")

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def reply(self, model: str, messages: Sequence[Mapping[str, Any]]) -> str:
        """Write the reply of ``model`` to ``messages`` (or raise an injected failure)."""
        key = history_key(messages)
        self._inject_failure(key, model)
        depth, prev = self.previous(messages)
        prefix = prev.author if prev is not None else None
        rng = np.random.default_rng(_seed_from(self.seed, "turn", key, model))
        intent = self.dynamics.draw(model, prefix, depth, prev.intent if prev else None, rng)
        text, answer = self.writer.compose(intent, rng, prev.answer if prev else None)
        turn = TurnTruth(
            author=model,
            prefix=prefix,
            depth=depth,
            intent=intent,
            text=text,
            answer=answer,
            previous=prev.intent if prev else None,
        )
        reply_key = history_key([*messages, {"role": "assistant", "content": text}])
        with self._lock:
            self._remember(self._turns, reply_key, turn)
            self.stats[f"reply:{model}"] += 1
            if self.record:
                self.truth.append(turn)
        return text

    @staticmethod
    def _model_name(model: str) -> str:
        return model.split("/", 1)[-1]

    def _response(self, model: str, messages: list[Any], text: str) -> ModelResponse:
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        return ModelResponse(
            model=model,
            choices=[
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            usage={
                "prompt_tokens": prompt_chars // 4 + 1,
                "completion_tokens": len(text) // 4 + 1,
                "total_tokens": prompt_chars // 4 + len(text) // 4 + 2,
            },
        )

    # -- litellm CustomLLM surface ---------------------------------------------------
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        """Sync completion."""
        name = self._model_name(model)
        if self.latency_s:
            time.sleep(self.latency_s)
        return self._response(name, messages, self.reply(name, messages))

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        """Async completion."""
        name = self._model_name(model)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._response(name, messages, self.reply(name, messages))

    def streaming(
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Iterator[GenericStreamingChunk]:
        """Sync stream: the reply in word-group chunks (failures raise before the first chunk)."""
        name = self._model_name(model)
        if self.latency_s:
            time.sleep(self.latency_s)
        text = self.reply(name, messages)
        yield from _chunks(text)

    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        """Async stream."""
        name = self._model_name(model)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.reply(name, messages)
        for chunk in _chunks(text):
            yield chunk


def _chunks(text: str, words_per_chunk: int = 6) -> Iterator[GenericStreamingChunk]:
    words = text.split(" ")
    pieces = [" ".join(words[i : i + words_per_chunk]) for i in range(0, len(words), words_per_chunk)]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        yield GenericStreamingChunk(
            text=piece if i == 0 else " " + piece,
            is_finished=last,
            finish_reason="stop" if last else "",
            usage=None,
            index=0,
            tool_use=None,
        )
