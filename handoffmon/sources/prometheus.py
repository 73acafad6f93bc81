"""The Prometheus source: handoffmon's counters read through the Prometheus HTTP API.

Each counter is summed over replicas (every label not in the key is aggregated away,
e.g. ``instance`` and ``job``) with one instant query, all at the same evaluation
time. Without a window the raw counter totals are summed, which equals merging the
replicas' local aggregates exactly.

With a ``window`` the counts are the increments of the last window, computed here from the
raw counters (``window_increases``), not by PromQL's ``increase``: ``increase`` detects a
counter reset per series, as a sample below the one before it, and extrapolates each series
to the window's edges by its own samples. A cell's stats are separate series, so a replica
restart could count as a reset in some of them and not in others: measured against a real
Prometheus, a cell's ``y2`` went 37, 38 | 36 … 60 across a restart (a reset: 61 counted) and
its ``yn`` 37, 38 | 38 … 62 (no sample below the one before: 25 counted, the 38 of the old
process lost), which read as Σy² = 67 > Σyn = 27 and repaired a healthy cell. Here each
series is read as sampled (``metric[window:step]``, ``WINDOW_STEPS`` points) and a reset is
a property of the scraped process: a step at which any series of a target (the labels
outside the key: ``job``, ``instance``, …) falls below its previous value restarts every
series of that target from 0; a series that appears after the target's first step was 0
until then (not its first sample lost, as ``increase`` does); nothing is extrapolated. So
all stats of a cell share one reset and one baseline, and their increments obey the same
relations as the turns behind them. A restart after which every series of a target is at or
above its old value stays undetectable (from counters alone), as for ``increase``.

The clean-baseline verdicts and the per-cell depth and conversation-cluster sums
(``handoffmon_baseline_checks_total``, ``handoffmon_cell_stats_total``) are read the same
way, so intervals from Prometheus are conversation-clustered like the local ones. Over a
``window`` the cluster sums' increase is an approximation for conversations that straddle
the window's start (their square grows by the cross term with their earlier checks, which
widens the interval a little; G counts only conversations that started in the window).
Shadow continuation's pairs (``handoffmon_shadow_pair_stats_total``: paired tables and
their cluster sums) are read the same way, so the refit's ``switch_costs`` from Prometheus
equal the in-process ones. Counters from a handoffmon that predates these series are
simply absent: the refit then treats turns as independent and says so (``clustered:
false``) and has no switch costs.

A ``match`` selector such as ``{job="prod",namespace="llm"}`` restricts every query to
one deployment; without it every handoffmon a Prometheus scrapes (staging and
production, two teams) is summed into one refit.

A Prometheus behind authentication (Grafana Mimir or Cloud, Thanos or Cortex with tenants,
an OAuth or kube-rbac proxy) is read with credentials in the URL
(``https://user:password@host``: HTTP basic auth), a bearer token
(``HANDOFFMON_PROMETHEUS_TOKEN``, or ``HANDOFFMON_PROMETHEUS_TOKEN_FILE``: a file such as a
mounted service-account token, read when the source is built) and extra headers
(``HANDOFFMON_PROMETHEUS_HEADERS``: ``Name: value`` lines, e.g. ``X-Scope-OrgID: team-a``).
Credentials never appear in the source's label, the refit JSON or error messages, and are
not sent on to another host when Prometheus redirects.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import math
import os
import re
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from handoffmon.counts import (
    CLUSTER_STATS,
    SHADOW_CLUSTER,
    CellStatKey,
    CheckKey,
    Counts,
    ShadowKey,
    TransitionKey,
    TurnKey,
)
from handoffmon.labels import SHADOW_PAIR_LABELS
from handoffmon.sources import SourceError
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

CHECKS = "handoffmon_checks_total"
TRANSITIONS = "handoffmon_rule_transitions_total"
TURNS = "handoffmon_turns_total"
ATTRIBUTIONS = "handoffmon_attributions_total"
MONITOR_ERRORS = "handoffmon_monitor_errors_total"
DROPPED = "handoffmon_queue_dropped_total"
BASELINE_CHECKS = "handoffmon_baseline_checks_total"
CELL_STATS = "handoffmon_cell_stats_total"
SHADOW_PAIR_STATS = "handoffmon_shadow_pair_stats_total"

_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^\{{{_MATCHER}(?:,{_MATCHER})*,?\s*\}}$")
_DURATION = re.compile(r"^(?:\d+(?:ms|[smhdwy]))+$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

Fetch = Callable[[str, dict[str, str]], Any]
"""(url, params) → decoded JSON body; injectable for tests."""

TOKEN_ENV = "HANDOFFMON_PROMETHEUS_TOKEN"
"""A bearer token for the Prometheus source (``Authorization: Bearer …``)."""
TOKEN_FILE_ENV = "HANDOFFMON_PROMETHEUS_TOKEN_FILE"
"""A file holding that token (a mounted Kubernetes service-account token), read when the
source is built."""
HEADERS_ENV = "HANDOFFMON_PROMETHEUS_HEADERS"
"""Extra request headers for the Prometheus source, one ``Name: value`` per line (or
separated by ``;``), e.g. ``X-Scope-OrgID: team-a`` for a multi-tenant Mimir, Cortex or Thanos."""
MAX_TOKEN_CHARS = 65536
"""Longest bearer token read from ``HANDOFFMON_PROMETHEUS_TOKEN_FILE``."""
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
MAX_LABEL_VALUE_CHARS = 1024
"""Longest key label value read: handoffmon exports at most 128 characters (``labels.MAX_LABEL_CHARS``),
a few times that once control characters are spelled as escapes."""
WINDOW_STEPS = 120
"""Points per series of a windowed read (``metric[window:window/WINDOW_STEPS]``): bounded
whatever the window and scrape interval. A step coarser than the scrape interval loses a
restarted process's last increments before the restart, the same turns' increments in every
series of the target (so the relations between them still hold)."""
MAX_RESPONSE_BYTES = 256 << 20
"""Largest query answer read (256 MiB, about a million series): a bigger one is refused, not
held in memory."""


def url_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without the ``user:password@`` of its authority, and the (percent-decoded) user
    and password (``None`` when there are none).

    Raises:
        SourceError: the URL's port is not a number (the message leaves the credentials out).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError as exc:
        raise SourceError(f"{host}: the source URL's port is not a number") from exc
    netloc = f"{host}:{port}" if port is not None else host
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), (user, password)


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its credentials (``url_credentials``), and the basic-auth header they
    make (``{}`` when there are none).

    Raises:
        SourceError: the URL's port is not a number.
    """
    url, credentials = url_credentials(url)
    if credentials is None:
        return url, {}
    token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
    return url, {"Authorization": f"Basic {token}"}


