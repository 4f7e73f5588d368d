"""What several commands share: exit codes, options, reporting, the exit verdict."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ["text", "json", "sarif", "github", "rdjson"]
REVIEW = "review"  # check's GitHub review payload (with --diff-base)
STRICT_HELP = "Also exit 1 when something could not be verified (a PFX600 note)."
SHOW_NOTES_HELP = (
    "Text, GitHub and rdjson formats: also list notes (divergences with no consumer today, "
    "deliberate ones); JSON and SARIF always carry them."
)

NO_WARM_WORKER = click.option(
    "--no-warm-worker",
    is_flag=True,
    help="Phase 2 in a fresh worker process (imports torch and vLLM, ~8 s) instead of one "
    "forked from the warm zygote kept in the cache folder (PREFIXLINT_WARM_WORKER=0 too).",
)
NO_DRYRUN = click.option(
    "--no-dryrun",
    is_flag=True,
    help="Phase 2 without the checkpoint and quantization dry-run (PFX701, PFX702) and the "
    "synthetic LoRA dry-run (PFX703; `--lora` still runs).",
)


NO_CACHE_HELP = "Neither read nor write the results cache."
PHASE2_NO_CACHE_HELP = (
    "Neither read nor write a cache: phase 2's worker gets an empty vLLM cache folder "
    "(vLLM's model-info cache of the registry), removed afterwards."
)
NO_SOURCE_HELP = "Text format: no source frame under findings."


@contextlib.contextmanager
def fresh_vllm_cache(enabled: bool) -> Iterator[None]:
    """``--no-cache`` for phase 2: prefixlint keeps no cache of its own there, but vLLM's
    registry reads and writes model-info files under ``VLLM_CACHE_ROOT``; a worker started
    inside gets an empty folder (it copies this process's environment when it starts)."""
    if not enabled:
        yield
        return
    folder = tempfile.mkdtemp(prefix="prefixlint-vllm-cache-")
    old = os.environ.get("VLLM_CACHE_ROOT")
    os.environ["VLLM_CACHE_ROOT"] = folder
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("VLLM_CACHE_ROOT", None)
        else:
            os.environ["VLLM_CACHE_ROOT"] = old
        shutil.rmtree(folder, ignore_errors=True)


def split_codes(values: tuple[str, ...]) -> list[str]:
    return [v.strip().upper() for value in values for v in value.split(",") if v.strip()]


def int_list(value: str, hint: str | None = None) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated integers, got {value!r}", param_hint=hint
        ) from None
    if not out or any(v < 1 for v in out):
        raise click.BadParameter(f"expected positive integers, got {value!r}", param_hint=hint)
    return out


def config_table(start: Path | None = None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]`` of the closest pyproject above ``start`` (default:
    the current folder): architecture -> config path (relative to the pyproject)."""
    from prefixlint.config import ConfigError, find_config_file, load_configs_table

    try:
        found = find_config_file(start or Path.cwd())
        return load_configs_table(found.parent) if found else ({}, None)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def readable_config(ctx: Any, param: Any, value: str | None) -> str | None:
    """``--config``: a config.json, or a folder holding one, whose text is a JSON object.
    What is not is the user's input error (exit 2, with the parse error), never a build
    that then blames the config it could not read."""
    import json

    if value is None:
        return None
    path = Path(value)
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise click.BadParameter(f"cannot read {file}: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise click.BadParameter(f"{file} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{file} is not a JSON object: a config.json holds one")
    return value


def writable(output: Path | None, option: str = "--output") -> None:
    """-o must name a file that can be written: a usage error now, not a traceback after
    the run."""
    if output is None:
        return
    if output.is_dir():
        raise click.UsageError(f"{option} {output} is a folder; name a file")
    if not output.parent.is_dir():
        raise click.UsageError(f"{option} {output}: folder {output.parent} does not exist")


def changed_lines(rev: str):
    from prefixlint.diffbase import DiffError
    from prefixlint.diffbase import changed_lines as changes_since

    try:
        return changes_since(rev)
    except DiffError as e:
        raise click.UsageError(str(e)) from None


def code_names() -> dict[str, str]:
    from prefixlint.codes import CODES

    return {c: entry.name for c, entry in CODES.items()}


def report(
    diagnostics,
    output_format: str,
    files: int,
    output: Path | None = None,
    *,
    show_source: bool = True,
    elapsed: float | None = None,
    phases: str = "",
    changes: Any = None,
    show_notes: bool = False,
) -> None:
    """Write ``diagnostics`` in ``output_format`` to ``output`` (default: stdout).
    ``review`` is the GitHub review payload, which needs ``changes`` (--diff-base)."""
    from prefixlint.reporters import REPORTERS

    options = {
        "show_notes": show_notes,
        "phases": phases,
        "files": files,
        "names": code_names(),
        "show_source": show_source,
        "root": Path.cwd(),
        "elapsed": elapsed,
    }

    def write(fh: Any) -> None:
        if output_format == REVIEW:
            import json

            from prefixlint.review import build_review

            fh.write(json.dumps(build_review(diagnostics, changes), indent=2) + "\n")
        else:
            REPORTERS[output_format](diagnostics, fh, options)

    if output is not None:
        try:
            with output.open("w", encoding="utf-8") as fh:
                write(fh)
        except OSError as e:
            raise click.UsageError(f"cannot write {output}: {e.strerror or e}") from None
    else:
        write(sys.stdout)


def exit_for(diagnostics, fail_on: str, strict: bool = False) -> None:
    from prefixlint.diagnostic import Severity

    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    failed = any(d.severity.rank >= threshold for d in diagnostics)
    if strict:  # a "not verified" note fails the run too (a divergence note never does)
        failed = failed or any(d.is_not_verified for d in diagnostics)
    sys.exit(EXIT_FINDINGS if failed else EXIT_OK)


def report_internal_errors(count: int) -> None:
    from prefixlint.codes import INTERNAL_ERROR_CODE

    if count:
        click.echo(
            f"prefixlint: {count} file(s) hit an internal error ({INTERNAL_ERROR_CODE}); "
            "please report it",
            err=True,
        )
