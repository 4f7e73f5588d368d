"""The ``prefixlint`` command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from prefixlint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip().upper() for value in values for v in value.split(",") if v.strip()]


def _rule_table() -> dict[str, tuple[str, str, bool, str]]:
    """code -> (name, default severity, default-enabled, summary); importing the rules
    themselves (and libcst) waits until a file actually needs linting."""
    from prefixlint.ruletable import RULE_TABLE

    return RULE_TABLE


class _Group(click.Group):
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="prefixlint")
def main() -> None:
    """A checker for vLLM model files: constructor contract, forward signature, prefixes."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Codes or prefixes to enable (e.g. PFX3,PFX101).")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning"]),
    default="warning",
    show_default=True,
    help="Exit 1 when a finding of at least this severity remains.",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the results cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Results cache folder.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: cores).")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="pyproject.toml to use."
)
@click.option(
    "--installed-vllm",
    is_flag=True,
    help="Also check the installed vLLM's model files (found on disk, never imported).",
)
@click.option("--no-source", is_flag=True, help="Text format: no source frame under findings.")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
def check(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    output_format: str,
    fail_on: str,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    config_path: Path | None,
    installed_vllm: bool,
    no_source: bool,
    output: Path | None,
) -> None:
    """Check model files (default: the current folder) and report findings."""
    from prefixlint.config import ConfigError, load_config, select_codes, validate_selectors
    from prefixlint.diagnostic import Severity
    from prefixlint.discovery import MissingPath, discover, installed_vllm_model_dirs
    from prefixlint.reporters import REPORTERS
    from prefixlint.runner import INTERNAL_ERROR, run_static

    started = time.perf_counter()
    try:
        config = load_config(config_path)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    targets = list(paths)
    if installed_vllm:
        found = installed_vllm_model_dirs()
        if not found:
            raise click.UsageError("--installed-vllm: no vLLM installation found on sys.path")
        targets.extend(found)
    if not targets:
        targets = [Path(".")]
    table = _rule_table()
    selectors = _split(select) or config.select
    ignores = config.ignore + _split(ignore)
    bad = validate_selectors(selectors + ignores, table)
    if bad:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(bad)}")
    codes = select_codes({c: v[2] for c, v in table.items()}, selectors, ignores)
    try:
        files = discover(targets, config)
    except MissingPath as e:
        raise click.UsageError(f"path does not exist: {e}") from None

    result = run_static(
        files, config, codes, jobs=jobs, use_cache=not no_cache, cache_dir=cache_dir
    )
    reporter = REPORTERS[output_format]
    options = {
        "files": result.files,
        "names": {c: v[0] for c, v in table.items()},
        "show_source": not no_source,
        "elapsed": time.perf_counter() - started,
    }
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            reporter(result.diagnostics, fh, options)
    else:
        reporter(result.diagnostics, sys.stdout, options)
    if result.internal_errors:
        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    failing = any(d.severity.rank >= threshold for d in result.diagnostics)
    sys.exit(EXIT_FINDINGS if failing else EXIT_OK)


@main.command()
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
def rules(output_format: str) -> None:
    """List every rule: code, name, default severity, whether it is on by default."""
    import json

    table = _rule_table()
    if output_format == "json":
        click.echo(
            json.dumps(
                [
                    {"code": c, "name": n, "severity": s, "default_enabled": on, "summary": summ}
                    for c, (n, s, on, summ) in table.items()
                ],
                indent=2,
            )
        )
        return
    name_w = max(len(v[0]) for v in table.values())
    click.echo(f"{'code':<7} {'name':<{name_w}} {'severity':<8} {'default':<7} summary")
    for code, (name, severity, on, summary) in table.items():
        click.echo(f"{code:<7} {name:<{name_w}} {severity:<8} {'on' if on else 'off':<7} {summary}")


@main.command()
@click.argument("code")
def rule(code: str) -> None:
    """Show a rule's documentation: what it does, why, example, use instead."""
    from prefixlint.rules import RULES_BY_CODE

    found = RULES_BY_CODE.get(code.strip().upper())
    if found is None:
        by_name = {r.name: r for r in RULES_BY_CODE.values()}
        found = by_name.get(code.strip().lower())
    if found is None:
        raise click.UsageError(f"unknown rule: {code} (see `prefixlint rules`)")
    default = "on" if found.default_enabled else "off (enable with --select)"
    click.echo(f"# {found.name} ({found.code})\n")
    click.echo(f"Default severity: {found.severity.value}. Default: {default}.\n")
    click.echo(found.documentation())


if __name__ == "__main__":
    main()