def auth_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """The request headers ``HANDOFFMON_PROMETHEUS_TOKEN`` (or ``_TOKEN_FILE``) and
    ``HANDOFFMON_PROMETHEUS_HEADERS`` ask for.

    Raises:
        SourceError: both token variables set, an unreadable or empty token file, a malformed
            header line (each message names the variable, never the secret).
    """
    out: dict[str, str] = {}
    for line in re.split(r"[\n;]", environ.get(HEADERS_ENV, "")):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _HEADER_NAME.match(name) or not value or any(c in value for c in "\r\n\0"):
            shown = name if _HEADER_NAME.match(name) else "a line"
            raise SourceError(f"{HEADERS_ENV}: {shown} is not a 'Name: value' header line")
        out[name] = value
    token, path = environ.get(TOKEN_ENV, ""), environ.get(TOKEN_FILE_ENV, "")
    if token and path:
        raise SourceError(f"set {TOKEN_ENV} or {TOKEN_FILE_ENV}, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                token = fh.read(MAX_TOKEN_CHARS + 1).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{TOKEN_FILE_ENV}: cannot read {path}: {exc}") from exc
        if not token:
            raise SourceError(f"{TOKEN_FILE_ENV}: {path} is empty")
        if len(token) > MAX_TOKEN_CHARS:
            raise SourceError(
                f"{TOKEN_FILE_ENV}: {path} holds over {MAX_TOKEN_CHARS} characters: not a token"
            )
    token = token.strip()
    if token:
        if any(c in token for c in "\r\n\0 "):
            raise SourceError(f"{TOKEN_FILE_ENV if path else TOKEN_ENV}: the token holds whitespace")
        if any(k.lower() == "authorization" for k in out):
            raise SourceError(f"{HEADERS_ENV} sets Authorization and a bearer token is set too")
        out["Authorization"] = f"Bearer {token}"
    return out


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, without the credentials when one leads to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if (
            new is not None
            and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        ):
            new.remove_header("Authorization")
        return new


