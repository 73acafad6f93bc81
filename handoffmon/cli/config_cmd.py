"""``handoffmon config check FILE``: validate a config file and its rules."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import click

from handoffmon.cli.exits import fail
from handoffmon.config import HandoffmonConfig, load_config, misnamed_env_names, unmatched_env_names
from handoffmon.errors import ConfigError


@click.group()
def config() -> None:
    """Configuration commands."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE (YAML or TOML) and the rules it declares; exit 1 on error.

    Warnings on stderr (exit 0) for a FILE that sets nothing, for a config with no rules, and
    for a HANDOFFMON_<SECTION>_<KEY> variable (one '_' where config variables take '__').
    """
    # ``HANDOFFMON_*`` overrides in the environment are validated with it. A variable shaped like
    # one whose section is no config key (``HANDOFFMON_STOER__BACKEND``) is an error here: a
    # running monitor only warns about it and ignores it, and this check is where a typo must
    # surface.
    try:
        with _quiet_config_log():  # what it would warn about is said below, once, as warning/error
            cfg = load_config(file)
        _check_rules(cfg, cfg.source)  # the source names the environment when it set a rule
    except ConfigError as exc:
        fail(str(exc))
    unread = unmatched_env_names(os.environ)
    if unread:
        fail("; ".join(unread))
    click.echo(
        f"ok: {file}: store={cfg.store.backend}, {len(cfg.rules)} rule(s), "
        f"depth buckets {', '.join(cfg.buckets.labels)}"
    )
    for line in [*_warnings(file, cfg), *misnamed_env_names(os.environ)]:
        click.echo(f"warning: {line}", err=True)


@contextlib.contextmanager
def _quiet_config_log() -> Iterator[None]:
    """Silence ``handoffmon.config``'s warnings about the environment (each was printed twice:
    as a log line, then as this command's warning or error)."""
    log = logging.getLogger("handoffmon.config")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _warnings(file: str, cfg: HandoffmonConfig) -> list[str]:
    """What is valid but probably not meant: a file that sets nothing (a template rendered
    empty, a wrong mount), a monitor with no rule to check."""
    out = []
    if not cfg.model_fields_set:
        out.append(f"{file} sets nothing (empty or null): every setting is its default")
    if not cfg.rules:
        out.append(
            "no rules: turns and handoffs are counted, but only rules requests declare in "
            "metadata.handoffmon.rules are checked"
            if cfg.request_rules.enabled
            else "no rules and request_rules.enabled is false: no turn is ever checked, so there "
            "is no adherence to export or refit"
        )
    return out


def _check_rules(cfg: object, source: str) -> None:
    """Compile the rules so unknown checkers and bad params fail here (reserved names are
    refused by the config model itself)."""
    try:
        from handoffmon.checkers.rules import RuleSet
    except ImportError:  # checkers not installed in this build yet
        return
    RuleSet.from_config(cfg.rules, source=source)  # type: ignore[attr-defined]
