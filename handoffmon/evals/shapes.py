"""Production decay shapes (versioned JSON): what ``shapes export`` writes and ``eval compare`` reads.

Per rule and model (and ``*`` pooled over models): adherence by depth bucket with Wilson
intervals and the Markov parameters; session-length percentiles; handoff pair
frequencies. Built from ``Counts`` (SQLite, Prometheus, cells CSV) or a refit document.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError, NoDataError, parse_json_document
from handoffmon.evals.docread import DocReader
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

SCHEMA = "handoffmon.shapes"
VERSION = 1
POOLED = "*"
PERCENTILES = (50, 75, 90, 95, 99)


@dataclass(frozen=True)
class RuleShape:
    """One rule's decay for one model (``*`` = pooled over models).

    ``markov`` holds p_tf, p_ft, stationary, half_life_turns and n_transitions (absent
    when the counts had no transitions for it).
    """

    rule: str
    model: str
    n: tuple[int, ...]
    passes: tuple[int, ...]
    adherence: tuple[float | None, ...]
    ci_low: tuple[float | None, ...]
    ci_high: tuple[float | None, ...]
    markov: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Shapes:
    """The shapes document.

    Attributes:
        created_at: UNIX time.
        source: where the production numbers came from.
        buckets: depth bucket labels (the order of every per-bucket tuple).
        rules: one entry per (rule, model) plus the pooled ``*`` entries.
        session_lengths: ``method`` (``histogram`` exact, or ``turns_by_depth``: survival
            interpolated from turns per depth bucket, see ``percentiles_from_turns``), ``conversations`` and
            ``p50`` … ``p99``, ``max``.
        history_tokens: percentiles when the source has them (else empty).
        handoff_pairs: ``prefix_model``, ``model``, ``turns``, ``share`` of handoff turns.
        confidence: interval level.
    """

    created_at: float
    source: str
    buckets: tuple[str, ...]
    rules: tuple[RuleShape, ...]
    session_lengths: dict[str, Any]
    history_tokens: dict[str, Any]
    handoff_pairs: tuple[dict[str, Any], ...]
    confidence: float = 0.95
    version: int = VERSION

    def to_json(self) -> str:
        """The versioned JSON document (NaN → null)."""
        return json.dumps({"schema": SCHEMA, **_clean(asdict(self))}, indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, source: str = "<shapes>") -> Shapes:
        """Parse a shapes document; ``InputError`` naming the source and key for anything else.

        Per-bucket lists must have one value per bucket, counts must be integers and
        adherences numbers (or null); keys this reader does not know are ignored.
        """
        d = parse_json_document(text, source)
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise InputError(f"{source}: not a {SCHEMA} document")
        doc = DocReader(source)
        version = doc.version(d, SCHEMA, VERSION)
        buckets = doc.bucket_labels(doc.key(d, "buckets", ""), "buckets")
        rules = tuple(
            doc.items(doc.key(d, "rules", ""), "rules", lambda r, at: _read_rule(doc, r, at, buckets))
        )
        first: dict[tuple[str, str], int] = {}
        for i, r in enumerate(rules):  # shape() would read only the first of two entries
            j = first.setdefault((r.rule, r.model), i)
            if j != i:
                raise doc.error(
                    f"rules[{i}]", f"rule {r.rule!r}, model {r.model!r} is also rules[{j}]: one entry each"
                )
        confidence = doc.confidence(d.get("confidence", 0.95))
        return cls(
            doc.number(doc.key(d, "created_at", ""), "created_at"),
            doc.string(doc.key(d, "source", ""), "source"),
            buckets,
            rules,
            _read_stats(
                doc, doc.key(d, "session_lengths", ""), "session_lengths", int_keys=("conversations",)
            ),
            _read_stats(doc, d.get("history_tokens") or {}, "history_tokens"),
            tuple(
                doc.items(
                    doc.key(d, "handoff_pairs", ""), "handoff_pairs", lambda p, at: _read_pair(doc, p, at)
                )
            ),
            confidence,
            version,
        )

    def shape(self, rule: str, model: str = POOLED) -> RuleShape | None:
        """The entry of one rule and model."""
        return next((r for r in self.rules if r.rule == rule and r.model == model), None)


_PER_BUCKET_COUNTS = ("n", "passes")
_PER_BUCKET_SHARES = ("adherence", "ci_low", "ci_high")
_PER_BUCKET_KEYS = (*_PER_BUCKET_COUNTS, *_PER_BUCKET_SHARES)
_MARKOV_KEYS = ("p_tf", "p_ft", "stationary", "half_life_turns", "n_transitions")
_MARKOV_PROBABILITIES = ("p_tf", "p_ft", "stationary")
_STAT_KEYS = (*(f"p{q}" for q in PERCENTILES), "max")


def _read_rule(doc: DocReader, value: Any, at: str, buckets: tuple[str, ...]) -> RuleShape:
    """One ``rules[i]`` entry: every per-bucket list has one value per bucket."""
    r = doc.mapping(value, at)
    per: dict[str, tuple[Any, ...]] = {}
    raw = {k: doc.array(doc.key(r, k, at), f"{at}.{k}", len(buckets), "buckets") for k in _PER_BUCKET_KEYS}
    for k in _PER_BUCKET_COUNTS:
        per[k] = tuple(doc.integer(v, f"{at}.{k}[{i}]", minimum=0) for i, v in enumerate(raw[k]))
    for i, (p, n) in enumerate(zip(per["passes"], per["n"], strict=True)):
        if p > n:
            raise doc.error(f"{at}.passes[{i}]", f"{p} passes out of n = {n}")
    # the counts are compared, the shares and intervals drawn: a hand edit must not make them disagree
    per["adherence"] = tuple(
        doc.share(v, per["passes"][i], per["n"][i], f"{at}.adherence[{i}]")
        for i, v in enumerate(raw["adherence"])
    )
    bounds = [
        doc.interval(lo, hi, per["adherence"][i], f"{at}.ci_low[{i}]", f"{at}.ci_high[{i}]")
        for i, (lo, hi) in enumerate(zip(raw["ci_low"], raw["ci_high"], strict=True))
    ]
    per["ci_low"], per["ci_high"] = tuple(b[0] for b in bounds), tuple(b[1] for b in bounds)
    markov = doc.mapping(r.get("markov") or {}, f"{at}.markov")
    return RuleShape(
        doc.string(doc.key(r, "rule", at), f"{at}.rule"),
        doc.string(doc.key(r, "model", at), f"{at}.model"),
        per["n"],
        per["passes"],
        per["adherence"],
        per["ci_low"],
        per["ci_high"],
        {k: _markov_value(doc, markov[k], f"{at}.markov.{k}", k) for k in _MARKOV_KEYS if k in markov},
    )


def _markov_value(doc: DocReader, value: Any, path: str, key: str) -> float | None:
    """A Markov parameter: p_tf, p_ft and stationary in [0, 1]; a half-life and a count ≥ 0 (or "inf").

    The compare moves production along a(d+1) = a(d)(1 − p_TF) + (1 − a(d)) p_FT: a p_TF of 7
    there gives adherences of 10^11, a negative one flags a clean eval.
    """
    if key in _MARKOV_PROBABILITIES:
        return doc.probability(value, path, optional=True)
    x = doc.number(value, path, optional=True, infinite=True)
    if x is not None and not x >= 0:
        raise doc.error(path, f"expected a number ≥ 0, got {x!r}")
    return None if x is None else float(x)


def _read_stats(doc: DocReader, value: Any, at: str, int_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """``session_lengths`` / ``history_tokens``: known numeric keys are checked, others kept as they are."""
    stats = dict(doc.mapping(value, at))
    for k in _STAT_KEYS:
        if k in stats:
            stats[k] = doc.number(stats[k], f"{at}.{k}", optional=True)
    for k in int_keys:
        if k in stats:
            stats[k] = doc.integer(stats[k], f"{at}.{k}", minimum=0)
    if "method" in stats:
        doc.string(stats["method"], f"{at}.method")
    return stats


def _read_pair(doc: DocReader, value: Any, at: str) -> dict[str, Any]:
    """One ``handoff_pairs[i]`` entry (known keys only)."""
    p = doc.mapping(value, at)
    return {
        "prefix_model": doc.string(doc.key(p, "prefix_model", at), f"{at}.prefix_model"),
        "model": doc.string(doc.key(p, "model", at), f"{at}.model"),
        "turns": doc.integer(doc.key(p, "turns", at), f"{at}.turns", minimum=0),
        "share": doc.probability(doc.key(p, "share", at), f"{at}.share"),
    }


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) else ("inf" if math.isinf(obj) else obj)
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _rule_shape(
    rule: str, model: str, passes: list[int], fails: list[int], trans: Any, z: float
) -> RuleShape:
    import numpy as np

    from handoffmon.refit.cells import wilson
    from handoffmon.refit.markov import fit_markov

    p, f = np.array(passes), np.array(fails)
    n = p + f
    lo, hi = wilson(p, n, z)
    with np.errstate(invalid="ignore", divide="ignore"):
        adh = np.where(n > 0, p / np.maximum(n, 1), np.nan)
    markov: dict[str, float | None] = {}
    if trans is not None and trans.sum() > 0:
        m = fit_markov(trans[None, :, :], z)
        markov = {
            "p_tf": float(m.p_tf[0]),
            "p_ft": float(m.p_ft[0]),
            "stationary": float(m.stationary[0]),
            "half_life_turns": float(m.half_life[0]),
            "n_transitions": float(m.n_transitions[0]),
        }

    def opt(x: Any) -> tuple[float | None, ...]:
        return tuple(None if not math.isfinite(v) else float(v) for v in x)

    return RuleShape(
        rule, model, tuple(int(v) for v in n), tuple(int(v) for v in p), opt(adh), opt(lo), opt(hi), markov
    )


def rule_shapes(counts: Counts, buckets: DepthBuckets, confidence: float = 0.95) -> list[RuleShape]:
    """Adherence by bucket and Markov parameters per (rule, model) and pooled per rule."""
    import numpy as np

    labels = buckets.labels
    z = _z(confidence)
    tally: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros((2, len(labels)), dtype=np.int64))
    for k, v in counts.checks.items():
        if k.verdict in ("pass", "fail") and k.depth_bucket in labels:
            row = 0 if k.verdict == "pass" else 1
            for model in (k.model, POOLED):
                tally[(k.rule, model)][row, labels.index(k.depth_bucket)] += v
    trans: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros((2, 2), dtype=np.int64))
    for t, v in counts.transitions.items():
        if t.from_verdict in ("pass", "fail") and t.to_verdict in ("pass", "fail"):
            i, j = int(t.from_verdict == "fail"), int(t.to_verdict == "fail")
            for model in (t.model, POOLED):
                trans[(t.rule, model)][i, j] += v
    return [
        _rule_shape(rule, model, list(a[0]), list(a[1]), trans.get((rule, model)), z)
        for (rule, model), a in sorted(tally.items())
    ]


def percentiles_from_histogram(hist: Mapping[int, int]) -> dict[str, Any]:
    """Exact percentiles of a depth → count histogram (``method: histogram``)."""
    items = sorted((int(d), int(c)) for d, c in hist.items() if c > 0)
    total = sum(c for _, c in items)
    out: dict[str, Any] = {"method": "histogram", "conversations": total}
    for q in PERCENTILES:
        acc = 0
        for d, c in items:
            acc += c
            if acc >= q / 100 * total:
                out[f"p{q}"] = d
                break
    out["max"] = items[-1][0] if items else None
    return out


def percentiles_from_turns(turns_by_bucket: Mapping[str, float], buckets: DepthBuckets) -> dict[str, Any]:
    """Session-length percentiles read off turns per depth bucket (``method: turns_by_depth``).

    Turns per depth ≈ conversations reaching that depth, so a bucket's turns per depth divided
    by depth 1's is the survival S(d) = P(length ≥ d) **averaged over the bucket**, not its
    survival at the bucket start (reading it so put every percentile about one bucket low or
    high: geometric lengths of mean 9 gave p50 8 and p99 48 for true 6 and 40). That average
    is placed at the depth where a survival decaying geometrically through the bucket (at the
    rate its neighbours imply) takes it, log S is interpolated linearly between those points
    (S(1) = 1) and extrapolated at the last rate after the last one, and the q-th percentile
    is the least d with S(d + 1) ≤ 1 − q, as ``percentiles_from_histogram`` counts. The open
    last bucket ``lo+`` is taken as lo … 2·lo − 1; no conversation outlives the last bucket
    with turns.

    Every conversation that reaches a bucket went through all the buckets before it, so the
    survival of a bucket is at least that of any later one: it is taken as the largest
    estimate at or after the bucket (capped at 1). An empty bucket between non-empty ones
    (sparse counts: a cells CSV with no row there) is missing data, not "every conversation
    ended here", which put p50 … p99 at depth 1 while the maximum was 16.
    """
    labels, edges = buckets.labels, buckets.edges
    widths = [(edges[i + 1] - edges[i]) if i + 1 < len(edges) else edges[i] for i in range(len(labels))]
    per_depth = [turns_by_bucket.get(lab, 0) / w for lab, w in zip(labels, widths, strict=True)]
    n0 = per_depth[0] if per_depth else 0
    out: dict[str, Any] = {"method": "turns_by_depth", "conversations": round(n0)}
    if n0 <= 0:
        return out
    known = [i for i, v in enumerate(per_depth) if v > 0]
    end = edges[known[-1]] + widths[known[-1]]  # the first depth no conversation reaches
    logs: list[float] = []
    later = 0.0
    for i in reversed(known):
        later = max(later, min(per_depth[i] / n0, 1.0))
        logs.append(math.log(later))
    logs.reverse()
    xs = [edges[i] + (widths[i] - 1) / 2 for i in known]  # bucket midpoints, then refined
    for _ in range(3):  # each pass places the points at the rates the previous one implies
        slopes = [(logs[j + 1] - logs[j]) / (xs[j + 1] - xs[j]) for j in range(len(xs) - 1)]
        xs = [_average_point(edges[i], widths[i], slopes[max(j - 1, 0) : j + 1]) for j, i in enumerate(known)]
    tail = min((logs[-1] - logs[-2]) / (xs[-1] - xs[-2]), 0.0) if len(xs) > 1 else 0.0

    def survival(d: int) -> float:
        if d >= end:
            return 0.0
        j = bisect.bisect_left(xs, d)
        if j == 0:
            return 1.0
        if j == len(xs):
            return math.exp(logs[-1] + tail * (d - xs[-1]))
        t = (d - xs[j - 1]) / (xs[j] - xs[j - 1])
        return math.exp(logs[j - 1] + t * (logs[j] - logs[j - 1]))

    for q in PERCENTILES:
        d = 1
        while survival(d + 1) > 1 - q / 100 + 1e-12:
            d += 1
        out[f"p{q}"] = d
    out["max"] = end - 1
    return out


def _average_point(lo: int, width: int, slopes: list[float]) -> float:
    """The depth in bucket lo … lo + width − 1 at which a survival decaying geometrically at the
    mean of ``slopes`` (log survival per depth) equals its average over the bucket."""
    slope = min(sum(slopes) / len(slopes), 0.0) if slopes else 0.0
    if width == 1:
        return float(lo)
    if slope > -1e-9:
        return lo + (width - 1) / 2
    rate = math.exp(slope)
    return lo + math.log((1 - rate**width) / (width * (1 - rate))) / slope


def turns_by_cell(counts: Counts) -> dict[tuple[str, str, str], int]:
    """Turns per (model, prefix_model, depth bucket); without turn counters (cells CSV), the
    largest number of checks any one rule made in the cell stands in for them."""
    out: Counter[tuple[str, str, str]] = Counter()
    if counts.turns:
        for k, v in counts.turns.items():
            out[(k.model, k.prefix_model, k.depth_bucket)] += v
        return dict(out)
    per_rule: Counter[tuple[str, str, str, str]] = Counter()
    for c, v in counts.checks.items():
        per_rule[(c.rule, c.model, c.prefix_model, c.depth_bucket)] += v
    for (_, model, prefix, bucket), v in per_rule.items():
        out[(model, prefix, bucket)] = max(out[(model, prefix, bucket)], v)
    return dict(out)


def handoff_pairs(counts: Counts) -> list[dict[str, Any]]:
    """Handoff turns per ordered pair (prefix_model → model) and their share of all handoff turns."""
    c: Counter[tuple[str, str]] = Counter()
    for (model, prefix, _), v in turns_by_cell(counts).items():
        if v > 0 and prefix not in (NO_PREFIX, UNKNOWN_MODEL, model):  # rows of 0: no handoff seen
            c[(prefix, model)] += v
    total = sum(c.values())
    return [{"prefix_model": a, "model": b, "turns": n, "share": n / total} for (a, b), n in c.most_common()]


def _refuse_pooled_name(models: set[str], source: str) -> None:
    """``InputError`` when production names a model ``*``: its counts would be added into the
    pooled-over-models entry of that name (counted twice there) and the model itself would vanish."""
    if POOLED in models:
        raise InputError(
            f"{source}: model {POOLED!r} is reserved in shapes for the pooled-over-models entry; "
            "rename it (attribution.canonical_models) before exporting shapes"
        )


def shapes_from_counts(
    counts: Counts,
    *,
    source: str,
    buckets: DepthBuckets | None = None,
    confidence: float = 0.95,
    history_tokens: dict[str, Any] | None = None,
) -> Shapes:
    """The shapes of production ``Counts`` (buckets inferred from the labels when not given)."""
    from handoffmon.sources.spec import infer_buckets

    _refuse_pooled_name(
        {k.model for k in counts.checks} | {k.prefix_model for k in counts.checks}
        | {k.model for k in counts.transitions} | {k.model for k in counts.turns}
        | {k.prefix_model for k in counts.turns},
        source,
    )  # fmt: skip
    buckets = buckets or infer_buckets(counts)
    stray = sorted({k.depth_bucket for k, v in counts.checks.items() if v} - set(buckets.labels))
    if stray:  # their checks would be left out of every bucket's adherence
        raise InputError(
            f"{source}: depth bucket(s) {', '.join(stray)} not one of the buckets "
            f"{', '.join(buckets.labels)}: checks from two depth.buckets settings (a config change "
            "inside the window, or two deployments summed: select one with --match)"
        )
    if counts.session_lengths:
        sessions = percentiles_from_histogram(counts.session_lengths)
    else:
        by_bucket: Counter[str] = Counter()
        for (_, _, bucket), v in turns_by_cell(counts).items():
            by_bucket[bucket] += v
        sessions = percentiles_from_turns(by_bucket, buckets)
    return Shapes(
        time.time(),
        source,
        buckets.labels,
        tuple(rule_shapes(counts, buckets, confidence)),
        sessions,
        history_tokens or {},
        tuple(handoff_pairs(counts)),
        confidence,
    )


def _refit_rule_shapes(name: str, fit: Any, labels: tuple[str, ...], z: float) -> list[RuleShape]:
    """One rule of a refit: per-model shapes rebuilt from its curves (passes = adherence × n) plus ``*``."""
    out: list[RuleShape] = []
    pooled_p, pooled_f = [0] * len(labels), [0] * len(labels)
    for model, curve in sorted(fit.curves.items()):
        p, f = [0] * len(labels), [0] * len(labels)
        for b, n, a in zip(curve.buckets, curve.n, curve.adherence, strict=True):
            i = labels.index(b)
            p[i] = round(a * n) if n and math.isfinite(a) else 0
            f[i] = n - p[i]
            pooled_p[i] += p[i]
            pooled_f[i] += f[i]
        shape = _rule_shape(name, model, p, f, None, z)
        mk = fit.markov.get(model)
        if mk is not None:
            markov = {
                "p_tf": mk.p_tf,
                "p_ft": mk.p_ft,
                "stationary": mk.stationary,
                "half_life_turns": mk.half_life_turns,
                "n_transitions": float(mk.n_transitions),
            }
            shape = RuleShape(**{**shape.__dict__, "markov": markov})
        out.append(shape)
    out.append(_rule_shape(name, POOLED, pooled_p, pooled_f, None, z))
    return out


def shapes_from_refit(result: Any, *, source: str) -> Shapes:
    """Shapes from a ``RefitResult`` (refit.json): curves and Markov fits as refitted.

    A refit document has no raw turn counts: the turns of a (model, bucket) and of a
    handoff pair are the most checks any one rule made there (the pooled rule ``all``
    counts a turn once per rule). Session lengths are read off those turns per bucket
    (``method: turns_by_depth``, an approximation).
    """
    from handoffmon.refit.result import ALL_RULES

    _refuse_pooled_name(
        {m for fit in result.rules.values() for m in fit.curves}
        | {m for fit in result.rules.values() for p in fit.pairs for m in (p.prefix_model, p.model)},
        source,
    )
    buckets = DepthBuckets.from_labels(result.buckets) if result.buckets else DepthBuckets()
    z = _z(result.confidence)
    shapes = [
        s
        for name, fit in sorted(result.rules.items())
        if name != ALL_RULES
        for s in _refit_rule_shapes(name, fit, buckets.labels, z)
    ]
    # checks, not turns: a turn checked by 4 rules counts 4 times in the pooled 'all' fit, so the
    # turns of a (model, bucket) or a pair are the most checks any one rule made there (as turns_by_cell)
    cell: Counter[tuple[str, str]] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    for name, fit in result.rules.items():
        if name == ALL_RULES:
            continue
        for model, curve in fit.curves.items():
            for b, n in zip(curve.buckets, curve.n, strict=True):
                cell[(model, b)] = max(cell[(model, b)], n)
        for p in fit.pairs:
            pairs[(p.prefix_model, p.model)] = max(pairs[(p.prefix_model, p.model)], p.n)
    by_bucket: Counter[str] = Counter()
    for (_, b), n in cell.items():
        by_bucket[b] += n
    pairs = Counter({k: n for k, n in pairs.items() if n > 0})
    total = sum(pairs.values())
    pair_list = tuple(
        {"prefix_model": a, "model": b, "turns": n, "share": n / total} for (a, b), n in pairs.most_common()
    )
    sessions = percentiles_from_turns(by_bucket, buckets)
    return Shapes(
        time.time(), source, buckets.labels, tuple(shapes), sessions, {}, pair_list, result.confidence
    )


def prometheus_history_tokens(
    base_url: str, *, match: str | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Percentiles of ``handoffmon_history_tokens`` over all depth buckets (histogram_quantile),
    restricted to the series ``match`` selects (``{job="prod"}``; None = all), read as the
    Prometheus source reads (its credentials and headers).

    Returns ``{}`` when the histogram has no data; raises ``SourceError`` when unreachable.
    """
    from handoffmon.sources import SourceError
    from handoffmon.sources.prometheus import PrometheusSource, select

    source = PrometheusSource(base_url, match=match, timeout_s=timeout_s)
    buckets = select("handoffmon_history_tokens_bucket", source.matchers)
    out: dict[str, Any] = {}
    for q in PERCENTILES:
        query = f"histogram_quantile({q / 100}, sum by (le) ({buckets}))"
        result = source.query(query, what="handoffmon_history_tokens")
        if result:
            try:
                value = float(result[0]["value"][1])
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise SourceError(
                    f"malformed Prometheus series for handoffmon_history_tokens: {exc}"
                ) from exc
            if math.isfinite(value):
                out[f"p{q}"] = value
    return out


def export_shapes(
    spec: str, *, confidence: float = 0.95, buckets: DepthBuckets | None = None, match: str | None = None
) -> Shapes:
    """Shapes from a ``--source``: ``refit.json``, ``sqlite://…``, ``prometheus://…`` or ``cells.csv``.

    ``match`` restricts a Prometheus source to one deployment (``{job="prod"}``).

    Raises:
        NoDataError: the source holds no checks (an empty store, a stale Prometheus target).
    """
    from pathlib import Path

    if spec.lower().endswith(".json") and "://" not in spec:  # sqlite://agg.json is SQLite
        from handoffmon.refit.result import RefitResult
        from handoffmon.sources import SourceError

        if match:
            raise SourceError(f"{spec}: --match only applies to a Prometheus source, not a refit.json")

        try:
            text = Path(spec).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{spec}: cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"{spec}: not UTF-8 text (byte {exc.start})") from exc
        shapes = shapes_from_refit(RefitResult.from_json(text, source=spec), source=spec)
        if not shapes.rules:
            raise NoDataError(f"{spec}: the refit holds no rule curves to export")
        return shapes
    from handoffmon.sources.spec import load_source

    loaded = load_source(spec, match=match)
    tokens: dict[str, Any] | None = None
    if spec.startswith(("prometheus://", "http://", "https://")):
        from handoffmon.sources import SourceError

        try:
            tokens = prometheus_history_tokens(spec, match=match)
        except SourceError as exc:  # the shapes are still useful without token percentiles
            tokens = {"unavailable": str(exc)[:200]}
    shapes = shapes_from_counts(
        loaded.counts, source=loaded.label, buckets=buckets, confidence=confidence, history_tokens=tokens
    )
    if not any(sum(shape.n) for shape in shapes.rules):  # no rules, or rows that count 0
        raise NoDataError(f"{loaded.label}: no checked turns (pass or fail) to export")
    return shapes
