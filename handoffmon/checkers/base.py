"""The checker contract: context, outcome, typed parameters and the registry of checker factories."""

from __future__ import annotations

import builtins
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from handoffmon.checkers.extracted import CLEAR, ExtractedMemory
from handoffmon.types import TurnContext

CheckVerdict = Literal["pass", "fail", "not_applicable"]
"""What a checker may answer. ``error`` is reserved for the rule runner (raise / over budget)."""

_MISSING: Any = object()

OVERRUN = 8.0
"""A check whose predicted CPU time (reply length × ``Checker.cost``) is over this many times
its budget is not run: ``error`` / ``too_large``. Costs are the worst shapes measured on a
loaded 2-core VM (Punkt on ``a. a. a.`` costs 8 times what it does on prose); the margin
keeps ordinary long replies checked (a sentence count runs up to 72,700 characters under the
default 50 ms), while a 10 MB reply can no longer hold a worker for 40 s."""

TOO_LARGE = "too_large"
"""The ``error`` reason of a check not run because the reply is too long for its budget."""
TURN_BUDGET = "turn_budget"
"""The ``error`` reason of a declared rule not run because the turn's declared rules used
their share of CPU."""
OVER_BUDGET = "over_budget"
"""The ``error`` reason of a check that used more CPU than its budget (its verdict is dropped)."""
LIMIT_REASONS = frozenset({TOO_LARGE, TURN_BUDGET, OVER_BUDGET})
"""``error`` reasons that are handoffmon's own limits at work, not a failure: the checks show
them (``handoffmon_checks_total{verdict="error"}``, by reason in
``handoffmon_check_errors_total{rule, reason}``), ``monitor_errors`` does not count them, so a
deployment with long replies or a tight budget does not page as failing (MonitorErrors). A
check over its budget is the same limit found after the fact (Python cannot stop a check): the
budget counts the check's own CPU, but a CPU-starved host (SMT siblings, cache and frequency
contention) makes the same work cost more of it. A checker that raises or answers nonsense
(``raised:*``, ``bad_outcome``, ``scope_error``) is a failure and is counted."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a checker may look at besides the reply text.

    Attributes:
        turn: the pipeline's turn context; ``None`` offline (``check``/``ifeval`` commands, evals).
        model_group: the model or group the application asked for (scope ``model_groups``).
        route: application route name (scope ``routes``).
        tags: request metadata tags (scope ``tags``).
        user_message: text of the last user message (challenge detection); defaults to
            ``turn.user_message`` when a turn is given.
        previous: rule name → what the store kept of the value that rule extracted at this
            conversation's previous turn (``CheckResult.extracted``); read it through
            :meth:`previous_matches` / :attr:`previous_value`; see ``answer_flip``.
        depth: 1-based depth of the reply; taken from ``turn.depth`` when ``turn`` is given.
        rule: name of the rule being evaluated (set by the rule runner for stateful checkers).
        memory: how ``previous`` values are stored (set by the rule set: keyed fingerprints
            in the pipeline, values in clear offline).
    """

    turn: TurnContext | None = None
    model_group: str | None = None
    route: str | None = None
    tags: frozenset[str] = frozenset()
    user_message: str = ""
    previous: Mapping[str, str] = field(default_factory=dict)
    depth: int = 1
    rule: str = ""
    memory: ExtractedMemory = CLEAR

    def __post_init__(self) -> None:
        if self.turn is None:
            return
        if self.depth != self.turn.depth:
            object.__setattr__(self, "depth", self.turn.depth)
        if not self.user_message and self.turn.user_message:
            object.__setattr__(self, "user_message", self.turn.user_message)

    @property
    def previous_value(self) -> str | None:
        """What this rule extracted at the previous turn, as text; ``None`` when nothing was
        stored or only a fingerprint was (the default in the pipeline: use :meth:`previous_matches`)."""
        return self.memory.recall(self.previous.get(self.rule))

    def previous_matches(self, value: str) -> bool | None:
        """Whether this rule extracted ``value`` at the previous turn; ``None`` when unknown."""
        return self.memory.same(self.rule, self.previous.get(self.rule), value)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """A checker's answer.

    Attributes:
        verdict: pass, fail or not_applicable.
        reason: short machine-friendly reason; never reply content.
        extracted: value to remember for the next turn (stateful checkers), else ``None``;
            the rule runner turns it into its stored form (``CheckContext.memory``).
    """

    verdict: CheckVerdict
    reason: str = ""
    extracted: str | None = None


