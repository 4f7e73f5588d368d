"""``prefixlint smoke``: the click command; the lead registers it with
``main.add_command(smoke)`` in ``prefixlint/cli.py``."""

from __future__ import annotations

import sys

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
) -> None:
    """Run TARGET in vLLM on random weights and compare greedy tokens (phase 3).

    TARGET is an architecture of the installed vLLM registry (LlamaForCausalLM),
    module:Class, path/to/file.py[:Class], or a model folder (its config.json, and its
    weights when it has them, are used as they are). Checks: PFX801 greedy-mismatch
    (vs transformers), PFX802 batch-dependence, PFX803 chunked-prefill-mismatch, PFX804
    prefix-cache-mismatch, PFX805 tp-mismatch, PFX806 compile-mismatch.
    """
    from prefixlint.reporters import REPORTERS
    from prefixlint.smoke import CHECKS, parse_checks
    from prefixlint.smoke import smoke as run

    try:
        codes = parse_checks(checks)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--checks") from None
    report = run(target, device=device, checks=codes, force=force, timeout=timeout)
    if report.error and not report.checks:
        raise click.UsageError(f"cannot smoke-run {target}: {report.error}")
    # The check table goes to stderr in every format: JSON on stdout stays parseable.
    if report.gate:
        click.echo(f"phase 2: {len(report.gate)} finding(s)", err=True)
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
    diagnostics = report.gate + report.diagnostics if report.blocked else report.diagnostics
    names = {c: n for c, (n, _) in CHECKS.items()}
    REPORTERS[output_format](
        diagnostics, sys.stdout, {"files": 1, "names": names, "show_source": True}
    )
    if report.error:
        sys.exit(EXIT_ERROR)
    failing = report.blocked or any(c.status == "fail" for c in report.checks)
    sys.exit(EXIT_FINDINGS if failing else EXIT_OK)
