"""Config a user gets wrong (or an attacker feeds): every mistake fails at load, naming key and file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.config import config_from_mapping, load_config
from handoffmon.errors import ConfigError


def _load(tmp_path: Path, text: str | bytes, name: str = "h.yaml") -> ConfigError:
    f = tmp_path / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(f, environ={})
    assert str(f) in str(exc.value)
    return exc.value


def test_a_file_that_is_not_utf8_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    """Binary garbage: ConfigError (exit 1 in every command), not a UnicodeDecodeError traceback."""
    err = _load(tmp_path, b"\xb0\x00\xff\xfe garbage \x80")
    assert "not UTF-8" in str(err)


def test_a_key_given_twice_is_refused_not_silently_replaced(tmp_path: Path) -> None:
    """PyYAML keeps the last of two `store:` sections; the first one vanished without a word."""
    err = _load(tmp_path, "store:\n  backend: sqlite\n  path: a.db\nstore:\n  backend: memory\n")
    assert "'store' given twice" in str(err) and "lines 1 and 4" in str(err)
    err = _load(tmp_path, "rules:\n  - {name: r, check: length, params: {unit: words, max: 3, max: 4}}\n")
    assert "'max' given twice" in str(err)


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    """`<<: *base` then a key of its own is YAML's override, not a duplicate."""
    f = tmp_path / "h.yaml"
    f.write_text(
        "rules:\n  - &base {name: a, check: length, params: {unit: words, max: 3}}\n"
        "  - <<: *base\n    name: b\n"
    )
    assert [r.name for r in load_config(f, environ={}).rules] == ["a", "b"]


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_infinite_and_nan_numbers_are_refused(tmp_path: Path, value: str) -> None:
    """`ttl_s: .inf` was accepted (NaN failed only by luck of the comparison, with a wrong reason)."""
    err = _load(tmp_path, f"store:\n  ttl_s: {value}\n")
    assert err.key == "store.ttl_s" and "finite" in str(err)


def test_infinity_from_the_environment_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(None, environ={"HANDOFFMON_REFIT__INTERVAL_S": "Infinity"})
    assert exc.value.key == "refit.interval_s" and "HANDOFFMON_REFIT__INTERVAL_S" in str(exc.value)


@pytest.mark.parametrize(
    ("section", "key"), [("pipeline", "workers"), ("store", "ttl_s"), ("scope", "min_depth")]
)
def test_a_boolean_is_not_a_number(tmp_path: Path, section: str, key: str) -> None:
    """`workers: true` became 1 worker, `ttl_s: yes` a TTL of 1 second."""
    if section == "scope":
        text = f"rules:\n  - name: r\n    check: no_commas\n    scope:\n      {key}: true\n"
        want = f"rules['r'].scope.{key}"
    else:
        text = f"{section}:\n  {key}: true\n"
        want = f"{section}.{key}"
    err = _load(tmp_path, text)
    assert err.key == want and "expected a number, got true" in str(err)


def test_booleans_still_set_boolean_keys(tmp_path: Path) -> None:
    f = tmp_path / "h.yaml"
    f.write_text("telemetry:\n  prometheus: false\n  log_turns: no\n")
    cfg = load_config(f, environ={"HANDOFFMON_TELEMETRY__EXEMPLARS": "true"})
    assert not cfg.telemetry.prometheus and not cfg.telemetry.log_turns and cfg.telemetry.exemplars


def test_a_scope_whose_depth_range_is_empty_is_refused(tmp_path: Path) -> None:
    """min_depth 5, max_depth 2: the rule never applies, and nothing said so."""
    err = _load(tmp_path, "rules:\n  - {name: r, check: no_commas, scope: {min_depth: 5, max_depth: 2}}\n")
    assert err.key == "rules['r'].scope" and "below min_depth" in str(err)
    ok = config_from_mapping(
        {"rules": [{"name": "r", "check": "no_commas", "scope": {"min_depth": 3, "max_depth": 3}}]}
    )
    assert ok.rules[0].scope.max_depth == 3


@pytest.mark.parametrize("name", [" short", "short ", "a\nb", "tab\there"])
def test_rule_names_with_edge_whitespace_or_control_characters_are_refused(name: str) -> None:
    """' short' and 'short' were two rules exporting near-identical labels; a newline broke log lines."""
    with pytest.raises(ConfigError) as exc:
        config_from_mapping({"rules": [{"name": name, "check": "no_commas"}]}, source="h.yaml")
    assert exc.value.key == "rules" and repr(name) in str(exc.value) and "h.yaml" in str(exc.value)


