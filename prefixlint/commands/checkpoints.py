"""``--checkpoint`` and ``[tool.prefixlint.checkpoints]``, shared by ``check --introspect`` and
``introspect``: resolved before any build, so a bad one is a usage error (exit 2)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import click

CHECKPOINT = click.option(
    "--checkpoint",
    metavar="PATH|ORG/NAME",
    help="A checkpoint folder or hub id: the dry-run streams its tensor names and shapes "
    "and builds under its quantization config (safetensors headers only, no weights, no "
    "GPU); its config.json is the build config unless --config says otherwise.",
)


def refuse_checkpoint_without_dryrun(checkpoint: str | None, no_dryrun: bool) -> None:
    if checkpoint and no_dryrun:
        raise click.UsageError("--checkpoint is checked by the dry-run: drop --no-dryrun")


def checkpoints(explicit: str | None) -> Any:
    """``--checkpoint`` and the pyproject table, resolved here (a hub id's headers
    fetched) before any build."""
    from prefixlint.introspect.targets.checkpoint import CheckpointError, Checkpoints

    try:
        return Checkpoints(explicit, _checkpoint_table)
    except CheckpointError as e:
        raise click.UsageError(str(e)) from None


def _checkpoint_table(path: Path | None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.checkpoints]`` of the pyproject closest to ``path`` (a model
    file; default: the current folder)."""
    from prefixlint.config import ConfigError, find_config_file, load_checkpoints_table

    start = path.parent if path is not None else Path.cwd()
    try:
        found = find_config_file(start)
        return load_checkpoints_table(found.parent) if found else ({}, None)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


@contextlib.contextmanager
def usage_error(*errors: type[BaseException]) -> Any:
    """These errors, raised inside, are usage errors (exit 2) with their message."""
    try:
        yield
    except errors as e:
        raise click.UsageError(str(e)) from None


def target_classes(target: str) -> list[str]:
    """The class names TARGET builds, found without importing it (the table is keyed by
    them)."""
    if ":" in target:
        return [target.rpartition(":")[2]]
    if target.endswith(".py"):
        from prefixlint.check_introspect import architectures_in
        from prefixlint.static.index import find_installed_package
        from prefixlint.static.vllm_source import registry_architectures

        registry = registry_architectures(find_installed_package("vllm"))
        return [c.name for c in architectures_in(Path(target), registry)]
    return [target]
