"""``eval switch-matrix``: prefix turns by A, the rest by B, for all K×K cells, with a prefix cache.

Protocol (``switch-matrix-handoff-drift.txt``): an episode is one run of one script
(task). In cell (A→B) model A writes assistant turns 1…T and model B writes T+1…L; the
default is the final-turn switch T = L−1. The episode score is the score of the final
reply: ``all`` (1 when every rule asserted there passes: Multi-IF's conversation-level
strict success) or ``mean`` (share of asserted rules that pass). A's prefix of an
episode does not depend on B, so it is generated once, cached on disk keyed by
(task, episode, prefix model) and reused for every suffix model; suffix results are
cached too, so an interrupted matrix resumes. Every cache entry records the fingerprint
it was made under (seed, router deployment, canonical-name map: ``RunSettings.fingerprint``,
as ``eval run``'s stored turns do); entries of another fingerprint are refused, or
deleted and generated again with ``discard_stale``. Every cell of an episode uses the same
per-run seed, which keeps the comparison with the diagonal (B→B) paired.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from handoffmon.checkers.rules import RuleSet
from handoffmon.errors import InputError
from handoffmon.evals.models import Messages, Responder
from handoffmon.evals.runner import (
    RunSettings,
    RunSummary,
    StaleRunsError,
    base_messages,
    call_with_retries,
    evaluate_turn,
    gather_or_stop,
    run_seed,
    stale_message,
)
from handoffmon.evals.script import DriftScript

ScoreMode = Literal["all", "mean"]


@dataclass(frozen=True)
class Episode:
    """One run of one script."""

    script: DriftScript
    run: int

    @property
    def id(self) -> str:
        """``<script id>#<run>``."""
        return f"{self.script.id}#{self.run}"


@dataclass
class CacheStats:
    """Prefix cache accounting (per process)."""

    prefix_generated: int = 0
    prefix_hits: int = 0
    suffix_generated: int = 0
    suffix_hits: int = 0
    discarded: int = 0
    """Cache entries deleted because their fingerprint differed (``discard_stale``)."""
    generated_keys: list[tuple[str, str, str]] = field(default_factory=list)


class CorruptCacheEntry(InputError):
    """A cache file that is not the JSON ``put`` writes (cut short by a full disk or a partial copy)."""

    def __init__(self, path: Path, exc: Exception) -> None:
        self.path = path
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        super().__init__(
            f"{path}: unreadable cache entry ({reason}): rerun with --discard-stale to delete and "
            "generate it again, or use a new --cache"
        )


