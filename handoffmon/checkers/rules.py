"""Rules (a checker + scope), per-request rules from metadata, and the never-raising RuleSet."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from handoffmon.checkers.base import (
    OVER_BUDGET,
    OVERRUN,
    TOO_LARGE,
    TURN_BUDGET,
    BuildLimits,
    CheckContext,
    Checker,
    CheckerRegistry,
    CheckOutcome,
    ParamError,
    UnknownChecker,
)
from handoffmon.checkers.builtin import default_registry
from handoffmon.checkers.extracted import CLEAR, ExtractedMemory, FingerprintMemory
from handoffmon.checkers.request_rules import (
    DEFAULT_POLICY,
    METADATA_KEY,
    REQUEST_REGEX_MAX_MEM,
    REQUEST_SOURCE,
    RequestRuleGate,
    RequestRulePolicy,
)
from handoffmon.checkers.safe_regex import clean_text, max_cost_ns
from handoffmon.config import RuleConfig, ScopeConfig
from handoffmon.errors import RuleError
from handoffmon.types import CheckResult, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.config import HandoffmonConfig

__all__ = ["METADATA_KEY", "REQUEST_SOURCE", "Rule", "RuleSet", "Scope"]

_log = logging.getLogger("handoffmon.checkers")
_VALID_VERDICTS = frozenset({"pass", "fail", "not_applicable"})
_OVERRUN_NS = OVERRUN * 1e9


@dataclass(frozen=True, slots=True)
class Scope:
    """Which turns a rule applies to; an empty selector matches everything.

    ``model_groups``/``routes`` match ``CheckContext.model_group``/``route`` exactly;
    ``tags`` matches when the context carries ANY of them; depth is inclusive.
    """

    model_groups: frozenset[str] = frozenset()
    routes: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    min_depth: int = 1
    max_depth: int | None = None

    @classmethod
    def from_config(cls, cfg: ScopeConfig) -> Scope:
        """Build from the config section."""
        return cls(
            frozenset(cfg.model_groups),
            frozenset(cfg.routes),
            frozenset(cfg.tags),
            cfg.min_depth,
            cfg.max_depth,
        )

    def applies(self, ctx: CheckContext) -> bool:
        """Whether a turn with this context is in scope."""
        if ctx.depth < self.min_depth or (self.max_depth is not None and ctx.depth > self.max_depth):
            return False
        if self.model_groups and ctx.model_group not in self.model_groups:
            return False
        if self.routes and ctx.route not in self.routes:
            return False
        return not self.tags or not self.tags.isdisjoint(ctx.tags)


@dataclass(frozen=True, slots=True)
class Rule:
    """A named, scoped, compiled checker with a time budget."""

    name: str
    checker: Checker
    scope: Scope = Scope()
    budget_s: float = 0.05

    def run(self, reply: str, ctx: CheckContext) -> CheckResult:
        """Run the checker; never raises. Raising or over budget → ``error`` verdict.

        The budget is CPU time on this thread: time spent waiting for the GIL or for a
        core (application threads, other processes) is not charged to the checker, so a
        busy host does not turn into error verdicts. Python cannot pre-empt a running
        function, so an over-budget check is detected after it returns (RE2 keeps regex
        time linear; size caps keep the rest bounded). A reply too long for the checker to
        finish within ``OVERRUN`` × the budget (its measured ``cost`` per character) is not
        run: ``error`` / ``too_large``; one that ran over is ``error`` / ``over_budget``. Both
        are limits, not failures (``LIMIT_REASONS``). ``duration_s`` is wall time.
        """
        checker = self.checker
        if checker.cost > 0 and len(reply) * checker.cost > self.budget_s * _OVERRUN_NS:
            return CheckResult(self.name, "error", TOO_LARGE, 0.0)
        start, cpu_start = time.perf_counter(), time.thread_time()
        try:
            c = replace(ctx, rule=self.name) if checker.stateful else ctx
            out = checker.fn(reply, c)
        except RecursionError:
            return CheckResult(self.name, "error", "raised:RecursionError", time.perf_counter() - start)
        except Exception as exc:  # the contract: a checker bug is a counted verdict, not a crash
            return CheckResult(
                self.name, "error", f"raised:{type(exc).__name__}", time.perf_counter() - start
            )
        duration = time.perf_counter() - start
        if not isinstance(out, CheckOutcome) or out.verdict not in _VALID_VERDICTS:
            return CheckResult(self.name, "error", "bad_outcome", duration)
        # CPU time never exceeds wall time: read the CPU clock again only when it could matter
        if duration > self.budget_s and time.thread_time() - cpu_start > self.budget_s:
            return CheckResult(self.name, "error", OVER_BUDGET, duration)
        extracted = None if out.extracted is None else ctx.memory.remember(self.name, str(out.extracted))
        return CheckResult(self.name, out.verdict, out.reason, duration, extracted)


class RuleSet:
    """The configured rules plus compiled per-request rules; evaluates every applicable one.

    Thread-safe: rules are immutable and the per-request compile cache is locked.

    Args:
        rules: compiled configured rules.
        registry: checker kinds (default: the built-ins).
        budget_s: per-check time budget.
        request: limits on rules requests declare (``request_rules`` config); the default
            is the config's default.
        memory: how values stateful checkers extract are stored between turns; values in
            clear by default (offline runs), keyed fingerprints in the pipeline.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        *,
        registry: CheckerRegistry | None = None,
        budget_s: float = 0.05,
        request: RequestRulePolicy = DEFAULT_POLICY,
        memory: ExtractedMemory = CLEAR,
    ) -> None:
        self.registry = registry if registry is not None else default_registry()
        self.budget_s = budget_s
        cap = max_cost_ns(budget_s, OVERRUN)
        self._limits = BuildLimits(max_cost_ns=cap)
        """Configured rules: a regex too slow for a 4,000-character reply fails at load."""
        self._request_limits = BuildLimits(max_cost_ns=cap, regex_max_mem=REQUEST_REGEX_MAX_MEM)
        """Declared rules, compiled on the check thread: RE2's memory bounds their compile time."""
        self.memory = memory
        self._cache_size = request.cache_size
        self._cache: OrderedDict[str, Rule | RuleError] = OrderedDict()
        self._lock = threading.Lock()
        self._request = request
        self._set_rules(tuple(rules))

    def _set_rules(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.names: tuple[str, ...] = tuple(r.name for r in rules)
        self._gate = RequestRuleGate(self._request, frozenset(self.names), self._compiled)

    @classmethod
    def from_config(
        cls,
        rules: Sequence[RuleConfig],
        *,
        source: str = "<config>",
        budget_s: float = 0.05,
        registry: CheckerRegistry | None = None,
        request: RequestRulePolicy = DEFAULT_POLICY,
        memory: ExtractedMemory = CLEAR,
    ) -> RuleSet:
        """Compile configured rules; raises ``RuleError`` naming the rule, the key and ``source``."""
        rs = cls(registry=registry, budget_s=budget_s, request=request, memory=memory)
        compiled: list[Rule] = []
        seen: set[str] = set()
        for cfg in rules:
            if cfg.name in seen:
                raise RuleError("duplicate rule name", key=f"rules[{cfg.name!r}].name", source=source)
            seen.add(cfg.name)
            compiled.append(rs.compile(cfg, where=f"rules[{cfg.name!r}]", source=source))
        rs._set_rules(tuple(compiled))
        return rs

    @classmethod
    def for_monitor(cls, config: HandoffmonConfig) -> RuleSet:
        """The pipeline's rule set: configured rules, the ``request_rules`` limits and the
        ``rule_state`` fingerprints (keyed; text only by opt-in). A rule that does not compile
        raises ``RuleError`` naming ``config.source``, the file the config came from."""
        state = config.rule_state
        key = state.hash_key.encode("utf-8") if state.hash_key is not None else None
        if key is None and config.store.backend != "memory":
            _log.warning(
                "handoffmon: rule_state.hash_key is not set, so answers stored by another replica "
                "or before a restart cannot be compared (answer_flip reads them as no previous answer)"
            )
        return cls.from_config(
            config.rules,
            source=config.source,
            budget_s=config.pipeline.check_budget_s,
            request=RequestRulePolicy.from_config(config.request_rules),
            memory=FingerprintMemory(key, text_ttl_s=state.text_ttl_s),
        )

    @property
    def request_rejections(self) -> dict[str, int]:
        """Rejected request-rule declarations so far, by reason code (``request_rules.CODES``)."""
        return dict(self._gate.rejections)

    def compile(self, cfg: RuleConfig, *, where: str = "rules", source: str = "<config>") -> Rule:
        """Build one rule; raises ``RuleError`` with key ``<where>.check`` or ``<where>.params.<key>``
        (a regex too slow for the check budget: ``safe_regex.MIN_REPLY_CHARS``). A rule from a
        request (``source`` is ``REQUEST_SOURCE``) is built within ``REQUEST_REGEX_MAX_MEM``."""
        limits = self._request_limits if source == REQUEST_SOURCE else self._limits
        try:
            checker = self.registry.build(cfg.check, cfg.params, limits)
        except UnknownChecker:
            known = ", ".join(n for n in self.registry.names() if not n.startswith("ifeval"))
            raise RuleError(
                f"unknown checker {cfg.check!r} (known: {known}, ifeval:<instruction id>, "
                "ifeval_loose:<instruction id>)",
                key=f"{where}.check",
                source=source,
            ) from None
        except ParamError as exc:
            key = f"{where}.params.{exc.key}" if exc.key else f"{where}.params"
            raise RuleError(f"rule {cfg.name!r}: {exc}", key=key, source=source) from exc
        return Rule(cfg.name, checker, Scope.from_config(cfg.scope), self.budget_s)

    def parse_request_rules(
        self, metadata: Mapping[str, Any] | None, *, declared: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[RuleConfig, ...]:
        """Per-request rules from ``metadata={"handoffmon": {"rules": [{name, check, params, scope?}]}}``.

        Checked against the ``request_rules`` limits (``declared``: the conversation's rules
        so far) and compiled (cached), all or nothing. Raises ``RequestRuleRejected`` (a
        ``RuleError``) with a reason code.
        """
        return self._gate.parse(metadata, declared)

    def declared_rule(self, raw: Mapping[str, Any]) -> RuleConfig:
        """A conversation's declared rule read back from its stored state, held to the same
        limits as a request's; raises ``RequestRuleRejected``."""
        return self._gate.admit_stored(raw)

    def _compiled(self, cfg: RuleConfig, where: str = "") -> Rule | RuleError:
        """Compile a per-request rule once; cached (LRU) by its JSON (pydantic's serializer:
        ~1 µs, where sorting keys would cost ~6; a client reordering params only costs a miss)."""
        key = cfg.model_dump_json()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        where = where or f"metadata.{METADATA_KEY}.rules[{cfg.name!r}]"
        try:
            result: Rule | RuleError = self.compile(cfg, where=where, source=REQUEST_SOURCE)
        except RuleError as exc:
            result = exc
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    @staticmethod
    def accumulate(previous: Sequence[RuleConfig], new: Sequence[RuleConfig]) -> tuple[RuleConfig, ...]:
        """A conversation's rules after a turn declares ``new`` ones (same name: the new one wins).

        Order is first declaration; this is how Multi-IF instructions accumulate.
        """
        merged: dict[str, RuleConfig] = {r.name: r for r in previous}
        for r in new:
            merged[r.name] = r
        return tuple(merged.values())

    def evaluate(
        self,
        reply: str,
        ctx: CheckContext,
        extra_rules: Sequence[RuleConfig] = (),
        *,
        skip: str | None = None,
    ) -> tuple[CheckResult, ...]:
        """Run every applicable configured rule, then every applicable extra rule. Never raises.

        Args:
            reply: the assistant reply text.
            ctx: the turn's context.
            extra_rules: the conversation's accumulated per-request rules. One whose name
                collides with a configured rule is skipped; one that fails to compile
                yields an ``error`` verdict with reason ``invalid_rule``. Together they may
                use ``OVERRUN`` × the budget of CPU (0.4 s by default): once past it, the rest
                yield ``error`` / ``turn_budget`` unrun, so sixteen declared rules that each
                stay under their own limit cannot hold a worker for seconds every turn.
            skip: a reason the reply cannot be checked (``tool_calls``: it only calls tools).
                Every applicable rule then yields ``not_applicable`` with this reason, unrun.
        """
        text = clean_text(reply if isinstance(reply, str) else "" if reply is None else str(reply))
        if ctx.memory is not self.memory:
            ctx = replace(ctx, memory=self.memory)
        results: list[CheckResult] = []
        append = results.append
        if skip is not None:
            for rule in self.rules:
                self._run_if_applies(rule, text, ctx, results, skip)
        else:
            for rule in self.rules:  # _run_if_applies, inlined for the configured rules
                try:
                    applies = rule.scope.applies(ctx)
                except Exception:
                    append(CheckResult(rule.name, "error", "scope_error"))
                    continue
                if applies:
                    append(rule.run(text, ctx))
        spent, share = 0.0, self.budget_s * OVERRUN  # CPU the declared rules of this turn may use
        for cfg in extra_rules:
            name = getattr(cfg, "name", None)
            if name in self.names:
                continue
            compiled = self._compiled(cfg) if isinstance(cfg, RuleConfig) else None
            if not isinstance(compiled, Rule):
                results.append(CheckResult(str(name or "invalid"), "error", "invalid_rule"))
            elif skip is None and spent > share:
                self._run_if_applies(compiled, text, ctx, results, TURN_BUDGET, verdict="error")
            else:
                cpu = time.thread_time()
                self._run_if_applies(compiled, text, ctx, results, skip)
                spent += time.thread_time() - cpu
        return tuple(results)

    @staticmethod
    def _run_if_applies(
        rule: Rule,
        text: str,
        ctx: CheckContext,
        out: list[CheckResult],
        skip: str | None = None,
        *,
        verdict: Verdict = "not_applicable",
    ) -> None:
        """Run ``rule`` when its scope covers the turn (``skip``: a ``verdict`` with that reason
        instead, unrun); a scope that raises is an ``error`` verdict.

        A malformed context must not break evaluation, nor hide the rule: the error
        verdict is counted like a checker error (``monitor_errors{stage="check"}``).
        """
        try:
            applies = rule.scope.applies(ctx)
        except Exception:
            out.append(CheckResult(rule.name, "error", "scope_error"))
            return
        if applies:
            out.append(rule.run(text, ctx) if skip is None else CheckResult(rule.name, verdict, skip))
