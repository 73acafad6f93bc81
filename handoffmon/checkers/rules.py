"""Rules (a checker + scope), per-request rules from metadata, and the never-raising RuleSet."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from handoffmon.checkers.base import (
    CheckContext,
    Checker,
    CheckerRegistry,
    CheckOutcome,
    ParamError,
    UnknownChecker,
)
from handoffmon.checkers.builtin import default_registry
from handoffmon.checkers.safe_regex import clean_text
from handoffmon.config import RuleConfig, ScopeConfig
from handoffmon.errors import RuleError
from handoffmon.types import CheckResult

METADATA_KEY = "handoffmon"
"""Request metadata namespace: ``metadata={"handoffmon": {"rules": [...]}}``."""

REQUEST_SOURCE = "<request metadata>"
_VALID_VERDICTS = frozenset({"pass", "fail", "not_applicable"})


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
        time linear; size caps keep the rest bounded). ``duration_s`` is wall time.
        """
        start, cpu_start = time.perf_counter(), time.thread_time()
        try:
            c = replace(ctx, rule=self.name) if self.checker.stateful else ctx
            out = self.checker.fn(reply, c)
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
            return CheckResult(self.name, "error", "over_budget", duration)
        return CheckResult(self.name, out.verdict, out.reason, duration, out.extracted)


