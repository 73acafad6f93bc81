"""Generate the parts of the docs that must match the code: configuration, metrics, CLI, benchmarks.

    .venv/bin/python scripts/gen_docs.py            # rewrite the generated blocks
    .venv/bin/python scripts/gen_docs.py --check    # exit 1 and name the pages that drifted

A generated block sits in a hand-written page between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->`` (the prose around it is edited by hand; the block never is).

Sources: the pydantic config model (``handoffmon/config.py``), the metrics the exporters
register (``handoffmon/exporters/``, ``handoffmon/proxy/metrics.py``), the click commands
(``handoffmon/cli/``) and the newest benchmark runner JSON in ``docs/operations/benchmarks/``.
``tests/docs/test_generated.py`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make `tests.benchmarks` importable
    sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs"
COMMAND = ".venv/bin/python scripts/gen_docs.py"
BENCH_DIR = DOCS / "operations" / "benchmarks"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


# -- configuration --------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"  # a Literal keeps its backticks
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(field: Any) -> str:
    signs = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "max_length": "length ≤"}
    out = []
    for meta in field.metadata:
        for attr, sign in signs.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if hasattr(value, "model_dump"):
        return "see below"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _is_section(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _model_rows(model: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", field


def _config_table(rows: Iterator[tuple[str, Any]]) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, field in rows:
        kind = _type_name(field.annotation)
        limits = _constraints(field)
        if limits:
            kind += f" ({limits})"
        lines.append(f"| `{key}` | {kind} | {_default(field)} | {_cell(field.description or '')} |")
    return lines


def configuration_block() -> str:
    """One table per config section, from ``HandoffmonConfig`` (attribute docstrings are the text)."""
    from handoffmon.config import HandoffmonConfig, RuleConfig, ScopeConfig

    top = [(n, f) for n, f in HandoffmonConfig.model_fields.items() if not _is_section(f.annotation)]
    lines = ["## Top level\n", *_config_table(iter(top))]
    for name, field in HandoffmonConfig.model_fields.items():
        if _is_section(field.annotation):
            section = field.annotation
            lines += ["", f"## `{name}`\n", _cell(section.__doc__ or ""), ""]
            lines += _config_table(_model_rows(section, f"{name}."))
    for title, model, prefix in (("`rules[]`", RuleConfig, ""), ("`rules[].scope`", ScopeConfig, "scope.")):
        lines += ["", f"## {title}\n", _cell(model.__doc__ or ""), ""]
        lines += _config_table(_model_rows(model, prefix))
    return "\n".join(lines)


# -- metrics --------------------------------------------------------------------------------


def _families(registry: Any) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(exposed name, type, label names, help) of every family a registry exposes now.

    Label names are read off the samples (public API only), so every family must have at
    least one sample: exercise the exporter first.
    """
    out = []
    for family in registry.collect():
        if not family.samples:
            raise SystemExit(f"{family.name} has no sample: exercise it in scripts/gen_docs.py")
        labels = max((tuple(k for k in s.labels if k != "le") for s in family.samples), key=len)
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out.append((name, family.type, labels, family.documentation))
    return out


def _metrics_table(
    rows: list[tuple[str, str, tuple[str, ...], str]], only_with: dict[str, str] | None = None
) -> list[str]:
    """Markdown rows; a metric in ``only_with`` (name → config key) is marked as exported only
    when that feature is enabled."""
    lines = ["| metric | type | labels | description |", "|---|---|---|---|"]
    for name, kind, labels, doc in rows:
        label_text = ", ".join(f"`{label}`" for label in labels) or "—"
        when = (only_with or {}).get(name)
        if when:
            doc = f"*Only with `{when}`.* {doc}"
        lines.append(f"| `{name}` | {kind} | {label_text} | {_cell(doc)} |")
    return lines