class DiskCache:
    """JSON files: ``prefix/<task>/<episode>/<model>@T<t>.json`` and ``cell/…/<A>__<B>@T<t>.json``.

    Each file holds ``{"fingerprint": …, "value": …}``: the value and the fingerprint
    (seed, deployment, names) it was made under. A file written before fingerprints were
    recorded holds the bare value; its fingerprint reads as None.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @staticmethod
    def _safe(part: str) -> str:
        digest = hashlib.sha1(part.encode("utf-8")).hexdigest()[:10]
        clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in part)[:60]
        return f"{clean}-{digest}"

    def path(self, kind: str, task: str, episode: str, name: str) -> Path:
        """File of one cache entry."""
        return self.root / kind / self._safe(task) / self._safe(episode) / f"{self._safe(name)}.json"

    def entry(
        self, kind: str, task: str, episode: str, name: str
    ) -> tuple[dict[str, Any] | None, Any] | None:
        """(fingerprint or None, value) of a stored entry, or None when there is none."""
        p = self.path(kind, task, episode, name)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise CorruptCacheEntry(p, exc) from exc
        if isinstance(data, dict) and set(data) == {"fingerprint", "value"}:
            return data["fingerprint"], data["value"]
        return None, data

    def get(self, kind: str, task: str, episode: str, name: str, fingerprint: dict[str, Any]) -> Any:
        """The stored value if it was made under ``fingerprint``, else None."""
        found = self.entry(kind, task, episode, name)
        if found is None or found[0] != fingerprint:
            return None
        return found[1]

    def put(
        self, kind: str, task: str, episode: str, name: str, value: Any, fingerprint: dict[str, Any]
    ) -> None:
        """Store atomically (a temp file of this writer's own, then a rename), with the
        fingerprint it was made under. ASCII JSON: a reply's lone surrogate (a provider's
        ``"\\ud800"``) is kept as its escape, which UTF-8 text cannot hold."""
        p = self.path(kind, task, episode, name)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"fingerprint": fingerprint, "value": value}, sort_keys=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_text(text, encoding="ascii")
            tmp.replace(p)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def discard(self, kind: str, task: str, episode: str, name: str) -> None:
        """Delete one entry (absent is fine)."""
        self.path(kind, task, episode, name).unlink(missing_ok=True)


@dataclass(frozen=True)
class CellScore:
    """The final-turn score of one episode in one cell.

    ``prefix_model``/``suffix_model`` are what the cell requested; ``authors`` the
    canonical author of every turn, the first ``split`` of them the prefix's.
    """

    episode: str
    prefix_model: str
    suffix_model: str
    score: float
    authors: tuple[str, ...]
    split: int = 0


class SwitchMatrixRun:
    """Generates every cell of a switch matrix.

    Args:
        responder: the model client (``model`` argument = a model or router group).
        models: the K models.
        cache_dir: on-disk cache root.
        switch_at: T, the number of prefix turns (None = L − 1 per script).
        score: ``all`` or ``mean``.
        settings: concurrency, retries and seed (``RunSettings``).
        task: cache namespace for the benchmark (e.g. ``drift`` or ``multi-if``).
    """

    def __init__(
        self,
        responder: Responder,
        models: Sequence[str],
        cache_dir: str | Path,
        *,
        switch_at: int | None = None,
        score: ScoreMode = "all",
        settings: RunSettings | None = None,
        task: str = "drift",
    ) -> None:
        self.responder = responder
        self.models = tuple(models)
        self.cache = DiskCache(cache_dir)
        self.switch_at = switch_at
        self.score_mode = score
        self.settings = settings or RunSettings()
        self.task = task
        self.stats = CacheStats()
        self.rules = RuleSet(budget_s=self.settings.check_budget_s)
        self.calls = RunSummary()
        self._inflight: dict[tuple[str, str], asyncio.Task[list[dict[str, str]]]] = {}
        self._sem = asyncio.Semaphore(max(1, self.settings.concurrency))
        self.fingerprint = self.settings.fingerprint()

    def split(self, script: DriftScript) -> int:
        """T for a script: ``switch_at`` (must leave at least one suffix turn) or L − 1."""
        t = script.length - 1 if self.switch_at is None else self.switch_at
        if not 0 <= t < script.length:
            raise ValueError(f"switch turn {t} outside 0..{script.length - 1} for script {script.id!r}")
        return t

    async def _generate(
        self, ep: Episode, model: str, messages: list[dict[str, str]], first: int, last: int
    ) -> list[dict[str, str]]:
        """Turns first..last by ``model`` appended to ``messages``; returns the new turns."""
        seed = run_seed(self.settings.seed, ep.script.id, ep.run)
        new: list[dict[str, str]] = []
        for depth in range(first, last + 1):
            user = ep.script.turns[depth - 1].user
            messages.append({"role": "user", "content": user})
            async with self._sem:
                reply = await call_with_retries(
                    self.responder, model, messages, seed, self.settings, self.calls
                )
            messages.append({"role": "assistant", "content": reply.text})
            new.append({"user": user, "reply": reply.text, "author": reply.author})
        return new

    async def prefix(self, ep: Episode, model: str) -> list[dict[str, str]]:
        """A's first T turns of an episode: from disk, from a generation in flight, or generated once.

        The file name also carries T, so prefixes for different switch points never mix.
        """
        t_split = self.split(ep.script)
        name = f"{model}@T{t_split}"
        key = (ep.id, name)
        cached = self.cache.get("prefix", self.task, ep.id, name, self.fingerprint)
        if cached is not None:
            self.stats.prefix_hits += 1
            return list(cached)
        task = self._inflight.get(key)
        if task is not None:
            self.stats.prefix_hits += 1
            return list(await task)

        async def make() -> list[dict[str, str]]:
            turns = await self._generate(ep, model, base_messages(ep.script), 1, t_split)
            self.cache.put("prefix", self.task, ep.id, name, turns, self.fingerprint)
            self.stats.prefix_generated += 1
            self.stats.generated_keys.append((self.task, ep.id, model))
            return turns

        task = asyncio.ensure_future(make())
        self._inflight[key] = task
        try:
            return list(await task)
        finally:
            self._inflight.pop(key, None)

    def _score(self, ep: Episode, replies: Sequence[str]) -> float:
        """Final-turn score, with rule state carried through the whole conversation."""
        previous: dict[str, str] = {}
        results: tuple[Any, ...] = ()
        for depth, reply in enumerate(replies, start=1):
            results = evaluate_turn(self.rules, ep.script, depth, reply, previous)
        asserted = set(ep.script.asserted_at(ep.script.length)) or {r.rule for r in results}
        decided = [
            r.verdict == "pass" for r in results if r.rule in asserted and r.verdict in ("pass", "fail")
        ]
        if not decided:
            return float("nan")
        return float(all(decided)) if self.score_mode == "all" else sum(decided) / len(decided)

    async def cell(self, ep: Episode, a: str, b: str) -> CellScore:
        """One episode in cell (A→B)."""
        t_split = self.split(ep.script)
        name = f"{a}__{b}@T{t_split}"
        stored = self.cache.get("cell", self.task, ep.id, name, self.fingerprint)
        if stored is None:
            pre = await self.prefix(ep, a)
            messages = base_messages(ep.script)
            for t in pre:
                messages += [
                    {"role": "user", "content": t["user"]},
                    {"role": "assistant", "content": t["reply"]},
                ]
            suffix = await self._generate(ep, b, messages, t_split + 1, ep.script.length)
            stored = {"prefix": pre, "suffix": suffix}
            self.cache.put("cell", self.task, ep.id, name, stored, self.fingerprint)
            self.stats.suffix_generated += 1
        else:
            self.stats.suffix_hits += 1
        turns = [*stored["prefix"], *stored["suffix"]]
        score = self._score(ep, [t["reply"] for t in turns])
        return CellScore(ep.id, a, b, score, tuple(t["author"] for t in turns), len(stored["prefix"]))

    def entries(self, episodes: Sequence[Episode]) -> list[tuple[str, str, str]]:
        """(kind, episode id, name) of every cache entry a run of ``episodes`` reads."""
        out = []
        for ep in episodes:
            t = self.split(ep.script)
            out += [("prefix", ep.id, f"{a}@T{t}") for a in self.models]
            out += [("cell", ep.id, f"{a}__{b}@T{t}") for a in self.models for b in self.models]
        return out

    def check_fingerprints(self, episodes: Sequence[Episode]) -> None:
        """Refuse (or, with ``discard_stale``, delete) cached entries made under another fingerprint.

        Entries written without a fingerprint (an older handoffmon) count as different.

        Raises:
            StaleRunsError: some entries differ and ``discard_stale`` is off (nothing is changed).
        """
        stale: list[tuple[str, str, str, dict[str, Any] | None]] = []
        corrupt: list[tuple[str, str, str, CorruptCacheEntry]] = []
        for kind, episode, name in self.entries(episodes):
            try:
                found = self.cache.entry(kind, self.task, episode, name)
            except CorruptCacheEntry as exc:
                corrupt.append((kind, episode, name, exc))
                continue
            if found is not None and found[0] != self.fingerprint:
                stale.append((kind, episode, name, found[0]))
        if corrupt and not self.settings.discard_stale:
            more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
            raise InputError(f"{corrupt[0][3]}{more}")
        for kind, episode, name, _exc in corrupt:
            self.cache.discard(kind, self.task, episode, name)
            self.stats.discarded += 1
        if stale and not self.settings.discard_stale:
            labelled = [
                (f"{kind} {name.split('@')[0]} of {episode}", have) for kind, episode, name, have in stale
            ]
            raise StaleRunsError(
                stale_message(
                    str(self.cache.root),
                    "cached prefix(es) or cell(s)",
                    self.fingerprint,
                    labelled,
                    shown=6,
                    stored="cached",
                    reuse="reusing them",
                    new="--cache",
                    delete="those entries",
                )
            )
        for kind, episode, name, _ in stale:
            self.cache.discard(kind, self.task, episode, name)
            self.stats.discarded += 1

    async def run(self, episodes: Sequence[Episode]) -> list[CellScore]:
        """Every episode in every cell (K×K); the prefix of (episode, A) is generated once.

        Callers check first: ``run`` does not call ``check_fingerprints`` (the CLI does, before
        any model call, to refuse or discard stale entries). Without that check a cache entry
        made under another fingerprint is still never reused: ``DiskCache.get`` treats it as a
        miss and the entry is generated again and overwritten.
        """
        jobs = [self.cell(ep, a, b) for ep in episodes for a in self.models for b in self.models]
        return await gather_or_stop(jobs)  # a failed cell stops the others: they stay cached


def episodes_of(scripts: Sequence[DriftScript], runs: int | None = None) -> list[Episode]:
    """Run r of each script is episode ``<id>#<r>``."""
    return [Episode(s, r) for s in scripts for r in range(runs or s.runs)]


