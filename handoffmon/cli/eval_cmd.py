"""``handoffmon eval``: run drift scripts, the switch matrix, and compare with production shapes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from handoffmon._extras import requires_extra
from handoffmon.cli.exits import ExitCode, fail
from handoffmon.cli.files import check_writable, one_stdout
from handoffmon.cli.params import RESAMPLES_OPTION, FiniteRange, NonNegativeFinite
from handoffmon.errors import HandoffmonError, NoDataError

_ROUTER_HELP = "litellm Router config (YAML with model_list), or 'sim' / 'sim:K' for the offline simulator"


def _fail(exc: Exception) -> NoReturn:
    fail(str(exc), ExitCode.NO_DATA if isinstance(exc, NoDataError) else ExitCode.ERROR)


def _scripts(paths: tuple[str, ...], multi_if: str | None, limit: int | None) -> list[Any]:
    from handoffmon.evals.multiif import load_multiif
    from handoffmon.evals.script import load_scripts

    if not paths and not multi_if:
        raise click.UsageError("give SCRIPTS (files or directories) and/or --multi-if CSV")
    if limit is not None and not multi_if:
        raise click.UsageError("--limit only applies to --multi-if (the first N Multi-IF conversations)")
    scripts = load_scripts(paths) if paths else []
    if multi_if:
        scripts += load_multiif(multi_if, limit=limit)
    if not scripts:  # given, but nothing in them: no data, not a usage error
        raise NoDataError(f"no scripts in {', '.join([*paths, *([multi_if] if multi_if else [])])}")
    return scripts


def _digest(obj: Any) -> str:
    import hashlib

    text = json.dumps(obj, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _deployment(router: str) -> str:
    """A hash of a router config's deployments (model_list, router_settings; api keys left out)."""
    import yaml

    try:
        data = yaml.safe_load(Path(router).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, RecursionError):
        return _digest(None)  # router_from_config reports the file; this is only its fingerprint
    if not isinstance(data, dict):
        return _digest(data)
    deployments = [
        {
            **d,
            "litellm_params": {k: v for k, v in (d.get("litellm_params") or {}).items() if k != "api_key"},
        }
        if isinstance(d, dict)
        else d
        for d in data.get("model_list") or []
    ]
    return _digest({"model_list": deployments, "router_settings": data.get("router_settings")})


