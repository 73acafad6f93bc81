"""Label cardinality guard: caps distinct model and rule names, buckets depth.

One guard serves the exporters' labels and the pipeline's in-process aggregates, so the
names a process keeps are bounded exactly like the names it exports (cap, then ``other``).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, in_cell
from handoffmon.depth import DepthBuckets
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL, VERDICTS, TurnResult

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.config import HandoffmonConfig

ALL_RULES = "all"
"""Rule label of values pooled over rules (refit gauges); always allowed."""

OTHER = "other"
"""Label value that absorbs every name beyond a cap."""

ALWAYS_ALLOWED: frozenset[str] = frozenset({NO_PREFIX, UNKNOWN_MODEL, OTHER})
"""Model label values that never count against ``max_models``."""

MAX_LABEL_CHARS = 128
"""Longer names are truncated before they are admitted (bounds series size too)."""


def exportable(value: str) -> str:
    """``value`` with every character that is not printable spelled as its escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``): controls (a newline, ESC, NUL), format characters (bidi overrides
    that display a name reversed, zero-width characters that make two names look alike), and a
    lone surrogate (a client's JSON ``"\\ud800"``), which is not UTF-8: prometheus_client encodes
    the exposition as UTF-8, so one such label value made every ``/metrics`` scrape raise.
    Printable text (``str.isprintable``: letters of any script, spaces, symbols) is returned as is."""
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else _escaped(c) for c in value)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


MAX_STAGES = 32
"""Distinct ``stage`` label values of the monitor's own health metrics."""


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess directory: guards there share their admitted names."""

_log = logging.getLogger("handoffmon.labels")


_REJECTED_BITS = 1 << 20
_REJECTED_MASK = _REJECTED_BITS - 1


_EMPTY_DB = struct.pack("i", 8) + bytes(4)
"""A prometheus_client multiprocess file that holds no sample (its header: 8 bytes used)."""


class _SharedNames:
    """A label's admitted names, shared by every process writing one multiprocess directory.

    One file per label (``handoffmon_labels_<label>.jsonl``: prometheus_client's collector
    reads ``*.db`` only), one JSON string per line, appended under an exclusive ``flock``:
    a name is admitted iff it is among the file's first ``cap`` lines, so every worker (and
    every guard, whatever its cap) maps a name alike and the workers together keep at most
    ``cap`` names. The file is touched only for a name the process has not decided yet; once
    the file holds ``cap`` names the caller never reads it again.

    The names live as long as the metric files do, whose series carry them: beside the names
    is an empty metric file, ``handoffmon_labels_<label>.db`` (a valid one, which the
    multiprocess collector reads as no sample). Whatever empties the directory's ``*.db``
    between runs (LiteLLM's proxy at start; an operator wiping the directory, as
    prometheus_client asks) removes it too, and the next process that uses the names finds it
    gone and starts from none: names admitted before a restart do not keep their places under
    the cap, while workers restarted beside the files of the others (whose series are still
    served) keep mapping those names alike.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path.with_suffix(".db")

    def admit(self, value: str, cap: int) -> tuple[bool, list[str]]:
        """(``value`` admitted, the admitted names — the file's first ``cap``), appending
        ``value`` while fewer than ``cap`` names are there. Raises ``OSError``."""
        import fcntl

        with open(self.path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                if not self.marker.exists():  # the metric files were wiped (or a first run)
                    f.truncate(0)
                    fresh = self.marker.with_name(f"{self.marker.name}.{os.getpid()}.tmp")
                    fresh.write_bytes(_EMPTY_DB)
                    os.replace(fresh, self.marker)  # a scrape never reads it half-written
                f.seek(0)
                names: list[str] = []
                for line in f:
                    try:
                        name = json.loads(line)
                    except ValueError:  # a writer died mid-line: skip it
                        continue
                    if isinstance(name, str) and name not in names:
                        names.append(name)
                admitted = names[:cap]
                if value in names:
                    return value in admitted, admitted
                if len(names) >= cap:
                    return False, admitted
                f.seek(0, os.SEEK_END)
                f.write(json.dumps(value) + "\n")
                f.flush()
                return True, [*admitted, value]
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class _Admitter:
    """Thread-safe first-come set of at most ``cap`` values; the rest map to ``other``.

    With ``shared`` the set is the one every process of a multiprocess directory shares
    (``_SharedNames``); if that file cannot be used the admitter falls back to counting
    in this process alone (logged once).
    """

    def __init__(
        self,
        cap: int,
        always: frozenset[str] = frozenset(),
        shared: _SharedNames | None = None,
        reserved: Iterable[str] = (),
    ) -> None:
        names = dict.fromkeys(exportable(v[:MAX_LABEL_CHARS]) for v in reserved)
        kept = frozenset([v for v in names if v not in always][:cap])
        self._reserved = len(kept)
        """Configured names (the first ``cap``): admitted now, outside the shared file, never
        crowded out by first-come names; they hold ``cap``'s first slots."""
        self._cap = max(cap - self._reserved, 0)
        """Slots left to first-come names."""
        self._always = always | kept
        self._admitted: dict[str, str] = {}
        self._counted = 0
        self.version = 0
        self._lock = threading.Lock()
        self._shared = shared
        self._full = False
        """Shared mode: the file held ``cap`` names at the last read (all of them admitted here)."""
        self.overflows = 0
        """Distinct names mapped to ``other`` because the cap was reached (each counted at its
        first rejection in this process; see ``_first_rejection``)."""
        self._rejected: bytearray | None = None
        for value in sorted(kept):
            self._admitted[value] = value

    def _admit(self, value: str) -> bool:
        if value in self._admitted:
            return True
        if value in self._always:
            self._admitted[value] = value
            return True
        if self._shared is not None:
            return self._admit_shared(value, self._shared)
        if self._counted >= self._cap:
            return False
        self._admitted[value] = value
        self._counted += 1
        self.version += 1
        return True

    def _admit_shared(self, value: str, shared: _SharedNames) -> bool:
        if self._full:  # every admitted name is already in ``_admitted``
            return False
        try:
            ok, names = shared.admit(value, self._cap)
        except OSError as exc:
            _log.warning("handoffmon: cannot share label names through %s (%r); capping per process",
                         shared.path, exc)  # fmt: skip
            self._shared = None
            self._counted = sum(1 for v in self._admitted if v not in self._always)
            return self._admit(value)
        for name in names:
            if name not in self._admitted:
                self._admitted[name] = name
                self.version += 1
        self._counted = len(names)
        self._full = len(names) >= self._cap
        return ok

    def get(self, value: str) -> str | None:
        """The label for ``value``, or None when it overflowed (caller maps it to ``other``)."""
        hit = self._admitted.get(value)  # lock-free fast path: dict reads are atomic
        if hit is not None:
            return hit
        with self._lock:
            if self._admit(value):
                return value
            if self._first_rejection(value):
                self.overflows += 1
            return None

    def _first_rejection(self, value: str) -> bool:
        """Whether ``value`` is rejected for the first time (call under the lock).

        A two-hash Bloom filter of 2**20 bits (128 KiB, allocated at the first rejection):
        memory stays bounded however many names flood in; a false positive (a new name taken
        for one seen before, rare below ~100,000 rejected names) undercounts, never overcounts.
        """
        bits = self._rejected
        if bits is None:
            bits = self._rejected = bytearray(_REJECTED_BITS // 8)
        h = hash(value)
        new = False
        for i in (h & _REJECTED_MASK, (h >> 20) & _REJECTED_MASK):
            byte, bit = i >> 3, 1 << (i & 7)
            if not bits[byte] & bit:
                bits[byte] |= bit
                new = True
        return new

    @property
    def counted(self) -> int:
        """Admitted values that count against the cap (reserved ones included)."""
        return self._counted + self._reserved

    @property
    def values(self) -> frozenset[str]:
        """Admitted values (including the always-allowed ones seen so far)."""
        with self._lock:
            return frozenset(self._admitted)


def configured_models(config: HandoffmonConfig) -> list[str]:
    """The model names a config spells out, in order: ``attribution.canonical_models``' canonical
    names, ``shadow.targets``, and ``shadow.candidates``' models and candidates."""
    names = list(config.attribution.canonical_models.values()) + list(config.shadow.targets)
    for model, candidates in config.shadow.candidates.items():
        names += [model, *candidates]
    return list(dict.fromkeys(names))


class LabelGuard:
    """Maps raw model/rule/stage names and depths to bounded label values.

    Shared by the Prometheus and OpenTelemetry exporters and the monitor's aggregates, so
    all of them see the same names; under ``PROMETHEUS_MULTIPROC_DIR`` shared by every
    worker too (``shared_dir``).
    Models: the names given in ``models`` (the config's, ``configured_models``) are admitted
    first and keep their slots whatever else comes; the rest of the ``max_models`` slots go to
    the first distinct names seen, for the life of the process (of the shared directory), later
    ones become ``other``; ``none``, ``unknown`` and ``other`` never count. Requested model
    groups alike, with ``requested_models`` first. Rules: configured rule names are admitted
    first and keep their slots, then per-request rules up to ``max_rules``. Depth is only
    ever exported as a bucket label. Conversation ids are never labels.

    Args:
        max_models: cap on distinct model label values.
        max_rules: cap on distinct rule label values.
        rules: configured rule names (admitted first, the first ``max_rules`` of them kept).
        models: configured model names (admitted first, the first ``max_models`` kept).
        requested_models: configured requested model groups (likewise).
        buckets: the depth buckets.
        shared_dir: a directory every process of the deployment shares; the admitted names
            live there (one small file per label) so the caps bound the names of all the
            processes together and every process maps a name alike. None (default):
            ``PROMETHEUS_MULTIPROC_DIR`` when it is set (pre-fork servers), else the caps
            are this process's own.

    Overflow is visible as series with the value ``other``, through ``usage()``
    (admitted values vs cap per label) and ``overflows()`` (distinct names mapped to
    ``other``, each counted once per process however often it is looked up again — a refit
    publishing the same names adds nothing), which the exporters publish.
    """

    def __init__(
        self,
        *,
        max_models: int = 50,
        max_rules: int = 100,
        rules: Iterable[str] = (),
        buckets: DepthBuckets | None = None,
        shared_dir: str | Path | None = None,
        models: Iterable[str] = (),
        requested_models: Iterable[str] = (),
    ) -> None:
        self.buckets = buckets or DepthBuckets()
        self._bucket_labels = frozenset(self.buckets.labels)
        where = shared_dir if shared_dir is not None else os.environ.get(MULTIPROC_ENV)
        self.shared_dir = Path(where) if where else None

        def shared(label: str) -> _SharedNames | None:
            d = self.shared_dir
            return None if d is None else _SharedNames(d / f"handoffmon_labels_{label}.jsonl")

        self._models = _Admitter(max_models, always=ALWAYS_ALLOWED, shared=shared("model"), reserved=models)
        self._rules = _Admitter(
            max_rules, always=frozenset({OTHER, ALL_RULES}), shared=shared("rule"), reserved=rules
        )
        self._stages = _Admitter(MAX_STAGES, always=frozenset({OTHER}), shared=shared("stage"))
        # Requested model groups get their own values under the same cap, so group names
        # never crowd serving-model names out of the ``model`` label.
        self._requested = _Admitter(
            max_models, always=ALWAYS_ALLOWED, shared=shared("requested_model"), reserved=requested_models
        )
        # Fast paths (~20 lookups per turn): an admitted value is its own label and stays
        # admitted, so a hit in the admitted dict is what ``_map`` would return, with no
        # side effect; anything else (new, truncated, empty, overflowing) takes ``_map``.
        self._model_hits = self._models._admitted
        self._rule_hits = self._rules._admitted
        self._stage_hits = self._stages._admitted
        self._caps = {
            "model": max_models,
            "requested_model": max_models,
            "rule": max_rules,
            "stage": MAX_STAGES,
        }

    @classmethod
    def from_config(cls, config: HandoffmonConfig) -> LabelGuard:
        """Caps from ``telemetry.max_models`` / ``max_rules``; the names the config spells out
        hold their slots (``configured_models``, the configured rules, their scopes' model
        groups)."""
        return cls(
            max_models=config.telemetry.max_models,
            max_rules=config.telemetry.max_rules,
            rules=[rule.name for rule in config.rules],
            buckets=config.buckets,
            models=configured_models(config),
            requested_models=[group for rule in config.rules for group in rule.scope.model_groups],
        )

    @staticmethod
    def _map(admitter: _Admitter, raw: str | None) -> str:
        value = exportable((raw or UNKNOWN_MODEL)[:MAX_LABEL_CHARS])
        label = admitter.get(value)
        return OTHER if label is None else label

    @property
    def version(self) -> int:
        """Grows whenever a new value is admitted (exporters refresh ``usage`` then)."""
        return self._models.version + self._rules.version + self._stages.version + self._requested.version

    def usage(self) -> dict[str, tuple[int, int]]:
        """Per label (``model``, ``requested_model``, ``rule``, ``stage``): (admitted values, cap)."""
        return {k: (a.counted, self._caps[k]) for k, a in self._admitters().items()}

    def _admitters(self) -> dict[str, _Admitter]:
        return {
            "model": self._models,
            "requested_model": self._requested,
            "rule": self._rules,
            "stage": self._stages,
        }

    def overflows(self) -> dict[str, int]:
        """Per label: distinct names mapped to ``other`` because its cap was reached, each at its
        first rejection in this process (monotonic)."""
        return {k: a.overflows for k, a in self._admitters().items()}

    @property
    def overflow_total(self) -> int:
        """Sum of :meth:`overflows` (cheap: exporters compare it to resync)."""
        return (
            self._models.overflows
            + self._requested.overflows
            + self._rules.overflows
            + self._stages.overflows
        )

    def admitted(self) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """The admitted model and rule names, live (read-only): ``admitted()[0].get(name)`` is
        what the first step of :meth:`model` looks up (and :meth:`rule` for ``[1]``), so
        ``hits.get(name) or guard.model(name)`` is ``guard.model(name)``, side effects
        included, without the method call for a name already admitted."""
        return self._model_hits, self._rule_hits

    def model(self, name: str | None) -> str:
        """Label for a model name (``None``/empty → ``unknown``; over the cap → ``other``)."""
        hit = self._model_hits.get(name)  # type: ignore[arg-type]  # None: a miss
        return hit if hit is not None else self._map(self._models, name)

    def requested_model(self, name: str | None) -> str:
        """Label for the model or group a request asked for (``telemetry.max_models`` cap of its own)."""
        return self._map(self._requested, name)

    def rule(self, name: str) -> str:
        """Label for a rule name (over the cap → ``other``)."""
        hit = self._rule_hits.get(name)
        return hit if hit is not None else self._map(self._rules, name)

    def stage(self, name: str) -> str:
        """Label for a monitoring stage (bounded by ``MAX_STAGES``)."""
        hit = self._stage_hits.get(name)
        return hit if hit is not None else self._map(self._stages, name)

    def depth_bucket(self, label: str, depth: int) -> str:
        """A valid bucket label: ``label`` if it is one of ours, else the bucket of ``depth``."""
        return label if label in self._bucket_labels else self.buckets.bucket(depth)

    @staticmethod
    def verdict(verdict: str) -> str:
        """The verdict, or ``error`` for anything outside pass|fail|not_applicable|error."""
        return verdict if verdict in VERDICTS else "error"

    @staticmethod
    def handoff(handoff: bool | None) -> str:
        """``true`` / ``false`` / ``unknown`` (undecided)."""
        if handoff is None:
            return "unknown"
        return "true" if handoff else "false"

    @property
    def models(self) -> frozenset[str]:
        """Model label values admitted so far."""
        return self._models.values

    @property
    def rules(self) -> frozenset[str]:
        """Rule label values admitted so far."""
        return self._rules.values


BASELINE_LABELS: tuple[str, ...] = ("rule", "model", "depth_bucket", "verdict")
CELL_STAT_LABELS: tuple[str, ...] = ("rule", "model", "prefix_model", "depth_bucket", "stat")
SHADOW_PAIR_LABELS: tuple[str, ...] = ("rule", "prefix_model", "model", "stat")
"""Labels of ``handoffmon_shadow_pair_stats``: the fields of ``counts.ShadowKey``, in order."""


def refit_input_labels(
    result: TurnResult, guard: LabelGuard
) -> tuple[list[tuple[str, ...]], list[tuple[tuple[str, ...], int]]]:
    """Label values of a turn's clean-baseline verdicts (``BASELINE_LABELS``, one per check
    of a clean same-author turn) and of its cell-stat increments (``CELL_STAT_LABELS``,
    value), capped by ``guard`` like every other series (the whole-cell bucket ``*`` is kept).

    The increments are ``counts.turn_cell_stats``'s, built here as label tuples directly
    (per turn, on the exporters' path): the same keys in the same order, one guard lookup
    per key as before (the same admissions and overflow counts)."""
    ctx = result.context
    model, prefix = guard.model(result.record.author), guard.model(ctx.prefix_model)
    bucket = guard.depth_bucket(result.depth_bucket, ctx.depth)
    rule = guard.rule
    baseline: list[tuple[str, ...]] = (
        [(rule(c.rule), model, bucket, guard.verdict(c.verdict)) for c in result.checks]
        if result.clean
        else []
    )
    stats: list[tuple[tuple[str, ...], int]] = []
    append = stats.append
    if in_cell(result.record.author, ctx.prefix_model, result.clean):
        depth, depth_bucket = ctx.depth, CELL_TOTAL if result.depth_bucket == CELL_TOTAL else bucket
        for c in result.checks:
            if c.verdict in ("pass", "fail"):
                append(((rule(c.rule), model, prefix, depth_bucket, "depth"), depth))
    for step in result.cluster:
        for stat, v in zip(CLUSTER_STATS, step[1:], strict=True):
            if v:
                # the pooled rule ``all`` is always admitted
                append(((rule(step.rule), model, prefix, CELL_TOTAL, stat), v))
    return baseline, stats
