"""Reading a Prometheus behind authentication: basic auth from the URL's credentials (a real
Prometheus with ``--web.config.file``), a bearer token and extra headers from the environment (a
real Prometheus behind an authenticating gateway, as Mimir, Cortex, Thanos and kube-rbac-proxy
put one), and credentials kept out of labels, the refit JSON, error messages and redirects to
another host. Before, the refit job and ``shapes export`` could not read such a Prometheus."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.sources import SourceError
from handoffmon.sources.prometheus import (
    HEADERS_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    PrometheusSource,
    auth_headers,
    split_credentials,
)
from tests.conftest import free_port
from tests.promserver import PromServer
from tests.sources.fakeprom import QuietHandler, loopback_server, reply

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "refit", "refit-test-password-7f3a"
HASHED = "$2b$04$acqk3HyiKJgrkY69FWhfL.cFla22Dega41TaxpRxGs.AlRdg4NeFm"
"""bcrypt of PASSWORD (``bcrypt.hashpw(PASSWORD, bcrypt.gensalt(4))``): Prometheus's web config
takes hashes only."""
TOKEN, TENANT = "tok-5b1e90c2d4", "team-a"


# -- parsing, no server ---------------------------------------------------------------------------


def test_credentials_leave_the_url_for_a_basic_auth_header() -> None:
    url, headers = split_credentials("https://re%40fit:p%3Ass@prom.example:9443/prefix")
    assert url == "https://prom.example:9443/prefix"
    assert headers == {"Authorization": "Basic cmVAZml0OnA6c3M="}  # base64("re@fit:p:ss")
    assert split_credentials("http://[::1]:9090") == ("http://[::1]:9090", {})
    assert split_credentials("http://u:p@[::1]:9090")[0] == "http://[::1]:9090"
    source = PrometheusSource("prometheus://u:secret@prom:9090", match='{job="x"}', environ={})
    assert source.base_url == "http://prom:9090"
    assert "secret" not in source.label and source.label == 'http://prom:9090{job="x"}'
    with pytest.raises(SourceError, match="port is not a number") as err:
        split_credentials("http://u:secret@prom:90x0")
    assert "secret" not in str(err.value)


def test_token_and_headers_from_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert auth_headers(
        {TOKEN_FILE_ENV: str(token_file), HEADERS_ENV: f"X-Scope-OrgID: {TENANT}; X-Other: 1"}
    ) == {
        "X-Scope-OrgID": TENANT,
        "X-Other": "1",
        "Authorization": f"Bearer {TOKEN}",
    }
    assert auth_headers({TOKEN_ENV: TOKEN}) == {"Authorization": f"Bearer {TOKEN}"}
    assert auth_headers({}) == {}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({TOKEN_ENV: TOKEN, TOKEN_FILE_ENV: "/x"}, f"set {TOKEN_ENV} or {TOKEN_FILE_ENV}, not both"),
        ({TOKEN_FILE_ENV: "/nonexistent/token"}, f"{TOKEN_FILE_ENV}: cannot read /nonexistent/token"),
        ({HEADERS_ENV: "X-Scope-OrgID team-a"}, f"{HEADERS_ENV}: a line is not a 'Name: value'"),
        ({HEADERS_ENV: "X-Scope-OrgID:"}, f"{HEADERS_ENV}: X-Scope-OrgID is not a 'Name: value'"),
        ({HEADERS_ENV: f"Authorization: Basic {TOKEN}", TOKEN_ENV: TOKEN}, "sets Authorization and a bearer"),
        ({TOKEN_ENV: f"{TOKEN} {TOKEN}"}, f"{TOKEN_ENV}: the token holds whitespace"),
    ],
)
def test_bad_settings_fail_naming_the_variable_not_the_secret(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SourceError, match=message) as err:
        PrometheusSource("http://prom:9090", environ=environ)
    assert TOKEN not in str(err.value)


def test_an_empty_token_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(SourceError, match="is empty"):
        auth_headers({TOKEN_FILE_ENV: str(tmp_path / "token")})


def test_url_credentials_and_an_authorization_setting_conflict() -> None:
    with pytest.raises(SourceError, match="use one") as err:
        PrometheusSource("http://u:secret@prom:9090", environ={TOKEN_ENV: TOKEN})
    assert "secret" not in str(err.value) and TOKEN not in str(err.value)


# -- a real Prometheus ----------------------------------------------------------------------------


@dataclass
class Deployment:
    """A real replica counting turns, scraped by a real Prometheus that requires basic auth."""

    prom: PromServer
    host: str


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    from tests.promserver import prometheus_server

    tmp = tmp_path_factory.mktemp("secured")
    port = free_port()
    cmd = [sys.executable, "-m", "tests.sources.replica", "--seed", "3", "--turns", "800"]
    cmd += ["--port", str(port), "--sqlite", str(tmp / "replica.sqlite")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with prometheus_server(tmp, [f"127.0.0.1:{port}"], basic_auth=(USER, PASSWORD, HASHED)) as prom:

            def scraped() -> bool:
                total = prom.query("sum(handoffmon_turns_total)")
                return bool(total) and float(total[0]["value"][1]) == 800

            assert prom.wait_for(scraped, timeout_s=30), prom.log_tail()
            yield Deployment(prom, prom.url.removeprefix("http://"))
    finally:
        proc.communicate(timeout=10)


@pytest.mark.integration
def test_refit_reads_a_prometheus_that_requires_basic_auth(secured: Deployment, tmp_path: Path) -> None:
    out = tmp_path / "refit.json"
    res = CliRunner().invoke(
        main, ["refit", "--source", f"http://{USER}:{PASSWORD}@{secured.host}", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert PASSWORD not in text and PASSWORD not in res.output
    assert json.loads(text)["source"] == f"http://{secured.host}"
    turns = PrometheusSource(f"http://{USER}:{PASSWORD}@{secured.host}", environ={}).snapshot().turns
    assert sum(turns.values()) == 800

    for url in (f"http://{secured.host}", f"http://{USER}:wrong-{PASSWORD}@{secured.host}"):
        res = CliRunner().invoke(main, ["refit", "--source", url, "--out", str(tmp_path / "no.json")])
        assert res.exit_code != 0
        assert "Traceback" not in res.output and "(401)" in res.stderr, res.stderr
        assert PASSWORD not in res.stderr


@contextmanager
def gateway(upstream: str, away: str = "") -> Iterator[tuple[str, list[dict[str, str]]]]:
    """An authenticating gateway in front of ``upstream`` (Prometheus): a request needs the bearer
    TOKEN and the tenant header, and is forwarded with basic auth; ``/away/...`` redirects to
    ``away`` (default: this gateway itself). Records each request's headers."""
    seen: list[dict[str, str]] = []
    basic = split_credentials(f"http://{USER}:{PASSWORD}@x")[1]
    port = [0]

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            if self.path.startswith("/away/"):
                self.send_response(302)
                target = away or f"http://127.0.0.1:{port[0]}"
                self.send_header("Location", target + self.path.removeprefix("/away"))
                self.end_headers()
                return
            bearer, tenant = self.headers.get("Authorization"), self.headers.get("X-Scope-OrgID")
            if bearer != f"Bearer {TOKEN}" or tenant != TENANT:
                reply(self, 401, b"unauthorized", "text/plain")
                return
            request = urllib.request.Request(upstream + self.path, headers=basic)
            try:
                with urllib.request.urlopen(request, timeout=10) as resp:
                    code, body = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                code, body = exc.code, exc.read()
            reply(self, code, body)

    with loopback_server(Handler) as port[0]:
        yield f"http://127.0.0.1:{port[0]}", seen


