"""Rules a request declares (``metadata.handoffmon.rules``): limits, names, allowed checkers, rejections.

Request metadata comes from whoever can call the application, so a declaration is
checked before anything is compiled: its size and shape first (a bounded walk, before
pydantic sees it), then names and checker kinds, then the conversation's totals. A
declaration that breaks any limit is rejected whole with :class:`RequestRuleRejected`
(its ``code`` is one of :data:`CODES`); the caller counts it and the turn goes on with the
configured rules and the rules the conversation already had.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from handoffmon.config import (
    CONFIG_ONLY_CHECKERS,
    DEFAULT_REQUEST_CHECKERS,
    RESERVED_RULE_NAMES,
    RequestRulesConfig,
    RuleConfig,
)
from handoffmon.errors import RuleError

METADATA_KEY = "handoffmon"
"""Request metadata namespace: ``metadata={"handoffmon": {"rules": [...]}}``."""

REQUEST_SOURCE = "<request metadata>"
BASE_KEY = f"metadata.{METADATA_KEY}.rules"

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/#-]{0,63}")
"""A declared rule name: 1–64 characters of letters, digits and ``_ . : / # -`` (IFEval ids
fit, and so do ``<id>#2``, the names ``ifeval_rules`` gives an id repeated in one list)."""

RESERVED_NAMES = RESERVED_RULE_NAMES
"""Names that mean something else in metrics and refit output (``all`` = pooled rules,
``other`` = labels past the cardinality cap); the config model refuses them too."""

REQUEST_REGEX_MAX_MEM = 1 << 20
"""RE2 memory for a pattern a request declares (a configured one has RE2's 8 MiB). The check
thread compiles declared rules, and compile time grows with the program: ``(\\pL|\\pN|\\pP){300}``
took 0.3 s to compile in 8 MiB and is refused in 13 ms in 1 MiB; a slow pattern's cost probe
(``safe_regex.regex_cost``) runs in ~20 ms in it (RE2's NFA, ~10 µs per character)."""

MAX_DEPTH = 8
"""Deepest nesting of lists/mappings a declared rule may have."""

CODES = (
    "disabled",
    "malformed",
    "too_many",
    "too_large",
    "too_deep",
    "bad_name",
    "reserved_name",
    "configured_name",
    "not_allowed",
    "invalid",
    "conversation_full",
    "names_full",
)
"""Why a declaration was rejected (a bounded set: safe as a label)."""


class RequestRuleRejected(RuleError):
    """A request's rule declaration was refused; ``code`` says why (one of :data:`CODES`)."""

    def __init__(self, code: str, message: str, *, key: str = BASE_KEY) -> None:
        self.code = code
        super().__init__(message, key=key, source=REQUEST_SOURCE)


def canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON: the size limits and the compile cache key are measured on it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stored_form(rule: RuleConfig) -> dict[str, Any]:
    """What conversation state keeps of a declared rule (defaults left out), and what the
    conversation limits measure."""
    return rule.model_dump(mode="json", exclude_defaults=True)


def json_size(value: Any, limit: int, *, key: str = BASE_KEY) -> int:
    """Approximate compact-JSON size of ``value``, walking at most ``limit`` bytes' worth.

    Raises:
        RequestRuleRejected: over ``limit`` (``too_large``), nested deeper than
            :data:`MAX_DEPTH` (``too_deep``), or holding something JSON cannot
            (``malformed``): nothing else in the declaration is looked at.
    """
    size = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RequestRuleRejected("too_deep", f"rules may nest at most {MAX_DEPTH} levels", key=key)
        if isinstance(node, str):
            size += len(node) + 2
        elif node is None or isinstance(node, (bool, int, float)):
            size += 5 if isinstance(node, (bool, type(None))) else len(repr(node))
        elif isinstance(node, Mapping):
            size += 2 + 5 * len(node)  # '"":' and ',' with the shortest value, before looking
            _over(size, limit, key)
            for field, item in node.items():
                if not isinstance(field, str):
                    raise RequestRuleRejected("malformed", "mapping keys must be strings", key=key)
                size += len(field) - 1
                _over(size, limit, key)
                stack.append((item, depth + 1))
        elif isinstance(node, (list, tuple)):
            size += 2 + len(node)
            _over(size, limit, key)  # before queueing a million items
            stack.extend((item, depth + 1) for item in node)
        else:
            raise RequestRuleRejected("malformed", f"{type(node).__name__} is not a JSON value", key=key)
        _over(size, limit, key)
    return size