def _exposed_names(collector: Any) -> list[str]:
    """The exposed names of the families ``collector`` serves (alone in a registry)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return [name for name, *_ in _families(registry)]


def monitor_metrics_block() -> str:
    """Every series a monitor's Prometheus exporter exposes after a turn, its own health and a refit."""
    from prometheus_client import CollectorRegistry

    from handoffmon.counts import Counts
    from handoffmon.depth import DepthBuckets
    from handoffmon.exporters.prometheus import PrometheusExporter
    from handoffmon.exporters.routing_decisions import RoutingCollector
    from handoffmon.exporters.serving import REFUSAL_REASONS, RefusalsCollector
    from handoffmon.exporters.shadow_calls import ShadowCollector
    from handoffmon.exporters.store_failures import StoreStatsCollector
    from handoffmon.pipeline.state import ConversationState
    from handoffmon.refit import refit
    from handoffmon.shadow.recorder import PairRecorder
    from handoffmon.shadow.stats import ShadowStats
    from handoffmon.sim import default_fleet
    from handoffmon.sim.offline import simulate_counts
    from handoffmon.testing import make_turn_result

    exporter = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    turn = make_turn_result(
        depth=2, prefix_model="a", checks=[("r", "pass")], transitions=[("r", "pass", "pass")], fallbacks=1
    )
    exporter.export(turn)
    exporter.export(make_turn_result(checks=[("r", "error")]))  # handoffmon_check_errors_total
    # a clean same-author turn: the baseline verdicts and the cells' cluster sums
    own = make_turn_result(depth=3, author="a", prefix_model="a", checks=[("r", "pass")])
    _, cluster = ConversationState().tally("a", "a", True, own.checks)
    exporter.export(dataclasses.replace(own, clean=True, cluster=cluster))
    exporter.observe_overhead("begin", 1e-5)
    exporter.count_error("export")
    exporter.count_drop()
    counts = simulate_counts(default_fleet(), 100, seed=3)
    # shadow continuation's pairs: their counters, and the switch-cost gauges
    pairs, shadow = PairRecorder(), Counts()
    a, b = (m.name for m in default_fleet().models[:2])
    for i in range(60):
        increments = pairs.add(f"c{i}", a, b, i % 2 == 0, {"r": (i % 3 != 0, i % 4 != 0)})
        exporter.count_shadow(increments)
        shadow = shadow.merge(Counts(shadow=increments))
    exporter.publish_refit(refit(counts.merge(shadow), buckets=DepthBuckets()))
    # the runtime registers the store guard's operation and failure counters beside the exporter,
    # in every mode (and, on the memory store, what its caps evicted)
    exporter.registry.register(
        StoreStatsCollector(
            lambda: {"get_errors": 0}, lambda: {"conversations": 0, "keys": 0}, lambda: {"get": 0}
        )
    )
    # and, with routing.enabled, the routing policy's decisions and its table's age
    routing = RoutingCollector(lambda: {("dry_run", "unchanged"): 0}, lambda now: 0.0)
    exporter.registry.register(routing)
    # and, with shadow.enabled, shadow continuation's calls, skips, checks, spend, budget and breaker
    stats = ShadowStats(
        {("handoff", "ok"): 0}, {"not_sampled": 0}, {("handoff", "pass"): 0}, {"handoff": 0}, 0.0, 0.0,
        {"calls": 0.0}, {"calls": 30.0}, {"gpt-4o-mini": 0}, 0,
    )  # fmt: skip
    shadow_collector = ShadowCollector(lambda: stats)
    exporter.registry.register(shadow_collector)
    # and, with telemetry.metrics_port, what that server closed unserved
    refusals = RefusalsCollector(lambda: dict.fromkeys(REFUSAL_REASONS, 0))
    exporter.registry.register(refusals)
    # the rows of a feature that is off by default are marked: a monitor without it has none
    only_with = {name: "routing.enabled" for name in _exposed_names(routing)}
    only_with.update({name: "telemetry.metrics_port" for name in _exposed_names(refusals)})
    only_with.update({name: "shadow.enabled" for name in _exposed_names(shadow_collector)})
    only_with["handoffmon_shadow_pair_stats_total"] = "shadow.enabled"  # counted from shadow pairs only
    only_with["handoffmon_store_evictions_total"] = "store.backend: memory"  # Redis and SQLite expire by TTL
    return "\n".join(_metrics_table(_families(exporter.registry), only_with))


def monitor_stages_block() -> str:
    """The ``stage`` label's values on the error counter, from ``types.MONITOR_STAGES``."""
    from handoffmon.types import MONITOR_STAGES

    stages = ", ".join(f"`{s}`" for s in MONITOR_STAGES)
    return (
        f"On `handoffmon_monitor_errors_total`, `stage` is one of the {len(MONITOR_STAGES)} "
        f"`types.MONITOR_STAGES`, all exported from 0: {stages}."
    )


def refit_job_metrics_block() -> str:
    """The series only ``handoffmon refit`` publishes (a failed ``--pushgateway`` refit)."""
    from handoffmon.cli.refit_cmd import failure_registry

    return "\n".join(_metrics_table(_families(failure_registry(0.0))))


