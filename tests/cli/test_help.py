"""Every command's --help says what each of its options does."""

from __future__ import annotations

import click

from handoffmon.cli import main


def _options_without_help(cmd: click.Command, path: tuple[str, ...]) -> list[str]:
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        out = []
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            out += _options_without_help(sub, (*path, name))
        return out
    return [
        f"{' '.join(path)} {p.opts[0]}"
        for p in cmd.params
        if isinstance(p, click.Option) and not p.help and p.name != "help"
    ]


def test_every_option_of_every_command_has_a_help_text() -> None:
    """18 options (eval compare --alpha/--min-gap/--min-share/--shapes, stats switch-matrix
    --ridge, ifeval --mode, ...) showed in --help and the CLI reference with no description."""
    assert _options_without_help(main, ("handoffmon",)) == []
