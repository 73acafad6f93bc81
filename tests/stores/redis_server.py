"""Test helper: a private ``redis-server`` on a free loopback port that tests may stop and restart."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

from tests.conftest import free_port, port_open, require_binary


class RedisServer:
    """A throwaway ``redis-server --save ''`` the test owns (never the system one)."""

    def __init__(self, port: int | None = None, args: Sequence[str] = ()) -> None:
        self.binary = require_binary("redis-server")
        self.port = port or free_port()
        self.args = list(args)
        """Extra ``redis-server`` options (``["--maxmemory", "2mb"]``)."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 5.0) -> None:
        """Start on ``self.port`` and wait until it accepts connections."""
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", *self.args]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not port_open("127.0.0.1", self.port, 0.05):
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait until the port is closed."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