def author_map(scores: Sequence[CellScore]) -> dict[str, str]:
    """Requested model → the author that wrote most of the turns requested from it.

    Raises:
        ValueError: two requested models were answered by one author (their cells
            would be the same cells of the matrix).
    """
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    for s in scores:
        tally[s.prefix_model].update(s.authors[: s.split])
        tally[s.suffix_model].update(s.authors[s.split :])
    out = {m: (c.most_common(1)[0][0] if c else m) for m, c in sorted(tally.items())}
    by_author: dict[str, list[str]] = defaultdict(list)
    for m, a in out.items():
        by_author[a].append(m)
    clash = {a: ms for a, ms in by_author.items() if len(ms) > 1}
    if clash:
        said = "; ".join(f"{', '.join(ms)} -> {a}" for a, ms in clash.items())
        raise ValueError(f"several requested models were answered by the same author ({said})")
    return out


def _on_author(s: CellScore, authors: dict[str, str]) -> bool:
    """Whether every turn of the episode was written by the author its cell names."""
    a, b = authors[s.prefix_model], authors[s.suffix_model]
    return all(x == a for x in s.authors[: s.split]) and all(x == b for x in s.authors[s.split :])


def analyse(
    scores: Sequence[CellScore],
    *,
    resamples: int = 1000,
    seed: int | None = 0,
    confidence: float = 0.95,
    ridge: float = 1.0,
    min_n: int = 20,
    fdr: float = 0.05,
    source: str = "eval switch-matrix",
) -> Any:
    """Paired BCa Δ per cell, BCa cell means and π/σ from the refit engine, named by author.

    Cells are renamed from the requested model or group to its author (``author_map``),
    the name production uses; an episode whose turns a fallback gave to another author
    is dropped from its cell and counted in ``off_author_episodes``. NaN scores (no
    rule decided at the final turn) are dropped.
    """
    import dataclasses
    import math

    from handoffmon.refit.switch_matrix import ScoreTable, switch_matrix

    authors = author_map(scores)
    kept = [s for s in scores if _on_author(s, authors)]
    rows = [
        (s.episode, authors[s.prefix_model], authors[s.suffix_model], s.score)
        for s in kept
        if not math.isnan(s.score)
    ]
    table = ScoreTable.from_rows(rows)
    result = switch_matrix(
        table,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
        ridge=ridge,
        min_n=min_n,
        fdr=fdr,
        source=source,
        rule="final_turn",
    )
    return dataclasses.replace(result, authors=authors, off_author_episodes=len(scores) - len(kept))


def scores_csv(scores: Sequence[CellScore]) -> str:
    """``episode,prefix_model,suffix_model,score`` (the ``stats switch-matrix`` input format).

    Named by author, without off-author episodes and NaN scores, like the matrix ``analyse``
    builds; names are written exactly (quoted where CSV needs it) and ``read_scores_csv``
    reads them back so.
    """
    import math

    from handoffmon.sources.csv import scores_csv_text

    authors = author_map(scores)
    return scores_csv_text(
        (s.episode, authors[s.prefix_model], authors[s.suffix_model], s.score)
        for s in scores
        if _on_author(s, authors) and not math.isnan(s.score)
    )


def messages_of(turns: Sequence[dict[str, str]]) -> Messages:
    """A cached prefix as chat messages."""
    out: list[dict[str, str]] = []
    for t in turns:
        out += [{"role": "user", "content": t["user"]}, {"role": "assistant", "content": t["reply"]}]
    return out