def parse_duration(window: str) -> float:
    """Seconds in a Prometheus duration such as ``1h``, ``90m`` or ``1h30m``."""
    if not _DURATION.match(window):
        raise SourceError(f"window {window!r} is not a Prometheus duration like 5m, 1h or 7d")
    return float(sum(int(n) * _UNIT_S[u] for n, u in re.findall(r"(\d+)(ms|[smhdwy])", window)))


def parse_match(match: str | None) -> str:
    """The label matchers of a ``--match`` selector, checked: ``{job="prod"}`` → ``job="prod"``.

    ``None`` or ``""`` → ``""`` (no selector). Raises ``SourceError`` for anything but a
    brace-enclosed list of ``label op "value"`` matchers (a metric name is not allowed:
    the selector applies to every handoffmon metric).
    """
    if not match:
        return ""
    text = match.strip()
    if not _SELECTOR.match(text):
        raise SourceError(
            f'--match {match!r} is not a label selector like {{job="prod",namespace="llm"}} '
            "(label matchers only, no metric name)"
        )
    return text[1:-1].strip().rstrip(",").strip()


def select(metric: str, matchers: str) -> str:
    """``metric`` with the checked ``matchers`` of :func:`parse_match` (``metric{...}``)."""
    return f"{metric}{{{matchers}}}" if matchers else metric


def _urllib_fetch(timeout_s: float, headers: Mapping[str, str] | None = None) -> Fetch:
    opener = urllib.request.build_opener(_SameHostRedirects)
    sent = dict(headers or {})

    def fetch(url: str, params: dict[str, str]) -> Any:
        full = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            with opener.open(urllib.request.Request(full, headers=sent), timeout=timeout_s) as resp:
                body = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(body) > MAX_RESPONSE_BYTES:
                raise SourceError(
                    f"Prometheus at {url} answered over {MAX_RESPONSE_BYTES >> 20} MiB for one query: "
                    "narrow it with --match"
                )
            return json.loads(body.decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise SourceError(f"Prometheus query failed ({exc.code}) at {url}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise SourceError(f"cannot reach Prometheus at {url}: {exc}") from exc
        except ValueError as exc:
            raise SourceError(f"Prometheus at {url} returned invalid JSON: {exc}") from exc

    return fetch


class PrometheusSource:
    """Reads ``Counts`` from a Prometheus server.

    Args:
        base_url: ``http://host:9090`` (``prometheus://host:9090`` is accepted too).
        window: a Prometheus duration (``1h``) for ``increase``; None = counter totals.
        match: a label selector (``{job="prod",namespace="llm"}``) every query is restricted
            to; None = every series of the metric (all deployments summed).
        timeout_s: per-query HTTP timeout.
        fetch: transport override (tests); default uses ``urllib``.
        clock: evaluation time source.
        environ: where ``HANDOFFMON_PROMETHEUS_TOKEN``, ``_TOKEN_FILE`` and ``_HEADERS`` are
            read (default: the process environment).

    Raises:
        SourceError: a malformed ``window``, ``match`` or authentication setting.
    """

    def __init__(
        self,
        base_url: str,
        *,
        window: str | None = None,
        match: str | None = None,
        timeout_s: float = 10.0,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if base_url.startswith("prometheus://"):
            base_url = "http://" + base_url[len("prometheus://") :]
        base_url, headers = split_credentials(base_url)
        self.base_url = base_url.rstrip("/")
        """The URL queried, without credentials."""
        self.window = window
        self.window_s = parse_duration(window) if window else None
        self.matchers = parse_match(match)
        extra = auth_headers(os.environ if environ is None else environ)
        if headers and any(k.lower() == "authorization" for k in extra):
            raise SourceError(
                f"the source URL carries a user and password and {TOKEN_ENV}, {TOKEN_FILE_ENV} or "
                f"{HEADERS_ENV} sets Authorization too: use one"
            )
        self._fetch = fetch or _urllib_fetch(timeout_s, {**headers, **extra})
        self._clock = clock

    @property
    def label(self) -> str:
        """Where the counts come from: the base URL and the selector, if any."""
        return f"{self.base_url}{{{self.matchers}}}" if self.matchers else self.base_url

    def query_for(self, metric: str, by: tuple[str, ...]) -> str:
        """The PromQL summing ``metric``'s counter totals over replicas by ``by`` (a window is
        read by ``window_query_for``)."""
        series = select(metric, self.matchers)
        return f"sum by ({', '.join(by)}) ({series})" if by else f"sum({series})"

    def query(
        self, expr: str, at: float | None = None, *, what: str | None = None, result_type: str = "vector"
    ) -> list[dict[str, Any]]:
        """Run one instant query (at ``at``, default now); its result series (a ``result_type``:
        ``vector``, or ``matrix`` for a range or subquery).

        Raises:
            SourceError: unreachable, an error answer, an answer with ``warnings`` (Thanos,
                Mimir and Cortex answer a query some stores or ingesters missed with success and
                a warning: a partial sum, whose cells' stats would not add up), or a body that
                is not a vector result (named by ``what``, default the query).
        """
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        body = self._fetch(f"{self.base_url}/api/v1/query", params)
        what = what or expr
        if not isinstance(body, dict):
            raise SourceError(f"{self.base_url} answered the query for {what} with no Prometheus API body")
        if body.get("status") != "success":
            raise SourceError(f"Prometheus query for {what} failed: {body.get('error', body)}")
        warnings = body.get("warnings")
        if warnings:
            shown = (
                "; ".join(str(w) for w in warnings)[:300]
                if isinstance(warnings, list)
                else str(warnings)[:300]
            )
            raise SourceError(
                f"Prometheus answered the query for {what} with warnings (a partial answer?): {shown}"
            )
        data = body.get("data")
        data = data if isinstance(data, dict) else {}
        if data.get("resultType") != result_type:
            raise SourceError(
                f"Prometheus returned {data.get('resultType')!r} for {what}, expected {result_type}"
            )
        result = data.get("result")
        if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
            raise SourceError(f"malformed Prometheus result for {what}: {str(result)[:200]}")
        return result

    def vector(self, metric: str, by: tuple[str, ...], at: float) -> list[tuple[dict[str, str], int]]:
        """Run one instant query; returns (labels, rounded value) per series (zeros left out).

        Raises:
            SourceError: a series that no sum of handoffmon counters gives: a value that is not
                a finite number ≥ 0 (NaN, ±Inf, negative: a gauge or a recording rule under the
                name), a key label missing, empty or over ``MAX_LABEL_VALUE_CHARS`` (dropped by
                relabeling, not a handoffmon series), or two series with the same key labels
                (each message names the metric and the series).
        """
        out = []
        seen: set[tuple[str, ...]] = set()
        for series in self.query(self.query_for(metric, by), at, what=metric):
            shown = str(series)[:200]
            try:
                raw = float(series["value"][1])
                found = series["metric"]
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                raise SourceError(f"malformed Prometheus series for {metric}: {shown}") from exc
            _check_count(metric, raw, series["value"][1], shown)
            labels = _key_labels(metric, found, by, shown)
            key = tuple(labels[k] for k in by)
            if key in seen:
                raise SourceError(
                    f"Prometheus answered two series for {metric} with the same labels {dict(labels)} "
                    "(a sum by those labels has one; a proxy between?)"[:400]
                )
            seen.add(key)
            value = round(raw)
            if value > 0:
                out.append((labels, value))
        return out

    def window_query_for(self, metric: str) -> str:
        """The PromQL reading ``metric``'s raw series over the window, ``WINDOW_STEPS`` points each."""
        assert self.window_s is not None
        step_ms = max(1, int(self.window_s * 1000 / WINDOW_STEPS))
        return f"{select(metric, self.matchers)}[{self.window}:{step_ms}ms]"

    def window_vectors(
        self, families: Mapping[str, tuple[str, ...]], at: float
    ) -> dict[str, list[tuple[dict[str, str], int]]]:
        """Each metric's window increments summed by its key labels (as ``vector`` answers),
        from the raw series of every family at once: a target's resets are found across all
        of them (``window_increases``).

        Raises:
            SourceError: as ``vector`` does, for a series no handoffmon counter gives.
        """
        rows: list[tuple[str, tuple[str, ...], dict[str, str], tuple[tuple[str, str], ...]]] = []
        points: list[list[tuple[float, float]]] = []
        for metric, by in families.items():
            for series in self.query(self.window_query_for(metric), at, what=metric, result_type="matrix"):
                shown = str(series)[:200]
                try:
                    found = series["metric"]
                    pts = sorted((float(t), float(v)) for t, v in series["values"])
                    target = tuple(
                        sorted((k, str(v)) for k, v in found.items() if k not in by and k != "__name__")
                    )
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                    raise SourceError(f"malformed Prometheus series for {metric}: {shown}") from exc
                for _, v in pts:
                    _check_count(metric, v, v, shown)
                labels = _key_labels(metric, found, by, shown)
                rows.append((metric, tuple(labels[k] for k in by), labels, target))
                points.append(pts)
        increases = window_increases([row[3] for row in rows], points)
        sums: dict[str, dict[tuple[str, ...], tuple[dict[str, str], float]]] = {m: {} for m in families}
        for (metric, key, labels, _), inc in zip(rows, increases, strict=True):
            _, total = sums[metric].get(key, (labels, 0.0))
            sums[metric][key] = (labels, total + inc)
        return {
            m: [(labels, round(v)) for labels, v in by_key.values() if round(v) > 0]
            for m, by_key in sums.items()
        }

    def snapshot(self) -> Counts:
        """All counters summed over replicas, evaluated at one instant (over a window: their
        increments, ``window_vectors``)."""
        at = self._clock()
        checks_by = ("rule", "model", "prefix_model", "depth_bucket", "verdict")
        trans_by = ("rule", "model", "handoff", "from_verdict", "to_verdict")
        turns_by = ("model", "prefix_model", "depth_bucket")
        base_by = ("rule", "model", "depth_bucket", "verdict")
        stats_by = ("rule", "model", "prefix_model", "depth_bucket", "stat")
        families = {
            CHECKS: checks_by,
            TRANSITIONS: trans_by,
            TURNS: turns_by,
            ATTRIBUTIONS: ("method",),
            MONITOR_ERRORS: ("stage",),
            DROPPED: (),
            BASELINE_CHECKS: base_by,
            CELL_STATS: stats_by,
            SHADOW_PAIR_STATS: SHADOW_PAIR_LABELS,
        }
        read = self.window_vectors(families, at) if self.window else None

        def vector(metric: str, by: tuple[str, ...], at: float) -> list[tuple[dict[str, str], int]]:
            return read[metric] if read is not None else self.vector(metric, by, at)

        checks = {CheckKey(*(lab[k] for k in checks_by)): v for lab, v in vector(CHECKS, checks_by, at)}  # type: ignore[arg-type]
        trans = {
            TransitionKey(*(lab[k] for k in trans_by)): v  # type: ignore[arg-type]
            for lab, v in vector(TRANSITIONS, trans_by, at)
        }
        turns: dict[TurnKey, int] = {}
        for lab, v in vector(TURNS, turns_by, at):
            key = TurnKey(lab["model"], lab["prefix_model"], lab["depth_bucket"], _handoff(lab))
            turns[key] = turns.get(key, 0) + v
        attributions = {lab["method"]: v for lab, v in vector(ATTRIBUTIONS, ("method",), at)}
        errors = {lab["stage"]: v for lab, v in vector(MONITOR_ERRORS, ("stage",), at)}
        dropped = sum(v for _, v in vector(DROPPED, (), at))
        baseline = {
            CheckKey(lab["rule"], lab["model"], lab["model"], lab["depth_bucket"], lab["verdict"]): v  # type: ignore[arg-type]
            for lab, v in vector(BASELINE_CHECKS, base_by, at)
        }
        stats = {CellStatKey(*(lab[k] for k in stats_by)): v for lab, v in vector(CELL_STATS, stats_by, at)}
        shadow = {
            ShadowKey(*(lab[k] for k in SHADOW_PAIR_LABELS)): v
            for lab, v in vector(SHADOW_PAIR_STATS, SHADOW_PAIR_LABELS, at)
        }
        if shadow and not any(k.stat in SHADOW_CLUSTER for k in shadow):
            raise SourceError(
                f"{self.label}: {SHADOW_PAIR_STATS} has paired tables but no cluster sums "
                '(stat="conversations", "b2", "c2", "bc", "bn", "cn", "n2"): dropped by relabeling '
                "or a recording rule? Without them every switch cost would treat pairs as independent"
            )
        if baseline and not any(k.stat in CLUSTER_STATS for k in stats):
            # both are written for every clean checked turn since they were introduced together
            raise SourceError(
                f"{self.label}: {BASELINE_CHECKS} has series but {CELL_STATS} has no cluster sums "
                '(stat="conversations", "y2", "yn", "n2"): dropped by relabeling or a recording '
                "rule? Without them every interval would treat turns as independent"
            )
        return Counts(
            checks=checks,
            transitions=trans,
            turns=turns,
            attributions=attributions,
            monitor_errors=errors,
            dropped=dropped,
            baseline_checks=baseline,
            cell_stats=stats,
            shadow=shadow,
        )


def window_increases(
    targets: list[tuple[tuple[str, str], ...]], points: list[list[tuple[float, float]]]
) -> list[float]:
    """Each series' increment over its ``points`` (time, value; sorted), with its target's
    resets and baseline shared by all series of that target (``targets[i]``: series i's labels
    outside the key).

    A target resets at a time at which any of its series falls below its previous value (a
    restarted process: all its counters start again from 0). Per series, each stretch between
    resets adds its last value minus its start: 0 after a reset, and 0 too for a series first
    seen after the target's first time (it did not exist, so it was 0); only a series present
    at the target's first time counts from its value there. Nothing is extrapolated."""
    by_target: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i, target in enumerate(targets):
        if points[i]:
            by_target.setdefault(target, []).append(i)
    out = [0.0] * len(points)
    for idxs in by_target.values():
        first = min(points[i][0][0] for i in idxs)
        resets = sorted(
            {t for i in idxs for (_, before), (t, v) in itertools.pairwise(points[i]) if v < before}
        )
        for i in idxs:
            total = 0.0
            for seg, group in itertools.groupby(points[i], key=lambda p: bisect.bisect_right(resets, p[0])):
                stretch = list(group)
                start = stretch[0][1] if seg == 0 and stretch[0][0] == first else 0.0
                total += stretch[-1][1] - start
            out[i] = total
    return out


def _check_count(metric: str, raw: float, shown_value: object, shown: str) -> None:
    """Raises SourceError unless ``raw`` is a count ≥ 0."""
    if not math.isfinite(raw) or round(raw) < 0:
        raise SourceError(
            f"Prometheus series for {metric} has value {shown_value!r}, not a count >= 0 "
            f"(a gauge or a rule writing under that name?): {shown}"
        )


def _key_labels(metric: str, found: Any, by: tuple[str, ...], shown: str) -> dict[str, str]:
    """The key labels ``by`` of a series' labels ``found``.

    Raises:
        SourceError: the labels are not a mapping, or a key label is missing, empty, not a
            string or over ``MAX_LABEL_VALUE_CHARS``.
    """
    try:
        labels = {k: found.get(k) for k in by}
    except AttributeError as exc:
        raise SourceError(f"malformed Prometheus series for {metric}: {shown}") from exc
    for k, v in labels.items():
        if not isinstance(v, str) or not v or len(v) > MAX_LABEL_VALUE_CHARS:
            what = "no" if not v else ("a non-string" if not isinstance(v, str) else "an over-long")
            raise SourceError(
                f"Prometheus series for {metric} has {what} {k!r} label (handoffmon sets every "
                f"key label, at most {MAX_LABEL_VALUE_CHARS} characters; dropped or rewritten "
                f"by relabeling?): {shown}"
            )
    return typing.cast(dict[str, str], labels)


def _handoff(labels: dict[str, str]) -> str:
    """``turns_total`` has no handoff label; derive it from the prefix the way the pipeline does."""
    prefix = labels["prefix_model"]
    if prefix == UNKNOWN_MODEL:
        return "unknown"
    return "false" if prefix in (NO_PREFIX, labels["model"]) else "true"