def test_thread_counts_are_bounded() -> None:
    """`workers: 100000` would start 100,000 threads at start."""
    for section, key in (("pipeline", "workers"), ("shadow", "max_concurrency")):
        with pytest.raises(ConfigError) as exc:
            config_from_mapping({section: {key: 100_000}})
        assert exc.value.key == f"{section}.{key}"


def test_config_check_fails_on_a_typoed_environment_section(tmp_path: Path) -> None:
    """A monitor warns and ignores HANDOFFMON_STOER__BACKEND; `config check` is where it must fail."""
    f = tmp_path / "h.yaml"
    f.write_text("")
    res = CliRunner().invoke(main, ["config", "check", str(f)], env={"HANDOFFMON_STOER__BACKEND": "sqlite"})
    assert res.exit_code == 1, res.output
    assert "HANDOFFMON_STOER__BACKEND" in res.stderr and "did you mean 'store'" in res.stderr


def test_config_check_names_the_environment_when_it_set_a_bad_rule(tmp_path: Path) -> None:
    f = tmp_path / "h.yaml"
    f.write_text("")
    rules = '[{"name": "r", "check": "length", "params": {"unit": "words", "max": -1}}]'
    res = CliRunner().invoke(main, ["config", "check", str(f)], env={"HANDOFFMON_RULES": rules})
    assert res.exit_code == 1
    assert "HANDOFFMON_* environment" in res.stderr and "rules['r'].params.max" in res.stderr


@pytest.mark.parametrize("what", ["binary", "missing"])
def test_config_check_on_unreadable_files_exits_1_without_a_traceback(tmp_path: Path, what: str) -> None:
    f = tmp_path / "h.yaml"
    if what == "binary":
        f.write_bytes(b"\xb0\xff\x00")
    res = CliRunner().invoke(main, ["config", "check", str(f)])
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.parametrize("token", ["s3cret\n", " s3cret", "   ", "a\tb"])
def test_a_metrics_token_no_header_can_carry_is_refused(token: str) -> None:
    """A secret file's trailing newline made every scrape 401; a blank token looked set."""
    with pytest.raises(ConfigError) as exc:
        load_config(None, environ={"HANDOFFMON_TELEMETRY__METRICS_TOKEN": token})
    assert exc.value.key == "telemetry.metrics_token" and "HANDOFFMON_TELEMETRY__METRICS_TOKEN" in str(
        exc.value
    )
    assert load_config(
        None, environ={"HANDOFFMON_TELEMETRY__METRICS_TOKEN": "s3cret"}
    ).telemetry.metrics_token


def test_depth_buckets_are_bounded() -> None:
    """depth_buckets: [1..10000] made every depth its own label value of every per-model series."""
    with pytest.raises(ConfigError) as exc:
        config_from_mapping({"depth_buckets": list(range(1, 10_001))}, source="h.yaml")
    assert exc.value.key == "depth_buckets" and "64" in str(exc.value)
    assert len(config_from_mapping({"depth_buckets": list(range(1, 65))}).buckets.labels) == 64


def test_a_variable_nested_below_a_value_is_named() -> None:
    """HANDOFFMON_STORE__BACKEND__X=1 makes store.backend a mapping: the error said only
    "key 'store.backend': Input should be 'memory', 'sqlite' or 'redis'", naming no variable."""
    with pytest.raises(ConfigError) as exc:
        load_config(None, environ={"HANDOFFMON_STORE__BACKEND__X": "1"})
    assert exc.value.key == "store.backend" and "HANDOFFMON_STORE__BACKEND__X" in str(exc.value)


@pytest.mark.parametrize("value", ["0.001", "0.5", "1e-9"])
def test_a_refit_interval_below_one_second_is_refused(tmp_path: Path, value: str) -> None:
    """``refit.interval_s: 0.001`` spun the refit loop (a refit of 50 models takes ~0.4 s of
    CPU): any non-zero interval under 1 s is refused naming the key and the file (or the
    variable); 0 (off) and 1 are accepted."""
    err = _load(tmp_path, f"refit:\n  interval_s: {value}\n")
    assert err.key == "refit.interval_s" and "minimum of 1 s" in str(err) and "set 0" in str(err)
    with pytest.raises(ConfigError, match=r"refit\.interval_s.*HANDOFFMON_REFIT__INTERVAL_S"):
        load_config(None, environ={"HANDOFFMON_REFIT__INTERVAL_S": value})
    assert config_from_mapping({"refit": {"interval_s": 0}}).refit.interval_s == 0
    assert config_from_mapping({"refit": {"interval_s": 1}}).refit.interval_s == 1