def _over(size: int, limit: int, key: str) -> None:
    if size > limit:
        raise RequestRuleRejected("too_large", f"rules are limited to {limit} bytes as JSON", key=key)


@dataclass(frozen=True, slots=True)
class RequestRulePolicy:
    """The limits of :class:`handoffmon.config.RequestRulesConfig`, compiled for matching."""

    enabled: bool = True
    max_per_request: int = 16
    max_per_conversation: int = 32
    max_rule_bytes: int = 1024
    max_conversation_bytes: int = 4096
    max_names: int = 256
    allowed_exact: frozenset[str] = frozenset(n for n in DEFAULT_REQUEST_CHECKERS if not n.endswith("*"))
    allowed_prefixes: tuple[str, ...] = tuple(n[:-1] for n in DEFAULT_REQUEST_CHECKERS if n.endswith("*"))
    cache_size: int = 256

    @classmethod
    def from_config(cls, cfg: RequestRulesConfig) -> RequestRulePolicy:
        """Split the allowlist into exact names and ``prefix*`` entries."""
        exact = frozenset(n for n in cfg.allowed_checkers if not n.endswith("*"))
        prefixes = tuple(n[:-1] for n in cfg.allowed_checkers if n.endswith("*"))
        return cls(
            cfg.enabled,
            cfg.max_per_request,
            cfg.max_per_conversation,
            cfg.max_rule_bytes,
            cfg.max_conversation_bytes,
            cfg.max_names,
            exact,
            prefixes,
            cfg.cache_size,
        )

    def allows(self, check: str) -> bool:
        """Whether a request may use checker kind ``check`` (never a config-only one)."""
        if check in CONFIG_ONLY_CHECKERS:
            return False
        return check in self.allowed_exact or check.startswith(self.allowed_prefixes)


DEFAULT_POLICY = RequestRulePolicy.from_config(RequestRulesConfig())

Compile = Callable[[RuleConfig, str], object]
"""Compiles a rule (cached by the rule set); returns the rule or a ``RuleError``."""


