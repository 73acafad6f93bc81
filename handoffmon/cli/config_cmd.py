"""``handoffmon config check FILE``: validate a config file and its rules."""

from __future__ import annotations

import sys

import click

from handoffmon.config import load_config
from handoffmon.errors import ConfigError


@click.group()
def config() -> None:
    """Configuration commands."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE (YAML or TOML) and the rules it declares; exit 1 on error."""
    try:
        cfg = load_config(file)
        _check_rules(cfg, file)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(
        f"ok: {file}: store={cfg.store.backend}, {len(cfg.rules)} rule(s), "
        f"depth buckets {', '.join(cfg.buckets.labels)}"
    )


def _check_rules(cfg: object, source: str) -> None:
    """Compile the rules so unknown checkers and bad params fail here (reserved names are
    refused by the config model itself)."""
    try:
        from handoffmon.checkers.rules import RuleSet
    except ImportError:  # checkers not installed in this build yet
        return
    RuleSet.from_config(cfg.rules, source=source)  # type: ignore[attr-defined]
