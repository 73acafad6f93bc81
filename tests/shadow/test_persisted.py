"""Shadow pairs are persisted and exported like every other count: a refit from the SQLite
aggregates and from a real Prometheus scraping the runtime gives the in-process switch costs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from click.testing import CliRunner

from handoffmon import build_runtime
from handoffmon.cli import main
from handoffmon.config import RefitConfig, config_from_mapping
from handoffmon.counts import POOLED_RULE, SHADOW_TABLE, ShadowKey
from handoffmon.integrations import wrap
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.refit import refit
from handoffmon.sources.prometheus import PrometheusSource
from handoffmon.sources.spec import infer_buckets
from tests.conftest import free_port
from tests.shadow.test_runner import CANONICAL, _converse, _router

RULES = [
    {"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}},  # alpha passes, backup fails
    {"name": "wordy", "check": "length", "params": {"unit": "words", "min": 3}},  # backup passes, alpha fails
    {"name": "bounded", "check": "length", "params": {"unit": "words", "max": 50}},  # both pass
]


def shadow_config(*, metrics_port: int, refit: dict[str, Any] | None = None, **extra: Any) -> Any:
    """Rules over three table cells, shadow on for every eligible turn (handoff arm back to model-c,
    no-handoff arm to model-b), handoffmon's series on ``metrics_port``."""
    return config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": CANONICAL},
            "telemetry": {"log_turns": False, "metrics_port": metrics_port},
            "refit": refit or {"interval_s": 0},
            "shadow": {
                "enabled": True,
                "sample_rate": 1.0,
                "calls_per_minute": 1000,
                "pair_calls_per_hour": 1000,
                "targets": ["model-b", "model-c"],
                "candidates": {"model-c": ["model-b"]},
            },
            **extra,
        }
    )


def _switch_costs(doc: dict[str, Any]) -> dict[str, Any]:
    return {rule: fit["switch_costs"] for rule, fit in doc["rules"].items()}


@pytest.mark.integration
@pytest.mark.slow
def test_refit_from_sqlite_and_prometheus_gives_the_in_process_switch_costs(tmp_path: Path) -> None:
    """Conversations alpha, alpha, primary (→ backup): a no-handoff pair c→c shadowed by model-b and a
    handoff pair c→b shadowed by model-c in each conversation (two pairs per cluster), over three rules
    that land in three cells of the paired table. The SQLite file, a real Prometheus scraping the
    runtime's metrics port, and ``handoffmon refit`` from both read exactly the in-process pairs."""
    from tests.promserver import prometheus_server

    db, port = tmp_path / "handoffmon.sqlite", free_port()
    config = shadow_config(store={"backend": "sqlite", "path": str(db)}, metrics_port=port)
    with build_runtime(config, registry=None) as rt:
        client = wrap(_router(), runtime=rt)
        for i in range(4):
            _converse(client, rt, ["alpha", "alpha", "primary"], f"p{i}")
        local = rt.snapshot()
        rt.monitor.aggregates.flush()
        persisted = load_counts_sqlite(db)
        with prometheus_server(tmp_path, [f"127.0.0.1:{port}"]) as prom:

            def scraped() -> bool:
                total = prom.query('sum(handoffmon_shadow_pair_stats_total{stat="n2"})')
                return bool(total) and float(total[0]["value"][1]) == sum(
                    v for k, v in local.shadow.items() if k.stat == "n2"
                )

            assert prom.wait_for(scraped, timeout_s=30), prom.log_tail()
            remote = PrometheusSource(prom.url).snapshot()
            cli_out = {}
            for name, source in (("sqlite", f"sqlite://{db}"), ("prometheus", prom.url)):
                out = tmp_path / f"{name}.json"
                res = CliRunner().invoke(
                    main, ["refit", "--source", source, "--min-n", "1", "--out", str(out)]
                )
                assert res.exit_code == 0, res.output
                cli_out[name] = json.loads(out.read_text(encoding="utf-8"))
    pair = ("model-c", "model-b")
    assert local.shadow[ShadowKey("brief", *pair, "prefix_only")] == 8  # two pairs per conversation
    assert local.shadow[ShadowKey("wordy", *pair, "model_only")] == 8
    assert local.shadow[ShadowKey("bounded", *pair, "both_pass")] == 8
    assert local.shadow[ShadowKey("brief", *pair, "handoff_arm")] == 4
    assert local.shadow[ShadowKey(POOLED_RULE, *pair, "conversations")] == 4
    # pooled over rules: 2 pairs x 3 rules = 6 checks per conversation cluster, n^2 = 36
    assert local.shadow[ShadowKey(POOLED_RULE, *pair, "n2")] == 4 * 6**2
    assert not any(k.rule == POOLED_RULE and k.stat in SHADOW_TABLE for k in local.shadow)
    assert persisted.shadow == local.shadow
    assert remote.shadow == local.shadow
    expected = json.loads(
        refit(
            local, buckets=infer_buckets(local), now=0.0, source="x", settings=RefitConfig(min_n=1)
        ).to_json()
    )
    costs = _switch_costs(expected)
    assert costs["brief"][0]["n_pairs"] == 8 and costs["brief"][0]["estimate"] < 0
    assert costs["wordy"][0]["estimate"] > 0
    for doc in cli_out.values():
        assert _switch_costs(doc) == costs