PASS = CheckOutcome("pass")
NOT_APPLICABLE_EMPTY = CheckOutcome("not_applicable", "empty_reply")

CheckFn = Callable[[str, CheckContext], CheckOutcome]
"""A built checker: a pure function of (reply text, context)."""


def passed(ok: bool, reason_if_fail: str) -> CheckOutcome:
    """``pass`` when ``ok`` else ``fail`` with the given reason."""
    return PASS if ok else CheckOutcome("fail", reason_if_fail)


class ParamError(ValueError):
    """A checker parameter is missing or invalid; ``key`` names it (``""`` = the whole params)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class BuildLimits:
    """What a checker built from params may cost, for the factories that measure it (the regex
    checkers, ``safe_regex``).

    Attributes:
        max_cost_ns: the most CPU per reply character its checks may take; a pattern measured
            above it is refused (``ParamError`` naming its key). ``None``: no limit.
        regex_max_mem: RE2's memory for one compiled pattern; compile time grows with it (with
            RE2's default 8 MiB, ``(\\pL|\\pN|\\pP){300}`` took 0.3 s to compile); a
            pattern that needs more is refused.
    """

    max_cost_ns: builtins.float | None = None
    regex_max_mem: builtins.int = 8 << 20


NO_LIMITS = BuildLimits()


class Params:
    """Typed, validated access to a rule's ``params`` mapping.

    Factories read every parameter through this object and call :meth:`finish`, so
    unknown keys and wrong types fail at load time naming the key. ``limits``: what the built
    checker may cost (:class:`BuildLimits`).
    """

    def __init__(self, raw: Mapping[str, Any], limits: BuildLimits = NO_LIMITS) -> None:
        if not isinstance(raw, Mapping):
            raise ParamError("", "params must be a mapping")
        self.limits = limits
        self._raw = dict(raw)
        self._seen: set[builtins.str] = set()
        self.cost: builtins.float | None = None
        """Set by a factory whose cost depends on its params (:meth:`set_cost`)."""

    def set_cost(self, ns_per_char: builtins.float) -> None:
        """The built check's worst CPU cost per reply character, in nanoseconds, when it
        depends on the params (a unit, a number of keywords); else the spec's ``cost`` holds."""
        self.cost = ns_per_char

    def _get(self, key: builtins.str, default: Any) -> Any:
        self._seen.add(key)
        if key in self._raw and self._raw[key] is not None:
            return self._raw[key]
        if default is _MISSING:
            raise ParamError(key, "required parameter missing")
        return default

    def has(self, key: builtins.str) -> builtins.bool:
        """Whether ``key`` was given (and not null)."""
        return self._raw.get(key) is not None

    def str(self, key: builtins.str, default: Any = _MISSING, *, allow_empty: builtins.bool = False) -> Any:
        """A string parameter."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise ParamError(key, f"must be a string, got {type(value).__name__}")
        if not allow_empty and not value:
            raise ParamError(key, "must not be empty")
        return value

    def int(
        self, key: builtins.str, default: Any = _MISSING, *, min_value: builtins.int | None = None
    ) -> Any:
        """An integer parameter (booleans rejected), optionally bounded below."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(key, f"must be an integer, got {type(value).__name__}")
        if min_value is not None and value < min_value:
            raise ParamError(key, f"must be >= {min_value}, got {value}")
        return value

    def float(
        self,
        key: builtins.str,
        default: Any = _MISSING,
        *,
        lo: builtins.float = float("-inf"),
        hi: builtins.float = float("inf"),
    ) -> Any:
        """A number parameter within [lo, hi]."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(key, f"must be a number, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise ParamError(key, f"must be within [{lo}, {hi}], got {value}")
        return float(value)

    def bool(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A boolean parameter."""
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ParamError(key, f"must be true or false, got {type(value).__name__}")
        return value

    def choice(self, key: builtins.str, choices: Iterable[_T], default: Any = _MISSING) -> Any:
        """One of ``choices``."""
        options = tuple(choices)
        value = self._get(key, default)
        if value not in options:
            raise ParamError(key, f"must be one of {', '.join(map(repr, options))}, got {value!r}")
        return value

    def str_list(
        self, key: builtins.str, default: Any = _MISSING, *, allow_empty: builtins.bool = False
    ) -> Any:
        """A list of non-empty strings (a single string is accepted as a one-item list)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise ParamError(key, "must be a list of non-empty strings")
        if not value and not allow_empty:
            raise ParamError(key, "must not be empty")
        return tuple(value)

    def raw(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A parameter of any type (the factory validates it)."""
        return self._get(key, default)

    def finish(self) -> None:
        """Reject parameters the factory did not read."""
        unknown = sorted(set(self._raw) - self._seen)
        if unknown:
            raise ParamError(unknown[0], f"unknown parameter{self._did_you_mean(unknown[0])}")

    def misspelled(self) -> ParamError | None:
        """An unread parameter named like one the factory read (``maxx`` for ``max``), or ``None``.

        When a factory fails (``give min, max or both``) before :meth:`finish` runs, a typo is
        the likelier cause: :meth:`CheckerRegistry.build` reports it first.
        """
        for key in sorted(set(self._raw) - self._seen):
            hint = self._did_you_mean(key)
            if hint:
                return ParamError(key, f"unknown parameter{hint}")
        return None

    def _did_you_mean(self, key: builtins.str) -> builtins.str:
        close = difflib.get_close_matches(key, sorted(self._seen), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""


CheckerFactory = Callable[[Params], CheckFn]
"""Builds a checker from validated params; raises ``ParamError`` on bad params."""


@dataclass(frozen=True, slots=True)
class CheckerSpec:
    """A registered checker kind.

    Attributes:
        name: the ``check:`` value in a rule.
        factory: builds the check function from params.
        stateful: reads ``CheckContext.previous_value`` (the rule runner then sets ``ctx.rule``).
        summary: one line for docs and ``--help``.
        cost: worst CPU time per reply character in nanoseconds, as measured on hostile shapes
            (0: unknown, never refused). The rule runner refuses a reply whose predicted time
            is over :data:`OVERRUN` times its budget (``error`` / ``too_large``), since Python
            cannot stop a check once it runs. A factory can refine it (:meth:`Params.set_cost`).
    """

    name: str
    factory: CheckerFactory
    stateful: bool = False
    summary: str = ""
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Checker:
    """A built checker: the check function plus what the rule runner needs to know."""

    kind: str
    fn: CheckFn
    stateful: bool = False
    cost: float = 0.0
    """Worst CPU nanoseconds per reply character (``CheckerSpec.cost``); 0 = unknown."""

    def max_chars(self, budget_s: float) -> int | None:
        """The longest reply this check may be given under ``budget_s`` (``None``: no limit)."""
        return int(budget_s * OVERRUN * 1e9 / self.cost) if self.cost > 0 else None

    def __call__(self, reply: str, ctx: CheckContext) -> CheckOutcome:
        """Run the check."""
        return self.fn(reply, ctx)


class UnknownChecker(KeyError):
    """No checker is registered under the requested name."""


class CheckerRegistry:
    """Named checker factories. Build one per monitor; users register their own kinds.

    Example:
        >>> reg = default_registry()
        >>> reg.register("shouty", lambda p: lambda reply, ctx: passed(reply.isupper(), "not_upper"))
    """

    def __init__(self, specs: Iterable[CheckerSpec] = ()) -> None:
        self._specs: dict[str, CheckerSpec] = {}
        for spec in specs:
            self._specs[spec.name] = spec

    def register(
        self,
        name: str,
        factory: CheckerFactory,
        *,
        stateful: bool = False,
        summary: str = "",
        replace: bool = False,
        cost: float = 0.0,
    ) -> None:
        """Add a checker kind; refuses to shadow an existing name unless ``replace``.

        ``cost``: worst CPU nanoseconds per reply character (see ``CheckerSpec.cost``)."""
        if name in self._specs and not replace:
            raise ValueError(f"checker {name!r} is already registered")
        self._specs[name] = CheckerSpec(name, factory, stateful, summary, cost)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def names(self) -> tuple[str, ...]:
        """Registered checker names, sorted."""
        return tuple(sorted(self._specs))

    def spec(self, name: str) -> CheckerSpec:
        """The spec registered under ``name``; raises ``UnknownChecker``."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownChecker(name) from None

    def build(self, name: str, params: Mapping[str, Any], limits: BuildLimits = NO_LIMITS) -> Checker:
        """Build a checker within ``limits``; raises ``UnknownChecker`` or ``ParamError`` (naming
        the key)."""
        spec = self.spec(name)
        p = Params(params, limits)
        try:
            fn = spec.factory(p)
        except ParamError as exc:
            typo = p.misspelled()
            if typo is not None and typo.key != exc.key:
                raise typo from exc
            raise
        p.finish()
        return Checker(name, fn, spec.stateful, spec.cost if p.cost is None else p.cost)

    def copy(self) -> CheckerRegistry:
        """An independent registry with the same kinds."""
        return CheckerRegistry(self._specs.values())
