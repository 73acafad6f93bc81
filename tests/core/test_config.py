"""Config loading: YAML/TOML, env overrides, errors naming key and file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.config import load_config
from handoffmon.errors import ConfigError


def test_defaults_without_file() -> None:
    cfg = load_config(None, environ={})
    assert cfg.store.backend == "memory"
    assert cfg.buckets.labels[-1] == "97+"


def test_yaml_and_env_override(tmp_path: Path) -> None:
    f = tmp_path / "h.yaml"
    f.write_text("store:\n  backend: sqlite\n  path: x.db\npipeline:\n  queue_size: 7\n")
    cfg = load_config(f, environ={"HANDOFFMON_PIPELINE__QUEUE_SIZE": "9"})
    assert cfg.store.backend == "sqlite"
    assert cfg.store.path == "x.db"
    assert cfg.pipeline.queue_size == 9


def test_toml(tmp_path: Path) -> None:
    f = tmp_path / "h.toml"
    f.write_text('depth_buckets = [1, 3, 10]\n[store]\nbackend = "memory"\n')
    assert load_config(f, environ={}).buckets.labels == ("1-2", "3-9", "10+")


def test_error_names_key_and_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("store:\n  backend: mongo\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f, environ={})
    assert "store.backend" in str(exc.value)
    assert str(f) in str(exc.value)


@pytest.mark.parametrize("name", ["all", "other", "None", "UNKNOWN", "total"])
def test_reserved_rule_names_are_refused_naming_the_key(tmp_path: Path, name: str) -> None:
    """A configured rule may not be called like the pooled fit or the cap's bucket (any case)."""
    f = tmp_path / "bad.yaml"
    f.write_text(f"rules:\n  - name: ok\n    check: no_commas\n  - name: {name}\n    check: no_commas\n")
    with pytest.raises(ConfigError, match="reserved") as exc:
        load_config(f, environ={})
    assert "rules" in str(exc.value) and str(f) in str(exc.value)


