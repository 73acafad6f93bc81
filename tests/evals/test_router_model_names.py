"""A --model / --models that the --router config cannot route is refused before any call (audit 2026-12-07).

``eval run --router router.yaml --model general`` against a router whose groups are ``chat`` and
``chat-backup`` (the feedback-loop guide's command on the shipped template) made every call,
retried each (50 runs, 150 retried calls, 28 s of LiteLLM error dumps) and exited 5, "rerun to
resume", as if a provider had failed. The router's own lookup (groups, aliases, wildcards,
deployment ids and litellm model names all route) now decides before --db or --cache is made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from tests.evals.test_eval_scope import SCRIPT


def _script(tmp_path: Path) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")  # 3 runs of 2 turns
    return str(path)


def _router(tmp_path: Path) -> str:
    def dep(name: str, model: str, reply: str) -> dict:
        return {"model_name": name, "litellm_params": {"model": model, "mock_response": reply}}

    path = tmp_path / "router.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    dep("chat", "openai/gpt-4o-mini", "hola amigo"),
                    dep("chat-backup", "anthropic/claude-3-5-haiku-latest", "hola"),
                    dep("mistral/*", "mistral/*", "bonjour"),
                ],
                "router_settings": {"model_group_alias": {"assistant": "chat"}},
            }
        ),
        encoding="utf-8",
    )
    return str(path)


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["eval", *args, "--no-progress"])
    return res.exit_code, res.output


def test_eval_run_refuses_a_model_the_router_has_no_route_for(tmp_path: Path) -> None:
    script, router = _script(tmp_path), _router(tmp_path)
    db, out = tmp_path / "e.sqlite", tmp_path / "eval.json"
    files = ["--db", str(db), "--out", str(out)]
    code, text = _run(tmp_path, "run", script, "--router", router, "--model", "general", *files)
    assert code == 1, text
    # the error is the command's own line; LiteLLM may log warnings of its own before it (in one
    # test process, the callbacks earlier tests' Routers left past its MAX_CALLBACKS)
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: {router}: key '--model': 'general' is no model group of the router"
        " (groups: assistant, chat, chat-backup, mistral/*), nor an alias, wildcard, deployment id"
        " or deployment model of it"
    ], text
    assert "chat, chat-backup, mistral/*" in text and "retried" not in text, text
    assert not db.exists() and not out.exists()
    for name in ("chat", "assistant", "mistral/mistral-small", "openai/gpt-4o-mini"):
        code, text = _run(tmp_path, "run", script, "--router", router, "--model", name, *files)
        assert code == 0 and ", 0 retried call(s), 0 failed run(s)" in text, (name, text)


def test_switch_matrix_refuses_a_model_the_router_has_no_route_for(tmp_path: Path) -> None:
    script, router = _script(tmp_path), _router(tmp_path)
    cache, out = tmp_path / "cache", tmp_path / "m.json"
    args = ["switch-matrix", script, "--router", router, "--cache", str(cache), "--out", str(out)]
    code, text = _run(tmp_path, *args, "--models", "chat,experimental")
    assert code == 1, text
    assert f"{router}: key '--model': 'experimental' is no model group of the router" in text, text
    assert not cache.exists() and not out.exists()


def test_a_provider_without_seed_is_evaluated_and_one_with_seed_still_gets_it(tmp_path: Path) -> None:
    """Every eval call sends the run's ``seed``; Anthropic refuses it (UnsupportedParamsError), so the
    shipped template's ``chat-backup`` group (and ``chat``'s fallback to it) failed every call: exit 5
    after 3 retries per run. Calls now let litellm drop a parameter the provider does not take, and
    a provider that takes it still receives the seed."""
    import asyncio

    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    from handoffmon.evals.models import RouterResponder, router_from_config

    script, router = _script(tmp_path), _router(tmp_path)
    db = ["--db", str(tmp_path / "e.sqlite")]
    code, text = _run(tmp_path, "run", script, "--router", router, "--model", "chat-backup", *db)
    assert code == 0, text
    assert "6 turn(s) generated, 0 resumed, 0 retried call(s), 0 failed run(s)" in text, text
    assert "answered by chat-backup -> anthropic/claude-3-5-haiku-latest" in text, text

    seen: list[tuple[str, object]] = []

    class Sent(CustomLogger):  # type: ignore[misc]
        def log_pre_api_call(self, model: str, messages: object, kwargs: dict) -> None:
            seen.append((model, (kwargs.get("optional_params") or {}).get("seed")))

    async def call() -> None:
        await RouterResponder(router_from_config(router))("chat", [{"role": "user", "content": "hi"}], seed=7)

    before = list(litellm.callbacks)
    litellm.callbacks = [*before, Sent()]
    try:
        asyncio.run(call())
    finally:
        litellm.callbacks = before
    assert ("gpt-4o-mini", 7) in seen, seen


def test_a_lookup_that_fails_otherwise_lets_the_name_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check uses litellm's own lookup; if that breaks in another way (another litellm), the
    name is let through and the first call reports what is wrong, instead of a traceback here."""
    from handoffmon.evals.models import router_from_config, router_group_of

    router = router_from_config(_router(tmp_path))

    def broken(**_: object) -> None:
        raise RuntimeError("lookup changed")

    monkeypatch.setattr(router, "_common_checks_available_deployment", broken)
    assert router_group_of(router, "router.yaml")("general") == "general"


def test_switch_matrix_summary_pairs_each_requested_model_with_its_author(tmp_path: Path) -> None:
    """The summary said '2 models answered by anthropic/…, openai/…' in sorted order, not the
    order of --models, so which author answered which group was left to guess."""
    script, router = _script(tmp_path), _router(tmp_path)
    args = ["switch-matrix", script, "--router", router, "--cache", str(tmp_path / "c"), "--min-n", "2"]
    code, text = _run(tmp_path, *args, "--models", "chat,chat-backup", "--out", str(tmp_path / "m.json"))
    assert code == 0, text
    summary = "switch matrix: chat -> openai/gpt-4o-mini, chat-backup -> anthropic/claude-3-5-haiku-latest; "
    assert summary in text, text
