"""Packaging: a light core, one extra per integration, and an ImportError that names the extra."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from email.message import Message
from email.parser import Parser
from importlib.util import find_spec
from pathlib import Path

import pytest

from handoffmon._extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

INTEGRATION_DISTS = {
    "litellm",
    "tqdm",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
    "starlette",
    "uvicorn",
    "httptools",
    "aiohttp",
    "redis",
    "matplotlib",
    "duckdb",
}
"""Distributions `pip install handoffmon` must not bring, directly or transitively."""

BLOCK_EXTRAS = """
import sys
BLOCKED = {blocked!r}
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""
"""Prelude that makes every extra's modules (and openai) unimportable, as on a core-only install."""


def _blocked_prelude() -> str:
    modules = sorted({m for mods in EXTRAS.values() for m in mods} | {"openai"})
    return BLOCK_EXTRAS.format(blocked=modules)


def _run_core_only(code: str) -> subprocess.CompletedProcess[str]:
    script = _blocked_prelude() + textwrap.dedent(code)
    cmd = [sys.executable, "-c", script]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


def _name(requirement: str) -> str:
    for sep in "<>=!~;[ ":
        requirement = requirement.split(sep)[0]
    return requirement.strip().lower().replace("_", "-")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds from this checkout (no dependencies)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (path,) = out.glob("handoffmon-*.whl")
    return path


def _metadata(wheel: Path) -> Message:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(zf.read(name).decode("utf-8"))


def test_wheel_metadata_core_has_no_integration(wheel: Path) -> None:
    """The built wheel: Python ≥ 3.11, SPDX license + LICENSE, and no integration in the core requirements."""
    meta = _metadata(wheel)
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    requires = meta.get_all("Requires-Dist") or []
    core = {_name(r) for r in requires if "extra ==" not in r}
    assert "numpy" in core and "prometheus-client" in core
    assert not core & INTEGRATION_DISTS
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"litellm", "proxy", "redis", "otel", "demo", "evals", "dev"} <= extras
    assert "plots" not in extras


@pytest.mark.slow
def test_pip_install_handoffmon_resolves_without_litellm(wheel: Path, tmp_path: Path) -> None:
    """`pip install handoffmon` (resolved by pip from the wheel, deps included) installs no integration."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed"]
    subprocess.run([*cmd, "--report", str(report), str(wheel)], check=True, capture_output=True, timeout=300)
    installed = {_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert {"handoffmon", "numpy", "pydantic", "prometheus-client"} <= installed
    assert not installed & INTEGRATION_DISTS, sorted(installed & INTEGRATION_DISTS)


def test_every_module_imports_or_names_its_extra() -> None:
    """Without any extra, each handoffmon module imports, or fails with MissingExtraError naming the extra."""
    out = _run_core_only(
        """
        import importlib, json, pkgutil
        import handoffmon
        from handoffmon.errors import MissingExtraError
        result = {}
        for info in pkgutil.walk_packages(handoffmon.__path__, "handoffmon."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
                result[info.name] = "ok"
            except MissingExtraError as exc:
                result[info.name] = str(exc).rsplit("handoffmon[", 1)[1].rstrip("]'")
        print(json.dumps(result))
        """
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["handoffmon.pipeline.monitor"] == "ok"
    assert result["handoffmon.refit.engine"] == "ok"
    assert result["handoffmon.exporters.prometheus"] == "ok"
    assert result["handoffmon.integrations.router"] == "ok"
    assert result["handoffmon.integrations.litellm_callback"] == "litellm"
    assert result["handoffmon.proxy.app"] == "proxy"
    assert result["handoffmon.stores.redis"] == "redis"
    assert result["handoffmon.sim.router"] == "demo"
    assert set(result.values()) <= {"ok", *EXTRAS}


def test_core_monitors_exports_and_refits_without_extras() -> None:
    """The core alone: a Monitor records turns, Prometheus renders them, the refit runs."""
    out = _run_core_only(
        """
        from prometheus_client import CollectorRegistry, generate_latest
        from handoffmon.config import config_from_mapping
        from handoffmon.depth import DepthBuckets
        from handoffmon.exporters.prometheus import PrometheusExporter
        from handoffmon.ingress import Outcome, RequestParser
        from handoffmon.pipeline.monitor import Monitor
        from handoffmon.refit import refit

        cfg = config_from_mapping({"rules": [{"name": "short", "check": "length",
                                              "params": {"unit": "words", "max": 5}}],
                                   "refit": {"interval_s": 0}})
        exporter = PrometheusExporter(CollectorRegistry())
        with Monitor(cfg, exporters=[exporter]) as monitor:
            history = [{"role": "user", "content": "hi"}]
            for author in ("a", "b", "a"):
                turn = monitor.capture(RequestParser().parse(history, "g"))
                reply = {"role": "assistant", "content": f"hello from {author}"}
                monitor.finish(turn, reply, Outcome(authors=(author,)))
                history = [*history, reply, {"role": "user", "content": "more"}]
            assert monitor.flush(10)
            counts = monitor.snapshot()
        assert counts.total_turns == 3
        text = generate_latest(exporter.registry).decode()
        assert 'handoffmon_turns_total{depth_bucket="2",model="b",prefix_model="a"} 1.0' in text
        print(sorted(refit(counts, buckets=DepthBuckets()).rules))
        """
    )
    assert out.returncode == 0, out.stderr
    assert "'short'" in out.stdout


def test_cli_names_the_missing_extra() -> None:
    """`handoffmon serve` without the proxy extra exits 1 with the pip line, not a traceback."""
    out = _run_core_only(
        """
        import sys
        from handoffmon.cli import main
        sys.argv = ["handoffmon", "serve", "--upstream", "http://127.0.0.1:9", "--port", "1"]
        main()
        """
    )
    assert out.returncode == 1
    assert "pip install 'handoffmon[proxy]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_extras_table_matches_pyproject() -> None:
    """The extras the code names exist in pyproject (and the reverse); their modules exist."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(optional)
    assert set(optional) - set(EXTRAS) == {"dev", "litellm-proxy"}  # tool/server sets, imported by no module
    for extra, modules in EXTRAS.items():
        assert optional[extra], extra
        for module in modules:
            assert find_spec(module) is not None, f"{extra}: {module} (is the dev extra installed?)"
    dev_extras = optional["dev"][0].split("[", 1)[1].rstrip("]").split(",")
    assert set(dev_extras) == set(optional) - {"dev"}, "the dev extra installs every other extra"


def test_tool_targets_match_requires_python() -> None:
    """ruff and mypy check the code for the oldest Python the package claims."""
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py311"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == "3.11"
