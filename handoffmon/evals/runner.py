"""``eval run``: replay scripts N times against a model, concurrently, with retries and resumability."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from handoffmon._extras import requires_extra
from handoffmon.checkers.base import CheckContext
from handoffmon.checkers.rules import RuleSet
from handoffmon.config import RuleConfig
from handoffmon.errors import InputError
from handoffmon.evals.models import Messages, MissingCredentialsError, Reply, Responder, credentials_error
from handoffmon.evals.script import DriftScript
from handoffmon.evals.store import ResultStore, Row, StoredTurn

_R = TypeVar("_R")


@dataclass(frozen=True)
class RunSettings:
    """How ``run_eval`` replays scripts.

    Attributes:
        runs: replays per script (None = each script's own ``runs``).
        concurrency: conversations in flight at once.
        retries: extra attempts per model call before the run is given up (resumable).
        backoff_s: first retry delay; doubles per attempt.
        seed: base seed; run r of script s is called with a seed derived from (seed, s, r).
        check_budget_s: per-rule time budget (generous offline: langdetect on long replies).
        progress: show a tqdm bar on stderr.
        target: what answers, beyond the seed (``deployment``: a hash of the router
            deployment; ``names``: a hash of the canonical-name map). With ``seed`` it is the
            run's fingerprint (see ``fingerprint``): stored turns are resumed only under the
            same fingerprint.
        discard_stale: delete the stored turns of runs whose fingerprint differs and generate
            them again (instead of refusing with ``StaleRunsError``).
    """

    runs: int | None = None
    concurrency: int = 8
    retries: int = 3
    backoff_s: float = 0.5
    seed: int = 0
    check_budget_s: float = 1.0
    progress: bool = False
    target: Mapping[str, str] = field(default_factory=dict)
    discard_stale: bool = False

    def fingerprint(self) -> dict[str, Any]:
        """What the stored turns of a run depend on besides the script: seed, deployment, names."""
        return {"seed": self.seed, **self.target}


class StaleRunsError(InputError):
    """Stored turns were produced under another fingerprint (seed, deployment or name map)."""


@dataclass
class RunSummary:
    """What one ``run_eval`` call did."""

    jobs: int = 0
    turns_generated: int = 0
    turns_resumed: int = 0
    model_calls: int = 0
    retries: int = 0
    discarded: int = 0
    """Runs whose stored turns were deleted because their fingerprint differed (``discard_stale``)."""
    rechecked: int = 0
    """Verdicts added to stored replies for rules the script gained since they were stored."""
    failed: list[tuple[str, int, str]] = field(default_factory=list)
    refused: MissingCredentialsError | None = None
    """The first call a provider refused for credentials; no call is made after it."""


def run_seed(base: int, script: str, run: int) -> int:
    """Stable per-run seed (31 bits) from the base seed, the script id and the run index."""
    digest = hashlib.sha256(f"{base}\x1f{script}\x1f{run}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def history_tokens(messages: Messages) -> int:
    """Approximate tokens of a history, as the monitor counts them (characters / 4, rounded up)."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return (chars + 3) // 4


async def call_with_retries(
    responder: Responder,
    model: str,
    messages: Messages,
    seed: int,
    settings: RunSettings,
    summary: RunSummary,
) -> Reply:
    """One model call, retried ``settings.retries`` times with exponential back-off.

    Raises:
        MissingCredentialsError: at once, not retried, when the provider lacks or refuses
            credentials (``credentials_error``): every call would fail the same way. Kept in
            ``summary.refused``: a call waiting for its turn raises it without calling.
    """
    delay = settings.backoff_s
    for attempt in range(settings.retries + 1):
        if summary.refused is not None:
            raise summary.refused
        summary.model_calls += 1
        try:
            return await responder(model, messages, seed=seed)
        except Exception as exc:  # any other provider error is retried; the last one propagates
            refused = credentials_error(exc, model)
            if refused is not None:
                summary.refused = summary.refused or refused
                raise refused from exc
            if attempt == settings.retries:
                raise
            summary.retries += 1
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


async def gather_or_stop(aws: Sequence[Awaitable[_R]]) -> list[_R]:
    """``asyncio.gather`` that cancels the other awaitables at the first exception (and waits
    for them to end) before raising it: a configuration error stops every call in flight."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def evaluate_turn(
    checker: RuleSet,
    script: DriftScript,
    depth: int,
    reply: str,
    previous: dict[str, str],
    rules: Sequence[RuleConfig] | None = None,
) -> tuple[Any, ...]:
    """Run ``rules`` (default: all active at ``depth``) on ``reply`` (never raises); updates ``previous``."""
    turn = script.turns[depth - 1]
    ctx = CheckContext(user_message=turn.user, previous=dict(previous), depth=depth)
    results = checker.evaluate(reply, ctx, script.rules_at(depth) if rules is None else rules)
    previous.update({r.rule: r.extracted for r in results if r.extracted is not None})
    return results


def _rows(
    script: DriftScript, model: str, run: int, depth: int, author: str, tokens: int, results: Sequence[Any]
) -> list[Row]:
    """The stored rows of one turn's check results."""
    asserted = set(script.asserted_at(depth))
    derail = script.turns[depth - 1].derail
    return [
        Row(script.id, model, run, depth, r.rule, r.verdict, r.reason, r.extracted,
            r.rule in asserted, derail, author, tokens)
        for r in results
    ]  # fmt: skip


def base_messages(script: DriftScript) -> list[dict[str, str]]:
    """The system message of a script, if any."""
    return [{"role": "system", "content": script.system}] if script.system else []


class Runner:
    """Replays scripts against one target model and stores rows in a ``ResultStore``.

    Args:
        responder: the model client.
        store: the results database (rows already there are skipped).
        settings: see ``RunSettings``.
        rules: a ``RuleSet`` (default: built-in checkers, no configured rules).
    """

    def __init__(
        self,
        responder: Responder,
        store: ResultStore,
        settings: RunSettings | None = None,
        *,
        rules: RuleSet | None = None,
    ) -> None:
        self.responder = responder
        self.store = store
        self.settings = settings or RunSettings()
        self.rules = rules or RuleSet(budget_s=self.settings.check_budget_s)
        self.summary = RunSummary()

    async def call(self, model: str, messages: Messages, seed: int) -> Reply:
        """One model call with retries (see ``call_with_retries``)."""
        return await call_with_retries(self.responder, model, messages, seed, self.settings, self.summary)

    async def replay(self, script: DriftScript, model: str, run: int, tick: Callable[[int], None]) -> None:
        """Replay one run, continuing after the turns already stored."""
        stored = self.store.stored_turns(script.id, model, run)
        for t in stored:
            if t.turn > script.length or t.user != script.turns[t.turn - 1].user:
                raise ValueError(
                    f"turn {t.turn} stored in the database differs from the script now; "
                    "use a new --db or a new script id"
                )
        self.recheck(script, model, run, stored)
        messages = base_messages(script)
        for t in stored:
            messages += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.reply}]
        previous = self.store.last_extracted(script.id, model, run, len(stored)) if stored else {}
        self.summary.turns_resumed += len(stored)
        tick(len(stored))
        seed = run_seed(self.settings.seed, script.id, run)
        for depth in range(len(stored) + 1, script.length + 1):
            turn = script.turns[depth - 1]
            messages.append({"role": "user", "content": turn.user})
            tokens = history_tokens(messages)
            reply = await self.call(model, messages, seed)
            messages.append({"role": "assistant", "content": reply.text})
            results = evaluate_turn(self.rules, script, depth, reply.text, previous)
            rows = _rows(script, model, run, depth, reply.author, tokens, results)
            self.store.add_turn(
                StoredTurn(depth, turn.user, reply.text, reply.author, tokens),
                script.id,
                model,
                run,
                tokens,
                rows,
            )
            self.summary.turns_generated += 1
            tick(1)

    def recheck(self, script: DriftScript, model: str, run: int, stored: Sequence[StoredTurn]) -> None:
        """Check stored replies for the rules active now that have no stored verdict there.

        A rule added to the script after the turns were stored would otherwise be missing
        from the resumed runs. Stateful checkers get the values extracted at earlier turns,
        as in a live run. A verdict already stored is kept (rules are keyed by name).
        """
        have = self.store.verdicts(script.id, model, run)
        previous: dict[str, str] = {}
        for t in stored:
            known = have.get(t.turn, {})
            missing = tuple(r for r in script.rules_at(t.turn) if r.name not in known)
            if missing:
                results = evaluate_turn(self.rules, script, t.turn, t.reply, previous, missing)
                rows = _rows(script, model, run, t.turn, t.author, t.history_tokens, results)
                self.store.add_rows(rows)
                self.summary.rechecked += len(rows)
            previous.update({r: e for r, e in known.items() if e is not None})

    def check_fingerprints(self, jobs: Sequence[tuple[DriftScript, int]], model: str) -> None:
        """Refuse (or, with ``discard_stale``, delete) stored runs made under another fingerprint.

        Stored turns recorded without a fingerprint (an older database) count as different:
        nothing says which seed or deployment wrote them. Then record the fingerprint of every job.

        Raises:
            StaleRunsError: some stored runs differ and ``discard_stale`` is off (nothing is changed).
        """
        want = self.settings.fingerprint()
        started = self.store.runs_with_turns(model)
        recorded = self.store.fingerprints(model)
        stale: list[tuple[DriftScript, int, dict[str, Any] | None]] = []
        for script, run in jobs:
            key = (script.id, run)
            if key in started and recorded.get(key) != want:
                stale.append((script, run, recorded.get(key)))
        if stale and not self.settings.discard_stale:
            shown = [(f"{s.id}#{r}", have) for s, r, have in stale]
            raise StaleRunsError(stale_message(self.store.path, f"stored run(s) of {model}", want, shown))
        for script, run, _ in stale:
            self.store.discard_run(script.id, model, run)
            self.summary.discarded += 1
        self.store.set_fingerprints(model, [(s.id, r) for s, r in jobs], want)

    async def run(self, scripts: Sequence[DriftScript], model: str) -> RunSummary:
        """Replay every run of every script against ``model``; failures are recorded, not raised.

        Raises:
            StaleRunsError: see ``check_fingerprints`` (raised before any model call).
            MissingCredentialsError: the provider lacks or refuses credentials; the calls in
                flight are cancelled (turns stored so far stay stored).
        """
        jobs = [(s, r) for s in scripts for r in range(self.settings.runs or s.runs)]
        self.check_fingerprints(jobs, model)
        self.summary.jobs += len(jobs)
        todo = sum(s.length for s, _ in jobs)
        sem = asyncio.Semaphore(max(1, self.settings.concurrency))
        bar = _progress(todo, self.settings.progress, model)

        async def one(script: DriftScript, run: int) -> None:
            async with sem:
                try:
                    await self.replay(script, model, run, bar.update)
                except MissingCredentialsError:  # no rerun repairs it: every run stops
                    raise
                except Exception as exc:  # a failed run stays resumable; the others go on
                    self.summary.failed.append((script.id, run, f"{type(exc).__name__}: {exc}"[:300]))

        try:
            await gather_or_stop([one(s, r) for s, r in jobs])
        finally:
            bar.close()
        return self.summary


