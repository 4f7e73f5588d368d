"""``prefixlint introspect``: phase 2 for one target, with its layout table on stderr."""

from __future__ import annotations

import contextlib
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
    NO_COMPARE,
    NO_DRYRUN,
    NO_SOURCE_HELP,
    NO_WARM_WORKER,
    PHASE2_NO_CACHE_HELP,
    STRICT_HELP,
    config_table,
    exit_for,
    fresh_vllm_cache,
    int_list,
    readable_config,
    report,
    writable,
)


@click.command()
@click.argument("target")
@click.option(
    "--config",
    "config_path",
    callback=readable_config,
    help="config.json (or a folder holding one) to build with.",
)
@click.option("--tp", default="1,2,4,8", show_default=True, help="Tensor-parallel sizes.")
@click.option("--pp", default="2,4", show_default=True, help="Pipeline sizes (SupportsPP only).")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="text")
@click.option("--fail-on", type=click.Choice(["error", "warning"]), default="warning")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds per build.")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@NO_DRYRUN
@NO_COMPARE
@NO_WARM_WORKER
@CHECKPOINT
@click.option(
    "--lora",
    metavar="PATH|ORG/NAME",
    help="A PEFT LoRA adapter folder or hub id: the LoRA dry-run matches its names as "
    "vLLM's LoRA loader does (adapter_config.json and the safetensors header only, no "
    "weights). Without it, a SupportsLoRA model is matched against a synthetic adapter "
    "of its checkpoint's linear layers.",
)
@click.option(
    "--explore-budget",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds for config variants that build unexecuted construction sites (0: none).",
)
@click.option("--no-cache", is_flag=True, help=PHASE2_NO_CACHE_HELP)
@click.option("--no-source", is_flag=True, help=NO_SOURCE_HELP)
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
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
    no_compare: bool,
    no_warm_worker: bool,
    checkpoint: str | None,
    lora: str | None,
    explore_budget: float,
    no_cache: bool,
    no_source: bool,
    output: Path | None,
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
    from prefixlint.introspect.targets.adapter import resolve_adapter
    from prefixlint.introspect.targets.checkpoint import CheckpointError

    refuse_checkpoint_without_dryrun(checkpoint, no_dryrun)
    writable(output)
    unreadable = _unreadable(target, no_cache)
    if unreadable:  # check's verdict, before the worker imports torch and vLLM
        report(unreadable, output_format, 1, output, show_source=not no_source)
        exit_for(unreadable, fail_on, strict)
    with usage_error(CheckpointError):
        adapter = resolve_adapter(lora).folder if lora else None
    table, base = config_table()
    found = checkpoints(checkpoint)
    by_class = _checkpoints_by_class(target, found)
    # the worker starts inside the fresh vLLM cache folder, so it is the one it sees (with
    # --no-cache never a warm one: a zygote started elsewhere has another folder)
    with (
        stop_on_signals(),
        fresh_vllm_cache(no_cache),
        contextlib.closing(Worker(warm=warm_folder(no_warm_worker or no_cache))) as worker,
    ):
        result = run(
            target,
            tp=int_list(tp),
            pp=int_list(pp),
            config=config_path,
            configs=table,
            config_base=base,
            timeout=timeout,
            dryrun=not no_dryrun,
            compare=not no_compare,
            explore_budget=explore_budget,
            checkpoint=found.explicit.folder if found.explicit else None,
            checkpoints=by_class,
            lora=adapter,
            worker=worker,
        )
    if result.error:
        raise click.UsageError(f"cannot introspect {target}: {public_name(result.error)}")
    result.diagnostics = polish(result.diagnostics + skipped_notes(result))
    # The layout table goes to stderr in every format: JSON on stdout stays parseable.
    for one in result.results:
        _echo_result(one)
    shown = not no_source
    report(result.diagnostics, output_format, len(result.results), output, show_source=shown)
    exit_for(result.diagnostics, fail_on, strict)


def _checkpoints_by_class(target: str, found: Any) -> dict[str, Any]:
    """--checkpoint for every class of TARGET; else the table's entry of each class."""
    from prefixlint.introspect.targets.checkpoint import CheckpointError

    with usage_error(CheckpointError):
        return {
            name: one
            for name in target_classes(target)
            if (one := found.for_class(None, name)) is not None
        }


def _unreadable(target: str, no_cache: bool) -> list:
    """A file TARGET as ``check`` judges it, before any build: a path that does not exist
    is a usage error (exit 2), a file that cannot be read or parsed its PFX001 errors
    (nothing to build). Empty for a registry name, ``module:Class`` and a parsed file."""
    from prefixlint.commands.lint import CheckOptions, lint
    from prefixlint.diagnostic import Severity
    from prefixlint.introspect import target_file

    if not (target.endswith(".py") or ".py:" in target):
        return []
    path = Path(target_file(target))
    if not path.exists():
        raise click.UsageError(f"path does not exist: {path}")
    if not path.is_file():
        raise click.UsageError(f"not a file: {path}")
    from prefixlint.codes import SYNTAX_ERROR_CODE

    found = lint(CheckOptions(paths=(path,), select=(SYNTAX_ERROR_CODE,), no_cache=no_cache))
    return [
        d
        for d in found.result.diagnostics
        if d.code == SYNTAX_ERROR_CODE and d.severity is Severity.ERROR
    ]


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
    if result.get("compare"):
        click.echo(f"  comparison with transformers: {_compared(result['compare'])}", err=True)
    if result.get("lora"):
        why = f": {result['lora_reason']}" if result.get("lora_reason") else ""
        click.echo(f"  LoRA dry-run: {result['lora']}{why}", err=True)
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
    from prefixlint.paths import display_path

    # files named as the findings name them (one helper for it)
    if result.get("coverage"):
        click.echo(f"  {describe(result['coverage'], display_path)}", err=True)
    for variant in result.get("variants", []):
        what = ", ".join(f"{k}={v}" for k, v in variant["overrides"].items())
        click.echo(f"  variant {what}: {variant['status']}", err=True)


def _compared(facts: dict) -> str:
    """compare/facts.py ``Comparison.to_json`` in words."""
    status = facts.get("status", "")
    if facts.get("reason"):
        detail = f" ({facts['detail']})" if facts.get("detail") else ""
        return f"{status}: {facts['reason'].replace('_', ' ')}{detail}"
    first = f", first at `{facts['first']}`" if facts.get("first") else ""
    if facts.get("extras_refused"):  # loaded again without the names real checkpoints add
        first += f"; loaded without the checkpoint extras it refused: {facts['extras_refused']}"
    if facts.get("custom_ops") == "native":  # no compiled CPU kernels in this vLLM build
        first += "; vLLM's ops on their torch implementation (forward_native)"
    variants = facts.get("variants") or []  # compare/variants.py: config variants
    if variants:
        counts: dict[str, int] = {}
        for v in variants:
            counts[v.get("status", "")] = counts.get(v.get("status", ""), 0) + 1
        said = ", ".join(f"{n} {s}" for s, n in counts.items())
        first += f"; {len(variants)} config variants: {said}"
    return (
        f"{status} ({facts.get('compared', 0)} boundaries{first}; {facts.get('seconds', 0):.2f}s)"
    )