def _target(
    router: str | None, seed: int, latency_s: float, config: str | None, *, matrix: bool
) -> tuple[Any, Any, dict[str, str]]:
    """(responder, name resolver, fingerprint of the target) for --router / plain litellm.

    Authors are canonicalized with ``attribution.canonical_models`` of ``config`` (the
    monitor's config file), so eval rows name models as production does; the simulator
    brings its own mapping. The fingerprint (``RunSettings.target``) hashes the deployment
    and that mapping: ``eval run`` resumes stored turns only when they are unchanged.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with requires_extra("evals", "handoffmon eval"):
        import litellm

    from handoffmon.attribution.names import ModelNames
    from handoffmon.config import load_config
    from handoffmon.errors import InputError
    from handoffmon.evals import models as m

    litellm.suppress_debug_info = True  # a CLI process: keep retried errors' debug dumps off stderr

    mapping = dict(load_config(config).attribution.canonical_models) if config else {}
    names = ModelNames(mapping)
    if router and (router == "sim" or router.startswith("sim:")):
        from handoffmon.sim.fleet import default_fleet, make_fleet
        from handoffmon.sim.router import canonical_models

        k = router.partition(":")[2]
        if k and not (k.isdigit() and 2 <= int(k) <= 12):
            raise InputError(f"--router {router}: 'sim:K' takes a fleet size K from 2 to 12, got {k!r}")
        fleet = make_fleet(int(k)) if k else default_fleet()
        tg = m.sim_target(fleet, seed=seed, latency_s=latency_s, fallbacks=not matrix, failures=True)
        # the provider's registered name differs per process: the map is fixed by the fleet's names
        sim_names = sorted(canonical_models(tg.fleet, "").values())
        target = {"deployment": f"{router} {_digest(repr(fleet))}", "names": _digest(sim_names)}
        return tg.responder, tg.group_of, target
    target = {"names": _digest(mapping)}
    if router:
        litellm_router = m.router_from_config(router)
        return (
            m.RouterResponder(litellm_router, names=names),
            m.router_group_of(litellm_router, router),
            {
                "deployment": f"{router} {_deployment(router)}",
                **target,
            },
        )
    return m.LitellmResponder(names=names), str, {"deployment": "litellm", **target}


def _settings(
    runs: int | None,
    concurrency: int,
    retries: int,
    seed: int,
    progress: bool,
    target: dict[str, str] | None = None,
    discard_stale: bool = False,
) -> Any:
    from handoffmon.evals.runner import RunSettings

    return RunSettings(
        runs=runs,
        concurrency=concurrency,
        retries=retries,
        seed=seed,
        progress=progress,
        target=target or {},
        discard_stale=discard_stale,
    )


def _write(path: str, text: str) -> None:
    from handoffmon.cli.files import write_text_atomic

    write_text_atomic(path, text)


@click.group("eval")
def eval_group() -> None:
    """Offline evals: drift scripts, the switch matrix, and the production feedback loop."""


_common = [
    click.option("--router", help=_ROUTER_HELP),
    click.option(
        "--runs", type=click.IntRange(min=1), help="replays per script (default: each script's runs)"
    ),
    click.option(
        "--concurrency",
        default=8,
        show_default=True,
        type=click.IntRange(min=1),
        help="in flight at once: conversations (eval run), model calls (eval switch-matrix)",
    ),
    click.option(
        "--retries",
        default=3,
        show_default=True,
        type=click.IntRange(min=0),
        help="extra attempts per model call before its run is given up (a rerun resumes it)",
    ),
    click.option(
        "--seed", default=0, show_default=True, type=int, help="base seed (per-run seeds derive from it)"
    ),
    click.option(
        "--multi-if", "multi_if", type=click.Path(dir_okay=False), help="Multi-IF CSV to add as scripts"
    ),
    click.option("--limit", type=click.IntRange(min=1), help="first N Multi-IF conversations only"),
    click.option(
        "--sim-latency",
        default=0.0,
        show_default=True,
        type=NonNegativeFinite(),
        help="simulator seconds per call",
    ),
    click.option("--progress/--no-progress", default=True, show_default=True, help="progress bar on stderr"),
    click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False),
        help="the monitor's config: attribution.canonical_models names authors as production does",
    ),
]


def _with_common(f: Any) -> Any:
    for opt in reversed(_common):
        f = opt(f)
    return f


@eval_group.command("run")
@click.argument("scripts", nargs=-1, type=click.Path(exists=True))
@click.option("--model", required=True, help="litellm model, or the Router model group")
@click.option("--db", default="eval.sqlite", show_default=True, help="results database (rerun resumes)")
@click.option(
    "--discard-stale",
    is_flag=True,
    help="delete stored runs made with another --seed, router deployment or name map, and run them again",
)
@click.option("--out", help="eval JSON (curves with Wilson intervals; '-' for stdout)")
@click.option("--jsonl", help="export every row of --db as JSONL ('-' for stdout)")
@click.option("--html", help="HTML report of the curves")
@click.option(
    "--shapes",
    "shapes_path",
    type=click.Path(exists=True, dir_okay=False),
    help="production shapes.json to overlay on the HTML report (joined on the author)",
)
@_with_common
def run_cmd(
    scripts: tuple[str, ...],
    model: str,
    db: str,
    out: str | None,
    jsonl: str | None,
    html: str | None,
    shapes_path: str | None,
    discard_stale: bool,
    **kw: Any,
) -> None:
    """Replay SCRIPTS N times against --model; rows land in --db; a rerun skips finished turns.

    Every row records the requested --model and the author that answered (after the
    router's fallbacks). A rerun resumes a run only when its seed, router deployment and
    canonical-name map are those its stored turns were made with; otherwise it stops
    (exit 1) unless --discard-stale. Exit status 4 when SCRIPTS hold no script, --shapes
    no production checks, or no checkpoint got a pass or fail verdict (nothing is written
    then); 5 when some runs failed (rerun to resume); 1 at the first call a provider refuses
    for missing or rejected credentials (not retried: no rerun repairs it).
    """
    from handoffmon.evals.results import build_result
    from handoffmon.evals.runner import Runner
    from handoffmon.evals.store import ResultStore

    try:
        outputs = (("--out", out), ("--jsonl", jsonl), ("--html", html))
        one_stdout(*outputs)
        for option, path in outputs:
            check_writable(path, option)  # before any model call, not after the run
        loaded = _scripts(scripts, kw["multi_if"], kw["limit"])
        shapes = _read_shapes(shapes_path) if shapes_path else None  # a bad file stops before any call
        if shapes is not None and not shapes.rules:
            raise NoDataError(f"{shapes_path}: the shapes hold no production checks: nothing to overlay")
        responder, resolve, target = _target(
            kw["router"], kw["seed"], kw["sim_latency"], kw["config_path"], matrix=False
        )
        settings = _settings(
            kw["runs"], kw["concurrency"], kw["retries"], kw["seed"], kw["progress"], target, discard_stale
        )
        group = resolve(model)  # an unknown --model stops before --db is created
        with ResultStore(db, label=" ".join(sys.argv[1:])[:500]) as store:
            summary = asyncio.run(Runner(responder, store, settings).run(loaded, group))
            rows = list(store.rows(model=group))
            runs = {s.id: kw["runs"] or s.runs for s in loaded}  # what this eval asked for
            result = build_result(rows, loaded, str(Path(db).resolve()), model=group, runs=runs)
            _check_decided(result, summary, db)
            if jsonl == "-":
                store.write_jsonl(sys.stdout)
            elif jsonl:
                store.export_jsonl(jsonl)
        if out:
            _write(out, result.to_json())
        warning = None
        if html:
            page, warning = _eval_page(result, shapes)
            _write(html, page)
    except HandoffmonError as exc:
        _fail(exc)
    authors = ", ".join(f"{m} -> {', '.join(per)}" for m, per in result.authors.items()) or "none"
    click.echo(
        f"eval run: {summary.jobs} run(s), {summary.turns_generated} turn(s) generated, "
        f"{summary.turns_resumed} resumed"
        + (f" ({summary.discarded} stale run(s) discarded)" if summary.discarded else "")
        + (f", {summary.rechecked} verdict(s) added to stored replies" if summary.rechecked else "")
        + f", {summary.retries} retried call(s), "
        f"{len(summary.failed)} failed run(s); answered by {authors} -> {db}",
        err=True,
    )
    for script, run, err in summary.failed[:10]:
        click.echo(f"  failed {script}#{run}: {err}", err=True)
    if warning:
        click.echo(f"warning: --shapes: {warning}", err=True)
    sys.exit(int(ExitCode.RUN_FAILED if summary.failed else ExitCode.OK))


def _check_decided(result: Any, summary: Any, db: str) -> None:
    """``NoDataError`` when no checkpoint got a pass or fail verdict (and no run failed, which
    a rerun resumes): every curve has n = 0, and a page of empty charts is no all-clear."""
    if summary.failed or result.verdicts.get("pass", 0) + result.verdicts.get("fail", 0):
        return
    got = ", ".join(f"{k} {v}" for k, v in sorted(result.verdicts.items())) or "no checkpoint rows"
    raise NoDataError(
        f"no checkpoint got a pass or fail verdict ({got}): nothing to report, nothing written "
        f"(the turns stay in {db}); put checkpoints where the rules apply"
    )


def _eval_page(result: Any, shapes: Any) -> tuple[str, str | None]:
    """The eval HTML, with production overlaid (and compare's flags) when shapes are given, and a
    warning when the shapes have nothing to overlay: the run itself succeeded, so its page is
    written without production rather than the command failing after the run."""
    from handoffmon.evals.html import eval_report

    if shapes is None:
        return eval_report(result), None
    from handoffmon.evals.compare import compare

    try:
        comparison = compare(shapes, [result])
    except NoDataError as exc:
        return eval_report(result, shapes=shapes), str(exc)
    return eval_report(result, shapes=shapes, comparison=comparison), None


def _read_shapes(path: str) -> Any:
    from handoffmon.errors import InputError
    from handoffmon.evals.shapes import Shapes

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a shapes.json (not UTF-8 text: {exc.reason})") from exc
    return Shapes.from_json(text, source=path)


@eval_group.command("switch-matrix")
@click.argument("scripts", nargs=-1, type=click.Path(exists=True))
@click.option("--models", required=True, help="comma-separated models (K ≥ 2)")
@click.option(
    "--cache",
    "cache_dir",
    default=".handoffmon-prefix-cache",
    show_default=True,
    help="directory of cached prefix generations and cells (a rerun resumes from it)",
)
@click.option("--out", required=True, help="switch-matrix JSON ('-' for stdout)")
@click.option("--scores", help="also write episode,prefix_model,suffix_model,score CSV")
@click.option(
    "--switch-at", type=click.IntRange(min=0), help="prefix turns T (default L-1: final-turn switch)"
)
@click.option(
    "--score",
    type=click.Choice(["all", "mean"]),
    default="all",
    show_default=True,
    help="an episode's score: 1 if every decided rule passed (all), or the share that passed (mean)",
)
@RESAMPLES_OPTION
@click.option(
    "--min-n", default=20, show_default=True, type=click.IntRange(min=2), help="min paired episodes"
)
@click.option(
    "--fdr",
    default=0.05,
    show_default=True,
    type=FiniteRange(0, 1, min_open=True, max_open=True),
    help="Benjamini-Hochberg false-discovery rate of 'significant'",
)
@click.option("--html", help="HTML report with the Δ heatmap")
@click.option(
    "--discard-stale",
    is_flag=True,
    help="delete cached prefixes and cells made with another --seed, router deployment or name map, "
    "and generate them again",
)
@_with_common
def switch_matrix_cmd(
    scripts: tuple[str, ...],
    models: str,
    cache_dir: str,
    out: str,
    scores: str | None,
    switch_at: int | None,
    score: str,
    resamples: int,
    min_n: int,
    fdr: float,
    html: str | None,
    discard_stale: bool,
    **kw: Any,
) -> None:
    """K×K prefix→suffix cells; prefixes cached on disk by (task, episode, prefix model).

    Cells are named by the author that answered each requested model (the names
    production uses); exit status 5 when model calls failed (rerun resumes from the cache),
    1 at the first call a provider refuses for missing or rejected credentials (not retried),
    4 when SCRIPTS hold no script or no pair reached --min-n (nothing is written then).
    The cache is reused only under the seed, router deployment and canonical-name map its
    entries were made with; otherwise it stops (exit 1) unless --discard-stale.
    """
    from handoffmon.evals.switch import SwitchMatrixRun, analyse, episodes_of, scores_csv

    try:
        outputs = (("--out", out), ("--scores", scores), ("--html", html))
        one_stdout(*outputs)
        for option, path in outputs:
            check_writable(path, option)  # before any model call, not after the run
        loaded = _scripts(scripts, kw["multi_if"], kw["limit"])
        names = [m.strip() for m in models.split(",") if m.strip()]
        if len(names) < 2:
            raise click.UsageError("--models needs at least two models")
        responder, resolve, target = _target(
            kw["router"], kw["seed"], kw["sim_latency"], kw["config_path"], matrix=True
        )
        settings = _settings(
            kw["runs"], kw["concurrency"], kw["retries"], kw["seed"], kw["progress"], target, discard_stale
        )
        task = "multi-if" if kw["multi_if"] and not scripts else "drift"
        sm = SwitchMatrixRun(
            responder,
            _distinct_models(names, resolve),
            cache_dir,
            switch_at=switch_at,
            score=score,  # type: ignore[arg-type]
            settings=settings,
            task=task,
        )
        episodes = episodes_of(loaded, kw["runs"])
        sm.check_fingerprints(episodes)  # before any model call; a stale cache is bad input, not a failed run
        try:
            cells = asyncio.run(sm.run(episodes))
        except HandoffmonError:  # missing credentials: a configuration error (exit 1), not resumable
            raise
        except Exception as exc:  # a provider error after retries: finished cells stay cached
            fail(f"switch matrix stopped: {type(exc).__name__}: {exc}"[:500], ExitCode.RUN_FAILED)
        result = analyse(
            cells,
            resamples=resamples,
            seed=kw["seed"],
            min_n=min_n,
            fdr=fdr,
            source=",".join(scripts) or "multi-if",
        )
        if not any(p.observed for p in result.fit.pairs):
            raise NoDataError(
                f"no pair reached --min-n {min_n} paired episodes ({result.n_episodes} episode(s)); "
                "add runs or scripts"
            )
        _write(out, result.to_json())
        if scores:
            _write(scores, scores_csv(cells).rstrip("\n"))
        if html:
            from handoffmon.evals.matrix_page import matrix_report

            _write(html, matrix_report(result))
    except (HandoffmonError, ValueError) as exc:
        _fail(exc)
    st = sm.stats
    sig = sum(p.significant for p in result.fit.pairs)
    click.echo(
        f"switch matrix: {', '.join(f'{m} -> {result.authors.get(m, m)}' for m in sm.models)}; "
        f"{result.n_episodes} episodes in {result.clusters} script(s); prefixes generated "
        f"{st.prefix_generated}, reused {st.prefix_hits}; cells generated {st.suffix_generated}, "
        f"cached {st.suffix_hits}"
        + (f" ({st.discarded} stale cache entries discarded)" if st.discarded else "")
        + f"; {result.off_author_episodes} off-author episode cell(s) dropped; "
        f"{sig} significant pair(s) at FDR {fdr}; mu={result.fit.mu:.4f} r2={result.fit.r2:.3f} -> {out}",
        err=True,
    )
    if 2 <= result.clusters < FEW_SCRIPTS:
        click.echo(few_scripts_warning(result.clusters), err=True)


FEW_SCRIPTS = 5
"""From this many scripts on, ``eval switch-matrix`` does not warn about script-level intervals
(measured coverage of a nominal 95% in docs/guides/eval-harness.md: 87% with 2 scripts, 92% with 4)."""


def few_scripts_warning(clusters: int) -> str:
    """The warning for a matrix of 2 to ``FEW_SCRIPTS`` − 1 scripts, quoting the guide's table."""
    return (
        f"warning: the matrix's episodes come from {clusters} scripts; the bootstrap resamples "
        f"scripts, and with fewer than {FEW_SCRIPTS} its intervals are too narrow when the handoff "
        "effect differs between scripts (measured: 87% coverage of a nominal 95% with 2 scripts, 92% "
        "with 4; raw p < 0.05 for 6.5% and 3.7% of pairs with no mean effect): add scripts"
    )


def _distinct_models(names: list[str], resolve: Any) -> list[str]:
    """The model (group) each of --models resolves to; ``InputError`` naming any that resolve alike.

    Two names for one model would make one K×K matrix of identical cells: no off-diagonal
    pair to measure, reported as "no pair reached --min-n" after the whole run.
    """
    from handoffmon.errors import InputError

    by_target: dict[str, list[str]] = {}
    for n in names:
        by_target.setdefault(resolve(n), []).append(n)
    same = {t: ns for t, ns in by_target.items() if len(ns) > 1}
    if same:
        said = "; ".join(
            f"{ns[0]} is given {len(ns)} times"
            if len(set(ns)) == 1
            else f"{' and '.join(dict.fromkeys(ns))} resolve to the same model (group) {t!r}"
            for t, ns in same.items()
        )
        raise InputError(f"--models {','.join(names)}: {said}; a switch matrix needs K distinct models")
    return list(by_target)


@eval_group.command("compare")
@click.option(
    "--shapes",
    "shapes_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="production shapes.json (handoffmon shapes export)",
)
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--alpha",
    default=0.05,
    show_default=True,
    type=FiniteRange(0, 1, min_open=True),
    help="flag 'too clean' when the Holm-adjusted one-sided p is below this",
)
@click.option(
    "--min-gap",
    default=0.05,
    show_default=True,
    type=FiniteRange(0, 1),
    help="and eval adherence exceeds production's by at least this (0.05 = 5 pp)",
)
@click.option(
    "--min-share",
    default=0.01,
    show_default=True,
    type=FiniteRange(0, 1),
    help="list production handoff pairs with at least this share of handoff turns the matrix lacks",
)
@click.option("--model", help="compare only this author (eval rows and production counts)")
@click.option("--out", help="comparison JSON ('-' for stdout; the text report then goes to stderr)")
@click.option("--html", help="eval HTML report with production overlaid and flagged checkpoints marked")
@click.option(
    "--strict",
    is_flag=True,
    help="exit 4 when an eval author or rule has no production match, or the reverse (listed either way)",
)
def compare_cmd(
    shapes_path: str,
    results: tuple[str, ...],
    alpha: float,
    min_gap: float,
    min_share: float,
    model: str | None,
    out: str | None,
    html: str | None,
    strict: bool,
) -> None:
    """Production SHAPES vs eval RESULTS (eval run JSON and/or switch-matrix JSON files).

    Both sides are joined on the author (the deployment that answered, canonical name).
    Eval authors and rules with no production match (and the reverse) are listed in the
    notes and on stderr. Exit status 3 when a rule is flagged "too clean", 4 when nothing
    could be compared (unknown --model, no production data for it, no shared rule or
    depth) or, with --strict, when some names have no match.
    """
    from handoffmon.errors import parse_json_document
    from handoffmon.evals.compare import compare, read_switch_matrix, render_text, unmatched_lines
    from handoffmon.evals.results import EvalResult
    from handoffmon.labels import MAX_LABEL_CHARS, exportable

    if model is not None:  # named as both sides name authors: production's label of it
        model = exportable(model[:MAX_LABEL_CHARS])

    try:
        one_stdout(("--out", out), ("--html", html))
        check_writable(out, "--out")
        check_writable(html, "--html")
        shapes = _read_shapes(shapes_path)
        evals, matrices = [], []
        for path in results:
            try:
                data = parse_json_document(Path(path).read_text(encoding="utf-8"), path)
            except UnicodeDecodeError as exc:
                raise HandoffmonError(f"{path}: not JSON (not UTF-8 text: {exc.reason})") from exc
            if isinstance(data, dict) and data.get("schema") == "handoffmon.switch_matrix":
                matrices.append(read_switch_matrix(data, path))
            else:
                evals.append((path, EvalResult.from_dict(data, source=path)))
        if html and len(evals) != 1:  # before anything is written
            raise HandoffmonError(
                f"--html needs exactly one eval run result among RESULTS, got {len(evals)}; nothing written"
            )
        c = compare(
            shapes,
            [e for _, e in evals],
            matrices,
            alpha=alpha,
            min_gap=min_gap,
            min_share=min_share,
            model=model,
            sources=[p for p, _ in evals],
        )
        page = None
        if html:
            from handoffmon.evals.html import eval_report

            page = eval_report(evals[0][1], shapes=shapes, comparison=c)
        if out:
            _write(out, json.dumps(c.to_dict(), indent=2, allow_nan=False))
        if html and page is not None:
            _write(html, page)
    except HandoffmonError as exc:
        _fail(exc)
    click.echo(render_text(c), err="-" in (out, html))  # stdout carries the JSON or the page
    for line in unmatched_lines(c.unmatched):
        click.echo(f"warning: {line}", err=True)
    if strict and c.unmatched:
        fail("--strict: some eval or production names have no match (listed above)", ExitCode.NO_DATA)
    sys.exit(int(ExitCode.FLAGGED if c.flagged else ExitCode.OK))