@pytest.mark.parametrize("path", ['":memory:"', '""', '"  "'])
def test_a_store_path_that_is_no_file_is_refused(tmp_path: Path, path: str) -> None:
    """``store.path: ":memory:"`` (or empty) gave each of the pipeline's threads its own empty
    database: every call but the first thread's failed ("no such table"), the monitor failing
    open for ever. Refused at load, naming the key and the file."""
    err = _load(tmp_path, f"store:\n  backend: sqlite\n  path: {path}\n")
    assert err.key == "store.path" and "backend: memory" in str(err)


def test_a_ttl_redis_cannot_store_is_refused(tmp_path: Path) -> None:
    """``store.ttl_s: 1e16`` loaded, and Redis then refused every write ("invalid expire time"):
    at most 100 years, refused at load naming the key and the file."""
    err = _load(tmp_path, "store:\n  ttl_s: 1.0e16\n")
    assert err.key == "store.ttl_s" and "3153600000" in str(err)
    assert config_from_mapping({"store": {"ttl_s": 3_153_600_000}}).store.ttl_s == 3_153_600_000


def test_a_total_key_cap_below_one_conversations_cap_is_refused(tmp_path: Path) -> None:
    """``store.max_keys`` below ``store.max_keys_per_conversation``: one conversation could
    outgrow the whole store; refused naming the section and the file."""
    err = _load(tmp_path, "store:\n  max_keys: 10\n  max_keys_per_conversation: 20\n")
    assert err.key == "store" and "max_keys (10)" in str(err)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("htp://127.0.0.1:6379/0", "scheme"),
        ("127.0.0.1:6379", "scheme"),
        ("''", "scheme"),
        ("redis://127.0.0.1:notaport/0", "port"),
        ("redis://127.0.0.1:99999/0", "port"),
        ("redis://:s3cret@127.0.0.1:6379/abc", "database"),
        ("redis://127.0.0.1:6379/1/2", "database"),
        ("redis://127.0.0.1:6379/-1", "database"),
        ("redis://127.0.0.1:6379/0?db=x", "database"),
        ("unix://", "socket"),
    ],
)
def test_a_malformed_redis_url_is_refused_at_load(tmp_path: Path, url: str, why: str) -> None:
    """A malformed ``store.url`` loaded (``config check`` said ok) and failed only when the
    runtime was built; worse, a database path that is no number (``/abc``, a letter O for a 0)
    was silently database 0 and ``/1/2`` database 12 (redis-py drops what it cannot read), so
    the monitor shared another environment's keys. Refused at load naming the key and the file,
    without echoing the URL (it may hold a password)."""
    err = _load(tmp_path, f"store:\n  backend: redis\n  url: {url}\n")
    assert err.key == "store.url" and why in str(err)
    assert "s3cret" not in str(err)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1",
        "REDIS://h:1/15",
        "redis://user:p%40ss@h:6379/2",
        "rediss://h:6380/",
        "redis://h/0?db=3",
        "unix:///run/redis.sock?db=1",
    ],
)
def test_well_formed_redis_urls_still_load(url: str) -> None:
    assert config_from_mapping({"store": {"backend": "redis", "url": url}}).store.url == url


def test_the_redis_url_is_not_checked_for_another_backend() -> None:
    """``store.url`` is read by the Redis backend only: a leftover value under ``memory`` (an
    environment-wide ``HANDOFFMON_STORE__URL``) does not stop a process that never uses it."""
    assert config_from_mapping({"store": {"backend": "memory", "url": "nope"}}).store.backend == "memory"


@pytest.mark.parametrize("header", ['""', '"x-conversation-id "', '"x conv"', '"x-conv:id"', '"x-conv\\n"'])
def test_a_conversation_header_no_request_can_carry_is_refused(tmp_path: Path, header: str) -> None:
    """``conversation_header: "x-conversation-id "`` (a trailing space pasted along) loaded, and no
    request header ever matched it: every conversation silently got a derived id (identical
    openings merge, ids change when the caller's would not). An empty name, whitespace, ``:``
    or a control character can be no HTTP header name: refused naming the key and the file."""
    err = _load(tmp_path, f"attribution:\n  conversation_header: {header}\n")
    assert err.key == "attribution.conversation_header" and "HTTP header name" in str(err)