def test_unknown_key_rejected(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("pipeline:\n  queue_sise: 3\n")
    with pytest.raises(ConfigError, match=r"pipeline\.queue_sise"):
        load_config(f, environ={})


def test_rule_error_names_rule(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("rules:\n  - name: grams\n    check: regex\n    scope:\n      min_depth: 0\n")
    with pytest.raises(ConfigError, match=r"rules\['grams'\]\.scope\.min_depth"):
        load_config(f, environ={})


def test_unparseable_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("store: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        load_config(f, environ={})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_config_check_command(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("store:\n  backend: memory\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("store:\n  ttl_s: -1\n")
    runner = CliRunner()
    ok = runner.invoke(main, ["config", "check", str(good)])
    assert ok.exit_code == 0, ok.output
    assert "ok:" in ok.output
    fail = runner.invoke(main, ["config", "check", str(bad)])
    assert fail.exit_code == 1
    assert "store.ttl_s" in fail.output


def test_env_reads_only_config_sections(tmp_path: Path) -> None:
    """HANDOFFMON_* variables that name no config section are ignored; typos inside a
    known section still fail naming the key."""
    cfg = load_config(None, environ={"HANDOFFMON_SOAK_S": "60", "HANDOFFMON_STORE__TTL_S": "5"})
    assert cfg.store.ttl_s == 5
    with pytest.raises(ConfigError, match=r"store\.backedn"):
        load_config(None, environ={"HANDOFFMON_STORE__BACKEDN": "sqlite"})


BAD_PARAMS = "rules:\n  - {name: lang, check: language}\n"
"""Valid for the config schema; the ``language`` checker itself requires ``languages``."""


def test_a_rule_param_error_found_at_monitor_start_names_the_file(tmp_path: Path) -> None:
    """Checker parameters are validated when the rules compile (``Monitor``, ``build_runtime``),
    after the schema: that error names the file and the key too, and the environment when it
    overrides the file."""
    from handoffmon import Monitor
    from handoffmon.runtime import build_runtime

    f = tmp_path / "h.yaml"
    f.write_text(BAD_PARAMS)
    key = "rules['lang'].params.languages"
    cfg = load_config(f, environ={})
    assert cfg.source == str(f)
    with pytest.raises(ConfigError) as exc:
        Monitor(cfg, start=False)
    assert exc.value.source == str(f) and exc.value.key == key, str(exc.value)
    with pytest.raises(ConfigError) as exc:
        build_runtime(
            load_config(f, environ={"HANDOFFMON_PIPELINE__QUEUE_SIZE": "9"}), registry=None, start=False
        )
    assert str(exc.value).startswith(f'{f} + HANDOFFMON_* environment: key "{key}"'), str(exc.value)


def test_serve_with_a_rule_param_error_exits_naming_the_file_and_key(tmp_path: Path) -> None:
    """``handoffmon serve`` fails before listening, with the file and the rule's key, not ``<config>``."""
    f = tmp_path / "h.yaml"
    f.write_text(BAD_PARAMS)
    res = CliRunner().invoke(main, ["serve", "--config", str(f), "--upstream", "http://127.0.0.1:9"])
    assert res.exit_code == 1, res.output
    assert str(f) in res.stderr and "rules['lang'].params.languages" in res.stderr, res.stderr
    assert "<config>" not in res.stderr
    assert "handoffmon serve: http" not in res.stderr  # no listening banner before a failed start


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("HANDOFFMON_TELEMETRY__METRICS_TOKEN", "12345678", ("telemetry", "metrics_token")),
        ("HANDOFFMON_TELEMETRY__METRICS_TOKEN", "true", ("telemetry", "metrics_token")),
        ("HANDOFFMON_STORE__PATH", "2024", ("store", "path")),
        ("HANDOFFMON_RULE_STATE__HASH_KEY", "1234567890123456789012", ("rule_state", "hash_key")),
        ("HANDOFFMON_STORE__KEY_PREFIX", "null", ("store", "key_prefix")),
    ],
)
def test_env_text_keys_keep_the_variables_text(name: str, value: str, key: tuple[str, str]) -> None:
    """A string-typed key takes the variable as text: a token of digits, "true", a path "2024"
    are not parsed as JSON (which failed with "Input should be a valid string")."""
    cfg = load_config(None, environ={name: value})
    assert getattr(getattr(cfg, key[0]), key[1]) == value


def test_env_non_text_keys_parse_json_and_errors_name_the_variable() -> None:
    """Numbers, booleans and lists are JSON; a bad value names the variable that set it, and a
    list given as plain text says how to write it."""
    cfg = load_config(
        None,
        environ={
            "HANDOFFMON_STORE__TTL_S": "5",
            "HANDOFFMON_SHADOW__DRY_RUN": "true",
            "HANDOFFMON_SHADOW__TARGETS": '["a","b"]',
        },
    )
    assert cfg.store.ttl_s == 5 and cfg.shadow.dry_run is True and cfg.shadow.targets == ["a", "b"]
    with pytest.raises(ConfigError, match=r"store\.ttl_s.*\(set by HANDOFFMON_STORE__TTL_S\)"):
        load_config(None, environ={"HANDOFFMON_STORE__TTL_S": "soon"})
    with pytest.raises(ConfigError) as exc:
        load_config(None, environ={"HANDOFFMON_SHADOW__TARGETS": "a"})
    assert 'HANDOFFMON_SHADOW__TARGETS takes JSON, e.g. HANDOFFMON_SHADOW__TARGETS=\'["a","b"]\'' in str(
        exc.value
    )


def test_unknown_key_suggests_the_closest_one(tmp_path: Path) -> None:
    """A typo is "unknown key" with the closest key of its section (not pydantic's "Extra inputs
    are not permitted"), in a file, a rule, or a variable (which is named)."""
    f = tmp_path / "bad.yaml"
    f.write_text("store:\n  backnd: sqlite\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f, environ={})
    assert str(exc.value) == f"{f}: key 'store.backnd': unknown key (did you mean 'backend'?)"
    f.write_text("rules:\n  - name: r\n    check: no_commas\n    scpe: {}\n")
    with pytest.raises(ConfigError, match=r"rules\['r'\]\.scpe\": unknown key \(did you mean 'scope'\?\)"):
        load_config(f, environ={})
    with pytest.raises(ConfigError, match=r"'backend'\?\) \(set by HANDOFFMON_STORE__BACKEDN\)"):
        load_config(None, environ={"HANDOFFMON_STORE__BACKEDN": "sqlite"})


def test_a_variable_naming_no_section_is_not_read_and_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """HANDOFFMON_STOER__BACKEND (a typo'd section) is ignored, as before, but no longer silently;
    variables without `__` (a test's HANDOFFMON_SOAK_S) are not config-shaped and not warned about."""
    with caplog.at_level("WARNING", logger="handoffmon.config"):
        cfg = load_config(None, environ={"HANDOFFMON_STOER__BACKEND": "sqlite", "HANDOFFMON_SOAK_S": "6"})
    assert cfg.store.backend == "memory"
    assert [r.getMessage() for r in caplog.records] == [
        "HANDOFFMON_STOER__BACKEND is not read: no config section 'stoer' (did you mean 'store'?)"
    ]


def test_routing_without_a_periodic_refit_is_refused_naming_both_keys_and_the_file(tmp_path: Path) -> None:
    """``routing.enabled: true`` with ``refit.interval_s: 0`` never got a table (every decision
    ``no_table``, the router's order for ever) and loaded silently; now load fails naming both
    keys, the file, and a variable that set one. A config built in Python may publish a table
    itself (``runtime.routing.holder``), so the model still takes it."""
    from handoffmon.config import HandoffmonConfig, config_from_mapping

    f = tmp_path / "h.yaml"
    f.write_text("routing:\n  enabled: true\nrefit:\n  interval_s: 0\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f, environ={})
    msg = str(exc.value)
    assert exc.value.key == "routing.enabled" and exc.value.source == str(f), msg
    assert "refit.interval_s is 0" in msg and "no_table" in msg
    f.write_text("routing:\n  enabled: true\n")
    with pytest.raises(ConfigError, match=r"refit.interval_s is 0 \(set by HANDOFFMON_REFIT__INTERVAL_S\)"):
        load_config(f, environ={"HANDOFFMON_REFIT__INTERVAL_S": "0"})
    assert load_config(f, environ={}).refit.interval_s == 300  # the default refit publishes one
    f.write_text("refit:\n  interval_s: 0\n")
    with pytest.raises(ConfigError, match=r"routing.enabled is true \(set by HANDOFFMON_ROUTING__ENABLED\)"):
        load_config(f, environ={"HANDOFFMON_ROUTING__ENABLED": "true"})
    assert not load_config(f, environ={}).routing.enabled
    data = {"routing": {"enabled": True}, "refit": {"interval_s": 0}}
    assert config_from_mapping(data).routing.enabled and HandoffmonConfig.model_validate(data).routing.enabled
    f.write_text("routing:\n  enabled: true\nrefit:\n  interval_s: 0\n")
    result = CliRunner().invoke(main, ["config", "check", str(f)])
    assert result.exit_code == 1 and "routing.enabled" in result.output and str(f) in result.output
