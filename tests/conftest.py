"""Shared test helpers: server requirements that skip locally but fail under CI=true."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (scripts/test.sh, .ci/run): none (serial) when the selection may
    include ``exclusive`` tests (soaks, memory and throughput bounds, alert timers), which must
    have the machine to themselves. So ``-m slow`` is serial, and ``-m 'slow and not exclusive'``
    (the simulations and statistics, CPU-bound) runs one worker per usable core. The default
    suite (``not slow``) runs one more worker than cores: much of it waits on real servers,
    subprocesses and scrape intervals, and a third worker on two cores fills that time (2,118
    tests: 223 s against 311 s with two workers, same host). ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    overrides."""
    if env := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(env)
    expr = config.option.markexpr or ""
    if "not slow" not in expr and "not exclusive" not in expr:
        return 0
    cores = len(os.sched_getaffinity(0))
    return cores + 1 if "not slow" in expr else cores


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An ``exclusive`` test must also be ``slow``: the default suite always runs on every core."""
    wrong = [
        i.nodeid for i in items if i.get_closest_marker("exclusive") and not i.get_closest_marker("slow")
    ]
    if wrong:
        raise pytest.UsageError("exclusive tests must be marked slow too: " + ", ".join(wrong))


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (under CI=true) when a needed server or binary is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def require_binary(name: str) -> str:
    """Path of an executable, or skip/fail naming it."""
    path = shutil.which(name)
    require(path is not None, f"{name} not installed (apt-get install {name})")
    assert path is not None
    return path


def require_redis(host: str = "127.0.0.1", port: int = 6379) -> None:
    """Skip/fail unless a Redis server answers on host:port."""
    require(port_open(host, port), f"no Redis server on {host}:{port}")


def free_port() -> int:
    """A TCP port that is free right now on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
