"""Generate the Grafana dashboard with Grafana's typed SDK (grafana-foundation-sdk).

Usage (repository root): ``python -m deploy.tools.dashboard`` rewrites
``deploy/grafana/dashboards/handoffmon.json``; a test fails while the checked-in JSON
differs from what this writes. ``--identity-labels job,env`` writes a dashboard for
another identity-label list (one variable per label) to ``--out``.

Every query selects one deployment through the identity variables (``cluster``,
``namespace``, ``job`` by default: single-valued, so two deployments in one Prometheus are
never summed on a panel); a label a target does not carry has no values and selects
``""``, which matches its absence.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from deploy.tools.from_rules import DEFAULT_RULES, IDENTITY_LABELS, _load

OUT = Path(__file__).resolve().parents[1] / "grafana" / "dashboards" / "handoffmon.json"
UID = "handoffmon-overview"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RUNBOOKS = "https://github.com/handoffmon/handoffmon/blob/main/docs/operations/alerting.md"
DEEP = 'depth_bucket=~"(9|[1-9][0-9]+)(-[0-9]+|\\\\+)?"'
NO_REFIT = "No refit yet (refit.interval_s, or the refit job and its Pushgateway)"
SERVE_ONLY = "Only handoffmon serve exports these"
NO_DATA = {
    4: NO_REFIT,
    7: NO_REFIT,
    8: NO_REFIT,
    9: "No significant Δ (or no refit yet)",
    10: NO_REFIT,
    11: "No handoffs between models",
    13: NO_REFIT,
    14: NO_REFIT,
    15: NO_REFIT,
    17: "No earlier assistant messages yet",
    23: NO_REFIT,
    31: "No router fallbacks",
    32: "No router fallbacks",
    33: SERVE_ONLY,
    34: "Off: routing.enabled",
    35: "Off: routing.enabled (or no refit yet)",
    36: SERVE_ONLY,
    37: SERVE_ONLY,
    41: "Off: shadow.enabled (or no refit yet)",
    42: "Off: shadow.enabled",
    43: "Off: shadow.enabled",
    44: "Off: shadow.enabled",
    45: "Off: shadow.enabled",
}
"""What an empty panel means (Grafana's ``noValue``) where a healthy deployment leaves it empty: a
feature that is off, no refit yet, no fallbacks. Elsewhere "No data" stays: a fault."""


SUCCESS = "handoffmon_refit_last_success_timestamp_seconds"


class Queries:
    """PromQL builders that put the identity selector into every metric selector."""

    def __init__(self, identity: Sequence[str]) -> None:
        self.identity = tuple(identity)
        self.sel = ", ".join(f'{label}="${label}"' for label in self.identity)

    def m(self, metric: str, matchers: str = "") -> str:
        """``metric{<identity>, matchers}``."""
        return f"{metric}{{{self.sel}{', ' + matchers if matchers else ''}}}"

    def pooled_fresh(self) -> str:
        """The newest success of the deployment's pooled fit (a refit job's) while under an hour
        old, as the rules' ``handoffmon:refit_standing_fit:last_success`` has it (inlined: the
        dashboard works without the rules file)."""
        pooled = self.m(SUCCESS, 'fit="pooled"')
        return f"(max({pooled}) > time() - 3600)"

    def fit(self, metric: str, matchers: str = "") -> str:
        """``metric{<identity>, matchers}`` of the fit the alerts stand on: a refit job's pooled
        fit while it is fresh, else the replicas' local ones, so a pair never shows twice; of
        the local ones, those of replicas whose own last success is under an hour old, as the
        rules' ``handoffmon:refit_standing_publisher:last_success`` has it (a replica whose refit
        hangs among fresh ones drops out, as from the alerts)."""
        extra = f"{matchers}, " if matchers else ""
        pooled, local = self.m(metric, extra + 'fit="pooled"'), self.m(metric, extra + 'fit!="pooled"')
        fresh = self.pooled_fresh()
        success = self.m(SUCCESS, 'fit!="pooled"')
        local_fresh = f"(max by (instance, fit) ({success}) > time() - 3600)"
        return (
            f"(\n  {pooled} and on () {fresh}\nor\n"
            f"  ({local} and on (instance, fit) {local_fresh}) unless on () {fresh}\n)"
        )

    def refit_success(self) -> str:
        """The newest success of the fit the alerts stand on (the pooled fit's when it is over
        an hour old and no local fit exists: the age then shows how stale it is)."""
        local, pooled = self.m(SUCCESS, 'fit!="pooled"'), self.m(SUCCESS, 'fit="pooled"')
        return f"({self.pooled_fresh()} or max({local}) or max({pooled}))"

    def ratio(self, by: str, metric: str, extra: str, window: str, fn: str = "rate") -> str:
        """pass / (pass + fail) of ``handoffmon_checks_total`` by ``by``."""
        num = self.m(metric, f'{extra}, verdict="pass"')
        den = self.m(metric, f'{extra}, verdict=~"pass|fail"')
        return f"sum by ({by}) ({fn}({num}[{window}]))\n/\nsum by ({by}) ({fn}({den}[{window}]))"


def _target(expr: str, legend: str = "__auto", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    return q.instant() if instant else q.range()


def _ts(pid: int, title: str, unit: str, w: int, h: int, *targets: prometheus.Dataquery) -> timeseries.Panel:
    panel = timeseries.Panel().id(pid).title(title).datasource(DS).unit(unit).span(w).height(h)
    for t in targets:
        panel = panel.with_target(t)
    return panel.no_value(NO_DATA[pid]) if pid in NO_DATA else panel


def _table(
    pid: int,
    title: str,
    w: int,
    h: int,
    *targets: prometheus.Dataquery,
    columns: Sequence[str] = (),
    matrix: tuple[str, str] | None = None,
) -> table.Panel:
    """A table of instant queries, each in Grafana's "table" format: one frame per query
    (labels as columns, the value as ``Value``, or ``Value #<refId>`` with several queries).
    In the default time-series format every series is a frame of its own and the table shows
    one of them at a time behind a frame selector. Several queries are merged into one row per
    label set, their value columns named by ``columns`` (in refId order); ``matrix``
    (row label, column label) pivots a single query's values into a grid."""
    assert not columns or len(columns) == len(targets)
    panel = table.Panel().id(pid).title(title).datasource(DS).span(w).height(h)
    if pid in NO_DATA:
        panel = panel.no_value(NO_DATA[pid])
    for t in targets:
        panel = panel.with_target(t.format(PromQueryFormat.TABLE))
    renames: dict[str, str] = {}
    if len(targets) > 1:
        panel = panel.with_transformation(DataTransformerConfig(id_val="merge", options={}))
        refs = [str(t.build().ref_id) for t in targets]
        renames = {f"Value #{ref}": name for ref, name in zip(refs, columns, strict=True)}
    elif columns:
        renames = {"Value": columns[0]}
    if matrix is not None:
        row, column = matrix
        panel = panel.with_transformation(
            DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"rowField": row, "columnField": column, "valueField": "Value"},
            )
        )
    else:
        panel = panel.with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "renameByName": renames},
            )
        )
    return panel