class RequestRuleGate:
    """Admits request-declared rules under a policy; thread-safe.

    Args:
        policy: the limits.
        configured: names of the configured rules (a request cannot take them over).
        compile: builds a rule, returning a ``RuleError`` instead of raising.
    """

    def __init__(self, policy: RequestRulePolicy, configured: frozenset[str], compile: Compile) -> None:
        self.policy = policy
        self._configured = configured
        self._compile = compile
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self.rejections: Counter[str] = Counter()
        """Rejected declarations by code."""

    def parse(
        self, metadata: Mapping[str, Any] | None, declared: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[RuleConfig, ...]:
        """The rules in ``metadata``, checked against the limits and ``declared`` (the
        conversation's rules so far); raises :class:`RequestRuleRejected` (counted here)."""
        try:
            return self._parse(metadata, declared)
        except RequestRuleRejected as exc:
            self._count(exc)
            raise

    def _count(self, exc: RequestRuleRejected) -> None:
        with self._lock:
            self.rejections[exc.code] += 1

    def _parse(
        self, metadata: Mapping[str, Any] | None, declared: Sequence[Mapping[str, Any]]
    ) -> tuple[RuleConfig, ...]:
        raw = _declaration(metadata)
        if raw is None:
            return ()
        policy = self.policy
        if not policy.enabled:
            raise RequestRuleRejected("disabled", "request rules are disabled (request_rules.enabled)")
        if len(raw) > policy.max_per_request:
            raise RequestRuleRejected("too_many", f"at most {policy.max_per_request} rules per request")
        rules = tuple(self._admit(item, f"{BASE_KEY}[{i}]") for i, item in enumerate(raw))
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:  # the later one would silently replace the earlier
                raise RequestRuleRejected(
                    "invalid",
                    f"rule name {rule.name!r} is declared twice in this request",
                    key=f"{BASE_KEY}[{rule.name!r}].name",
                )
            seen.add(rule.name)
        self._fits_conversation(rules, declared)
        self._claim_names({r.name for r in rules})
        return rules

    def admit_stored(self, raw: Mapping[str, Any]) -> RuleConfig:
        """A rule read back from conversation state, checked as a declaration (a store is
        shared, so what it returns is not trusted more than a request)."""
        try:
            rule = self._admit(raw, "conversation state")
            self._claim_names({rule.name})
        except RequestRuleRejected as exc:
            self._count(exc)
            raise
        return rule

    def _admit(self, item: Any, where: str) -> RuleConfig:
        if not isinstance(item, Mapping):
            raise RequestRuleRejected("malformed", "each rule must be a mapping", key=where)
        name = item.get("name")
        if isinstance(name, str) and name:
            where = f"{BASE_KEY}[{name[:64]!r}]"
        json_size(item, self.policy.max_rule_bytes, key=where)
        if isinstance(name, str) and name.lower() in RESERVED_NAMES:  # before the model refuses it as invalid
            raise RequestRuleRejected("reserved_name", f"{name!r} is reserved", key=f"{where}.name")
        try:
            cfg = RuleConfig.model_validate(item)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise RequestRuleRejected("invalid", err["msg"], key=f"{where}.{loc}" if loc else where) from None
        if NAME.fullmatch(cfg.name) is None:
            raise RequestRuleRejected(
                "bad_name",
                "names are 1-64 characters of letters, digits and _ . : / # -",
                key=f"{where}.name",
            )
        if cfg.name in self._configured:
            raise RequestRuleRejected(
                "configured_name", f"rule name {cfg.name!r} is already a configured rule", key=f"{where}.name"
            )
        if not self.policy.allows(cfg.check):
            raise RequestRuleRejected(
                "not_allowed",
                f"checker {cfg.check[:64]!r} is not allowed in request rules "
                "(request_rules.allowed_checkers)",
                key=f"{where}.check",
            )
        compiled = self._compile(cfg, where)
        if isinstance(compiled, RuleError):
            raise RequestRuleRejected("invalid", _bare(compiled), key=compiled.key or where) from compiled
        return cfg

    def _fits_conversation(self, rules: Sequence[RuleConfig], declared: Sequence[Mapping[str, Any]]) -> None:
        merged: dict[str, int] = {}
        for old in declared:
            merged[str(old.get("name"))] = len(canonical_json(old))
        for rule in rules:
            merged[rule.name] = len(canonical_json(stored_form(rule)))
        policy = self.policy
        if len(merged) > policy.max_per_conversation:
            raise RequestRuleRejected(
                "conversation_full", f"at most {policy.max_per_conversation} declared rules per conversation"
            )
        if sum(merged.values()) > policy.max_conversation_bytes:
            raise RequestRuleRejected(
                "conversation_full",
                f"a conversation's declared rules are limited to "
                f"{policy.max_conversation_bytes} bytes as JSON",
            )

    def _claim_names(self, names: set[str]) -> None:
        with self._lock:
            new = names - self._names
            if len(self._names) + len(new) > self.policy.max_names:
                raise RequestRuleRejected(
                    "names_full",
                    f"this process already tracks {len(self._names)} declared rule names "
                    f"(request_rules.max_names); new names are refused",
                )
            self._names |= new


def _bare(exc: RuleError) -> str:
    """``exc``'s message without the ``source: key '…': `` it starts with, which the
    rejection that carries it adds again."""
    text = str(exc)
    where = ": ".join([*([exc.source] if exc.source else []), *([f"key {exc.key!r}"] if exc.key else [])])
    return text[len(where) + 2 :] if where and text.startswith(where + ": ") else text


def _declaration(metadata: Any) -> Sequence[Any] | None:
    """The raw ``rules`` list of the request's metadata (``None``: nothing declared)."""
    if not metadata or not isinstance(metadata, Mapping):
        return None
    section = metadata.get(METADATA_KEY)
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise RequestRuleRejected("malformed", "must be a mapping", key=f"metadata.{METADATA_KEY}")
    raw = section.get("rules")
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)):
        raise RequestRuleRejected("malformed", "must be a list of rules")
    return raw
