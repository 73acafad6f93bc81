"""The README's `handoffmon serve` quickstart, run as written: the command, the client, the curl line."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess

import httpx

from tests.conftest import free_port, require_binary
from tests.docs.snippets import claimed, expected_output, shell_commands
from tests.proxy.conftest import Upstream, serve_process
from tests.proxy.mock_upstream import reply_text, schedule

PAGE = "README.md"
THIS = "tests/proxy/test_readme.py"
README_UPSTREAM = "http://litellm:4000"
README_URL = "http://127.0.0.1:4100"


def _model_free(line: str) -> str:
    """A series line with its model label blanked: the mock upstream names its own models."""
    return re.sub(r'model="[^"]*"', 'model="…"', line)


def test_serve_quickstart_command_client_and_metrics(upstream: Upstream) -> None:
    """`handoffmon serve` started from the README's own command line (upstream and port swapped for
    the mock's): the client snippet prints the upstream's reply, and the curl line then prints the
    documented handoffmon_turns_total line (depth 1, no prefix model, 1.0)."""
    curl_bin = require_binary("curl")
    start, curl_block = claimed(PAGE, THIS, "bash")
    (client_block,) = claimed(PAGE, THIS)
    (serve,) = [c for c in shell_commands(start.code) if c.startswith("handoffmon serve")]
    (curl,) = shell_commands(curl_block.code)
    port = free_port()
    argv = shlex.split(serve.replace(README_UPSTREAM, upstream.url).replace("--port 4100", f"--port {port}"))
    assert argv[0] == "handoffmon"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDOFFMON_")}
    with serve_process(argv[1:], port, env) as served:
        url = served.url
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(client_block.code.replace(README_URL, url), client_block.id, "exec"), {})
        assert out.getvalue() == reply_text(schedule(1), 1) + "\n"
        assert httpx.post(f"{url}/admin/flush", timeout=30).json() == {"flushed": True}
        shown = subprocess.run(
            ["bash", "-c", curl.replace(README_URL, url).replace("curl ", f"{curl_bin} ", 1)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert shown.returncode == 0, shown.stderr
    assert [_model_free(s) for s in shown.stdout.splitlines()] == [
        _model_free(s) for s in expected_output(curl_block.code)
    ]
