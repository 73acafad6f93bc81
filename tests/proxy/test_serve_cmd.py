"""``handoffmon serve`` command line: bad or missing upstream fails fast naming the key."""

from __future__ import annotations

from click.testing import CliRunner

from handoffmon.cli import main


def test_missing_upstream_fails_naming_the_key() -> None:
    """No --upstream and no proxy.upstream: a clear error, non-zero exit, nothing started."""
    result = CliRunner().invoke(main, ["serve"], env={"HANDOFFMON_PROXY__UPSTREAM": ""})
    assert result.exit_code != 0
    assert "proxy.upstream" in result.output


def test_bad_upstream_url_fails_naming_the_key() -> None:
    """--upstream that is not an http(s) URL is rejected before serving."""
    result = CliRunner().invoke(main, ["serve", "--upstream", "router:4000", "--port", "1"])
    assert result.exit_code != 0
    assert "proxy.upstream" in result.output and "router:4000" in result.output
