"""``ShadowRunner``: shadow continuation behind the check stage, on its own bounded pool of threads.

A check worker hands every checked turn that carries an integration's offer to ``offer``
(cheap: the policy's sampling, budget and breaker); a picked turn waits in a bounded
queue for one of ``max_concurrency`` threads, which makes the call through the
integration, checks the reply with the same rules and context as the served reply and
records the pair. Nothing here touches the application's request: failures are counted
and otherwise ignored, the shadow reply is never returned, attributed or stored.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from handoffmon.config import ShadowConfig
from handoffmon.counts import ShadowKey
from handoffmon.labels import LabelGuard
from handoffmon.pipeline.worker import WorkerPool
from handoffmon.shadow import Breaker, Budget, Decision, ShadowPolicy, Skip
from handoffmon.shadow.policy import SKIP_REASONS
from handoffmon.shadow.recorder import PairRecorder
from handoffmon.shadow.stats import ShadowStats
from handoffmon.shadow.turns import (
    NoRoute,
    ShadowReply,
    ShadowTurn,
    failure_kind,
    pair_verdicts,
    params_bytes,
    prompt_bytes,
)

_log = logging.getLogger("handoffmon.shadow")

CALL_OUTCOMES: tuple[str, ...] = (
    "ok",
    "rate_limited",
    "server_error",
    "timeout",
    "misconfigured",
    "error",
    "wrong_author",
    "dry_run",
)
"""``handoffmon_shadow_calls_total{outcome}``: the call's result (``dry_run``: decided, not made)."""


DEADLINE_SLACK_S = 1.0
"""How long past ``shadow.timeout_s`` a shadow thread waits for a call before leaving it."""


class ShadowDeadline(TimeoutError):
    """A shadow call still running ``timeout_s`` + ``DEADLINE_SLACK_S`` after it started (counted
    ``timeout``; the call is left to end by itself, its result dropped)."""


