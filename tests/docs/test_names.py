"""Names the README and the docs mention exist in the code: config keys, environment variables,
metric names, Python paths and `handoffmon …` command lines in prose (a renamed one fails here)."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
from pydantic import BaseModel

from handoffmon.cli.refit_cmd import REFIT_FAILURE_GAUGE
from handoffmon.config import HandoffmonConfig
from handoffmon.sources.prometheus import HEADERS_ENV, TOKEN_ENV, TOKEN_FILE_ENV
from tests.docs.snippets import DOCS, README, ROOT, pages, resolve_command

GENERATED = {
    DOCS / "reference" / name for name in ("configuration.md", "metrics.md", "cli.md", "refit-json.md")
}
PROSE_PAGES = [p for p in pages() if p not in GENERATED]
RENAMED = {"proxy.metrics_token"}
"""Keys the docs name only to say they moved (config.py refuses them with the new name)."""
NOT_CONFIG_VARIABLES = {
    "CONFIG",  # the config file's path
    "STORE_BACKEND",  # docker-compose's own variable, passed on as HANDOFFMON_STORE__BACKEND
    "SOAK_S",  # the soak tests' length (tests/reliability)
    "METRICS_TOKEN",  # docker-compose's own variable, passed on as HANDOFFMON_TELEMETRY__METRICS_TOKEN
    "FUZZ_EXAMPLES",  # the adversarial wrapper suite's example count (tests/integrations)
    # the Prometheus source's credentials (sources/prometheus.py), read by refit and shapes export
    *(name.removeprefix("HANDOFFMON_") for name in (TOKEN_ENV, TOKEN_FILE_ENV, HEADERS_ENV)),
}
NOT_METRICS = {"handoffmon_buckets", "handoffmon_rows", "handoffmon_shadow"}
"""Tables of the turn-log SQL (guides/turn-logs.md); the shadow calls' metadata key (guides/shadow.md)."""

_SQL = re.compile(r"^```sql\n.*?^```", re.S | re.M)
_CODE = re.compile(r"`([^`\n]+)`")
_FILE = re.compile(r"\.(json|jsonl|ya?ml|md|py|db|prom|csv|parquet|html|txt|toml)$")
"""File names (`refit.json`) are not config keys."""


def _text(page: Path) -> str:
    """A page without its SQL blocks (their table names are not metrics)."""
    return _SQL.sub("", page.read_text(encoding="utf-8"))


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _config_key_exists(path: list[str]) -> bool:
    model: type[BaseModel] = HandoffmonConfig
    for i, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return False
        nested = field.annotation
        if i < len(path) - 1:
            if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
                return False  # dict-valued keys (e.g. canonical_models) end the path
            model = nested
    return True


def _config_keys(text: str) -> set[str]:
    """`section.key[.sub]` spans whose first part is a config section (values after `:` dropped)."""
    sections = set(HandoffmonConfig.model_fields)
    keys = set()
    for span in _CODE.findall(text):
        m = re.fullmatch(r"([a-z_]+(?:\.[a-z_0-9]+)+)(?:[:=].*)?", span.strip())
        if m and m.group(1).split(".")[0] in sections and not _FILE.search(m.group(1)):
            keys.add(m.group(1))
    return keys


@pytest.mark.parametrize("page", PROSE_PAGES, ids=_rel)
def test_config_keys_named_in_the_docs_exist(page: Path) -> None:
    """Every `section.key` the page names is a field of handoffmon/config.py's model."""
    missing = sorted(k for k in _config_keys(_text(page)) - RENAMED if not _config_key_exists(k.split(".")))
    assert not missing, f"{_rel(page)} names config keys that do not exist: {missing}"


