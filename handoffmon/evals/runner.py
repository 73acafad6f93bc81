"""``eval run``: replay scripts N times against a model, concurrently, with retries and resumability."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from handoffmon._extras import requires_extra
from handoffmon.checkers.base import CheckContext
from handoffmon.checkers.rules import RuleSet
from handoffmon.errors import InputError
from handoffmon.evals.models import Messages, Reply, Responder
from handoffmon.evals.script import DriftScript
from handoffmon.evals.store import ResultStore, Row, StoredTurn


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
    rechecked: int = 0
    """Verdicts added to stored replies for rules the script gained since they were stored."""
    """Runs whose stored turns were deleted because their fingerprint differed (``discard_stale``)."""
    failed: list[tuple[str, int, str]] = field(default_factory=list)


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
    """One model call, retried ``settings.retries`` times with exponential back-off."""
    delay = settings.backoff_s
    for attempt in range(settings.retries + 1):
        summary.model_calls += 1
        try:
            return await responder(model, messages, seed=seed)
        except Exception:  # any provider error is retried; the last one propagates
            if attempt == settings.retries:
                raise
            summary.retries += 1
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def evaluate_turn(
    rules: RuleSet, script: DriftScript, depth: int, reply: str, previous: dict[str, str]
) -> tuple[Any, ...]:
    """Run every rule active at ``depth`` on ``reply`` (never raises); updates ``previous``."""
    turn = script.turns[depth - 1]
    ctx = CheckContext(user_message=turn.user, previous=dict(previous), depth=depth)
    results = rules.evaluate(reply, ctx, script.rules_at(depth))
    previous.update({r.rule: r.extracted for r in results if r.extracted is not None})
    return results


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
            asserted = set(script.asserted_at(depth))
            rows = [
                Row(
                    script.id,
                    model,
                    run,
                    depth,
                    r.rule,
                    r.verdict,
                    r.reason,
                    r.extracted,
                    r.rule in asserted,
                    turn.derail,
                    reply.author,
                    tokens,
                )
                for r in results
            ]
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
                ctx = CheckContext(user_message=t.user, previous=dict(previous), depth=t.turn)
                results = self.rules.evaluate(t.reply, ctx, missing)
                asserted = set(script.asserted_at(t.turn))
                derail = script.turns[t.turn - 1].derail
                rows = [
                    Row(script.id, model, run, t.turn, r.rule, r.verdict, r.reason, r.extracted,
                        r.rule in asserted, derail, t.author, t.history_tokens)
                    for r in results
                ]  # fmt: skip
                self.store.add_rows(rows)
                self.summary.rechecked += len(rows)
                previous.update({r.rule: r.extracted for r in results if r.extracted is not None})
            previous.update({r: e for r, e in known.items() if e is not None})

    def check_fingerprints(self, jobs: Sequence[tuple[DriftScript, int]], model: str) -> None:
        """Refuse (or, with ``discard_stale``, delete) stored runs made under another fingerprint.

        Stored turns recorded without a fingerprint (an older database) count as different:
        nothing says which seed or deployment wrote them. Then record the fingerprint of every job.

        Raises:
            StaleRunsError: some stored runs differ and ``discard_stale`` is off (nothing is changed).
        """
        want = self.settings.fingerprint()
        stale: list[tuple[DriftScript, int, dict[str, Any] | None]] = []
        for script, run in jobs:
            if not self.store.stored_turns(script.id, model, run):
                continue
            have = self.store.fingerprint(script.id, model, run)
            if have != want:
                stale.append((script, run, have))
        if stale and not self.settings.discard_stale:
            raise StaleRunsError(_stale_message(self.store.path, model, want, stale))
        for script, run, _ in stale:
            self.store.discard_run(script.id, model, run)
            self.summary.discarded += 1
        for script, run in jobs:
            self.store.set_fingerprint(script.id, model, run, want)

    async def run(self, scripts: Sequence[DriftScript], model: str) -> RunSummary:
        """Replay every run of every script against ``model``; failures are recorded, not raised.

        Raises:
            StaleRunsError: see ``check_fingerprints`` (raised before any model call).
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
                except Exception as exc:  # a failed run stays resumable; the others go on
                    self.summary.failed.append((script.id, run, f"{type(exc).__name__}: {exc}"[:300]))

        try:
            await asyncio.gather(*(one(s, r) for s, r in jobs))
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


def _stale_message(
    db: str,
    model: str,
    want: Mapping[str, Any],
    stale: Sequence[tuple[DriftScript, int, dict[str, Any] | None]],
) -> str:
    runs = ", ".join(f"{s.id}#{r}" for s, r, _ in stale[:8]) + (
        f" (+{len(stale) - 8})" if len(stale) > 8 else ""
    )
    what = fingerprint_change(stale[0][2], want, "stored")
    return (
        f"{db}: {len(stale)} stored run(s) of {model} were made with other settings ({runs}: {what}); "
        "resuming would mix their turns with new ones. Use a new --db, or pass --discard-stale to "
        "delete those runs' stored turns and generate them again"
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