def _variables(q: Queries) -> list[object]:
    out: list[object] = [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
    ]
    scope: list[str] = []
    for label in q.identity:
        where = "{" + ", ".join(scope) + "}" if scope else ""
        out.append(
            dashboard.QueryVariable(label)
            .label(label.capitalize())
            .datasource(DS)
            .query(f"label_values(handoffmon_build_info{where}, {label})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(False)
            .include_all(False)
        )
        scope.append(f'{label}="${label}"')
    for name, metric, label, multi in (
        ("rule", "handoffmon_checks_total", "rule", True),
        ("model", "handoffmon_turns_total", "model", True),
        ("fit_rule", "handoffmon_refit_mu", "rule", False),  # R² is absent for K = 2
    ):
        var = (
            dashboard.QueryVariable(name)
            .label(name.replace("_", " ").capitalize())
            .datasource(DS)
            .query(f"label_values({q.m(metric)}, {label})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(multi)
            .include_all(multi)
        )
        if multi:
            var = var.all_value(".*")
        else:
            var = var.current(VariableOption(text="all", value="all", selected=True))
        out.append(var)
    return out


def _adherence(d: dashboard.Dashboard, q: Queries) -> dashboard.Dashboard:
    sel = 'rule=~"$rule", model=~"$model"'
    return (
        d.with_row(dashboard.Row("Adherence by depth").id(1))
        .with_panel(
            _ts(
                2,
                "Adherence by depth bucket — $rule",
                "percentunit",
                12,
                9,
                _target(
                    q.ratio("model, depth_bucket", "handoffmon_checks_total", sel, "$__rate_interval"),
                    "{{model}} · depth {{depth_bucket}}",
                ),
            )
        )
        .with_panel(
            _table(
                3,
                "Decay shape: adherence by depth over the dashboard range",
                12,
                9,
                _target(
                    q.ratio("model, depth_bucket", "handoffmon_checks_total", sel, "$__range", "increase"),
                    instant=True,
                ),
                columns=("adherence",),
            ).unit("percentunit")
        )
        .with_panel(
            bargauge.Panel()
            .id(4)
            .no_value(NO_DATA[4])
            .title("Stationary adherence (Markov long run) — fit rule $fit_rule")
            .datasource(DS)
            .unit("percentunit")
            .min(0)
            .max(1)
            .span(12)
            .height(8)
            .with_target(
                _target(
                    "max by (model, after_handoff) "
                    + "("
                    + q.fit("handoffmon_stationary_adherence", 'rule="$fit_rule", model=~"$model"')
                    + ")",
                    "{{model}} · after handoff: {{after_handoff}}",
                    instant=True,
                )
            )
        )
        .with_panel(
            _ts(
                5,
                "Adherence by pair (prefix → model), all depths",
                "percentunit",
                12,
                8,
                _target(
                    q.ratio("prefix_model, model", "handoffmon_checks_total", sel, "$__rate_interval"),
                    "{{prefix_model}} → {{model}}",
                ),
            )
        )
    )


def _fit(q: Queries, metric: str, extra: str = "") -> str:
    matchers = 'rule="$fit_rule", model=~"$model"' + (f", {extra}" if extra else "")
    return f"max by (prefix_model, model) {q.fit(metric, matchers)}"


def _pairs(d: dashboard.Dashboard, q: Queries) -> dashboard.Dashboard:
    est = _fit(q, "handoffmon_handoff_delta", 'bound="estimate"')
    pair_table = [
        _target(est, ref="A", instant=True),
        _target(_fit(q, "handoffmon_handoff_delta", 'bound="lower"'), ref="B", instant=True),
        _target(_fit(q, "handoffmon_handoff_delta", 'bound="upper"'), ref="C", instant=True),
        _target(_fit(q, "handoffmon_handoff_significant"), ref="D", instant=True),
        _target(_fit(q, "handoffmon_handoff_risk"), ref="E", instant=True),
        _target(_fit(q, "handoffmon_handoff_checked_turns"), ref="F", instant=True),
    ]
    handoff_sel = q.m("handoffmon_turns_total", 'prefix_model!~"none|unknown", model=~"$model"')
    handoffs = (
        f"sum by (prefix_model, model) (rate({handoff_sel}[$__rate_interval]))\n"
        "unless on (prefix_model, model)\n"
        f"label_replace(sum by (model) (rate({q.m('handoffmon_turns_total')}[$__rate_interval])), "
        '"prefix_model", "$1", "model", "(.+)")'
    )
    return (
        d.with_row(dashboard.Row("Handoff pairs").id(6))
        .with_panel(
            _table(
                7,
                "Handoff effect Δ matrix (rows: prefix model, columns: model) — fit rule $fit_rule",
                12,
                9,
                _target(est, instant=True),
                matrix=("prefix_model", "model"),
            )
        )
        .with_panel(
            _table(
                8,
                "Pairs: Δ with interval, significance and fitted risk — fit rule $fit_rule",
                12,
                9,
                *pair_table,
                columns=("Δ", "Δ lower", "Δ upper", "significant", "fitted risk", "checked turns"),
            )
        )
        .with_panel(
            _table(
                9,
                "Significant Δ only (interval excludes 0) — fit rule $fit_rule",
                12,
                9,
                _target(
                    f"{est}\nand on (prefix_model, model)\n"
                    f"({_fit(q, 'handoffmon_handoff_significant')} == 1)",
                    instant=True,
                ),
                columns=("Δ",),
            )
        )
        .with_panel(
            _table(
                10,
                "Fitted handoff risk μ + π + σ (also pairs never observed) — fit rule $fit_rule",
                12,
                9,
                _target(_fit(q, "handoffmon_handoff_risk"), instant=True),
                columns=("fitted risk",),
            )
        )
        .with_panel(
            _ts(
                11,
                "Handoff turns per second by pair",
                "ops",
                24,
                9,
                _target(handoffs, "{{prefix_model}} → {{model}}"),
            )
        )
    )


def _models(d: dashboard.Dashboard, q: Queries) -> dashboard.Dashboard:
    fit = 'rule="$fit_rule", model=~"$model"'

    def gauge(pid: int, title: str, metric: str) -> bargauge.Panel:
        return (
            bargauge.Panel()
            .id(pid)
            .no_value(NO_DATA[pid])
            .title(title)
            .datasource(DS)
            .span(8)
            .height(8)
            .with_target(_target(f"max by (model) {q.fit(metric, fit)}", "{{model}}", instant=True))
        )

    refit_age = f"time() - {q.refit_success()}"
    return (
        d.with_row(dashboard.Row("Models: influence and susceptibility").id(12))
        .with_panel(gauge(13, "Prefix influence π — fit rule $fit_rule", "handoffmon_prefix_influence"))
        .with_panel(
            gauge(14, "Suffix susceptibility σ — fit rule $fit_rule", "handoffmon_suffix_susceptibility")
        )
        .with_panel(
            stat.Panel()
            .id(15)
            .no_value(NO_DATA[15])
            .title("Refit fit quality, verdict routing and age — fit rule $fit_rule")
            .datasource(DS)
            .span(8)
            .height(8)
            .with_target(_target("max" + q.fit("handoffmon_refit_r2", 'rule="$fit_rule"'), "R²", "A", True))
            .with_target(_target("max" + q.fit("handoffmon_refit_mu", 'rule="$fit_rule"'), "μ", "B", True))
            .with_target(_target(refit_age, "refit age", "C", True))
            .override_by_query("C", [DynamicConfigValue(id_val="unit", value="s")])
            # verdict routing: handoffs after a failed check ÷ after a passed one, and the flag
            # (1: the Δ-based handoff alerts of the rule are held, HandoffRoutingFollowsFailures)
            .with_target(
                _target(
                    "max"
                    + q.fit("handoffmon_handoff_after_fail_ratio", 'rule="$fit_rule", bound="estimate"'),
                    "handoffs after fail ÷ after pass",
                    "D",
                    True,
                )
            )
            .with_target(
                _target(
                    "max" + q.fit("handoffmon_verdict_routing", 'rule="$fit_rule"'),
                    "verdict routing (1: Δ alerts held)",
                    "E",
                    True,
                )
            )
        )
    )


def _routing(d: dashboard.Dashboard, q: Queries) -> dashboard.Dashboard:
    fallbacks = (
        f"sum by (requested_model, model) (rate({q.m('handoffmon_fallbacks_total')}[$__rate_interval]))"
    )
    turns = f"sum(rate({q.m('handoffmon_turns_total')}[$__rate_interval]))"
    share = f"{fallbacks}\n/ ignoring (requested_model, model) group_left\n{turns}"
    requests = (
        f"sum by (route, status_class) (rate({q.m('handoffmon_proxy_requests_total')}[$__rate_interval]))"
    )
    upstream = f"sum by (kind) (rate({q.m('handoffmon_proxy_upstream_errors_total')}[$__rate_interval]))"
    decisions = (
        f"sum by (mode, outcome) (rate({q.m('handoffmon_routing_decisions_total')}[$__rate_interval]))"
    )
    # at query time from the refit time, as RoutingTableStale: a hung worker's age gauge freezes low
    table_age = f"time() - min({q.m('handoffmon_routing_table_timestamp_seconds')})"
    held = f"max by (instance) ({q.m('handoffmon_proxy_queued_bytes')})"
    limit = f"max by (instance) ({q.m('handoffmon_proxy_queued_bytes_limit')})"
    in_flight = f"max by (instance) ({q.m('handoffmon_proxy_upstream_requests')})"
    no_reply = f"rate({q.m('handoffmon_responses_without_reply_total')}[$__rate_interval])"
    no_reply_rate = f"sum by (status) ({no_reply})"
    replica_turns = f"sum by (instance) (rate({q.m('handoffmon_turns_total')}[$__rate_interval]))"
    no_reply_share = (  # as AnswersWithoutReply reads it: no-reply / (no-reply + turns counted)
        f"sum by (instance) ({no_reply})\n/\n(sum by (instance) ({no_reply})\n+\n"
        f"({replica_turns} or 0 * sum by (instance) ({no_reply})))"
    )
    most = f"max by (instance) ({q.m('handoffmon_proxy_upstream_requests_limit')})"
    return (
        d.with_row(dashboard.Row("Routing: fallbacks and the proxy").id(30))
        .with_panel(
            _ts(
                31,
                "Router fallbacks per second (requested → serving model)",
                "ops",
                8,
                8,
                _target(fallbacks, "{{requested_model}} → {{model}}"),
            )
        )
        .with_panel(
            _ts(
                32,
                "Fallback share of all turns (RouterFallbacksFrequent at 10%)",
                "percentunit",
                8,
                8,
                _target(share, "{{requested_model}} → {{model}}"),
            )
        )
        .with_panel(
            _ts(
                33,
                "handoffmon serve: requests by route and status, upstream errors",
                "reqps",
                8,
                8,
                _target(requests, "{{route}} {{status_class}}", "A"),
                _target(upstream, "upstream error: {{kind}}", "B"),
            )
        )
        .with_panel(
            _ts(
                34,
                "Risk-aware routing decisions per second (reordered / home changed the fallback order)",
                "ops",
                16,
                8,
                _target(decisions, "{{mode}}: {{outcome}}"),
            )
        )
        .with_panel(
            stat.Panel()
            .id(35)
            .no_value(NO_DATA[35])
            .title("Routing pair-risk table age (RoutingTableStale at 1 h)")
            .datasource(DS)
            .unit("s")
            .span(8)
            .height(8)
            .with_target(_target(table_age, "table age", "A", True))
        )
        .with_panel(
            _ts(
                36,
                "handoffmon serve: bytes held by turns not yet checked, and the limit (QueueDrops past it)",
                "bytes",
                12,
                8,
                _target(held, "held: {{instance}}", "A"),
                _target(limit, "limit: {{instance}}", "B"),
            )
        )
        .with_panel(
            _ts(
                37,
                "handoffmon serve: upstream requests in flight, and the limit (503 upstream_busy past it)",
                "short",
                12,
                8,
                _target(in_flight, "in flight: {{instance}}", "A"),
                _target(most, "limit: {{instance}}", "B"),
            )
        )
        .with_panel(
            _ts(
                38,
                "Answers without a reply (no turn) per second by status, and each replica's share of its "
                "answers (AnswersWithoutReply at 5%)",
                "ops",
                24,
                8,
                _target(no_reply_rate, "{{status}}", "A"),
                _target(no_reply_share, "share: {{instance}}", "B"),
            ).override_by_query("B", [DynamicConfigValue(id_val="unit", value="percentunit")])
        )
    )


def _shadow(d: dashboard.Dashboard, q: Queries) -> dashboard.Dashboard:
    cost = _fit(q, "handoffmon_switch_cost", 'bound="estimate"')
    cost_table = [
        _target(cost, ref="A", instant=True),
        _target(_fit(q, "handoffmon_switch_cost", 'bound="lower"'), ref="B", instant=True),
        _target(_fit(q, "handoffmon_switch_cost", 'bound="upper"'), ref="C", instant=True),
        _target(_fit(q, "handoffmon_switch_cost_significant"), ref="D", instant=True),
        _target(_fit(q, "handoffmon_switch_cost_pairs"), ref="E", instant=True),
        _target(_fit(q, "handoffmon_switch_cost_disagrees"), ref="F", instant=True),
    ]
    calls = f"sum by (arm, outcome) (rate({q.m('handoffmon_shadow_calls_total')}[$__rate_interval]))"
    skipped = f"sum by (reason) (rate({q.m('handoffmon_shadow_skipped_total')}[$__rate_interval]))"
    table_sel = q.m(
        "handoffmon_shadow_pair_stats_total",
        'rule=~"$rule", model=~"$model", stat=~"both_pass|model_only|prefix_only|both_fail"',
    )
    pairs = f"sum by (prefix_model, model) (rate({table_sel}[$__rate_interval]))"
    budget = (
        f"max by (window) ({q.m('handoffmon_shadow_budget_used')})\n/\n"
        f"max by (window) ({q.m('handoffmon_shadow_budget_limit')})"
    )
    spend = f"sum(rate({q.m('handoffmon_shadow_spend_usd_total')}[$__rate_interval])) * 86400"
    breaker = f"max by (target) ({q.m('handoffmon_shadow_breaker_open')})"
    return (
        d.with_row(dashboard.Row("Shadow continuation: experimental switch cost").id(40))
        .with_panel(
            _table(
                41,
                "Switch cost (shadow pairs): interval, significance, pairs, disagrees — fit rule $fit_rule",
                12,
                9,
                *cost_table,
                columns=("switch cost", "lower", "upper", "significant", "pairs", "disagrees with Δ"),
            )
        )
        .with_panel(
            _ts(
                42,
                "Shadow pair checks per second by pair (prefix model → other continuation)",
                "ops",
                12,
                9,
                _target(pairs, "{{prefix_model}} → {{model}}"),
            )
        )
        .with_panel(
            _ts(
                43,
                "Shadow calls per second by arm and outcome",
                "ops",
                8,
                8,
                _target(calls, "{{arm}}: {{outcome}}"),
            )
        )
        .with_panel(
            _ts(44, "Turns not shadowed per second by reason", "ops", 8, 8, _target(skipped, "{{reason}}"))
        )
        .with_panel(
            _ts(
                45,
                "Shadow budget used per window, spend (USD/day) and open breakers",
                "percentunit",
                8,
                8,
                _target(budget, "{{window}} used", "A"),
                _target(spend, "USD per day at this rate", "B"),
                _target(breaker, "breaker open: {{target}}", "C"),
            )
            .override_by_query("B", [DynamicConfigValue(id_val="unit", value="currencyUSD")])
            .override_by_query("C", [DynamicConfigValue(id_val="unit", value="short")])
        )
    )


def _health(d: dashboard.Dashboard, q: Queries, alerts: Sequence[str]) -> dashboard.Dashboard:
    attr = q.m("handoffmon_attributions_total")
    errors = f"sum by (stage) (rate({q.m('handoffmon_monitor_errors_total')}[$__rate_interval]))"
    error_sel = q.m("handoffmon_checks_total", 'verdict="error"')
    checker_errors = f"sum by (rule) (rate({error_sel}[$__rate_interval]))"
    drops = f"sum(rate({q.m('handoffmon_queue_dropped_total')}[$__rate_interval]))"
    overhead = (
        "histogram_quantile(0.99, sum by (stage, le) "
        f"(rate({q.m('handoffmon_overhead_seconds_bucket')}[$__rate_interval])))"
    )
    store = (  # the share of the op's calls, as StoreFailures reads it
        f"sum by (op, kind) (rate({q.m('handoffmon_store_failures_total')}[$__rate_interval]))\n"
        "/ on (op) group_left\n"
        f"sum by (op) (rate({q.m('handoffmon_store_operations_total')}[$__rate_interval]))"
    )
    evictions = f"sum by (what) (rate({q.m('handoffmon_store_evictions_total')}[$__rate_interval]))"
    cap = f"max by (label) ({q.m('handoffmon_label_values')} / {q.m('handoffmon_label_limit')})"
    refit_age = f"time() - max({q.m('handoffmon_refit_last_success_timestamp_seconds')})"
    # each replica's own local fit, as RefitStale (fit="local") reads it: a replica whose refit
    # hangs among fresh ones ages here while the newest refit stays young
    local_success = q.m(SUCCESS, 'fit!="pooled"')
    replica_refit_age = f"time() - max by (instance) ({local_success})"
    refit_sel = q.m("handoffmon_monitor_errors_total", 'stage="refit"')
    refit_failures = f"sum(increase({refit_sel}[$__rate_interval]))"
    seconds_sel = q.m("handoffmon_check_seconds_total", 'rule=~"$rule"')
    checks_sel = q.m("handoffmon_checks_total", 'rule=~"$rule"')
    check_cost = (
        f"sum by (rule) (rate({seconds_sel}[$__rate_interval]))\n/\n"
        f"sum by (rule) (rate({checks_sel}[$__rate_interval]))"
    )
    history = (
        "histogram_quantile(0.9, sum by (depth_bucket, le) "
        f"(rate({q.m('handoffmon_history_tokens_bucket')}[$__rate_interval])))"
    )
    alert_filter = '{alertname=~"' + "|".join(alerts) + '"}'
    return (
        d.with_row(dashboard.Row("Monitoring health").id(16))
        .with_panel(
            _ts(
                17,
                "Attribution coverage (share of earlier assistant messages by method)",
                "percentunit",
                8,
                8,
                _target(
                    f"sum by (method) (rate({attr}[$__rate_interval]))\n/ ignoring (method) group_left\n"
                    f"sum(rate({attr}[$__rate_interval]))",
                    "{{method}}",
                ),
            )
        )
        .with_panel(
            _ts(
                18,
                "Turns per second by model",
                "ops",
                8,
                8,
                _target(
                    "sum by (model) (rate("
                    + q.m("handoffmon_turns_total", 'model=~"$model"')
                    + "[$__rate_interval]))",
                    "{{model}}",
                ),
            )
        )
        .with_panel(
            _ts(
                19,
                "Monitor errors, checker errors and queue drops per second",
                "ops",
                8,
                8,
                _target(errors, "errors: {{stage}}", "A"),
                _target(checker_errors, "checker error verdicts: {{rule}}", "B"),
                _target(drops, "queue drops", "C"),
            )
        )
        .with_panel(_ts(20, "handoffmon overhead p99 by stage", "s", 8, 8, _target(overhead, "{{stage}}")))
        .with_panel(
            _ts(
                21,
                "Attribution store failures as a share of calls (fail-open; StoreFailures at 1%) "
                "and memory-store evictions per second",
                "percentunit",
                8,
                8,
                _target(store, "{{op}} {{kind}}", "A"),
                _target(evictions, "evicted {{what}}", "B"),
            ).override_by_query("B", [DynamicConfigValue(id_val="unit", value="ops")])
        )
        .with_panel(
            bargauge.Panel()
            .id(22)
            .title("Label cap usage (LabelCapPressure at 90%)")
            .datasource(DS)
            .unit("percentunit")
            .min(0)
            .max(1)
            .span(8)
            .height(8)
            .with_target(_target(cap, "{{label}}", instant=True))
        )
        .with_panel(
            _ts(
                23,
                "Refit age and failed in-process refits",
                "s",
                8,
                8,
                _target(refit_age, "age of the newest refit", "A"),
                _target(refit_failures, "failed refits", "B"),
                _target(replica_refit_age, "local refit age: {{instance}}", "C"),
            ).override_by_query("B", [DynamicConfigValue(id_val="unit", value="short")])
        )
        .with_panel(_ts(24, "Checker time per check by rule", "s", 8, 8, _target(check_cost, "{{rule}}")))
        .with_panel(
            _ts(
                25,
                "History size p90 by depth bucket (approx. tokens)",
                "short",
                8,
                8,
                _target(history, "{{depth_bucket}}"),
            )
        )
        .with_panel(
            dashboard.Panel()
            .type("alertlist")
            .id(26)
            .title("handoffmon alerts")
            .description("Firing and pending alerts of handoffmon's rules only (filtered by alert name).")
            .span(24)
            .height(8)
            .options(
                {
                    "viewMode": "list",
                    "groupMode": "default",
                    "groupBy": [],
                    "maxItems": 50,
                    "sortOrder": 1,
                    "dashboardAlerts": False,
                    "alertName": "",
                    "alertInstanceLabelFilter": alert_filter,
                    "stateFilter": {
                        "firing": True,
                        "pending": True,
                        "noData": False,
                        "normal": False,
                        "error": True,
                    },
                }
            )
        )
    )


def build(identity: Sequence[str] = IDENTITY_LABELS, rules_path: Path = DEFAULT_RULES) -> dict[str, object]:
    """The dashboard as a JSON-ready dict."""
    q = Queries(identity)
    alerts = [str(r["alert"]) for g in _load(rules_path)["groups"] for r in g["rules"] if "alert" in r]
    d = (
        dashboard.Dashboard("handoffmon — adherence and handoff risk")
        .uid(UID)
        .description(
            "Adherence by conversation depth and by model handoff pair, refit influence/susceptibility, "
            "routing, shadow continuation and monitoring health — one deployment at a time (identity "
            "variables)."
        )
        .tags(["handoffmon", "llm"])
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("")
        .link(
            dashboard.DashboardLink("Runbooks: handoffmon alerts")
            .type("link")
            .icon("doc")
            .url(RUNBOOKS)
            .target_blank(True)
        )
    )
    for var in _variables(q):
        d = d.with_variable(var)  # type: ignore[arg-type]
    d = _health(_shadow(_routing(_models(_pairs(_adherence(d, q), q), q), q), q), q, alerts)
    built = d.build()
    data: dict[str, object] = json.loads(json.dumps(built, cls=JSONEncoder))
    return data


def render(identity: Sequence[str] = IDENTITY_LABELS) -> str:
    """The dashboard JSON text as checked in."""
    return json.dumps(build(identity), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dashboard; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identity-labels", help="comma-separated labels (default: job,namespace,cluster)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output file (default: {OUT})")
    args = parser.parse_args(argv)
    identity = IDENTITY_LABELS
    if args.identity_labels:
        identity = tuple(x.strip() for x in args.identity_labels.split(",") if x.strip())
    args.out.write_text(render(identity), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
