"""The dashboard's refit panels show the fit the alerts stand on: a fresh pooled fit, else the local ones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import require_binary
from tests.deploy.shipped import TEMPLATE_VALUES, dashboard, panel_targets, substitute

PAIR = 'prefix_model="a", model="b", rule="all", bound="upper"'
INPUT = (
    # two replicas refit every minute (one labelled local, one from before the label)
    ('handoffmon_refit_last_success_timestamp_seconds{job="prod", instance="r1", fit="local"}', "0+60x200"),
    ('handoffmon_refit_last_success_timestamp_seconds{job="prod", instance="r2"}', "0+60x200"),
    # the refit job pushes until minute 30
    ('handoffmon_refit_last_success_timestamp_seconds{job="prod", fit="pooled"}', "0+60x30 1800x170"),
    (f'handoffmon_handoff_delta{{job="prod", instance="r1", fit="local", {PAIR}}}', "-0.10x200"),
    (f'handoffmon_handoff_delta{{job="prod", instance="r2", {PAIR}}}', "-0.20x200"),
    (f'handoffmon_handoff_delta{{job="prod", fit="pooled", {PAIR}}}', "0.02x200"),
    (f'handoffmon_handoff_delta{{job="staging", fit="pooled", {PAIR}}}', "0.50x200"),
)
SERIES = "".join(f"\n      - series: '{series}'\n        values: '{values}'" for series, values in INPUT)


def _target(title_part: str, expr_part: str, job: str = "prod") -> str:
    found = [e for t, e in panel_targets(dashboard()) if title_part in t and expr_part in e]
    assert len(found) == 1, found
    return substitute(found[0], {**TEMPLATE_VALUES, "job": job})


def _check(expr: str, eval_time: str, labels: str, value: float) -> str:
    return (
        f"      - expr: {json.dumps(expr)}\n        eval_time: {eval_time}\n        exp_samples:\n"
        f"          - labels: '{labels}'\n            value: {value}\n"
    )


def _check_empty(expr: str, eval_time: str) -> str:
    return f"      - expr: {json.dumps(expr)}\n        eval_time: {eval_time}\n        exp_samples: []\n"


def _promtool(tmp_path: Path, series: str, checks: str) -> None:
    test = tmp_path / "dashboard.test.yml"
    test.write_text(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:"
        f"{series}\n    promql_expr_test:\n{checks}",
        encoding="utf-8",
    )
    out = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(test)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_pair_table_and_refit_age_follow_the_standing_fit(tmp_path: Path) -> None:
    """A job's fresh pooled fit is the one row per pair (not max over it and the replicas); an
    hour after its last push the replicas' local fits (labelled or from before the label) take
    over, and the refit age follows the same fit."""
    upper = _target("Pairs: Δ with interval", 'bound="upper"')
    age = _target("Refit fit quality", "time() - ((max(")
    pair = '{prefix_model="a", model="b"}'
    checks = (
        _check(upper, "60m", pair, 0.02)  # pooled fresh (last push at 30m)
        + _check(upper, "100m", pair, -0.1)  # pooled stale since 90m: max of the local fits
        + _check(age, "60m", "{}", 1800)
        + _check(age, "100m", "{}", 0)
    )
    _promtool(tmp_path, SERIES, checks)


def test_a_stale_pooled_fit_without_local_fits_shows_no_pair_and_its_age(tmp_path: Path) -> None:
    """A deployment whose only fit is the job's (no in-process refit): its pair while the job
    pushes; an hour after its last push no pair (no fit stands, the alerts are quiet) and the age
    of that push (RefitStale's), not "No data"; a deployment with no refit at all shows neither,
    and never another deployment's values."""
    solo = (
        ('handoffmon_refit_last_success_timestamp_seconds{job="solo", fit="pooled"}', "0+60x30 1800x170"),
        (f'handoffmon_handoff_delta{{job="solo", fit="pooled", {PAIR}}}', "0.3x200"),
    )
    series = SERIES + "".join(f"\n      - series: '{s}'\n        values: '{v}'" for s, v in solo)
    pair = '{prefix_model="a", model="b"}'
    upper, age = ("Pairs: Δ with interval", 'bound="upper"'), ("Refit fit quality", "time() - ((max(")
    checks = (
        _check(_target(*upper, job="solo"), "60m", pair, 0.3)
        + _check_empty(_target(*upper, job="solo"), "100m")
        + _check(_target(*age, job="solo"), "60m", "{}", 1800)
        + _check(_target(*age, job="solo"), "100m", "{}", 4200)
        + _check_empty(_target(*upper, job="none"), "100m")
        + _check_empty(_target(*age, job="none"), "100m")
    )
    _promtool(tmp_path, series, checks)


def test_refit_age_shows_each_replicas_local_fit_so_a_hung_one_ages_beside_fresh_ones(tmp_path: Path) -> None:
    """The refit age panel draws each replica's local fit as RefitStale (fit="local") reads it: r3,
    whose refit hangs at minute 60 while r1 and r2 refit every minute, is 40 minutes old at
    minute 100 (the newest refit stays at 0); the pooled fit draws no replica line."""
    hung = (
        (
            'handoffmon_refit_last_success_timestamp_seconds{job="prod", instance="r3", fit="local"}',
            "0+60x60 3600x140",
        ),
    )
    series = SERIES + "".join(f"\n      - series: '{s}'\n        values: '{v}'" for s, v in hung)
    replicas = _target("Refit age and failed", "max by (instance)")
    samples = "".join(
        f"          - labels: '{{instance=\"{r}\"}}'\n            value: {v}\n"
        for r, v in (("r1", 0), ("r2", 0), ("r3", 2400))
    )
    checks = (
        f"      - expr: {json.dumps(replicas)}\n        eval_time: 100m\n        exp_samples:\n{samples}"
        + _check(_target("Refit age and failed", "time() - max(handoffmon"), "100m", "{}", 0)
    )
    _promtool(tmp_path, series, checks)