class ShadowRunner:
    """Decides, calls, checks and records shadow continuations for one runtime.

    Args:
        config: the ``shadow`` section (``enabled``).
        on_error: counts one of handoffmon's own failures (``monitor_errors{stage="shadow"}``).
        policy: the decision policy (default: built from ``config`` with its budget and breaker).
        start: start the threads now.
        guard: caps the model and rule names of the pairs (the monitor's guard, so kept and
            exported names agree; capped before the cluster sums, so they stay exact per label).
        sink: receives each pair's ``Counts.shadow`` increments (``Monitor.count_shadow``:
            aggregates, SQLite, Prometheus, OTel).
    """

    def __init__(
        self,
        config: ShadowConfig,
        *,
        on_error: Callable[[], object] = lambda: None,
        policy: ShadowPolicy | None = None,
        start: bool = True,
        guard: LabelGuard | None = None,
        sink: Callable[[Mapping[ShadowKey, int]], object] = lambda increments: None,
    ) -> None:
        self.config = config
        self._guard = guard if guard is not None else LabelGuard()
        self._sink = sink
        self.policy = policy or ShadowPolicy(
            config, Budget(config), Breaker(config.breaker_failures, config.breaker_cooldown_s)
        )
        self.recorder = PairRecorder()
        self.on_pair: Callable[[ShadowTurn, Decision, Mapping[str, tuple[bool, bool]]], object] | None = None
        """Called after each recorded pair (the demo computes the planted switch cost from it)."""
        self._on_error = on_error
        self._lock = threading.Lock()
        self._calls: Counter[tuple[str, str]] = Counter()
        self._skipped: Counter[str] = Counter()
        self._checks: Counter[tuple[str, str]] = Counter()
        self._pairs: Counter[str] = Counter()
        self._tokens = 0.0
        self._usd = 0.0
        self._deadlines = threading.BoundedSemaphore(config.max_concurrency)
        """Shadow calls running (on time or past their deadline): at most ``max_concurrency``."""
        self._closing = False
        self._close_by = math.inf
        """``time.monotonic()`` deadline of ``close``: a queued call not started by then is not made."""
        self._pool: WorkerPool[tuple[ShadowTurn, Decision]] = WorkerPool(
            self._run,
            workers=config.max_concurrency,
            queue_size=config.queue_size,
            on_error=self._failed,
            name="handoffmon-shadow",
            start=start,
        )

    def after_fork(self) -> int:
        """In a forked child: the shadow threads started again, the parent's queued calls
        forgotten (the parent makes them); how many were. The parent's calls in flight hold no
        slot here: their threads do not exist in the child."""
        self._deadlines = threading.BoundedSemaphore(self.config.max_concurrency)
        return self._pool.after_fork()

    # -- on a check worker ----------------------------------------------------------------

    def offer(self, turn: ShadowTurn) -> None:
        """Decide for one checked turn and queue its shadow call. Never raises, never blocks."""
        try:
            self._offer(turn)
        except Exception as exc:
            self._failed(exc)

    def _offer(self, turn: ShadowTurn) -> None:
        source, messages, unsent = turn.offer
        decision = self.policy.decide(
            turn.prefix_model,
            turn.author,
            lambda: prompt_bytes(messages) + params_bytes(source),
            len(messages),
            candidates=source.candidates,
            prices=source.prices,
            unsent=unsent,
            key=f"{turn.conversation_id}\x00{len(messages)}",
            routable=getattr(source, "routable", None),
            conversation=turn.conversation_id,
        )
        if isinstance(decision, Skip):
            self._count(self._skipped, decision.reason)
            return
        if self.config.dry_run:
            self.policy.breaker.release(decision.target)
            r = decision.reservation
            self._spent(r.tokens if r else 0.0, r.usd if r else 0.0)
            self._count(self._calls, (decision.arm, "dry_run"))
            return
        if not self._pool.submit((turn, decision), turn.conversation_id):
            self._give_back(decision)
            self._count(self._skipped, "shutdown" if self._closing else "busy")

    def _give_back(self, decision: Decision) -> None:
        """Undo a decision that made no call: its call, tokens and money, and the breaker's probe."""
        self.policy.breaker.release(decision.target)
        if decision.reservation is not None:
            self.policy.budget.cancel(decision.reservation)

    # -- on a shadow thread ---------------------------------------------------------------

    def _run(self, job: tuple[ShadowTurn, Decision]) -> None:
        turn, d = job
        if time.monotonic() >= self._close_by:  # close's time is up: no call starts after it
            self._give_back(d)
            self._count(self._skipped, "shutdown")
            return
        breaker, budget = self.policy.breaker, self.policy.budget
        if not self._deadlines.acquire(blocking=False):  # every overdue slot holds a call: none starts
            self._give_back(d)
            self._count(self._skipped, "busy")
            return
        try:
            reply = self._call_by_deadline(turn, d)
        except NoRoute as exc:  # nothing was sent: the routes changed since the decision, or busy
            self._give_back(d)
            reason = getattr(exc, "reason", "no_route")
            self._count(self._skipped, reason if reason in SKIP_REASONS else "no_route")
            return
        except Exception as exc:
            kind = failure_kind(exc)
            breaker.record(d.target, ok=kind == "error")
            self._count(self._calls, (d.arm, kind))
            r = d.reservation  # sent, use unknown: what the budget keeps holding, its upper bound
            self._spent(r.tokens if r else 0.0, r.usd if r else 0.0)
            _log.debug("handoffmon shadow call to %s failed: %s", d.target, kind)
            return
        breaker.record(d.target, ok=True)
        if d.reservation is not None:
            budget.settle(d.reservation, reply.tokens, reply.usd)
        r = d.reservation
        self._spent(
            reply.tokens if reply.tokens is not None else (r.tokens if r else 0.0),
            reply.usd if reply.usd is not None else (r.usd if r else 0.0),
        )
        if reply.author is not None and reply.author != d.target:
            self._count(self._calls, (d.arm, "wrong_author"))  # another model answered: no pair
            return
        self._count(self._calls, (d.arm, "ok"))
        shadow = turn.evaluate(reply.text)
        with self._lock:
            for check in shadow:
                self._checks[(d.arm, check.verdict)] += 1
        verdicts = pair_verdicts(d.arm, turn.served, shadow)
        g = self._guard
        capped = {g.rule(rule): v for rule, v in verdicts.items()}
        prefix, model = g.model(d.prefix_model), g.model(d.model)
        increments = self.recorder.add(turn.conversation_id, prefix, model, d.arm == "handoff", capped)
        if increments:
            self._sink(increments)
            self._count(self._pairs, d.arm)
            if self.on_pair is not None:
                self.on_pair(turn, d, verdicts)

    def _call_by_deadline(self, turn: ShadowTurn, d: Decision) -> ShadowReply:
        """The source's call, on a thread of its own, waited for ``timeout_s`` + ``DEADLINE_SLACK_S``
        at most; past that it raises ``ShadowDeadline`` (a ``timeout``, tripping the breaker) and
        the call is left to end by itself, its result dropped. Holds one of the runner's
        ``max_concurrency`` deadline slots (acquired by the caller) until the call ends, so calls
        left running never outnumber the shadow threads.

        The sources pass ``timeout_s`` to their clients, but an HTTP client's timeout bounds each
        read, not the call: a target trickling its reply a byte every 0.3 s held a call with
        ``timeout_s`` 1 for 76 s (``litellm.completion``), and a shadow thread with it."""
        c = self.config
        box: list[Any] = []
        done = threading.Event()

        def call() -> None:
            try:
                box.append(
                    turn.offer.source.call(
                        d.target, turn.offer.messages, max_tokens=c.max_output_tokens, timeout_s=c.timeout_s
                    )
                )
            except BaseException as exc:
                box.append(exc)
            finally:
                done.set()
                self._deadlines.release()

        try:
            threading.Thread(target=call, name="handoffmon-shadow-call", daemon=True).start()
        except BaseException:
            self._deadlines.release()
            raise
        if not done.wait(c.timeout_s + DEADLINE_SLACK_S):
            raise ShadowDeadline(f"no answer within {c.timeout_s + DEADLINE_SLACK_S:g} s")
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]

    # -- accounting -----------------------------------------------------------------------

    def _count(self, counter: Counter[str] | Counter[tuple[str, str]], key: object) -> None:
        with self._lock:
            counter[key] += 1  # type: ignore[index]

    def _spent(self, tokens: float, usd: float) -> None:
        with self._lock:
            self._tokens += tokens
            self._usd += usd

    def _failed(self, exc: BaseException) -> None:
        _log.warning("handoffmon shadow continuation failed", exc_info=exc)
        try:
            self._on_error()
        except Exception:  # pragma: no cover - error accounting itself failed
            _log.exception("handoffmon error handler failed")

    @property
    def stats(self) -> ShadowStats:
        """The counters now."""
        used, limits = self.policy.budget.usage()
        breaker = {t: int(self.policy.breaker.is_open(t)) for t in self.config.targets}
        with self._lock:
            return ShadowStats(
                dict(self._calls), dict(self._skipped), dict(self._checks), dict(self._pairs),
                self._tokens, self._usd, used, limits, breaker, self._pool.pending(),
            )  # fmt: skip

    # -- life -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the shadow threads (idempotent)."""
        self._pool.start()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until queued shadow calls finished; False on timeout."""
        return self._pool.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop taking turns and finish the queued calls within ``timeout_s``; False on timeout.

        A queued call not started within ``timeout_s`` is never made (the threads, which outlive
        a timed-out close, skip it): its reservation is given back and it is counted as skipped
        ``shutdown``, as is a turn offered after ``close``. A shadow thread waits for a call in
        flight ``shadow.timeout_s`` + ``DEADLINE_SLACK_S`` at most (the call itself may run on,
        left behind)."""
        self._closing = True
        if timeout_s is not None:
            self._close_by = time.monotonic() + max(0.0, timeout_s)
        return self._pool.close(timeout_s)