def proxy_metrics_block() -> str:
    """The series ``handoffmon serve`` adds (proxy counters)."""
    from prometheus_client import CollectorRegistry

    from handoffmon.pipeline.worker import ByteBudget
    from handoffmon.proxy.metrics import ProxyMetrics

    registry = CollectorRegistry()
    ProxyMetrics(registry, ByteBudget(1))
    return "\n".join(_metrics_table(_families(registry)))


# -- CLI --------------------------------------------------------------------------------------


def _commands(group: Any, ctx: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    import click

    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        sub_ctx = click.Context(cmd, info_name=name, parent=ctx)
        yield f"{path} {name}", cmd, sub_ctx
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, sub_ctx, f"{path} {name}")


def cli_block() -> str:
    """Usage, help and options of every command, from click."""
    import inspect

    import click

    from handoffmon.cli import main

    root = click.Context(main, info_name="handoffmon")
    lines: list[str] = []
    for path, cmd, ctx in _commands(main, root, "handoffmon"):
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        # cleandoc: a docstring's later paragraphs are indented, which Markdown reads as code
        lines += [f"## `{path}`\n", f"```text\n{path} {usage}\n```\n", inspect.cleandoc(cmd.help or ""), ""]
        params = [p for p in cmd.get_params(ctx) if p.get_help_record(ctx) is not None and p.name != "help"]
        if params:
            lines += ["| option | description |", "|---|---|"]
            for param in params:
                record = param.get_help_record(ctx)
                assert record is not None
                lines.append(f"| `{_cell(record[0])}` | {_cell(record[1])} |")
            lines.append("")
    return "\n".join(lines).rstrip()


# -- checkers -------------------------------------------------------------------------------


def checkers_block() -> str:
    """Every registered checker with its factory's docstring; the IFEval instruction ids."""
    import inspect

    from handoffmon.checkers import default_registry

    registry = default_registry()
    lines = ["| check | what it verifies, and its params |", "|---|---|"]
    ifeval = []
    for name in registry.names():
        if name.startswith("ifeval_loose:"):
            continue
        if name.startswith("ifeval:"):
            ifeval.append(name.removeprefix("ifeval:"))
            continue
        spec = registry.spec(name)
        doc = _cell(inspect.getdoc(spec.factory) or spec.summary).replace("```json", "`` ```json ``")
        lines.append(f"| `{name}`{' (stateful)' if spec.stateful else ''} | {doc} |")
    lines += [
        "",
        f"**IFEval**: `ifeval:<id>` (strict) and `ifeval_loose:<id>` for each of the {len(ifeval)} "
        "instruction ids, with the reference's keyword arguments ([the IFEval family](ifeval.md)):",
        "",
        ", ".join(f"`{i}`" for i in ifeval) + ".",
    ]
    return "\n".join(lines)


# -- refit.json -----------------------------------------------------------------------------


def _attribute_docs(cls: type) -> dict[str, str]:
    """``name → text`` from the ``Attributes:`` section of a Google-style class docstring."""
    import inspect
    import re

    doc = inspect.getdoc(cls) or ""
    if "Attributes:" not in doc:
        return {}
    out: dict[str, str] = {}
    name = None
    for line in doc.split("Attributes:", 1)[1].splitlines():
        m = re.match(r"^    (\w+): (.*)$", line)
        if m:
            name, out[m.group(1)] = m.group(1), m.group(2)
        elif line.startswith("        ") and name:
            out[name] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break
    return out