class RuleSet:
    """The configured rules plus compiled per-request rules; evaluates every applicable one.

    Thread-safe: rules are immutable and the per-request compile cache is locked.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        *,
        registry: CheckerRegistry | None = None,
        budget_s: float = 0.05,
        max_request_rules: int = 32,
        max_request_rule_bytes: int = 2048,
        cache_size: int = 1024,
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.names: tuple[str, ...] = tuple(r.name for r in self.rules)
        self.registry = registry if registry is not None else default_registry()
        self.budget_s = budget_s
        self.max_request_rules = max_request_rules
        self.max_request_rule_bytes = max_request_rule_bytes
        self._cache_size = cache_size
        self._cache: OrderedDict[str, Rule | RuleError] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls,
        rules: Sequence[RuleConfig],
        *,
        source: str = "<config>",
        budget_s: float = 0.05,
        registry: CheckerRegistry | None = None,
    ) -> RuleSet:
        """Compile configured rules; raises ``RuleError`` naming the rule, the key and ``source``."""
        rs = cls(registry=registry, budget_s=budget_s)
        compiled: list[Rule] = []
        seen: set[str] = set()
        for cfg in rules:
            if cfg.name in seen:
                raise RuleError("duplicate rule name", key=f"rules[{cfg.name!r}].name", source=source)
            seen.add(cfg.name)
            compiled.append(rs.compile(cfg, where=f"rules[{cfg.name!r}]", source=source))
        rs.rules = tuple(compiled)
        rs.names = tuple(r.name for r in compiled)
        return rs

    def compile(self, cfg: RuleConfig, *, where: str = "rules", source: str = "<config>") -> Rule:
        """Build one rule; raises ``RuleError`` with key ``<where>.check`` or ``<where>.params.<key>``."""
        try:
            checker = self.registry.build(cfg.check, cfg.params)
        except UnknownChecker:
            known = ", ".join(n for n in self.registry.names() if not n.startswith("ifeval"))
            raise RuleError(
                f"unknown checker {cfg.check!r} (known: {known}, ifeval:<instruction id>)",
                key=f"{where}.check",
                source=source,
            ) from None
        except ParamError as exc:
            key = f"{where}.params.{exc.key}" if exc.key else f"{where}.params"
            raise RuleError(f"rule {cfg.name!r}: {exc}", key=key, source=source) from exc
        return Rule(cfg.name, checker, Scope.from_config(cfg.scope), self.budget_s)

    def parse_request_rules(self, metadata: Mapping[str, Any] | None) -> tuple[RuleConfig, ...]:
        """Per-request rules from ``metadata={"handoffmon": {"rules": [{name, check, params, scope?}]}}``.

        Every rule is compiled (and cached) so bad ones fail here. Raises ``RuleError``.
        """
        if not metadata or not isinstance(metadata, Mapping):
            return ()
        section = metadata.get(METADATA_KEY)
        if section is None:
            return ()
        if not isinstance(section, Mapping):
            raise RuleError("must be a mapping", key=f"metadata.{METADATA_KEY}", source=REQUEST_SOURCE)
        raw = section.get("rules")
        if raw is None:
            return ()
        base = f"metadata.{METADATA_KEY}.rules"
        if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
            raise RuleError("must be a list of rules", key=base, source=REQUEST_SOURCE)
        if len(raw) > self.max_request_rules:
            raise RuleError(
                f"at most {self.max_request_rules} rules per request", key=base, source=REQUEST_SOURCE
            )
        return tuple(self._parse_one(item, i, base) for i, item in enumerate(raw))

    def _parse_one(self, item: Any, index: int, base: str) -> RuleConfig:
        label = item.get("name") if isinstance(item, Mapping) else None
        where = f"{base}[{label!r}]" if isinstance(label, str) and label else f"{base}[{index}]"
        try:
            cfg = RuleConfig.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise RuleError(
                err["msg"], key=f"{where}.{loc}" if loc else where, source=REQUEST_SOURCE
            ) from exc
        if cfg.name in self.names:
            raise RuleError(
                f"rule name {cfg.name!r} is already a configured rule",
                key=f"{where}.name",
                source=REQUEST_SOURCE,
            )
        result = self._compiled(cfg, where)
        if isinstance(result, RuleError):
            raise result
        return cfg

    def _compiled(self, cfg: RuleConfig, where: str = "") -> Rule | RuleError:
        """Compile a per-request rule once; cached (LRU) by its canonical JSON.

        Rules larger than ``max_request_rule_bytes`` (canonical JSON) are refused: a client
        must not be able to make the background worker compile huge keyword lists or
        schemas on every request.
        """
        key = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, default=str)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        where = where or f"metadata.{METADATA_KEY}.rules[{cfg.name!r}]"
        if len(key) > self.max_request_rule_bytes:
            return RuleError(
                f"rule is {len(key)} bytes as JSON; per-request rules are limited to "
                f"{self.max_request_rule_bytes}",
                key=where,
                source=REQUEST_SOURCE,
            )
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
        self, reply: str, ctx: CheckContext, extra_rules: Sequence[RuleConfig] = ()
    ) -> tuple[CheckResult, ...]:
        """Run every applicable configured rule, then every applicable extra rule. Never raises.

        Args:
            reply: the assistant reply text.
            ctx: the turn's context.
            extra_rules: the conversation's accumulated per-request rules. One whose name
                collides with a configured rule is skipped; one that fails to compile
                yields an ``error`` verdict with reason ``invalid_rule``.
        """
        text = clean_text(reply if isinstance(reply, str) else "" if reply is None else str(reply))
        results: list[CheckResult] = []
        for rule in self.rules:
            self._run_if_applies(rule, text, ctx, results)
        for cfg in extra_rules:
            name = getattr(cfg, "name", None)
            if name in self.names:
                continue
            compiled = self._compiled(cfg) if isinstance(cfg, RuleConfig) else None
            if not isinstance(compiled, Rule):
                results.append(CheckResult(str(name or "invalid"), "error", "invalid_rule"))
            else:
                self._run_if_applies(compiled, text, ctx, results)
        return tuple(results)

    @staticmethod
    def _run_if_applies(rule: Rule, text: str, ctx: CheckContext, out: list[CheckResult]) -> None:
        """Run ``rule`` when its scope covers the turn; a scope that raises is an ``error`` verdict.

        A malformed context must not break evaluation, nor hide the rule: the error
        verdict is counted like a checker error (``monitor_errors{stage="check"}``).
        """
        try:
            applies = rule.scope.applies(ctx)
        except Exception:
            out.append(CheckResult(rule.name, "error", "scope_error"))
            return
        if applies:
            out.append(rule.run(text, ctx))
