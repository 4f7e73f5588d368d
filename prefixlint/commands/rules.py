"""``prefixlint rules`` (the catalog) and ``prefixlint rule CODE`` (one code's page)."""

from __future__ import annotations

import click


@click.command()
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text")
def rules(output_format: str) -> None:
    """List every code of every phase: name, default severity, default state, phase, fixable."""
    import json

    from prefixlint.codes import CODES

    if output_format == "json":
        rows = [
            {
                "code": c.code,
                "name": c.name,
                "severity": c.severity.value,
                "default_enabled": c.default_enabled,
                "phase": c.phase,
                "fixable": c.fixable,
                "summary": c.summary,
                "url": c.url,
            }
            for c in CODES.values()
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    name_w = max(len(c.name) for c in CODES.values())
    click.echo(
        f"{'code':<7} {'name':<{name_w}} {'severity':<8} {'default':<7} {'phase':<10} "
        f"{'fix':<3} summary"
    )
    for c in CODES.values():
        on = "on" if c.default_enabled else "off"
        fix = "yes" if c.fixable else ""
        click.echo(
            f"{c.code:<7} {c.name:<{name_w}} {c.severity.value:<8} {on:<7} {c.phase:<10} "
            f"{fix:<3} {c.summary}"
        )


@click.command()
@click.argument("code")
def rule(code: str) -> None:
    """Show a code's documentation: what it does, why, example, use instead."""
    from prefixlint.codes import CODES

    key = code.strip()
    found = CODES.get(key.upper()) or next(
        (c for c in CODES.values() if c.name == key.lower()), None
    )
    if found is None:
        raise click.UsageError(f"unknown rule: {code} (see `prefixlint rules`)")
    default = "on" if found.default_enabled else "off (enable with --select)"
    click.echo(f"# {found.name} ({found.code})\n")
    click.echo(
        f"Phase: {found.phase}. Default severity: {found.severity.value}. Default: {default}."
        + (" Fixable with `--fix`." if found.fixable else "")
        + "\n"
    )
    if found.phase != "static":
        click.echo(f"{found.summary}.\n")
    click.echo(found.documentation())