def fingerprint_change(have: Mapping[str, Any] | None, want: Mapping[str, Any], stored: str) -> str:
    """What differs between a stored fingerprint and the current one ("seed 0 -> 7; names …")."""
    if have is None:
        return f"they were {stored} without a fingerprint (an older handoffmon)"
    return "; ".join(
        f"{k} {have.get(k)!r} -> {want.get(k)!r}"
        for k in sorted(set(have) | set(want))
        if have.get(k) != want.get(k)
    )


def stale_message(
    where: str,
    what: str,
    want: Mapping[str, Any],
    stale: Sequence[tuple[str, Mapping[str, Any] | None]],
    *,
    shown: int = 8,
    stored: str = "stored",
    reuse: str = "resuming",
    new: str = "--db",
    delete: str = "those runs' stored turns",
) -> str:
    """Why stale runs or cache entries are refused: ``stale`` is (label, stored fingerprint) per entry."""
    labels = ", ".join(label for label, _ in stale[:shown])
    labels += f" (+{len(stale) - shown})" if len(stale) > shown else ""
    change = fingerprint_change(stale[0][1], want, stored)
    return (
        f"{where}: {len(stale)} {what} were made with other settings ({labels}: {change}); "
        f"{reuse} would mix their turns with new ones. Use a new {new}, or pass --discard-stale to "
        f"delete {delete} and generate them again"
    )


class _NoBar:
    def update(self, n: int) -> None:
        return None

    def close(self) -> None:
        return None


def _progress(total: int, enabled: bool, label: str) -> Any:
    if not enabled:
        return _NoBar()
    with requires_extra("evals", "the eval progress bar"):
        from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="turn", dynamic_ncols=True)