def test_header_names_any_case_and_token_characters_still_load() -> None:
    for header in ("X-Conversation-Id", "x_session", "conv.id~1"):
        cfg = config_from_mapping({"attribution": {"conversation_header": header}})
        assert cfg.attribution.conversation_header == header


def test_a_variable_with_one_underscore_before_a_key_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``HANDOFFMON_STORE_BACKEND=redis`` (one ``_`` where sections and keys take ``__``; the
    compose file's own host-side variable has that name) was ignored without a word: the
    monitor ran on the memory store. Still not read (it is no config variable), but warned
    about with the variable meant; names that are no section's key are left alone."""
    env = {
        "HANDOFFMON_STORE_BACKEND": "redis",
        "HANDOFFMON_REQUEST_RULES_MAX_NAMES": "3",
        "HANDOFFMON_METRICS_TOKEN": "x",  # no section's key: another tool's variable
        "HANDOFFMON_STORE_BACKEDN": "redis",  # not a key: not guessed at
        "HANDOFFMON_SOAK_S": "6",
    }
    with caplog.at_level("WARNING", logger="handoffmon.config"):
        cfg = load_config(None, environ=env)
    assert cfg.store.backend == "memory" and cfg.request_rules.max_names == 256
    assert sorted(r.getMessage() for r in caplog.records) == [
        "HANDOFFMON_REQUEST_RULES_MAX_NAMES is not read: sections and keys are separated by '__' "
        "(did you mean HANDOFFMON_REQUEST_RULES__MAX_NAMES?)",
        "HANDOFFMON_STORE_BACKEND is not read: sections and keys are separated by '__' "
        "(did you mean HANDOFFMON_STORE__BACKEND?)",
    ]


def test_config_check_warns_about_a_variable_with_one_underscore(tmp_path: Path) -> None:
    """A warning, exit 0: the compose workflow exports HANDOFFMON_STORE_BACKEND on the host for
    compose to pass on as HANDOFFMON_STORE__BACKEND, and a check in that shell must not fail."""
    f = tmp_path / "h.yaml"
    f.write_text("rules:\n  - {name: r, check: no_commas}\n")
    res = CliRunner().invoke(main, ["config", "check", str(f)], env={"HANDOFFMON_STORE_BACKEND": "redis"})
    assert res.exit_code == 0, res.output
    assert res.stderr.count("HANDOFFMON_STORE_BACKEND is not read") == 1  # not the log line too
    assert "warning: HANDOFFMON_STORE_BACKEND is not read" in res.stderr
    assert "HANDOFFMON_STORE__BACKEND?" in res.stderr


def _duration_keys() -> list[str]:
    """Every float setting in seconds (``…_s``), as ``section.key``."""
    from handoffmon.config import HandoffmonConfig

    keys = []
    for section, field in HandoffmonConfig.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and hasattr(model, "model_fields")):
            continue
        for key, sub in model.model_fields.items():
            if key.endswith("_s") and "float" in str(sub.annotation):
                keys.append(f"{section}.{key}")
    return keys


@pytest.mark.parametrize("dotted", _duration_keys())
def test_a_duration_past_100_years_is_refused(dotted: str) -> None:
    """``pipeline.shutdown_timeout_s: 1e12`` loaded, then ``close()`` (and the exit hook) raised
    OverflowError from a thread wait; ``refit.interval_s: 1e12`` killed the refit thread with
    a traceback; ``store.timeout_s: 1e12`` failed every Redis call (the socket timeout
    overflowed) while the start said the store "does not answer". Python's waits take at most
    ~292 years: every duration is capped at 100 years (as ``store.ttl_s`` was), naming the key."""
    section, key = dotted.split(".")
    with pytest.raises(ConfigError) as exc:
        config_from_mapping({section: {key: 1e12}})
    assert exc.value.key == dotted and "3153600000" in str(exc.value)


@pytest.mark.parametrize("query", ["socket_timeout=30", "socket_connect_timeout=30"])
def test_a_timeout_in_the_redis_url_is_refused_for_store_timeout_s(tmp_path: Path, query: str) -> None:
    """redis-py lets the URL's ``?socket_timeout=30`` override ``store.timeout_s`` (measured: the
    client waited 30 s, not 0.05): a hung Redis then held the attribution thread 30 s per
    call. Refused at load, naming ``store.url`` and the key to use instead."""
    err = _load(tmp_path, f"store:\n  backend: redis\n  url: redis://127.0.0.1:6379/0?{query}\n")
    assert err.key == "store.url" and "store.timeout_s" in str(err)