@pytest.mark.integration
def test_a_bearer_token_and_tenant_header_reach_prometheus_through_a_gateway(
    secured: Deployment, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    environ = {TOKEN_FILE_ENV: str(token_file), HEADERS_ENV: f"X-Scope-OrgID: {TENANT}"}
    direct = PrometheusSource(f"http://{USER}:{PASSWORD}@{secured.host}", environ={}).snapshot()
    with gateway(secured.prom.url) as (url, seen):
        through = PrometheusSource(url, environ=environ).snapshot()
        assert through == direct and sum(through.turns.values()) == 800
        assert seen and all(h["authorization"] == f"Bearer {TOKEN}" for h in seen)
        with pytest.raises(SourceError, match=r"\(401\)") as err:
            PrometheusSource(
                url, environ={TOKEN_ENV: "wrong", HEADERS_ENV: f"X-Scope-OrgID: {TENANT}"}
            ).snapshot()
        assert TOKEN not in str(err.value)


@pytest.mark.integration
def test_a_redirect_to_another_host_drops_the_credentials(secured: Deployment) -> None:
    """A Prometheus URL that redirects elsewhere (a login page, a moved service) gets the request,
    never the token: the redirected request to the other host carries no Authorization."""
    with (
        gateway(secured.prom.url) as (other, other_seen),
        gateway(secured.prom.url, away=other) as (url, seen),
    ):
        environ = {TOKEN_ENV: TOKEN, HEADERS_ENV: f"X-Scope-OrgID: {TENANT}"}
        with pytest.raises(SourceError, match=r"\(401\)"):
            PrometheusSource(url + "/away", environ=environ).snapshot()
        assert seen[0]["authorization"] == f"Bearer {TOKEN}"  # the host configured got it
        assert other_seen and "authorization" not in other_seen[0]
    with gateway(secured.prom.url) as (url, seen):  # a redirect within the host keeps them
        turns = PrometheusSource(url + "/away", environ=environ).snapshot().turns
        assert sum(turns.values()) == 800
        assert all(h["authorization"] == f"Bearer {TOKEN}" for h in seen)
