"""The ``handoffmon`` command; subcommands load lazily so ``--help`` stays fast."""

from __future__ import annotations

import importlib
from typing import Any

import click

from handoffmon._version import __version__
from handoffmon.cli.exits import fail
from handoffmon.errors import MissingExtraError

# name -> "module:attribute" of a click command or group. One line per subcommand.
LAZY_COMMANDS: dict[str, str] = {
    "config": "handoffmon.cli.config_cmd:config",
    "check": "handoffmon.cli.check_cmd:check",
    "ifeval": "handoffmon.cli.ifeval_cmd:ifeval",
    "refit": "handoffmon.cli.refit_cmd:refit",
    "stats": "handoffmon.cli.stats_cmd:stats",
    "serve": "handoffmon.cli.serve_cmd:serve",
    "eval": "handoffmon.cli.eval_cmd:eval_group",
    "shapes": "handoffmon.cli.shapes_cmd:shapes",
    "demo": "handoffmon.cli.demo_cmd:demo",
    "report": "handoffmon.cli.report_cmd:report",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[cmd_name].split(":")
            cmd: Any = getattr(importlib.import_module(module), attr)
            return cmd  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; a missing optional dependency ends it with the pip line to fix it.

        User errors no command caught end as one ``error:`` line and exit 1 (``ExitCode.ERROR``)
        (click's own ``Error:`` of a ``ClickException`` included),
        never a traceback: a file argument that does not exist or is a directory (click's
        ``Path`` check, which would otherwise exit 2, the code kept for usage errors such as a
        missing argument or option), a file
        that is not UTF-8 text, a file or directory the OS refuses.
        """
        try:
            return super().invoke(ctx)
        except MissingExtraError as exc:
            fail(str(exc))
        except click.MissingParameter:
            raise  # a usage error (exit 2) whatever the parameter's type, a FILE one too
        except click.BadParameter as exc:
            if isinstance(getattr(exc.param, "type", None), click.Path):
                fail(exc.format_message())
            raise
        except click.UsageError:
            raise  # click's "Usage: ... Error: ..." and exit 2
        except click.ClickException as exc:  # a command's own error: 'error:' as everywhere else
            fail(exc.format_message())
        except UnicodeDecodeError as exc:
            fail(f"an input file is not UTF-8 text ({exc.reason} at byte {exc.start})")
        except RecursionError:  # json/yaml parsers recurse per nesting level
            fail("an input file is nested too deeply to read (JSON or YAML thousands of levels deep)")
        except BrokenPipeError:
            raise  # click's own handling: the reader went away
        except OSError as exc:
            if exc.filename is None:
                raise
            what = exc.strerror or type(exc).__name__
            fail(f"{exc.filename}: {what}")


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="handoffmon")
def main() -> None:
    """handoffmon: adherence by conversation depth and by model handoff pair."""


if __name__ == "__main__":  # pragma: no cover
    main()