def refit_json_block() -> str:
    """One table per record of the refit document, from the dataclasses' fields and docstrings."""

    from handoffmon.refit import result as r

    records = (r.RefitResult, r.RuleFit, r.PairEffect, r.ModelScores, r.MarkovFit, r.DepthCurve)
    records += (r.CellAdherence, r.SwitchCost, r.InputRepair, r.ShadowInputRepair)
    lines = [f"Schema `{r.SCHEMA}`, version {r.SCHEMA_VERSION}.", ""]
    for cls in records:
        docs = _attribute_docs(cls)
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        lines += [f"### `{cls.__name__}`\n", _cell(summary), "", "| key | type | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            kind = str(f.type).replace("|", "\\|")
            lines.append(f"| `{f.name}` | `{kind}` | {_cell(docs.get(f.name, ''))} |")
        lines.append("")
    return "\n".join(lines).rstrip()


# -- benchmarks -----------------------------------------------------------------------------


def latest_benchmark() -> Path:
    """The newest checked-in runner JSON (files are named by date, so the last sorts newest)."""
    files = sorted(BENCH_DIR.glob("*.json"))
    if not files:
        raise SystemExit(f"no benchmark JSON in {BENCH_DIR.relative_to(ROOT)}")
    return files[-1]


def benchmark_sources() -> list[tuple[Path, dict[str, Any], list[str]]]:
    """(file, runner JSON, benchmarks taken from it): each benchmark's rows come from the newest
    checked-in run that has it, so a partial run (``--only routing``) updates its own rows only."""
    latest_benchmark()  # fails clearly when there is none
    owner: dict[str, Path] = {}
    docs: dict[Path, dict[str, Any]] = {}
    for path in sorted(BENCH_DIR.glob("*.json")):
        docs[path] = json.loads(path.read_text(encoding="utf-8"))
        for row in docs[path]["rows"]:
            owner[row["bench"]] = path
    out = []
    for path, doc in docs.items():
        benches = [b for b in dict.fromkeys(r["bench"] for r in doc["rows"]) if owner[b] == path]
        if benches:
            out.append((path, doc, benches))
    return out


def _facts(path: Path, doc: dict[str, Any], benches: list[str], partial: bool) -> str:
    m = doc["machine"]
    loads = [s["load_before"][0] for s in doc["suites"]] + [doc["machine_after"]["load_average"][0]]
    commit = str(m.get("git", {}).get("commit") or "?")[:10]
    which = f" ({', '.join(benches)})" if partial else ""
    return (
        f"Source{which}: [`{path.name}`](benchmarks/{path.name}), on "
        f"{m['cpu_model']}, {m['logical_cores']} logical cores, {m['memory_gib']} GiB, Python {m['python']}, "
        f"litellm {m['packages'].get('litellm')}, commit `{commit}`; 1-minute load average "
        f"{min(loads):.1f}–{max(loads):.1f} during the run; {doc['wall_s']:.0f} s wall"
        f"{' (`--quick`)' if doc['parameters'].get('quick') else ''}."
    )


def benchmark_block() -> str:
    """The runner's table and its facts lines, each benchmark from the newest checked-in run of it."""
    from tests.benchmarks.runner import markdown_table
    from tests.benchmarks.suites import Row

    sources = benchmark_sources()
    rows = [
        Row(**{k: v for k, v in r.items() if k in Row.__dataclass_fields__})
        for _, doc, benches in sources
        for r in doc["rows"]
        if r["bench"] in benches
    ]
    facts = "\n\n".join(_facts(p, d, b, len(sources) > 1) for p, d, b in sources)
    return f"{markdown_table(rows)}\n\n{facts}"


# -- driver ---------------------------------------------------------------------------------

BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "reference/configuration.md": {"config": configuration_block},
    "reference/metrics.md": {
        "monitor-stages": monitor_stages_block,
        "monitor-metrics": monitor_metrics_block,
        "refit-job-metrics": refit_job_metrics_block,
        "proxy-metrics": proxy_metrics_block,
    },
    "reference/cli.md": {"cli": cli_block},
    "guides/checkers.md": {"checkers": checkers_block},
    "reference/refit-json.md": {"refit-json": refit_json_block},
    "operations/performance.md": {"benchmarks": benchmark_block},
}
"""Page under docs/ → generated block name → the function producing its text."""


def render(text: str, blocks: dict[str, Callable[[], str]], page: str) -> str:
    """``text`` with each ``<!-- generated:NAME -->`` block replaced by its generator's output."""
    for name, make in blocks.items():
        begin, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
        if begin not in text or end not in text:
            raise SystemExit(f"docs/{page}: markers {begin} … {end} not found")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def drifted() -> dict[Path, str]:
    """Pages whose checked-in text differs from what the code generates → the generated text."""
    out = {}
    for page, blocks in BLOCKS.items():
        path = DOCS / page
        current = path.read_text(encoding="utf-8")
        wanted = render(current, blocks, page)
        if wanted != current:
            out[path] = wanted
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated blocks, or with ``--check`` report the pages that drifted."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page drifted")
    args = parser.parse_args(argv)
    stale = drifted()
    for path, text in stale.items():
        rel = path.relative_to(ROOT)
        if args.check:
            print(f"drifted: {rel}")
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {rel}")
    if args.check and stale:
        print(f"regenerate with: {COMMAND}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