@pytest.mark.parametrize("page", PROSE_PAGES, ids=_rel)
def test_environment_variables_named_in_the_docs_map_to_config_keys(page: Path) -> None:
    """`HANDOFFMON_SECTION__KEY` variables resolve to config keys."""
    names = set(re.findall(r"\bHANDOFFMON_([A-Z0-9_]+)", _text(page))) - NOT_CONFIG_VARIABLES
    missing = sorted(n for n in names if not _config_key_exists(n.lower().split("__")))
    assert not missing, f"{_rel(page)} names variables that map to no config key: {missing}"


def _known_metrics() -> set[str]:
    reference = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(handoffmon_\w+)` \| (\w+) \|", reference, flags=re.M)
    known = {REFIT_FAILURE_GAUGE}  # pushed by the refit job only, not by a running exporter
    for name, kind in rows:
        known.add(name)
        if kind == "counter":
            known.add(name.removesuffix("_total"))  # the OpenTelemetry instrument's name
        if kind == "histogram":
            known |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return known


@pytest.mark.parametrize("page", PROSE_PAGES, ids=_rel)
def test_metric_names_in_the_docs_exist(page: Path) -> None:
    """Every `handoffmon_…` series a page names is in the generated metrics reference."""
    text = _text(page)
    names = set(re.findall(r"(?<![\w./])(handoffmon_[a-z0-9_]+)(?![\w*]|\.\w)", text))
    known = _known_metrics()
    missing = sorted(names - known - NOT_METRICS)
    assert not missing, f"{_rel(page)} names metrics that no exporter defines: {missing}"
    # a family named by its prefix (`handoffmon_proxy_*`) must name at least one series
    families = set(re.findall(r"(?<![\w./])(handoffmon_[a-z0-9_]+)\*", text))
    empty = sorted(f for f in families if not any(k.startswith(f) for k in known))
    assert not empty, f"{_rel(page)} names metric families with no series: {empty}"


@pytest.mark.parametrize("page", PROSE_PAGES, ids=_rel)
def test_commands_in_prose_exist(page: Path) -> None:
    """Inline `handoffmon …` commands name real subcommands and options (code blocks are tested in
    test_snippets)."""
    prose = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", _text(page), flags=re.S | re.M)
    for span in _CODE.findall(prose):
        if not span.startswith("handoffmon ") or "…" in span:
            continue
        cmd, args = resolve_command(shlex.split(span))
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        unknown = [a for a in args if a.startswith("--") and a.split("=", 1)[0] not in known]
        assert not unknown, f"{_rel(page)}: `{span}`: {cmd.name} has no option {unknown}"


def _resolves(dotted: str) -> bool:
    """``handoffmon.a.b.C`` imports as a module path with attributes after it."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _is_python_path(dotted: str) -> bool:
    """Whether a ``handoffmon.x.…`` span means Python: ``x`` is a submodule of handoffmon. Other
    spans (``handoffmon.turn`` events, ``handoffmon.eval`` schemas, ``handoffmon.yaml``) are names of
    another kind; top-level names (``handoffmon.wrap``) are pinned by the package's ``__all__`` test."""
    package = ROOT / "handoffmon"
    head = dotted.split(".")[1]
    return (package / head / "__init__.py").is_file() or (package / f"{head}.py").is_file()


@pytest.mark.parametrize("page", PROSE_PAGES, ids=_rel)
def test_python_paths_in_the_docs_import(page: Path) -> None:
    """`handoffmon.module.name` spans import (modules, classes, functions, constants), also when
    the span calls it (`handoffmon.exporters.serving.multiprocess_registry()`)."""
    calls = (re.fullmatch(r"(handoffmon(?:\.\w+)+)(?:\(.*\))?", s) for s in _CODE.findall(_text(page)))
    spans = {m.group(1) for m in calls if m}
    missing = sorted(s for s in spans if _is_python_path(s) and not _resolves(s))
    assert not missing, f"{_rel(page)} names Python objects that do not exist: {missing}"


def test_the_checks_see_the_readme() -> None:
    """The README is among the pages checked, and it names config keys and metrics to check."""
    assert README in PROSE_PAGES
    assert _config_keys(_text(README)) or "handoffmon_turns_total" in _text(README)
