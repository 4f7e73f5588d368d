"""``prefixlint smoke``: the click command (``prefixlint/cli.py`` imports it when it runs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@click.command(name="smoke")
@click.argument("target")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto: CUDA when torch sees a GPU, else CPU.",
)
@click.option(
    "--checks",
    help="Comma list of checks (codes or names, e.g. PFX801,batch-dependence); default: all.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.option("--force", is_flag=True, help="Run even when phase 2 reports errors.")
@click.option(
    "--config",
    "config_path",
    help="config.json (or a folder holding one) to build the checkpoint from; default: "
    "[tool.prefixlint.configs] of the closest pyproject, else phase 2's synthesis.",
)
@click.option(
    "--timeout",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds for the whole smoke run (engines included).",
)
def smoke(
    target: str,
    device: str,
    checks: str | None,
    output_format: str,
    force: bool,
    timeout: float,
    config_path: str | None,
) -> None:
    """Run TARGET in vLLM on random weights and compare greedy tokens (phase 3).

    TARGET is an architecture of the installed vLLM registry (LlamaForCausalLM, or one a
    vLLM plugin registers), module:Class, path/to/file.py[:Class], or a model folder (its
    config.json, and its weights when it has them, are used as they are). Checks: PFX801
    greedy-mismatch (vs transformers), PFX802 batch-dependence, PFX803
    chunked-prefill-mismatch, PFX804 prefix-cache-mismatch, PFX805 tp-mismatch, PFX806
    compile-mismatch.
    """
    from prefixlint.progress import Progress
    from prefixlint.smoke import parse_checks
    from prefixlint.smoke import smoke as run

    try:
        codes = parse_checks(checks)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--checks") from None
    if config_path is not None and not Path(config_path).exists():
        raise click.BadParameter(f"{config_path} does not exist", param_hint="--config")
    table, base = _configs_near(target)
    with Progress() as progress:
        report = run(
            target,
            device=device,
            checks=codes,
            force=force,
            timeout=timeout,
            config=config_path,
            configs=table,
            config_base=base,
            progress=progress,
        )
    if report.error and not report.checks:
        raise click.UsageError(f"cannot smoke-run {target}: {report.error}")
    _table(report)
    _verdict(report, output_format)


def _configs_near(target: str) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]`` of the pyproject closest to the target's file (the
    current folder for a registry name), as phase 2 reads it."""
    from prefixlint.config import ConfigError, find_config_file, load_configs_table

    spec = target.split(".py:")[0] + ".py" if ".py:" in target else target
    start = Path(spec).parent if Path(spec).is_file() else Path.cwd()
    try:
        found = find_config_file(start)
        return load_configs_table(found.parent) if found else ({}, None)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def _table(report: Any) -> None:
    """The per-check table, on stderr in every format (JSON on stdout stays parseable)."""
    if report.config_source:
        click.echo(f"config: {report.config_source}", err=True)
    for line in gate_lines(report.gate):
        click.echo(line, err=True)
    if report.blocked:
        click.echo(f"not run: {report.blocked}", err=True)
    for c in report.checks:
        took = f"{c.seconds:6.1f}s" if c.seconds is not None else "      -"
        extra = f"  {c.reason}" if c.reason else ""
        click.echo(f"  {c.code} {c.name:<25} {c.status:<5} {took}{extra}", err=True)
    if report.timings:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in report.timings.items())
        click.echo(f"  timings: {steps}; wall {report.seconds:.1f}s", err=True)
    if report.error:
        click.echo(f"prefixlint smoke: {report.error}", err=True)


def gate_lines(gate: list[Any]) -> list[str]:
    """Phase 2's findings and notes on the smoke target: a count, then each one, so the
    count is what is listed."""
    from prefixlint.diagnostic import Severity

    findings = [d for d in gate if d.severity is not Severity.NOTE]
    notes = [d for d in gate if d.severity is Severity.NOTE]
    lines = []
    for what, items in (("finding(s)", findings), ("not verified (PFX600)", notes)):
        if items:
            lines.append(f"phase 2: {len(items)} {what}")
            lines += [
                f"  {d.filename}:{d.location.row}: {d.code} {' '.join(d.message.split())[:200]}"
                for d in items
            ]
    return lines


def _verdict(report: Any, output_format: str) -> None:
    """Findings on stdout, then the one-line verdict: "passed" only for checks that ran."""
    from prefixlint.commands.common import code_names
    from prefixlint.diagnostic import Severity
    from prefixlint.reporters import REPORTERS

    diagnostics = report.gate + report.diagnostics if report.blocked else report.diagnostics
    names = code_names()  # every code's: phase 2's (a blocked run's gate) and PFX604 too
    if output_format == "json" or diagnostics:
        REPORTERS[output_format](
            diagnostics, sys.stdout, {"files": 1, "names": names, "show_source": True}
        )
    passed = [c.code for c in report.checks if c.status == "pass"]
    unverified = [c for c in report.checks if c.status in ("error", "skip")]
    if output_format == "text" and not diagnostics:
        if passed:
            click.echo(f"Passed: {', '.join(passed)}.")
        if unverified:
            click.echo(
                f"Not verified: {', '.join(c.code for c in unverified)} "
                f"({'; '.join(sorted({c.reason or c.status for c in unverified}))[:500]})."
            )
    if report.error:
        sys.exit(EXIT_ERROR)
    failing = (
        report.blocked
        or any(c.status == "fail" for c in report.checks)
        or any(d.severity is Severity.ERROR for d in report.diagnostics)
    )
    if not failing and any(c.status == "error" for c in report.checks):
        sys.exit(EXIT_ERROR)  # nothing failed, but what should have run did not
    sys.exit(EXIT_FINDINGS if failing else EXIT_OK)
