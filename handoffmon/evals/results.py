"""Adherence-by-checkpoint curves with Wilson intervals, and the eval results document."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from handoffmon.errors import InputError
from handoffmon.evals.docread import DocReader, finite_or_nan
from handoffmon.evals.store import Row

SCHEMA = "handoffmon.eval"
VERSION = 2
"""2: curve points carry the ``author`` that answered; ``authors`` maps each requested model to
its authors' turn counts. Version-1 documents are read with author = requested model."""


@dataclass(frozen=True)
class CurvePoint:
    """Adherence of one rule at one checkpoint depth (over runs).

    ``script`` is ``"*"`` for the curve pooled over scripts (same rule, same depth).
    ``model`` is what the runs requested (a model or router group); ``author`` the
    canonical name of the deployment that answered (after fallbacks), the name
    production counts use and ``eval compare`` joins on.
    """

    script: str
    model: str
    author: str
    rule: str
    depth: int
    n: int
    passes: int
    adherence: float
    ci_low: float
    ci_high: float


def wilson_interval(passes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of passes/n (NaN, NaN when n = 0), via the refit's ``wilson``."""
    import numpy as np
    from scipy.stats import norm

    from handoffmon.refit.cells import wilson

    if n == 0:
        return math.nan, math.nan
    lo, hi = wilson(np.array([passes]), np.array([n]), float(norm.ppf(0.5 + confidence / 2)))
    return float(lo[0]), float(hi[0])


def adherence_curves(rows: Iterable[Row], confidence: float = 0.95) -> list[CurvePoint]:
    """Pass share per (script, model, author, rule, depth) over checkpoint rows, plus pooled ``*`` curves.

    ``not_applicable`` and ``error`` verdicts are left out of n, as in production.
    """
    tally: dict[tuple[str, str, str, str, int], Counter[str]] = defaultdict(Counter)
    for r in rows:
        if r.checkpoint:
            tally[(r.script, r.model, r.author, r.rule, r.turn)][r.verdict] += 1
            tally[("*", r.model, r.author, r.rule, r.turn)][r.verdict] += 1
    out = []
    for (script, model, author, rule, depth), c in sorted(tally.items()):
        n = c["pass"] + c["fail"]
        lo, hi = wilson_interval(c["pass"], n, confidence)
        share = c["pass"] / n if n else math.nan
        out.append(CurvePoint(script, model, author, rule, depth, n, c["pass"], share, lo, hi))
    return out


def authors_of(rows: Iterable[Row]) -> dict[str, dict[str, int]]:
    """Requested model → {author: turns it answered} (one count per turn, not per rule)."""
    seen: set[tuple[str, str, int, int]] = set()
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        key = (r.script, r.model, r.run, r.turn)
        if key not in seen:
            seen.add(key)
            out[r.model][r.author] += 1
    return {m: dict(c.most_common()) for m, c in sorted(out.items())}


@dataclass(frozen=True)
class EvalResult:
    """The ``eval run`` document: curves, verdict totals and what was run."""

    created_at: float
    database: str
    models: tuple[str, ...]
    scripts: tuple[dict[str, Any], ...]
    curves: tuple[CurvePoint, ...]
    verdicts: dict[str, int]
    confidence: float = 0.95
    version: int = VERSION
    pressure: tuple[dict[str, Any], ...] = ()
    """Markov fits of pressure scripts (``pressure.PressureFit`` as dicts)."""
    authors: dict[str, dict[str, int]] = field(default_factory=dict)
    """Requested model → {author: turns} (see ``authors_of``)."""

    @property
    def author_names(self) -> tuple[str, ...]:
        """Every author that answered a turn, sorted."""
        return tuple(sorted({a for per in self.authors.values() for a in per}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN → null)."""
        d = asdict(self)
        d["curves"] = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in c.items()}
            for c in d["curves"]
        ]
        d["pressure"] = [_nan_to_none(f) for f in d["pressure"]]
        return {"schema": SCHEMA, **d}

    def to_json(self) -> str:
        """The versioned JSON document."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> EvalResult:
        """Rebuild from ``to_dict``; ``InputError`` naming the source and key for anything else.

        Known keys are checked for type (depths and counts are integers, adherences numbers
        or null); keys this reader does not know are ignored.
        """
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"{source}: not a {SCHEMA} document")
        doc = DocReader(source)
        version = doc.version(data, SCHEMA, VERSION)
        confidence = doc.confidence(data.get("confidence", 0.95))
        verdicts = doc.mapping(doc.key(data, "verdicts", ""), "verdicts")
        authors = doc.mapping(data.get("authors") or {}, "authors")
        return cls(
            doc.number(doc.key(data, "created_at", ""), "created_at"),
            doc.string(doc.key(data, "database", ""), "database"),
            tuple(doc.items(doc.key(data, "models", ""), "models", doc.string)),
            tuple(doc.items(doc.key(data, "scripts", ""), "scripts", lambda v, at: _read_script(doc, v, at))),
            _read_curves(doc, doc.key(data, "curves", "")),
            {k: doc.integer(v, f"verdicts.{k}", minimum=0) for k, v in verdicts.items()},
            confidence,
            version,
            tuple(doc.items(data.get("pressure") or [], "pressure", lambda v, at: _read_fit(doc, v, at))),
            {
                m: {
                    a: doc.integer(n, f"authors.{m}.{a}", minimum=0)
                    for a, n in doc.mapping(per, f"authors.{m}").items()
                }
                for m, per in authors.items()
            },
        )


def _read_point(doc: DocReader, value: Any, at: str) -> CurvePoint:
    """One ``curves[i]``; a version-1 point has no author (the requested model stands in)."""
    c = doc.mapping(value, at)
    model = doc.string(doc.key(c, "model", at), f"{at}.model")
    n = doc.integer(doc.key(c, "n", at), f"{at}.n", minimum=0)
    passes = doc.integer(doc.key(c, "passes", at), f"{at}.passes", minimum=0)
    if passes > n:
        raise doc.error(f"{at}.passes", f"{passes} passes out of n = {n}")

    # compare adds up the counts, the report draws the share and interval: they must agree
    share = doc.share(doc.key(c, "adherence", at), passes, n, f"{at}.adherence")
    lo, hi = doc.interval(
        doc.key(c, "ci_low", at), doc.key(c, "ci_high", at), share, f"{at}.ci_low", f"{at}.ci_high"
    )
    return CurvePoint(
        doc.string(doc.key(c, "script", at), f"{at}.script"),
        model,
        doc.string(c.get("author", model), f"{at}.author"),
        doc.string(doc.key(c, "rule", at), f"{at}.rule"),
        doc.integer(doc.key(c, "depth", at), f"{at}.depth", minimum=1),
        n,
        passes,
        finite_or_nan(share),
        finite_or_nan(lo),
        finite_or_nan(hi),
    )


def _read_curves(doc: DocReader, value: Any) -> tuple[CurvePoint, ...]:
    """``curves``, each (script, model, author, rule, depth) once: compare adds them up, so a
    point given twice (a concatenated or hand-edited file) would double its n."""
    points = doc.items(value, "curves", lambda v, at: _read_point(doc, v, at))
    first: dict[tuple[str, str, str, str, int], int] = {}
    for i, c in enumerate(points):
        j = first.setdefault((c.script, c.model, c.author, c.rule, c.depth), i)
        if j != i:
            raise doc.error(
                f"curves[{i}]",
                f"script {c.script!r}, model {c.model!r}, author {c.author!r}, rule {c.rule!r}, "
                f"depth {c.depth} is also curves[{j}]: one point each",
            )
    return tuple(points)


def _read_script(doc: DocReader, value: Any, at: str) -> dict[str, Any]:
    """One ``scripts[i]`` (known keys only)."""
    s = doc.mapping(value, at)

    def depths(key: str) -> list[int]:
        return doc.items(doc.key(s, key, at), f"{at}.{key}", lambda v, p: doc.integer(v, p, minimum=1))

    return {
        "id": doc.string(doc.key(s, "id", at), f"{at}.id"),
        "kind": doc.string(doc.key(s, "kind", at), f"{at}.kind"),
        "length": doc.integer(doc.key(s, "length", at), f"{at}.length", minimum=0),
        "checkpoints": depths("checkpoints"),
        "derails": depths("derails"),
        "rules": doc.items(doc.key(s, "rules", at), f"{at}.rules", doc.string),
    }


_FIT_NUMBERS = (
    "first_turn_accuracy", "p_tf", "p_ft", "stationary", "stationary_change", "log_loss", "mse",
)  # fmt: skip


def _read_fit(doc: DocReader, value: Any, at: str) -> dict[str, Any]:
    """One ``pressure[i]`` (``PressureFit`` as a dict; NaN written as null)."""
    f = doc.mapping(value, at)
    out: dict[str, Any] = {
        "script": doc.string(doc.key(f, "script", at), f"{at}.script"),
        "model": doc.string(doc.key(f, "model", at), f"{at}.model"),
        "n_train": doc.integer(doc.key(f, "n_train", at), f"{at}.n_train", minimum=0),
        "n_val": doc.integer(doc.key(f, "n_val", at), f"{at}.n_val", minimum=0),
    }
    for k in _FIT_NUMBERS:
        out[k] = doc.number(doc.key(f, k, at), f"{at}.{k}", optional=True)
    for k in ("p_tf_ci", "p_ft_ci", "stationary_ci"):
        pair = doc.array(doc.key(f, k, at), f"{at}.{k}", 2, "an interval")
        out[k] = [doc.number(v, f"{at}.{k}[{i}]", optional=True) for i, v in enumerate(pair)]
    for k in ("observed", "simulated"):
        out[k] = doc.items(doc.key(f, k, at), f"{at}.{k}", lambda v, p: doc.number(v, p, optional=True))
    return out


def current_checkpoints(rows: Iterable[Row], scripts: Sequence[Any]) -> list[Row]:
    """The rows of ``scripts``, each row's ``checkpoint`` read off the script as it is now.

    The stored flag is what the script said when the turn ran: a checkpoint added (or
    removed) since then would otherwise be missing from (or linger in) the curves.
    """
    by_id = {s.id: s for s in scripts}
    asserted: dict[tuple[str, int], frozenset[str]] = {}
    out = []
    for r in rows:
        s = by_id.get(r.script)
        if s is None or r.turn > s.length:
            continue
        key = (r.script, r.turn)
        if key not in asserted:
            asserted[key] = frozenset(s.asserted_at(r.turn))
        cp = r.rule in asserted[key]
        out.append(r if cp == r.checkpoint else dataclasses.replace(r, checkpoint=cp))
    return out


def build_result(
    rows: Sequence[Row],
    scripts: Sequence[Any],
    database: str,
    confidence: float = 0.95,
    *,
    model: str | None = None,
    runs: Mapping[str, int] | None = None,
) -> EvalResult:
    """Summarize stored rows of the given scripts into an ``EvalResult`` (with pressure-script fits).

    Only rows of ``model`` (the requested model or group; None = every model) and of runs
    0 … ``runs[script]`` − 1 (None = every run) count: the database may hold other
    models' evals and more runs of the same script than this eval asked for.
    Checkpoints are those of the scripts as given (``current_checkpoints``), not the stored flags.
    """
    from handoffmon.evals.pressure import fit_all

    wanted = (
        r
        for r in rows
        if (model is None or r.model == model) and (runs is None or r.run < runs.get(r.script, 0))
    )
    mine = current_checkpoints(wanted, scripts)
    verdicts = Counter(r.verdict for r in mine if r.checkpoint)
    pressure_ids = {s.id for s in scripts if s.kind == "pressure"}
    info = tuple(
        {
            "id": s.id,
            "kind": s.kind,
            "length": s.length,
            "checkpoints": list(s.checkpoints),
            "derails": [i + 1 for i, t in enumerate(s.turns) if t.derail],
            "rules": list(s.rule_names),
        }
        for s in scripts
    )
    return EvalResult(
        time.time(),
        database,
        tuple(sorted({r.model for r in mine})),
        info,
        tuple(adherence_curves(mine, confidence)),
        dict(verdicts),
        confidence,
        pressure=tuple(asdict(f) for f in fit_all(r for r in mine if r.script in pressure_ids)),
        authors=authors_of(mine),
    )


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj
