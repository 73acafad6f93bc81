"""Refit results: frozen records and their versioned JSON document (schema ``handoffmon.refit/2``)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Union, overload

import orjson

from handoffmon.depth import BUCKET_LABEL
from handoffmon.errors import InputError, json_got, json_shown, parse_json_document

SCHEMA = "handoffmon.refit"
SCHEMA_VERSION = 2
"""Bump on any incompatible change of the JSON layout; readers accept versions ≤ this.

2: conversation-clustered Newcombe intervals, raw and BH-adjusted p-values, clean
baseline, within-bucket depth adjustment, identified-only decomposition (null π/σ for
models not seen in a role), ``prior_sd_pp`` instead of ``ridge``, adjusted R², Δ into
each model, Markov fits split by ``turns`` (``markov_handoff_turns`` /
``markov_same_author``) and published only above ``markov_min_transitions``."""

SWITCH_MATRIX_VERSION = 2
"""Schema version of ``handoffmon.switch_matrix`` documents (2: author join, BH, script clusters)."""


ALL_RULES = "all"
"""Key of the pooled-over-rules fit in ``RefitResult.rules``."""

OBSERVATIONAL_NOTE = (
    "Production handoff effects are observational: turns were not randomized to "
    "prefix models, so delta(A->B) compares cell A->B with B's clean B->B baseline at "
    "the same depths only; other differences between handed-off and ordinary "
    "conversations (topic, difficulty, user) are not adjusted for. Where the router hands "
    "off on the conversation itself (escalating hard conversations, falling back after a "
    "failed reply), delta is biased negative for pairs with no effect, enough to page; "
    "shadow continuation measures the switch cost free of that bias."
)

VERDICT_ROUTING_NOTE = (
    " Warning: in this window handoffs followed failed checks {ratio:.1f}x as often as passed "
    "ones (rules: {rules}): routing depends on the verdicts, so the deltas and handoff risks "
    "are biased negative; confirm with shadow continuation before acting on them."
)

REPAIR_NOTE = (
    " Warning: {cells} cell(s) had conversation-cluster sums that contradict their checks (a "
    "series lost or reset on its own, one stat counted without the others); each was read as one "
    "conversation, or without its conversation count, so its intervals are wider than the data "
    "would give: see input_repairs."
)

SHADOW_REPAIR_NOTE = (
    " Warning: {cells} shadow pair cell(s) had conversation-cluster sums that contradict their "
    "paired tables; each was read as one conversation, or without its conversation count, so its "
    "switch-cost intervals are wider than the data would give: see shadow_input_repairs."
)

NAN = float("nan")


@dataclass(frozen=True)
class PairEffect:
    """Handoff effect and handoff risk of one ordered pair (prefix_model → model).

    Attributes:
        rule: rule name, or ``"all"`` when pooled over rules.
        prefix_model: author of the previous turn (A).
        model: author of the turn (B, the suffix).
        n: checked turns (pass + fail) in the handoff cell A→B; 0 when never observed.
        delta: depth-adjusted Δ(A→B) = adherence(A→B) − B's clean baseline at the same
            depths; NaN if not reported.
        se: conversation-clustered standard error of ``delta``.
        ci_low: lower bound of the ``confidence`` interval for Δ (Newcombe hybrid score
            on design-effect-adjusted counts).
        ci_high: upper bound.
        significant: the Benjamini–Hochberg adjusted p-value is ≤ ``RefitResult.fdr``
            (false-discovery control across the rule's reported pairs).
        risk: fitted μ + π_A + σ_B (defined for every pair of known models).
        risk_se: standard error of ``risk`` from the decomposition's covariance.
        observed: the pair passed ``min_n`` and has a Δ estimate.
        coverage: share of the handoff cell's checked turns in depth buckets where the
            baseline had data (strata without a baseline are dropped).
        residual: delta − risk for pairs used in the decomposition, else NaN.
        p_value: raw two-sided p-value of Δ = 0 (dual to the interval; NaN where no test
            was made).
        p_adjusted: Benjamini–Hochberg adjusted p-value over the rule's tested pairs.
        design_effect: clustered / binomial variance of the handoff cell (≥ 1).
    """

    rule: str
    prefix_model: str
    model: str
    n: int
    delta: float
    se: float
    ci_low: float
    ci_high: float
    significant: bool
    risk: float
    risk_se: float
    observed: bool
    coverage: float = NAN
    residual: float = NAN
    p_value: float = NAN
    p_adjusted: float = NAN
    design_effect: float = NAN


SWITCH_COST_NOTE = (
    "switch_costs are experimental: on sampled turns a second model continued the identical "
    "history in the background, so estimate = mean[y(B continues A's prefix) - y(A continues "
    "A's prefix)] over paired outcomes on the same prefixes. It is compared with the "
    "observational s(A->B) - s(A->A) (A's clean baseline, depth-adjusted), not with delta, "
    "which measures s(A->B) - s(B->B) against B's own baseline."
)


@dataclass(frozen=True)
class SwitchCost:
    """Experimental switch cost of leaving prefix model A for model B, from shadow pairs.

    Attributes:
        rule: rule name, or ``"all"`` when pooled over rules.
        prefix_model: A, the author of the history both continuations saw.
        model: B, the model A's conversation would switch to.
        n_pairs: paired outcomes (both continuations checked pass or fail).
        estimate: mean of y_B − y_A over the pairs (B's minus A's adherence on A's
            prefixes); negative = switching to B costs adherence.
        ci_low: lower bound of the ``confidence`` interval (Newcombe's square-and-add
            interval for paired proportions on conversation-clustered effective counts).
        ci_high: upper bound.
        significant: Benjamini–Hochberg adjusted p-value ≤ ``RefitResult.fdr`` over the
            rule's switch costs.
        p_value: raw two-sided p-value (dual to the interval).
        p_adjusted: Benjamini–Hochberg adjusted p-value.
        design_effect: clustered / multinomial variance of the paired difference (≥ 1).
        model_adherence: B's pass rate on the pairs.
        prefix_adherence: A's pass rate on the same pairs.
        handoff_pairs: pairs from the handoff arm (B served, A shadowed).
        observational: observational estimate of the same contrast, s(A→B) − s(A→A): the
            handoff cell against A's clean baseline, depth-adjusted (NaN when either
            cell is below ``min_n``).
        observational_ci_low: its lower bound (as ``PairEffect.ci_low``).
        observational_ci_high: its upper bound.
        disagree: experimental and observational estimates differ at the interval's level
            (z-test on their difference with the variances added, which ignores their
            positive covariance and so flags less often than an exact test would).
    """

    rule: str
    prefix_model: str
    model: str
    n_pairs: int
    estimate: float
    ci_low: float
    ci_high: float
    significant: bool
    p_value: float = NAN
    p_adjusted: float = NAN
    design_effect: float = NAN
    model_adherence: float = NAN
    prefix_adherence: float = NAN
    handoff_pairs: int = 0
    observational: float = NAN
    observational_ci_low: float = NAN
    observational_ci_high: float = NAN
    disagree: bool = False


class PairTable(Sequence[PairEffect]):
    """A fit's ``PairEffect`` records, built on first read.

    A K = 100 refit has ~10⁵ pairs per document (every rule and ``all``); building them
    is a third of the refit's CPU, and many readers (the periodic refit's gauges for a
    few rules, ``RuleFit.pair``) never touch most of them. The records are built once,
    on first access, by ``build`` and then kept; the sequence compares equal to a list
    of the same records.
    """

    __slots__ = ("_build", "_encoded", "_len", "_rows")

    def __init__(
        self,
        build: Callable[[], list[PairEffect]],
        length: int,
        encoded: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self._build: Callable[[], list[PairEffect]] | None = build
        self._len = length
        self._rows: list[PairEffect] | None = None
        self._encoded = encoded

    def encoded(self) -> list[dict[str, Any]]:
        """The records as ``_encode`` writes them; from the columns when the table was built
        with ``encoded`` (the JSON document of a K = 100 refit never builds the records)."""
        if self._encoded is not None:
            return self._encoded()
        return [_encode(row) for row in self._list()]

    def _list(self) -> list[PairEffect]:
        if self._rows is None:
            assert self._build is not None
            self._rows, self._build = self._build(), None
        return self._rows

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> PairEffect: ...
    @overload
    def __getitem__(self, i: slice) -> list[PairEffect]: ...
    def __getitem__(self, i: int | slice) -> PairEffect | list[PairEffect]:
        return self._list()[i]

    def __iter__(self) -> Iterator[PairEffect]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (PairTable, list)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PairTable({self._list()!r})"


@dataclass(frozen=True)
class ModelScores:
    """One model's decomposition terms and its absolute "handoffs into it" effect.

    π and σ are **relative**: ridge-shrunk and summing to zero over the models identified
    in that role, so a negative σ means "worse after a handoff than the average model",
    not "worse after a handoff". They are NaN (null in JSON, no gauge) for a model not
    seen in that role in any fitted pair: not estimable. What pages is absolute:
    ``into_delta``, the Δ of all handoffs into this model against its clean baseline.

    Attributes:
        prefix_influence: π — how this model's turns move the adherence of whoever
            continues after it, relative to the average prefix (positive helps).
        prefix_influence_se: standard error of π.
        suffix_susceptibility: σ — how this model's adherence moves when it continues
            someone else's conversation, relative to the average suffix.
        suffix_susceptibility_se: standard error of σ.
        n: checked turns in the observed off-diagonal cells involving this model.
        into_delta: Δ of every handoff into this model (any prefix) vs its clean baseline.
        into_ci_low: lower bound of its interval.
        into_ci_high: upper bound.
        into_n: checked handoff turns into this model behind ``into_delta``.
        into_p_value: raw two-sided p-value of ``into_delta`` (dual to its interval).
        into_p_adjusted: Benjamini–Hochberg adjusted ``into_p_value`` over the fit's models.
        into_significant: ``into_p_adjusted`` ≤ ``RefitResult.fdr``.
    """

    prefix_influence: float
    prefix_influence_se: float
    suffix_susceptibility: float
    suffix_susceptibility_se: float
    n: int
    into_delta: float = NAN
    into_ci_low: float = NAN
    into_ci_high: float = NAN
    into_n: int = 0
    into_p_value: float = NAN
    into_p_adjusted: float = NAN
    into_significant: bool = False


@dataclass(frozen=True)
class MarkovFit:
    """Two-state (pass/fail) Markov chain of one rule's verdicts for one model.

    Attributes:
        model: author of the later turn of each transition.
        rule: rule name or ``"all"``.
        turns: which transitions were counted: ``all`` (pooled, includes handoff
            ``unknown``), ``handoff`` (into a handoff turn: the chain of a hypothetical
            conversation in which *every* turn is a handoff — its ``stationary`` is that
            chain's long-run level, not "adherence after a handoff") or ``same_author``.
        p_tf: P(fail at next check | pass now).
        p_tf_ci: Wilson interval of ``p_tf``.
        p_ft: P(pass at next check | fail now).
        p_ft_ci: Wilson interval of ``p_ft``.
        stationary: long-run adherence p_FT / (p_TF + p_FT); NaN when both are 0.
        stationary_ci: interval of ``stationary``.
        half_life_turns: turns for the distance to ``stationary`` to halve; inf when
            the chain never moves, 0 when it mixes in one step.
        initial: observed adherence at depth bucket 1 (start of the implied curve); NaN for a
            model never checked at depth 1, whose curve starts at its first bucket's adherence.
        log_loss: mean binomial cross-entropy of the implied curve vs observed checks.
        mse: mean squared error (Brier) of the curve's probability vs every observed check.
        n_transitions: pass/fail transitions used.
        n_from_pass: transitions out of pass.
        n_from_fail: transitions out of fail.
    """

    model: str
    rule: str
    p_tf: float
    p_tf_ci: tuple[float, float]
    p_ft: float
    p_ft_ci: tuple[float, float]
    stationary: float
    stationary_ci: tuple[float, float]
    half_life_turns: float
    log_loss: float
    mse: float
    n_transitions: int
    initial: float = NAN
    turns: str = "all"
    n_from_pass: int = 0
    n_from_fail: int = 0


@dataclass(frozen=True)
class DepthCurve:
    """Observed adherence by depth bucket (Wilson intervals) and the Markov-implied curve.

    Attributes:
        model: the suffix model (all its checked turns, any prefix).
        rule: rule name or ``"all"``.
        buckets: bucket labels in depth order.
        n: checked turns (pass + fail) per bucket.
        adherence: pass share per bucket (NaN where n = 0).
        ci_low: Wilson lower bounds.
        ci_high: Wilson upper bounds.
        fitted: pooled Markov curve averaged over each bucket's depths (NaN if no fit).
    """

    model: str
    rule: str
    buckets: tuple[str, ...]
    n: tuple[int, ...]
    adherence: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    fitted: tuple[float, ...]


@dataclass(frozen=True)
class CellAdherence:
    """Adherence of one cell (prefix_model → model) by depth bucket, with Wilson intervals.

    Attributes:
        prefix_model: author of the previous turn (``none`` at depth 1, ``unknown``).
        model: author of the checked turns.
        rule: rule name or ``"all"``.
        n: checked turns (pass + fail) per bucket, in ``RefitResult.buckets`` order.
        adherence: pass share per bucket (NaN where n = 0).
        ci_low: Wilson lower bounds.
        ci_high: Wilson upper bounds.
    """

    prefix_model: str
    model: str
    rule: str
    n: tuple[int, ...]
    adherence: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]


@dataclass(frozen=True)
class RuleFit:
    """Everything the refit estimates for one rule (or ``"all"``, pooled over rules).

    Attributes:
        rule: rule name or ``"all"``.
        mu: μ, the average handoff effect across ordered pairs.
        mu_se: standard error of μ.
        r2: weighted (1/var) R² of the decomposition over the observed pairs.
        r2_unweighted: ordinary R² over the same pairs.
        n_pairs: observed off-diagonal pairs the decomposition was fitted on.
        models: per model π/σ (null where not estimable) and Δ into the model.
        pairs: every ordered pair of distinct models in the fit (observed or not).
        markov: pooled Markov fit per model.
        markov_handoff_turns: fit from transitions into handoff turns (see ``MarkovFit.turns``).
        markov_same_author: fit from transitions into same-author turns.
        curves: observed/fitted depth curve per model.
        cells: adherence by depth of every cell with checked turns (incl. ``none`` and
            ``unknown`` prefixes), pooled over rules: filled in the ``all`` fit only (per
            rule they would grow as rules × K², per-model curves are in ``curves``).
        r2_adjusted: R² adjusted for the decomposition's effective degrees of freedom.
        dispersion: overdispersion φ ≥ 1 applied to the decomposition's covariance.
        switch_costs: experimental switch costs from shadow continuation (``SwitchCost``),
            one per (prefix model, model) with shadow pairs; empty without shadow data.
        prior_sd_pi_pp: prior SD of π the decomposition used, in percentage points
            (fitted by marginal likelihood with ``prior: empirical``, floored at
            ``prior_sd_pp``; null without a ridge).
        prior_sd_sigma_pp: the same for σ.
        handoff_after_fail_ratio: handoff rate of the turn after a failed check over the rate
            after a passed one (``refit.routing_check``); near 1 when routing ignores verdicts.
        handoff_after_fail_ci: its interval (log scale, clustered counts).
        verdict_routing: the interval's lower bound exceeds 1.25: handoffs follow failures,
            so Δ of this fit is biased negative (the refit's ``note`` says so).
    """

    rule: str
    mu: float
    mu_se: float
    r2: float
    r2_unweighted: float
    n_pairs: int
    models: dict[str, ModelScores] = field(default_factory=dict)
    pairs: Sequence[PairEffect] = field(default_factory=list)
    markov: dict[str, MarkovFit] = field(default_factory=dict)
    markov_handoff_turns: dict[str, MarkovFit] = field(default_factory=dict)
    markov_same_author: dict[str, MarkovFit] = field(default_factory=dict)
    curves: dict[str, DepthCurve] = field(default_factory=dict)
    cells: list[CellAdherence] = field(default_factory=list)
    r2_adjusted: float = NAN
    dispersion: float = 1.0
    switch_costs: list[SwitchCost] = field(default_factory=list)
    prior_sd_pi_pp: float = NAN
    prior_sd_sigma_pp: float = NAN
    handoff_after_fail_ratio: float = NAN
    handoff_after_fail_ci: tuple[float, float] = (NAN, NAN)
    verdict_routing: bool = False

    def switch_cost(self, prefix_model: str, model: str) -> SwitchCost | None:
        """The experimental switch cost of one ordered pair, if shadow pairs exist."""
        return next(
            (s for s in self.switch_costs if s.prefix_model == prefix_model and s.model == model), None
        )

    @property
    def residuals(self) -> dict[str, float]:
        """Residual Δ − risk per observed pair, keyed ``"A->B"``."""
        return {f"{p.prefix_model}->{p.model}": p.residual for p in self.pairs if not math.isnan(p.residual)}

    def pair(self, prefix_model: str, model: str) -> PairEffect | None:
        """The entry of one ordered pair, if both models are known."""
        for p in self.pairs:
            if p.prefix_model == prefix_model and p.model == model:
                return p
        return None


@dataclass(frozen=True)
class InputRepair:
    """A cell whose conversation-cluster sums contradicted its checks or each other in an
    approximate source (Prometheus, a multiprocess directory), and how it was read instead.

    Attributes:
        rule: the rule, or ``"all"`` for the sums pooled over rules.
        prefix_model: the cell's prefix model.
        model: the cell's model.
        violated: the relations that failed beyond the tolerance, e.g. ``checks <= n2``.
        conversations: G as read.
        y2: Σy² as read.
        yn: Σyn as read.
        n2: Σn² as read.
        checks: the cell's checked turns N (the clean baseline's on the diagonal).
        passes: their passes Y.
        action: ``one_conversation`` (the cell read as one conversation holding all its checks:
            design effect N, the widest reading) or ``conversations_dropped`` (only G exceeded the
            checks: G ignored, the cell counts as N²/Σn² conversations).
    """

    rule: str
    prefix_model: str
    model: str
    violated: tuple[str, ...]
    conversations: int
    y2: int
    yn: int
    n2: int
    checks: int
    passes: int
    action: str


@dataclass(frozen=True)
class ShadowInputRepair:
    """A shadow pair cell of an approximate source whose cluster sums no conversations can give.

    Its sums contradicted its paired table or each other in Prometheus or a multiprocess
    directory; ``action`` says how it was read instead.

    Attributes:
        rule: the rule, or ``"all"`` for the sums pooled over rules.
        prefix_model: A, who wrote the prefix.
        model: B, the other continuation.
        violated: the relations that failed beyond the tolerance, e.g. ``pairs <= n2``.
        conversations: G as read.
        b2: Σb² as read (b: pairs only B passed, per conversation).
        c2: Σc² as read (c: pairs only A passed).
        bc: Σbc as read.
        bn: Σbn as read.
        cn: Σcn as read.
        n2: Σn² as read.
        pairs: the cell's pairs N (its paired table's total).
        model_only: B, pairs only B passed.
        prefix_only: C, pairs only A passed.
        action: ``one_conversation`` (read as one conversation holding all its pairs: design
            effect N, the widest reading) or ``conversations_dropped`` (only G exceeded the pairs:
            G ignored, the cell counts as N²/Σn² conversations).
    """

    rule: str
    prefix_model: str
    model: str
    violated: tuple[str, ...]
    conversations: int
    b2: int
    c2: int
    bc: int
    bn: int
    cn: int
    n2: int
    pairs: int
    model_only: int
    prefix_only: int
    action: str


@dataclass(frozen=True)
class RefitResult:
    """A full refit: one ``RuleFit`` per rule plus ``"all"``.

    Attributes:
        created_at: UNIX time of the refit.
        source: where the counts came from (``local``, ``prometheus://…``, a file).
        observational: True for production counts (Δ is not a randomized contrast).
        note: plain-language caveat shown with the numbers.
        rules: fits by rule name, including ``"all"``.
        confidence: interval level used.
        min_n: minimum checked turns for a pair/cell to be reported.
        prior_sd_pp: prior SD of π and σ in percentage points (the decomposition's ridge;
            the least SD with ``prior = "empirical"``).
        prior: ``empirical`` (prior SDs fitted per rule, see ``RuleFit.prior_sd_pi_pp``) or
            ``fixed``.
        buckets: depth bucket labels used.
        window_s: time window the counts cover (a Prometheus source's ``--window``), if any.
        version: schema version of this document.
        fdr: Benjamini–Hochberg level behind ``PairEffect.significant``.
        markov_min_transitions: transitions needed out of each state to publish a chain.
        clustered: intervals are conversation-clustered (the source had cluster sums).
        clean_baseline: the baseline holds only clean same-author turns (else all of them).
        depth_adjusted: within-bucket depth adjustment applied (the source had depth sums).
        excluded_models: models beyond ``refit.max_models``, left out of the fit.
        excluded_rules: rules beyond ``refit.max_rules``, left out of the fit.
        switch_cost_note: what ``RuleFit.switch_costs`` estimate and what they are compared
            with (empty when the counts hold no shadow pairs).
        input_repairs: cells whose cluster sums contradicted their checks in an approximate
            source and were read conservatively (the largest 100; see ``InputRepair``).
        input_repaired_cells: how many cells were repaired in all.
        shadow_input_repairs: shadow pair cells whose cluster sums contradicted their paired
            table in an approximate source and were read conservatively (the largest 100; see
            ``ShadowInputRepair``).
        shadow_input_repaired_cells: how many shadow pair cells were repaired in all.
    """

    created_at: float
    source: str
    observational: bool
    note: str
    rules: dict[str, RuleFit]
    confidence: float = 0.95
    min_n: int = 30
    prior_sd_pp: float = 5.0
    buckets: tuple[str, ...] = ()
    window_s: float | None = None
    version: int = SCHEMA_VERSION
    fdr: float = 0.05
    markov_min_transitions: int = 30
    clustered: bool = False
    clean_baseline: bool = False
    depth_adjusted: bool = False
    excluded_models: tuple[str, ...] = ()
    excluded_rules: tuple[str, ...] = ()
    switch_cost_note: str = ""
    prior: str = "fixed"
    input_repairs: tuple[InputRepair, ...] = ()
    input_repaired_cells: int = 0
    shadow_input_repairs: tuple[ShadowInputRepair, ...] = ()
    shadow_input_repaired_cells: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN/inf become null/"inf")."""
        return {"schema": SCHEMA, **_encode(self)}

    def to_json(self, *, indent: int | None = 2) -> str:
        """The versioned JSON document."""
        return _dumps(self.to_dict(), indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> RefitResult:
        """Rebuild from ``to_dict`` output; raises ``InputError`` for other schemas/versions and,
        naming the key, for values of another type or shape than ``to_dict`` writes."""
        result = _load_versioned(cls, data, source)
        _check_buckets(result, source)
        return result

    @classmethod
    def from_json(cls, text: str, *, source: str = "<json>") -> RefitResult:
        """Rebuild from ``to_json`` output."""
        return cls.from_dict(parse_json_document(text, source), source=source)


@dataclass(frozen=True)
class CellMean:
    """Mean episode score of one switch-matrix cell with a BCa interval."""

    prefix_model: str
    model: str
    n: int
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class SwitchMatrixResult:
    """Offline switch matrix: paired BCa Δ per cell, BCa cell means, decomposition.

    ``fit.pairs`` carry the paired-bootstrap Δ intervals (not observational: every
    episode ran under every cell), raw and Benjamini–Hochberg adjusted p-values;
    ``significant`` = adjusted p ≤ ``fdr``. The JSON document puts ``mu``, ``r2``,
    ``models`` and ``pairs`` at the top level like a ``RuleFit``, plus ``cells``.

    Attributes:
        clusters: scripts resampled as the top level of the bootstrap (1 = episodes only).
        min_n: paired episodes a pair needs to be reported.
        fdr: false-discovery rate of ``significant``.
        authors: requested model or group → the author that answered it; models and
            pairs are named by author, the names production uses.
        off_author_episodes: episode cells dropped because a router fallback made
            another author write part of them.
    """

    created_at: float
    source: str
    n_episodes: int
    resamples: int
    seed: int | None
    confidence: float
    fit: RuleFit
    cells: list[CellMean]
    version: int = SWITCH_MATRIX_VERSION
    clusters: int = 1
    min_n: int = 20
    fdr: float = 0.05
    authors: dict[str, str] = field(default_factory=dict)
    off_author_episodes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; the fit's fields are flattened to the top level."""
        d = _encode(self)
        fit = d.pop("fit")
        fit.pop("cells")  # the matrix's own ``cells`` (BCa cell means) take that key
        return {"schema": "handoffmon.switch_matrix", **d, **fit}

    def to_json(self, *, indent: int | None = 2) -> str:
        """The versioned JSON document."""
        return _dumps(self.to_dict(), indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> SwitchMatrixResult:
        """Rebuild from ``to_dict`` output; raises ``InputError`` naming the key of a malformed value."""
        if not isinstance(data, dict):
            return _load_versioned(cls, data, source, schema="handoffmon.switch_matrix")
        data = dict(data)
        fit_keys = {f.name for f in dataclasses.fields(RuleFit)} - {"cells"}
        data["fit"] = {k: data.pop(k) for k in list(data) if k in fit_keys}
        return _load_versioned(
            cls, data, source, schema="handoffmon.switch_matrix", known=SWITCH_MATRIX_VERSION, nested="fit"
        )


_T = typing.TypeVar("_T")


def _load_versioned(
    cls: type[_T], data: Any, source: str, schema: str = SCHEMA, known: int = SCHEMA_VERSION, nested: str = ""
) -> _T:
    """``data`` decoded as ``cls``; ``InputError`` "<source>: <key path>: <what is wrong>" for a
    version that is not an integer from 1 to ``known`` and for any value of another type or shape
    than the dataclasses declare (a list where an object is, a string where a number is, a
    missing field). ``nested``: a key whose fields the document keeps at its top level."""
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise InputError(f"{source}: not a {schema} document")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= known:
        raise InputError(
            f"{source}: version: unsupported {schema} version {json_shown(version)} "
            f"(this reader reads 1 to {known})"
        )
    body = {k: v for k, v in data.items() if k != "schema"}
    try:
        return typing.cast(_T, _decode(cls, body))
    except _BadValue as exc:
        path = "".join(reversed(exc.path)).lstrip(".")
        if nested and path.startswith(f"{nested}."):
            path = path[len(nested) + 1 :]
        raise InputError(f"{source}: {path or '(document)'}: {exc.message}") from None
    except (TypeError, ValueError) as exc:  # a record's own check (none yet): still no traceback
        raise InputError(f"{source}: malformed {schema} document: {exc}") from exc


MAX_CREATED_AT = 32503680000.0
"""Year 3000: a later ``created_at`` is not a UNIX time in seconds (milliseconds, a damaged file)."""


def _check_buckets(result: RefitResult, source: str) -> None:
    """``InputError`` naming the key where per-bucket values do not run along the buckets.

    ``buckets`` must be depth bucket labels as ``DepthBuckets`` writes them, every curve's
    buckets among them, and each per-bucket list (``n``, ``adherence``, its interval,
    ``fitted``) as long as its buckets, with counts ≥ 0 and shares in [0, 1]: the report zips
    them and ``shapes export`` looks each curve bucket up in ``buckets``. Also ``created_at`` a
    UNIX time in seconds and every pair's ``n`` ≥ 0 (the report dates and sizes by them)."""
    from handoffmon.depth import DepthBuckets

    def bad(path: str, message: str) -> InputError:
        return InputError(f"{source}: {path}: {message}")

    labels = result.buckets
    for i, label in enumerate(labels):
        if not BUCKET_LABEL.match(label):
            raise bad(f"buckets[{i}]", f"{label!r} is not a depth bucket label (like '1', '3-4' or '97+')")
    try:
        rebuilt = DepthBuckets.from_labels(labels).labels if labels else labels
    except ValueError as exc:  # no bucket starting at 1
        raise bad("buckets", f"not depth buckets: {exc}") from None
    if rebuilt != labels:
        raise bad("buckets", f"{', '.join(labels)} are not contiguous depth buckets from 1 in depth order")
    if not (math.isfinite(result.created_at) and 0.0 <= result.created_at < MAX_CREATED_AT):
        raise bad("created_at", f"expected a UNIX time in seconds, got {result.created_at!r}")
    for name, fit in result.rules.items():
        for j, pair in enumerate(fit.pairs):
            if pair.n < 0:
                raise bad(f"rules.{name}.pairs[{j}].n", f"expected a count ≥ 0, got {pair.n}")
        for model, curve in fit.curves.items():
            at = f"rules.{name}.curves.{model}"
            for i, label in enumerate(curve.buckets):
                if label not in labels:
                    raise bad(f"{at}.buckets[{i}]", f"{label!r} is not one of the refit's buckets")
            _check_per_bucket(curve, at, "buckets", len(curve.buckets), bad)
        for j, cell in enumerate(fit.cells):
            _check_per_bucket(cell, f"rules.{name}.cells[{j}]", "the refit's buckets", len(labels), bad)


def _check_per_bucket(
    row: DepthCurve | CellAdherence, at: str, along: str, length: int, bad: Callable[[str, str], InputError]
) -> None:
    for key in ("n", "adherence", "ci_low", "ci_high", "fitted"):
        values = getattr(row, key, None)
        if values is None:
            continue
        if len(values) != length:
            raise bad(f"{at}.{key}", f"{len(values)} value(s), but {along} has {length}")
        for i, x in enumerate(values):
            if key == "n" and x < 0:
                raise bad(f"{at}.n[{i}]", f"expected a count ≥ 0, got {x}")
            if key != "n" and not (math.isnan(x) or 0.0 <= x <= 1.0):
                raise bad(f"{at}.{key}[{i}]", f"expected a share in [0, 1] or null, got {x!r}")


class _BadValue(Exception):
    """A value of the wrong type or shape; ``path`` collects the keys while unwinding (innermost first)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def _expected(what: str, value: Any) -> _BadValue:
    return _BadValue(f"expected {what}, got {json_got(value)}")


_SPECS: dict[type, tuple[dict[str, Any], frozenset[str]]] = {}
"""Per dataclass: type hints of its fields and the fields without a default."""


def _spec(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    spec = _SPECS.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        required = frozenset(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        spec = _SPECS[cls] = ({f.name: hints[f.name] for f in fields}, required)
    return spec


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
"""Field names per dataclass type (``dataclasses.fields`` is slow in a hot loop)."""


def _encode(obj: Any) -> Any:
    """Dataclasses → dicts, tuples → lists, NaN → None, ±inf → "inf"/"-inf"."""
    t = type(obj)
    if t is float:
        return obj if obj - obj == 0.0 else _non_finite(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is PairTable:
        return obj.encoded()
    names = _FIELD_NAMES.get(t)
    if names is None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELD_NAMES[t] = tuple(f.name for f in dataclasses.fields(obj))
    if names is not None:
        return {name: _encode(getattr(obj, name)) for name in names}
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, (int, str)):  # bool and enum subclasses too
        return obj
    if isinstance(obj, float) or hasattr(obj, "__float__"):
        x = float(obj)
        return x if x - x == 0.0 else _non_finite(x)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _dumps(doc: dict[str, Any], indent: int | None) -> str:
    """The document as JSON text, written by orjson (a K = 100 refit's 50 MB document: 0.15 s
    instead of ``json.dumps``' 1.6 s compact, 5 s indented).

    Same keys, order and values as ``json.dumps`` (``json.loads`` reads it back equal);
    different bytes: non-ASCII stays UTF-8 instead of ``\\u`` escapes, exponents are
    written ``1e-7`` (``json``: ``1e-07``), compact output has no spaces after ``,``/``:``,
    and ``indent`` is 2 or None (orjson indents by two only). ``_encode`` has already
    mapped NaN/±inf to null/"inf" (orjson would write null for any it missed, where
    ``allow_nan=False`` raised), so the guard is ``_encode``'s, tested in test_result.
    """
    if indent not in (None, 2):
        raise ValueError(f"indent must be 2 or None, got {indent!r}")
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent == 2 else 0)
    return orjson.dumps(doc, option=option).decode()


def _non_finite(x: float) -> Any:
    if math.isnan(x):
        return None
    return "inf" if x > 0 else "-inf"


def encode_floats(values: Any) -> list[Any]:
    """A float array as ``_encode`` writes each element (NaN → None, ±inf → "inf"/"-inf")."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    out: list[Any] = arr.tolist()
    for i in np.flatnonzero(~np.isfinite(arr)).tolist():
        out[i] = _non_finite(out[i])
    return out


def _decode(hint: Any, value: Any) -> Any:
    """Inverse of ``_encode`` guided by type hints; ``_BadValue`` for a value of another type."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        if type(value) is not dict:
            raise _expected("an object", value)
        hints, required = _spec(typing.cast(type, hint))
        for name in sorted(required - value.keys()):
            exc = _BadValue("missing")
            exc.path.append(f".{name}")
            raise exc
        kwargs = {}
        for k, v in value.items():
            if k in hints:
                kwargs[k] = _decode_at(hints[k], v, f".{k}")
        return typing.cast(Any, hint)(**kwargs)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        return _decode(next(a for a in args if a is not type(None)), value)
    if origin is dict:
        if type(value) is not dict:
            raise _expected("an object", value)
        _, vt = typing.get_args(hint)
        return {k: _decode_at(vt, v, f".{k}") for k, v in value.items()}
    if origin in (list, Sequence, tuple):
        if type(value) is not list:
            raise _expected("a list", value)
        args = typing.get_args(hint)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise _BadValue(f"expected a list of {len(args)} values, got {len(value)}")
            return tuple(_decode_at(a, v, f"[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
        items = [_decode_at(args[0], v, f"[{i}]") for i, v in enumerate(value)]
        return items if origin is not tuple else tuple(items)
    if hint is float:
        if value is None:
            return NAN
        if type(value) is float or type(value) is int:
            return float(value)
        if value in ("inf", "-inf"):
            return float(value)
        raise _expected("a number, null, 'inf' or '-inf'", value)
    if hint is int:
        if type(value) is float and value.is_integer():
            return int(value)  # 3.0 as another JSON writer may put it
        if type(value) is not int:
            raise _expected("an integer", value)
        return value
    if hint is str:
        if type(value) is not str:
            raise _expected("a string", value)
        return value
    if hint is bool:
        if type(value) is not bool:
            raise _expected("true or false", value)
        return value
    return value


def _decode_at(hint: Any, value: Any, key: str) -> Any:
    """``_decode`` of the value at ``key`` (``.name`` or ``[i]``), which a ``_BadValue`` records."""
    try:
        return _decode(hint, value)
    except _BadValue as exc:
        exc.path.append(key)
        raise
