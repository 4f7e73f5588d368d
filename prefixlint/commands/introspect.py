"""``prefixlint introspect``: phase 2 for one target, with its layout table on stderr."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import click

from prefixlint.commands.checkpoints import (
    CHECKPOINT,
    checkpoints,
    refuse_checkpoint_without_dryrun,
    target_classes,
    usage_error,
)
from prefixlint.commands.common import (
    FORMATS,
    NO_DRYRUN,
    NO_WARM_WORKER,
    STRICT_HELP,
    config_table,
    exit_for,
    int_list,
    report,
)


@click.command()
@click.argument("target")
@click.option(
    "--config", "config_path", help="config.json (or a folder holding one) to build with."
)
@click.option("--tp", default="1,2,4,8", show_default=True, help="Tensor-parallel sizes.")
@click.option("--pp", default="2,4", show_default=True, help="Pipeline sizes (SupportsPP only).")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="text")
@click.option("--fail-on", type=click.Choice(["error", "warning"]), default="warning")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds per build.")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@NO_DRYRUN
@NO_WARM_WORKER
@CHECKPOINT
@click.option(
    "--explore-budget",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds for config variants that build unexecuted construction sites (0: none).",
)
def introspect(
    target: str,
    config_path: str | None,
    tp: str,
    pp: str,
    output_format: str,
    fail_on: str,
    timeout: float,
    strict: bool,
    no_dryrun: bool,
    no_warm_worker: bool,
    checkpoint: str | None,
    explore_budget: float,
) -> None:
    """Build TARGET on the meta device for several TP/PP layouts and check what it built.

    TARGET is an architecture of the installed vLLM registry (LlamaForCausalLM),
    module:Class, or path/to/file.py[:Class].
    """
    from prefixlint.check_introspect import polish, public_name
    from prefixlint.introspect import introspect as run
    from prefixlint.introspect.process.client import Worker
    from prefixlint.introspect.process.stopping import stop_on_signals
    from prefixlint.introspect.process.warm import warm_folder
    from prefixlint.introspect.targets.checkpoint import CheckpointError

    refuse_checkpoint_without_dryrun(checkpoint, no_dryrun)
    table, base = config_table()
    found = checkpoints(checkpoint)
    with usage_error(CheckpointError):
        # --checkpoint for every class of TARGET; else the table's entry of each class
        by_class = {
            name: one
            for name in target_classes(target)
            if (one := found.for_class(None, name)) is not None
        }
    worker = Worker(warm=warm_folder(no_warm_worker))
    with stop_on_signals(), contextlib.closing(worker):
        result = run(
            target,
            tp=int_list(tp),
            pp=int_list(pp),
            config=config_path,
            configs=table,
            config_base=base,
            timeout=timeout,
            dryrun=not no_dryrun,
            explore_budget=explore_budget,
            checkpoint=found.explicit.folder if found.explicit else None,
            checkpoints=by_class,
            worker=worker,
        )
    if result.error:
        raise click.UsageError(f"cannot introspect {target}: {public_name(result.error)}")
    result.diagnostics = polish(result.diagnostics + skipped_notes(result))
    # The layout table goes to stderr in every format: JSON on stdout stays parseable.
    for one in result.results:
        _echo_result(one)
    report(result.diagnostics, output_format, len(result.results))
    exit_for(result.diagnostics, fail_on, strict)


def _echo_result(result: dict[str, Any]) -> None:
    from prefixlint.check_introspect import public_name

    click.echo(
        f"{public_name(result['arch'])}: {result['status']} "
        f"(config: {result['config_source'] or '-'})"
        + (f" {result['reason']}" if result["reason"] else ""),
        err=True,
    )
    if result.get("dryrun"):
        why = f": {result['dryrun_reason']}" if result.get("dryrun_reason") else ""
        click.echo(
            f"  checkpoint/quantization dry-run: {result['dryrun']}{why} "
            f"({result.get('dryrun_seconds', 0):.2f}s)",
            err=True,
        )
    for layout in result["layouts"]:
        extra = f" {layout['reason']}" if layout["reason"] else ""
        click.echo(
            f"  {layout['name']:<28} {layout['status']:<7} {layout['seconds']:.2f}s{extra}",
            err=True,
        )
    _echo_coverage(result)


def skipped_notes(report: Any) -> list:
    """A PFX600 note for each target phase 2 skipped without saying so itself: a skip
    verified nothing and must not read as passed."""
    from prefixlint.check_introspect import note, public_name
    from prefixlint.introspect import target_file
    from prefixlint.paths import display_path

    out = []
    for result in report.results:
        arch = result.get("arch")
        if result.get("status") != "skipped":
            continue
        if any(d.data.get("architecture") == arch for d in report.diagnostics):
            continue
        file = result.get("class_file") or target_file(result["target"])
        out.append(
            note(
                display_path(Path(file)) if Path(file).is_file() else file,
                int(result.get("class_line") or 1),
                f"`{public_name(str(arch))}` not verified: phase 2 skipped it: "
                f"{public_name(result.get('reason') or 'no reason given')}",
                str(arch),
            )
        )
    return out


def _echo_coverage(result: dict) -> None:
    from prefixlint.introspect.coverage.sites import describe

    if result.get("coverage"):
        click.echo(f"  {describe(result['coverage'], _relative)}", err=True)
    for variant in result.get("variants", []):
        what = ", ".join(f"{k}={v}" for k, v in variant["overrides"].items())
        click.echo(f"  variant {what}: {variant['status']}", err=True)


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
