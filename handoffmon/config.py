"""Configuration: one pydantic model, loaded from YAML or TOML plus ``HANDOFFMON_*`` env vars."""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from handoffmon.depth import DEFAULT_EDGES, DepthBuckets
from handoffmon.errors import ConfigError

ENV_PREFIX = "HANDOFFMON_"
ENV_NESTED = "__"

_log = logging.getLogger("handoffmon.config")


class _Section(BaseModel):
    # attribute docstrings become field descriptions: the configuration reference is generated from them;
    # ``.inf``/``.nan`` are no setting (a TTL of infinity, a NaN confidence): refused at load
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, v: Any, info: ValidationInfo) -> Any:
        """``workers: true`` or ``ttl_s: yes`` is a mistake, not 1: pydantic would take a bool
        as the number 1 (or 0) in a number field."""
        if isinstance(v, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _unwrap(field.annotation) in (int, float):
                raise ValueError(f"expected a number, got {str(v).lower()}")
        return v

    @field_validator("*", mode="after")
    @classmethod
    def _duration_fits(cls, v: Any, info: ValidationInfo) -> Any:
        """A duration (a ``…_s`` number) of at most 100 years: Python's waits take at most ~292
        (``threading.TIMEOUT_MAX``), so ``shutdown_timeout_s: 1e12`` made ``close()`` raise
        OverflowError, ``refit.interval_s: 1e12`` killed the refit thread, and a Redis
        ``timeout_s`` of 1e12 failed every call."""
        name = info.field_name or ""
        if name.endswith("_s") and isinstance(v, float | int) and v > MAX_TTL_S:
            raise ValueError(f"at most {MAX_TTL_S} (100 years): a longer wait overflows Python's timers")
        return v


MAX_TTL_S = 100 * 365 * 24 * 3600
"""Largest ``store.ttl_s``: 100 years, "never" for any deployment (Redis takes no expiry past
about 9·10^15 s)."""


class StoreConfig(_Section):
    """Where attributions and per-conversation state live."""

    backend: Literal["memory", "sqlite", "redis"] = "memory"
    """``memory`` (one process, LRU + TTL), ``sqlite`` (one host, survives restarts), ``redis``."""
    path: str = "handoffmon.db"
    """SQLite file (backend ``sqlite``); aggregates are kept in the same file. Created when
    missing, in a directory that must exist. A relative path is relative to the process's
    working directory, not to the config file: give an absolute one in deployments. Not
    ``:memory:`` or empty (each thread would get a database of its own, empty: every store call
    of the pipeline failed)."""
    url: str = "redis://127.0.0.1:6379/0"
    """Redis URL (backend ``redis``): ``redis://[[user]:password@]host[:port][/db]``,
    ``rediss://`` for TLS, ``unix:///path.sock[?db=N]``. A malformed one (another scheme, a port
    or database that is no number) is refused at load, and so is a timeout in its query
    (``?socket_timeout=``: it would override ``timeout_s``); a well-formed one whose server
    does not answer fails open at start."""
    ttl_s: float = Field(default=7 * 24 * 3600, gt=0, le=MAX_TTL_S)
    """Forget attributions and conversation state this long after their last write. At most
    100 years (3153600000): from about 10^16 s Redis refused every write's expiry."""
    max_conversations: int = Field(default=100_000, gt=0)
    """Memory backend: LRU cap on tracked conversations (their messages are evicted together,
    counted in ``handoffmon_store_evictions_total{what="conversations"}``)."""
    max_keys_per_conversation: int = Field(default=10_000, gt=0)
    """Memory backend: cap on one conversation's attribution keys; past it its oldest keys are
    dropped (``handoffmon_store_evictions_total{what="keys"}``). A turn writes 2 keys (chain
    and content), so the default covers 5,000 turns, more than any context window holds
    resent: it only binds when one conversation id is shared by unrelated traffic (a constant
    ``x-conversation-id``)."""
    max_keys: int = Field(default=5_000_000, gt=0)
    """Memory backend: cap on all conversations' attribution keys together (~100 B each: 5M is
    about 0.5 GB, 2.5 times what 100,000 conversations of 10 turns hold); past it the least
    recently used conversations are evicted as past ``max_conversations`` (counted in
    ``handoffmon_store_evictions_total{what="conversations"}``). Without it only
    ``max_conversations`` × ``max_keys_per_conversation`` bounded the store (10^9 keys).
    At least ``max_keys_per_conversation``."""
    max_state_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    """Memory backend: cap on all conversations' states together, in bytes as stored (256 MiB);
    past it the least recently used conversations are evicted (counted in
    ``handoffmon_store_evictions_total{what="conversations"}``). A state is usually under
    1 KB, but one that declares many long-named rules and alternates models keeps up to
    ~40 KB of cells: without it only ``max_conversations`` bounded them (~4 GB)."""
    key_prefix: str = "handoffmon:"
    """Redis key prefix."""
    timeout_s: float = Field(default=0.05, gt=0)
    """Redis socket timeout: past it the store fails open (attribution becomes unknown)."""
    backoff_after: int = Field(default=3, ge=1)
    """Consecutive store failures (any backend) after which the store is skipped for a while."""
    backoff_s: float = Field(default=1.0, gt=0)
    """How long the store is skipped after ``backoff_after`` failures (then probed again)."""

    @model_validator(mode="after")
    def _key_caps(self) -> StoreConfig:
        if self.max_keys < self.max_keys_per_conversation:
            raise ValueError(
                f"max_keys ({self.max_keys}) is below max_keys_per_conversation "
                f"({self.max_keys_per_conversation}): one conversation could outgrow the whole store"
            )
        return self

    @field_validator("url")
    @classmethod
    def _a_redis_url(cls, v: str, info: ValidationInfo) -> str:
        # checked only where it is read (backend ``redis``); a leftover value elsewhere is unused
        if info.data.get("backend") == "redis":
            problem = redis_url_problem(v)
            if problem:
                raise ValueError(problem)
        return v

    @field_validator("path")
    @classmethod
    def _a_file(cls, v: str) -> str:
        if not v.strip() or v.strip() == ":memory:":
            raise ValueError(
                f"{v!r} is no file: SQLite would give every thread a database of its own, empty "
                "(the pipeline's threads could not read what another wrote); name a file, or use "
                "backend: memory"
            )
        return v


_HTTP_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110 ``token``)."""

REDIS_URL_FORMS = "redis://[[user]:password@]host[:port][/db], rediss://… (TLS) or unix:///path.sock[?db=N]"


def redis_url_problem(url: str) -> str | None:
    """What makes ``url`` no URL the Redis client can use, or ``None``. Never quotes the URL (it
    may hold a password). Stricter than redis-py, which reads a database path it cannot parse
    (``/abc``, a letter O for a zero) as database 0 and ``/1/2`` as database 12 without a word."""
    from urllib.parse import parse_qs, unquote, urlsplit

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("redis", "rediss", "unix"):
        return f"not a Redis URL: the scheme must be redis://, rediss:// or unix:// ({REDIS_URL_FORMS})"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"not a Redis URL: the port is not a number from 0 to 65535 ({REDIS_URL_FORMS})"
    del port  # parsed only to be checked
    query = parse_qs(parts.query)
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name in query:
            return f"?{name}= in the URL would override store.timeout_s (the fail-open wait): set that key"
    dbs = query.get("db", [])
    if scheme == "unix":
        if not parts.path:
            return f"not a Redis URL: no socket path ({REDIS_URL_FORMS})"
    else:
        path = unquote(parts.path)
        if path.startswith("/"):
            path = path[1:]
        if path and not dbs:
            dbs = [path]
    for db in dbs:
        if not (db.isascii() and db.isdigit()):
            return (
                "not a Redis URL: the database is not a number (a path /0, /1, … or ?db=N; "
                f"{REDIS_URL_FORMS})"
            )
    return None


class AttributionConfig(_Section):
    """How authors are named and conversations identified."""

    canonical_models: dict[str, str] = Field(default_factory=dict)
    """Deployment id or provider model name → canonical model name."""
    conversation_header: str = "x-conversation-id"
    """Request header carrying the caller's conversation id (case-insensitive). An HTTP header
    name: letters, digits and ``!#$%&'*+-.^_`|~``; empty, whitespace, ``:`` or a control
    character is refused at load (no request could carry it: every conversation would get a
    derived id without a word)."""
    content_fallback: bool = True
    """Attribute by content-only fingerprint when the chain breaks."""
    text_cache_bytes: int = Field(default=16_000_000, gt=0)
    """Estimated memory bound of the folded-text cache and the conversations' latest-history scan
    states together (messages are resent every turn)."""
    pending_max: int = Field(default=100_000, gt=0)
    """Replies held in-process until persisted (and chain-verified replies remembered)."""
    conversation_id_key: str | None = Field(default=None, min_length=16)
    """Secret that keys derived conversation ids (``h-…``, given to conversations whose caller
    sends no id): BLAKE2b of the first exchange's fingerprint under this key instead of the
    unkeyed fingerprint, so whoever reads exported ids (OTel attributes, exemplars, logs)
    cannot confirm a guessed opening by hashing it. Give every replica and restart the same
    value (e.g. ``HANDOFFMON_ATTRIBUTION__CONVERSATION_ID_KEY``): a conversation whose
    history a replica cannot find in the store is identified by deriving its id again. Setting
    or changing it changes the ids of conversations in flight once. Unset: unkeyed ids."""

    @field_validator("conversation_header")
    @classmethod
    def _an_http_header_name(cls, v: str) -> str:
        if not _HTTP_TOKEN.fullmatch(v):
            raise ValueError(
                f"{v!r} is no HTTP header name (letters, digits and !#$%&'*+-.^_`|~; no space, "
                "':' or control character): no request could carry it, so every conversation "
                "would get a derived id"
            )
        return v


class PipelineConfig(_Section):
    """The background queue that runs checkers and updates aggregates."""

    queue_size: int = Field(default=10_000, gt=0)
    """Turns waiting for the check workers; when full, turns are dropped and counted."""
    workers: int = Field(default=1, ge=1, le=256)
    """Check worker threads (a conversation's turns always go to the same one); with 1 and the
    memory store, the attribution thread runs the checks instead, while no captured turn waits."""
    attribution_queue_size: int = Field(default=1_000, gt=0)
    """Captured turns waiting for the attribution thread. Each holds its request's message
    list, so this bounds memory; when full, turns are dropped (shed, never attributed on
    the request path)."""
    max_queued_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    """Bytes of request and reply bodies that turns on their way through the pipeline (queued
    for attribution, then for the checks) may hold together: ``serve`` counts each turn's raw
    bodies until it is checked; the in-process wrappers count what a turn's reference to the
    application's message list keeps alive (its slots and text, estimated), from 64 KiB up
    (smaller histories count 0: the queue's length bounds them). Past it, turns are dropped as
    from a full queue, so requests of megabytes arriving faster than they can be attributed
    cannot hold gigabytes."""
    check_budget_s: float = Field(default=0.05, gt=0)
    """Per-check time budget; a checker over budget yields an ``error`` verdict."""
    shutdown_timeout_s: float = Field(default=10.0, ge=0)
    """How long ``close()`` (and the exit hook) waits for the queues to drain."""
    export_queue_size: int = Field(default=10_000, gt=0)
    """Results buffered per exporter (each has its own thread); when full, results are
    dropped for that exporter and counted as ``monitor_errors{stage="export"}``."""
    error_log_interval_s: float = Field(default=60.0, ge=0)
    """At most one log line per error kind (stage and exception type) per this many
    seconds; the lines left out are counted in the next one (every error is still counted
    in ``monitor_errors``). 0 logs every error."""


class ScopeConfig(_Section):
    """Which turns a rule applies to (all fields optional; empty = any)."""

    model_groups: list[str] = Field(default_factory=list)
    """Requested model groups the rule applies to (empty: all)."""
    routes: list[str] = Field(default_factory=list)
    """Values of the request metadata ``route`` (empty: all)."""
    tags: list[str] = Field(default_factory=list)
    """Request metadata ``tags``: the rule applies if any of these is present (empty: all)."""
    min_depth: int = Field(default=1, ge=1)
    """First depth checked (inclusive)."""
    max_depth: int | None = Field(default=None, ge=1)
    """Last depth checked (inclusive; null: no limit); not below ``min_depth``."""

    @model_validator(mode="after")
    def _depth_range(self) -> ScopeConfig:
        if self.max_depth is not None and self.max_depth < self.min_depth:
            raise ValueError(
                f"max_depth ({self.max_depth}) is below min_depth ({self.min_depth}): "
                "the rule would never apply"
            )
        return self


RESERVED_RULE_NAMES = frozenset({"all", "*", "other", "none", "unknown", "total"})
"""Rule names (any case) that mean something else in metrics and refit output (``all`` =
pooled over rules, ``other`` = names past a cardinality cap): refused everywhere."""


class RuleConfig(_Section):
    """One named rule: a checker with parameters and a scope."""

    name: str = Field(min_length=1, max_length=100)
    """Unique; the ``rule`` label in metrics: printable text without leading or trailing
    whitespace. Not one of ``all``, ``*``, ``other``, ``none``,
    ``unknown``, ``total`` (reserved: they mean something else in metrics, refit and shapes
    output — ``all`` is the refit's pooled-over-rules fit, ``*`` the shapes' pooled entry)."""
    check: str = Field(min_length=1)
    """A registered checker (``length``, ``json_schema``, ``ifeval:<instruction id>``, …)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The checker's parameters; unknown or ill-typed ones fail at load."""
    scope: ScopeConfig = Field(default_factory=ScopeConfig)
    """Which turns the rule applies to."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if v.strip().lower() in RESERVED_RULE_NAMES:
            raise ValueError(f"{v!r} is reserved (it means something else in metrics): rename the rule")
        return v


DEFAULT_REQUEST_CHECKERS: tuple[str, ...] = (
    "regex_must_match",
    "regex_must_not_match",
    "keywords_present",
    "keywords_absent",
    "starts_with",
    "ends_with",
    "letter_case",
    "no_commas",
    "length",
    "valid_json",
    "answer_tag",
    "answer_flip",
    "ifeval:*",
    "ifeval_loose:*",
)
"""Checkers a request may declare by default: linear-time (RE2, literal matching), no model
to load, nothing imported. ``json_schema`` (Python ``re`` in ``pattern``), ``language``
(a ~115 MB model) and user-registered kinds must be allowed explicitly."""

CONFIG_ONLY_CHECKERS: frozenset[str] = frozenset({"pydantic_model"})
"""Checkers no request may declare whatever the allowlist says (they import code)."""


class RequestRulesConfig(_Section):
    """Rules requests declare in ``metadata.handoffmon.rules`` (they accumulate per conversation).

    A declaration that breaks a limit is rejected whole, with a reason in the log, and counted
    as ``monitor_errors{stage="rules"}``; the turn is still checked by the configured rules.
    """

    enabled: bool = True
    """False: every declaration is rejected (and counted)."""
    max_per_request: int = Field(default=16, ge=1)
    """Rules one request may declare."""
    max_per_conversation: int = Field(default=32, ge=1)
    """Distinct declared rule names one conversation may accumulate."""
    max_rule_bytes: int = Field(default=1024, ge=64)
    """Size of one rule as compact JSON."""
    max_conversation_bytes: int = Field(default=4096, ge=64)
    """Size of all of a conversation's declared rules as compact JSON (bounds its stored state)."""
    max_names: int = Field(default=256, ge=1)
    """Distinct declared rule names one process accepts (bounds metric labels and the refit);
    past it, declarations that bring a new name are rejected (``names_full``, counted), for the
    life of the process: clients declaring random names can fill it and lock later names out
    (configured rules are never affected). Remedy: configure the rules you rely on, or
    ``enabled: false`` / strip ``metadata.handoffmon`` for untrusted clients; restart to empty it."""
    allowed_checkers: list[str] = Field(default_factory=lambda: list(DEFAULT_REQUEST_CHECKERS))
    """Checker kinds a request may use: exact names, or a prefix ending in ``*`` (``ifeval:*``)."""
    cache_size: int = Field(default=256, ge=1)
    """Compiled request rules kept (LRU, shared by all conversations)."""

    @field_validator("allowed_checkers")
    @classmethod
    def _no_code_importing_checkers(cls, v: list[str]) -> list[str]:
        for name in v:
            prefix = name[:-1] if name.endswith("*") else None
            if not name or prefix == "":
                raise ValueError("entries are checker names or prefixes such as 'ifeval:*', not '*' or ''")
            for banned in CONFIG_ONLY_CHECKERS:
                if name == banned or (prefix is not None and banned.startswith(prefix)):
                    raise ValueError(f"{name!r} allows {banned!r}, which imports code: configured rules only")
        return v

    @model_validator(mode="after")
    def _request_fits_conversation(self) -> RequestRulesConfig:
        if self.max_per_request > self.max_per_conversation:
            raise ValueError("max_per_request must not exceed max_per_conversation")
        if self.max_rule_bytes > self.max_conversation_bytes:
            raise ValueError("max_rule_bytes must not exceed max_conversation_bytes")
        return self


class RuleStateConfig(_Section):
    """How values stateful checkers extract (answer_flip's last answer) are kept between turns.

    Conversation state may live in Redis or SQLite: by default only a keyed fingerprint
    (BLAKE2b) of each value is stored, enough to tell "same answer" from "changed".
    """

    hash_key: str | None = Field(default=None, min_length=16)
    """Secret for the fingerprints. Unset: a random key per process, so a value stored by
    another replica or before a restart reads as "no previous value" (never as a change).
    Set it (e.g. ``HANDOFFMON_RULE_STATE__HASH_KEY``) when replicas share a Redis store or
    a SQLite store outlives the process."""
    text_ttl_s: float = Field(default=0.0, ge=0)
    """Opt-in: also keep the value itself, readable by checkers for this many seconds after
    it was extracted (0 = never store text). Expired text is dropped at the conversation's
    next state write; an idle conversation's state expires after ``store.ttl_s``."""


class TelemetryConfig(_Section):
    """Prometheus, OpenTelemetry and log output."""

    prometheus: bool = True
    """Export Prometheus metrics."""
    max_models: int = Field(default=50, gt=0)
    """Distinct model names (exported labels and the monitor's own aggregates) before new
    names collapse into ``other``. The models the config names (``attribution.canonical_models``'
    canonical names, ``shadow.targets`` and ``shadow.candidates``) hold their slots first; the
    rest go to the first names seen, for the life of the process."""
    max_rules: int = Field(default=100, gt=0)
    """Distinct rule names (configured rules come first; labels and aggregates) before ``other``."""
    exemplars: bool = False
    """Attach conversation ids as exemplars (OpenMetrics only)."""
    otel: bool = False
    """Emit events/metrics through the application's (or given) OTel providers."""
    otel_span: Literal["join", "own"] = "join"
    """``join``: no span of handoffmon's own; evaluations (``gen_ai.evaluation.result``) and a
    ``handoffmon.turn`` event go out through the OTel logs API in the caller's trace, with
    ``gen_ai.response.id``. ``own``: one ``chat`` span per turn (stacks with no GenAI tracing)."""
    capture_content: bool = False
    """Opt-in: put prompt/reply text on spans (never on metrics or logs)."""
    log_turns: bool = True
    """One structured log event per turn (logger ``handoffmon.turns``)."""
    log_format: Literal["json", "console"] = "json"
    """Rendering of the per-turn log events."""
    metrics_port: int | None = Field(default=None, ge=0, lt=65536)
    """Also serve handoffmon's series at ``http://metrics_host:metrics_port/metrics`` (0 picks a
    free port). Unset: they are only registered in the application's Prometheus registry. At
    most 16 connections at once, 10 s per read or write; what it closes unserved is counted in
    ``handoffmon_metrics_port_refusals_total``."""
    metrics_host: str = "127.0.0.1"
    """Listen address of the ``metrics_port`` server (loopback unless set, e.g. ``0.0.0.0``)."""
    metrics_token: str | None = None
    """Bearer token required on every ``/metrics`` handoffmon serves itself (the
    ``metrics_port`` server, and ``handoffmon serve``'s ``/metrics`` and ``/admin/*``)."""

    @field_validator("metrics_token")
    @classmethod
    def _token_without_edge_whitespace(cls, v: str | None) -> str | None:
        # a secret read from a file keeps its trailing newline: no client could ever send it
        # (every scrape 401), and a blank token would look set while protecting nothing
        if v and (v != v.strip() or not v.isprintable()):
            raise ValueError(
                "the token has leading or trailing whitespace or a control character (a secret file's "
                "trailing newline?): no Authorization header can carry it; strip it"
            )
        return v


REFIT_MIN_INTERVAL_S = 1.0
"""Smallest non-zero ``refit.interval_s`` (seconds)."""


class RefitConfig(_Section):
    """The periodic refit inside a running monitor."""

    interval_s: float = Field(default=300.0, ge=0)
    """Seconds between refits of this process's counts; 0 disables the periodic refit.
    Otherwise at least 1, as ``handoffmon demo --refit-interval``: a refit of 50 models and 5
    rules takes about 0.4 s of CPU, so an interval such as 0.001 kept a core busy refitting
    counts that barely moved, while Prometheus scrapes the gauges every 15-60 s. A refit that
    takes longer than the interval is followed by a pause as long as it took."""
    min_n: int = Field(default=30, ge=1)
    """Cells with fewer checked turns are not reported."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """Level of the reported intervals."""
    prior_sd_pp: float = Field(default=5.0, gt=0)
    """Prior SD of each prefix influence π and suffix susceptibility σ, in percentage
    points (the decomposition's ridge, 1/(prior_sd_pp/100)²). With ``prior: empirical``
    (the default) the least SD assumed: the fit estimates τ_π and τ_σ from the spread of
    the effects and never shrinks harder than this; with ``prior: fixed`` the SD itself."""
    prior: Literal["empirical", "fixed"] = "empirical"
    """``empirical``: the prior SDs of π and σ are fitted by marginal likelihood (floored at
    ``prior_sd_pp``), so large true effects are not pulled toward 0 and keep interval
    coverage; ``fixed``: ``prior_sd_pp`` as given."""
    fdr: float = Field(default=0.05, gt=0, lt=1)
    """False-discovery rate of ``significant`` (Benjamini–Hochberg across a rule's pairs)."""
    markov_min_transitions: int = Field(default=30, ge=1)
    """Transitions needed out of pass and out of fail before a Markov chain is published."""
    max_models: int = Field(default=200, ge=2)
    """Models in the fit (most checked turns first); the rest are reported as excluded.
    Bounds the refit's memory ((K+2)·K·buckets per rule) whatever clients send."""
    max_rules: int = Field(default=100, ge=1)
    """Rules in the fit (most checked turns first); the rest are reported as excluded."""

    @field_validator("interval_s")
    @classmethod
    def _interval_floor(cls, v: float) -> float:
        if 0 < v < REFIT_MIN_INTERVAL_S:
            raise ValueError(
                f"{v:g} s is below the minimum of {REFIT_MIN_INTERVAL_S:g} s (a refit loop that "
                "short would keep a core busy): set 0 to turn the periodic refit off, or at least "
                f"{REFIT_MIN_INTERVAL_S:g}"
            )
        return v

    @property
    def ridge(self) -> float:
        """The decomposition's ridge penalty in Δ units: 1 / (prior_sd_pp / 100)²."""
        return float(1.0 / (self.prior_sd_pp / 100.0) ** 2)


ShadowArm = Literal["handoff", "no_handoff"]
SHADOW_ARMS: tuple[ShadowArm, ...] = ("handoff", "no_handoff")


class ShadowConfig(_Section):
    """Shadow continuation: on a sampled, budgeted share of turns, a second model continues the
    identical history in the background (never returned, never recorded as a turn).

    It sends conversation content to the shadow targets: only models named in ``targets``
    are ever asked."""

    enabled: bool = False
    """Off by default."""
    dry_run: bool = False
    """Decide and count what would be spent, but make no shadow call."""
    sample_rate: float = Field(default=0.01, ge=0, le=1)
    """Share of eligible turns (depth ≥ 2, known prefix model) considered for a shadow call."""
    arms: list[ShadowArm] = Field(default_factory=lambda: list(SHADOW_ARMS))
    """``handoff``: a handoff turn A→B is continued by A; ``no_handoff``: an A→A turn by a candidate B."""
    targets: list[str] = Field(default_factory=list)
    """Allowlist of models (canonical names) shadow calls may go to; required when enabled."""
    candidates: dict[str, list[str]] = Field(default_factory=dict)
    """Per model, the candidates of the no-handoff arm (default: the router's fallbacks)."""
    request_models: dict[str, str] = Field(default_factory=dict)
    """Per target (canonical name), the ``model`` a shadow request names at an OpenAI-compatible
    endpoint (``serve``'s upstream, a wrapped OpenAI client); default: the canonical name."""
    calls_per_minute: float = Field(default=30.0, gt=0)
    """Shadow calls started in any 60 s window."""
    tokens_per_hour: int = Field(default=200_000, gt=0)
    """Tokens (reserved at the call's upper bound, settled to the usage) in any hour."""
    usd_per_day: float | None = Field(default=5.0, gt=0)
    """Spend in any 24 h (litellm's cost map); ``None`` = no money cap. A target without a
    known price is skipped while a money cap is set."""
    pair_calls_per_hour: int = Field(default=60, gt=0)
    """Shadow calls per ordered (prefix model, model) pair in any hour, so frequent pairs
    leave budget for rare ones."""
    max_calls_per_conversation: int = Field(default=2, gt=0)
    """Shadow calls per conversation in any hour (skip reason ``conversation_quota``), so no
    conversation — a long one, or one a client keeps sending — takes more than its share of the
    budget. Counted for the conversations shadowed in the last hour, at most 10,000 (the least
    recently shadowed forgotten first)."""
    seed: str | None = Field(default=None, min_length=16)
    """Secret that fixes which turns are sampled (and which candidate a no-handoff arm takes),
    keyed by the turn's conversation and position. Unset: a random secret drawn when the runtime is
    built (per process; forked workers share it), so nobody can pick conversation ids that are
    always sampled, and replicas sample independently. Set it (e.g. ``HANDOFFMON_SHADOW__SEED``)
    only to make replicas or reruns of the same traffic sample the same turns, and keep it
    secret: whoever knows it can choose ids that are always sampled."""
    max_output_tokens: int = Field(default=1024, gt=0)
    """``max_tokens`` of every shadow call (bounds the reservation)."""
    max_concurrency: int = Field(default=2, gt=0, le=256)
    """Shadow calls in flight at once (one background thread each)."""
    queue_size: int = Field(default=32, gt=0)
    """Picked turns waiting for a shadow thread; further picks are skipped (``busy``)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Timeout of one shadow call: passed to the client, and a call still running 1 s past it is
    counted ``timeout`` and left behind (a client's timeout bounds each read, not the call)."""
    breaker_failures: int = Field(default=3, gt=0)
    """Consecutive 429/5xx/timeouts/401/403/404 of a target that stop its shadow traffic."""
    breaker_cooldown_s: float = Field(default=60.0, gt=0)
    """How long a stopped target gets no shadow traffic before one probe call."""

    @model_validator(mode="after")
    def _targets_when_enabled(self) -> ShadowConfig:
        if self.enabled and not self.targets:
            raise ValueError("shadow.targets must name the models shadow calls may go to when shadow.enabled")
        return self


class RoutingConfig(_Section):
    """Risk-aware fallback ordering (``docs/guides/routing.md``): off by default."""

    enabled: bool = False
    """Order a request's router fallbacks by the refit's pair-risk table, which this process's
    periodic refit publishes: a config file (or ``HANDOFFMON_*`` variables) enabling routing with
    ``refit.interval_s: 0`` is refused, since no table would ever come (every decision
    ``no_table``)."""
    mode: Literal["dry_run", "enforce"] = "dry_run"
    """``dry_run`` only counts what the policy would have changed; ``enforce`` changes the order."""
    rule: str = Field(default="all", min_length=1)
    """Which fit's pair risks drive the order: ``all`` (pooled over rules) or one rule's name."""
    min_effect_pp: float = Field(default=2.0, ge=0)
    """A candidate moves ahead of an earlier one only if its handoff risk is better by at
    least this many percentage points (and the difference is significant)."""
    z: float = Field(default=1.96, ge=0)
    """Significance of a risk difference: |difference| ≥ z × its (conservative) standard error."""
    max_table_age_s: float = Field(default=3600.0, gt=0)
    """A table older than this is stale: the router's own order is used (so is one stamped over
    5 minutes ahead of this process's clock)."""
    return_home: bool = True
    """Prefer the conversation's original model (author of its first reply) when it is a
    candidate, not cooling down, and no candidate ahead of it is significantly safer by the table."""
    max_extra_cost_usd_per_mtok: float | None = Field(default=None, ge=0)
    """A candidate may not move ahead of one that is cheaper by more than this (input +
    output price per million tokens, litellm's cost map); ``None`` = no cap."""
    max_extra_latency_s: float | None = Field(default=None, ge=0)
    """A candidate may not move ahead of one that is faster by more than this (the
    router's latency stats); ``None`` = no cap."""


class ProxyConfig(_Section):
    """``handoffmon serve``."""

    upstream: str | None = None
    """Upstream OpenAI-compatible base URL, with or without ``/v1`` (``--upstream``)."""
    host: str = "127.0.0.1"
    """Listen address (``--host``); beyond loopback ``serve`` requires ``telemetry.metrics_token``."""
    port: int = Field(default=4100, gt=0, lt=65536)
    """Listen port (``--port``)."""
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    """Larger request bodies of the monitored APIs (chat completions, Responses, Messages) are
    answered 413 and not forwarded. Other paths (file uploads, audio) stream their bodies
    upstream as they arrive, unbounded by this."""
    max_held_body_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    """Request bodies of the monitored APIs held whole at once (each is read whole before it is
    forwarded, to be monitored; a request without ``Content-Length`` holds
    ``proxy.max_body_bytes`` until it is read). A request that would pass it is forwarded as
    it arrives, unmonitored (``unmonitored{reason="shed"}``): without it, concurrent large
    bodies were bounded only by ``max_connections`` × ``max_body_bytes`` (80 GiB). At least
    ``proxy.max_body_bytes``."""
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    """No upstream byte for this long: 504 (mid-stream: the client's response is aborted)."""
    max_upstream_requests: int = Field(default=1024, ge=0)
    """Upstream requests in flight at most (a stream counts until it ends; 0: no limit). A
    request past it waits up to ``proxy.upstream_queue_timeout_s`` for one to end, then is
    answered 503 (``upstream_errors{kind="busy"}``)."""
    upstream_queue_timeout_s: float = Field(default=5.0, gt=0)
    """How long a request waits for an upstream slot (``proxy.max_upstream_requests``)."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Request line plus headers larger than this are answered 431 and not forwarded."""
    client_timeout_s: float = Field(default=30.0, gt=0)
    """A client that takes longer than this to send its headers, or pauses this long
    inside its body, is answered 408 and disconnected (slow or half-open clients)."""
    body_timeout_s: float = Field(default=60.0, gt=0)
    """A monitored API's request body (at most ``proxy.max_body_bytes``) not complete this
    long after its headers is answered 408: a client trickling bytes just inside
    ``proxy.client_timeout_s`` cannot hold a connection for ever. Forwarded paths (uploads)
    are bounded by the pause alone."""
    max_connections: int = Field(default=8192, ge=0)
    """Open client connections at most (0: no limit); past it uvicorn answers new requests 503
    (``Exceeded concurrency limit.``), so slow or idle clients cannot hold unbounded memory."""
    max_monitored_reply_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Replies larger than this (after undoing gzip/deflate on a copy; for an event stream,
    characters of text and tool-call arguments) are forwarded unchanged but not monitored,
    counted ``unmonitored{reason="too_large"}``; bounds what a reply can cost in memory."""
    metrics_render_timeout_s: float = Field(default=10.0, gt=0)
    """``/metrics`` is rendered on a worker thread; a render slower than this answers 503
    (counted as ``monitor_errors{stage="export"}``) while proxied requests keep flowing."""
    drain_delay_s: float = Field(default=3.0, ge=0)
    """On SIGTERM, ``/readyz`` answers 503 for this long while requests are still served
    (load balancers stop sending), then the graceful shutdown starts."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "metrics_token" in data:
            raise ValueError(
                "proxy.metrics_token moved to telemetry.metrics_token "
                "(one token for every /metrics endpoint handoffmon serves)"
            )
        return data


class HandoffmonConfig(_Section):
    """Root configuration. Every field has a default: an empty file is valid."""

    depth_buckets: list[int] = Field(default_factory=lambda: list(DEFAULT_EDGES), min_length=1, max_length=64)
    """Lower bounds of the depth buckets, increasing from 1 (``[1, 2, 3, 5]`` → ``1, 2, 3-4, 5+``).
    At most 64: each bucket is a ``depth_bucket`` label value of every per-model series."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    rules: list[RuleConfig] = Field(default_factory=list)
    """Rules checked on every applicable reply (see ``rules[]`` below)."""
    request_rules: RequestRulesConfig = Field(default_factory=RequestRulesConfig)
    rule_state: RuleStateConfig = Field(default_factory=RuleStateConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    refit: RefitConfig = Field(default_factory=RefitConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    shadow: ShadowConfig = Field(default_factory=ShadowConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    _source: str = PrivateAttr(default="<config>")
    _empty_file: str | None = PrivateAttr(default=None)

    @property
    def empty_file(self) -> str | None:
        """The config file ``load_config`` read when it sets nothing (empty, only comments,
        ``null``), else ``None``: valid, but rarely meant (a template rendered empty, a wrong
        mount), so the runtime warns at start as ``config check`` does."""
        return self._empty_file

    @property
    def source(self) -> str:
        """Where this config was read from (a file path, ``<defaults>``, with
        `` + HANDOFFMON_* environment`` when variables override it): errors found after
        validation, such as a rule's checker parameters, name it as validation errors do."""
        return self._source

    @field_validator("depth_buckets")
    @classmethod
    def _valid_edges(cls, v: list[int]) -> list[int]:
        DepthBuckets(tuple(v))
        return v

    @field_validator("rules")
    @classmethod
    def _unique_rule_names(cls, v: list[RuleConfig]) -> list[RuleConfig]:
        seen: set[str] = set()
        for rule in v:
            # configured names only: a request's declared names have stricter rules of their own
            # (request_rules), each rejection with its reason code
            if rule.name != rule.name.strip():
                raise ValueError(
                    f"rule name {rule.name!r} starts or ends with whitespace "
                    f"(it would label metrics apart from {rule.name.strip()!r})"
                )
            if not rule.name.isprintable():
                raise ValueError(
                    f"rule name {rule.name!r} holds a control character (newline, tab, ...): "
                    "name rules with printable text"
                )
            if rule.name in seen:
                raise ValueError(f"duplicate rule name {rule.name!r}")
            seen.add(rule.name)
        return v

    @property
    def buckets(self) -> DepthBuckets:
        """The depth buckets as an object."""
        return DepthBuckets(tuple(self.depth_buckets))


def _yaml_loader() -> type:
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the
    last one silently: a second ``store:`` section would drop the first without a word)."""
    import yaml

    class _NoDuplicates(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
        # the mapping's own keys, before merge keys (``<<: *base``) are flattened in: a key that
        # overrides a merged one is YAML's way to override, not a duplicate
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:  # an unhashable key: the mapping constructor reports it
                continue
        loader.flatten_mapping(node)
        return loader.construct_mapping(node, deep=deep)

    _NoDuplicates.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return _NoDuplicates


class _DuplicateKey(ValueError):
    def __init__(self, key: Any, first: int, again: int) -> None:
        self.key, self.first, self.again = key, first, again
        lines = f"line {first}" if first == again else f"lines {first} and {again}"
        super().__init__(f"key {key!r} given twice in one mapping ({lines}): keep one")


def load_yaml_text(text: str) -> Any:
    """Parse YAML as ``yaml.safe_load`` does, refusing duplicate keys (``_DuplicateKey``)."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())


def read_structured_file(path: Path, what: str = "config file") -> Any:
    """A YAML (or ``.toml``) file's data; ``ConfigError`` naming the file when it cannot be read,
    is not UTF-8, does not parse, or gives a key twice in one mapping. ``what`` names the file's
    role in the messages ("config file", "rules file")."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not a {what}: not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(path)
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror}", source=str(path)) from exc
    toml = path.suffix.lower() == ".toml"
    try:
        if toml:
            import tomllib

            return tomllib.loads(text)
        return load_yaml_text(text)
    except _DuplicateKey as exc:
        raise ConfigError(str(exc), source=str(path)) from exc
    except Exception as exc:  # parser errors differ per format; all mean "not parseable"
        raise ConfigError(f"not valid {'TOML' if toml else 'YAML'}: {exc}", source=str(path)) from exc


def _read_file(path: Path) -> dict[str, Any]:
    data = read_structured_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=str(path))
    return data


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X`` (the ``None`` of an optional field says nothing about its values)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _annotation_at(path: Sequence[int | str]) -> Any:
    """The type of the config value at ``path`` (a section's fields by name, a dict's entries by
    any key, a list's items by index), or ``None`` when no key is there."""
    node: Any = HandoffmonConfig
    for part in path:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return None
            node = field.annotation
        elif get_origin(node) is dict:
            node = get_args(node)[1]
        elif get_origin(node) is list and isinstance(part, int):
            node = get_args(node)[0]
        else:
            return None
    return node


def _is_text(annotation: Any) -> bool:
    """Whether a config value of this type is text (``str``, a ``Literal`` of strings)."""
    annotation = _unwrap(annotation)
    if annotation is str:
        return True
    return get_origin(annotation) is Literal and all(isinstance(a, str) for a in get_args(annotation))


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``HANDOFFMON_STORE__BACKEND=sqlite`` → ``{"store": {"backend": "sqlite"}}``, and which
    variable set each dotted key (``{"store.backend": "HANDOFFMON_STORE__BACKEND"}``).

    A text key (``str``, a choice of strings) keeps the variable's text as it is, so a token
    ``12345678``, a path ``2024`` or a hash key of digits stay strings. Other values are parsed
    as JSON when they parse (numbers, booleans, lists such as ``["a","b"]``, mappings), else
    kept as text for validation to refuse. Only variables whose first segment names a
    top-level config key are read, so other ``HANDOFFMON_*`` variables (a test's
    ``HANDOFFMON_SOAK_S``) are not config; a bad key inside a known section
    (``HANDOFFMON_STORE__BACKEDN``) still fails fast, naming the variable.
    """
    out: dict[str, Any] = {}
    names: dict[str, str] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == f"{ENV_PREFIX}CONFIG":
            continue
        path = name[len(ENV_PREFIX) :].lower().split(ENV_NESTED)
        if path[0] not in HandoffmonConfig.model_fields:
            continue
        value = raw if _is_text(_annotation_at(path)) else _json_or_text(raw)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        names[".".join(path)] = name
    return out, names


def unmatched_env_names(environ: Mapping[str, str]) -> list[str]:
    """``HANDOFFMON_<SECTION>__<KEY>`` variables whose section is no config key, each with a
    suggestion (``HANDOFFMON_STOER__BACKEND is not read: no config section 'stoer' (did you mean
    'store'?)``).

    They are not read (a typo'd section would otherwise be silently ignored); variables
    without ``__`` are not config-shaped and not listed.
    """
    lines = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or ENV_NESTED not in name:
            continue
        section = name[len(ENV_PREFIX) :].lower().split(ENV_NESTED)[0]
        if section in HandoffmonConfig.model_fields:
            continue
        hint = _did_you_mean(section, HandoffmonConfig)
        lines.append(f"{name} is not read: no config section {section!r}{hint}")
    return lines


def misnamed_env_names(environ: Mapping[str, str]) -> list[str]:
    """``HANDOFFMON_<SECTION>_<KEY>`` variables (one ``_`` where config variables take ``__``)
    that name a section's key exactly, each with the variable meant (``HANDOFFMON_STORE_BACKEND
    is not read: … (did you mean HANDOFFMON_STORE__BACKEND?)``).

    They are not read: such a name is also what a wrapper's own variable may be called (the
    compose file's host-side ``HANDOFFMON_STORE_BACKEND``, passed on as
    ``HANDOFFMON_STORE__BACKEND``), so a running monitor and ``config check`` warn and go on.
    Names that are no section's key (``HANDOFFMON_METRICS_TOKEN``) are not listed.
    """
    lines = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or ENV_NESTED in name:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        if rest in HandoffmonConfig.model_fields:
            continue
        for section, field in HandoffmonConfig.model_fields.items():
            model = _unwrap(field.annotation)
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                continue
            key = rest[len(section) + 1 :] if rest.startswith(f"{section}_") else ""
            if key in model.model_fields:
                meant = f"{ENV_PREFIX}{section.upper()}{ENV_NESTED}{key.upper()}"
                lines.append(
                    f"{name} is not read: sections and keys are separated by '{ENV_NESTED}' "
                    f"(did you mean {meant}?)"
                )
                break
    return lines


def _did_you_mean(name: str, model: type[BaseModel] | None) -> str:
    """`` (did you mean 'backend'?)`` for the closest field of ``model``, or ``""``."""
    if model is None:
        return ""
    close = difflib.get_close_matches(name, list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The config model holding the value at ``loc`` (a validation error's location)."""
    node = _unwrap(_annotation_at(loc))
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = v
    return merged


def _key_of(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """Dotted key for an error location, naming rules by their ``name`` where possible."""
    parts: list[str] = []
    node: Any = data
    for item in loc:
        if isinstance(item, int) and isinstance(node, list) and item < len(node):
            entry = node[item]
            label = entry.get("name") if isinstance(entry, dict) else None
            parts[-1] = f"{parts[-1]}[{label!r}]" if label else f"{parts[-1]}[{item}]"
            node = entry
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "<config>", env_names: Mapping[str, str] | None = None
) -> HandoffmonConfig:
    """Validate a mapping; errors name the first bad key and the source.

    An unknown key is reported as such with the closest known one (``unknown key (did you
    mean 'backend'?)``). ``env_names`` maps dotted keys to the ``HANDOFFMON_*`` variables that
    set them: an error in such a key names the variable.
    """
    try:
        config = HandoffmonConfig.model_validate(dict(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        key = _key_of(loc, data)
        msg = err["msg"]
        if err["type"] == "extra_forbidden" and loc:
            msg = f"unknown key{_did_you_mean(str(loc[-1]), _model_at(loc[:-1]))}"
        var = _env_name_of(loc, env_names or {})
        if var and err["type"] in ("list_type", "dict_type"):
            msg = f"""{msg}: {var} takes JSON, e.g. {var}='["a","b"]' or '{{"a": "b"}}'"""
        elif var:
            msg = f"{msg} (set by {var})"
        extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{msg}{extra}", key=key or None, source=source) from exc
    config._source = source
    return config


def _env_name_of(loc: tuple[int | str, ...], env_names: Mapping[str, str]) -> str | None:
    """The variable that set the value at ``loc``, a value holding it (a JSON list or mapping), or
    a key below it (``HANDOFFMON_STORE__BACKEND__X`` turns ``store.backend`` into a mapping)."""
    parts = [str(p) for p in loc]
    for n in range(len(parts), 0, -1):
        var = env_names.get(".".join(parts[:n]))
        if var:
            return var
    below = ".".join(parts) + "."
    return next((var for key, var in sorted(env_names.items()) if key.startswith(below)), None)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> HandoffmonConfig:
    """Load config from a YAML/TOML file (or ``$HANDOFFMON_CONFIG``) plus env overrides.

    Args:
        path: config file; ``None`` uses ``$HANDOFFMON_CONFIG`` if set, else defaults.
        environ: environment to read (defaults to ``os.environ``).

    Raises:
        ConfigError: naming the offending key and the file.
    """
    env = os.environ if environ is None else environ
    if path is None and env.get(f"{ENV_PREFIX}CONFIG"):
        path = env[f"{ENV_PREFIX}CONFIG"]
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        data = _read_file(Path(path))
    empty_file = str(path) if path is not None and not data else None
    overrides, names = _env_overrides(env)
    for line in [*unmatched_env_names(env), *misnamed_env_names(env)]:
        _log.warning("%s", line)
    if overrides:
        data = _merge(data, overrides)
        source = f"{source} + {ENV_PREFIX}* environment"
    config = config_from_mapping(data, source=source, env_names=names)
    config._empty_file = empty_file
    _routing_has_a_table(config, names)
    return config


def _routing_has_a_table(config: HandoffmonConfig, env_names: Mapping[str, str]) -> None:
    """Refuse ``routing.enabled`` with ``refit.interval_s: 0`` in a loaded config: routing's table
    comes only from this process's periodic refit (no key reads one from elsewhere; a
    ``handoffmon refit`` job publishes gauges, not the table), so it would never get one and
    count ``no_table`` on every request. Checked at load, not in the model: code that builds its
    config in Python may publish a table itself (``runtime.routing.holder.publish``, as
    ``handoffmon demo --compare-routing`` does).

    Raises:
        ConfigError: naming both keys (and the variables that set them) and the source.
    """
    if not config.routing.enabled or config.refit.interval_s > 0:
        return
    by = {k: f" (set by {env_names[k]})" for k in ("routing.enabled", "refit.interval_s") if k in env_names}
    raise ConfigError(
        f"routing.enabled is true{by.get('routing.enabled', '')} but refit.interval_s is 0"
        f"{by.get('refit.interval_s', '')}: no periodic refit runs, so routing never gets a "
        "pair-risk table and keeps the router's order on every request (outcome no_table); set "
        "refit.interval_s > 0 (e.g. 300) or routing.enabled: false",
        key="routing.enabled",
        source=config.source,
    )
