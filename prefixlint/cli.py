"""The ``prefixlint`` command line: the group. Each command lives in its own module under
``prefixlint/commands/`` (``smoke`` in ``prefixlint/smoke/cli.py``), imported only when it
runs, so a one-file ``check`` (the pre-commit case) loads neither phase 2's nor phase 3's
command code."""

from __future__ import annotations

import importlib
import sys

import click

from prefixlint import __version__
from prefixlint.commands.common import EXIT_ERROR

# command -> (module, attribute)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("prefixlint.commands.check", "check"),
    "introspect": ("prefixlint.commands.introspect", "introspect"),
    "review": ("prefixlint.commands.review", "review"),
    "rule": ("prefixlint.commands.rules", "rule"),
    "rules": ("prefixlint.commands.rules", "rules"),
    "smoke": ("prefixlint.smoke.cli", "smoke"),
    "warm": ("prefixlint.commands.warm", "warm"),
    "zoo": ("prefixlint.commands.zoo", "zoo"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, attr = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except (click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_ERROR)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="prefixlint")
def main() -> None:
    """A checker for vLLM model files: constructor contract, forward signature, prefixes."""


if __name__ == "__main__":
    main()
