"""``prefixlint check``: the static phase over files and folders, and with ``--introspect``
phase 2 for the architectures they define."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from prefixlint.commands.checkpoints import (
    CHECKPOINT,
    checkpoints,
    refuse_checkpoint_without_dryrun,
    usage_error,
)
from prefixlint.commands.common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    FORMATS,
    NO_CACHE_HELP,
    NO_DRYRUN,
    NO_SOURCE_HELP,
    NO_WARM_WORKER,
    REVIEW,
    SHOW_NOTES_HELP,
    STRICT_HELP,
    changed_lines,
    config_table,
    exit_for,
    fresh_vllm_cache,
    int_list,
    report,
    report_internal_errors,
    writable,
)
from prefixlint.commands.lint import CheckOptions, LintRun, lint


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Codes or prefixes to enable (e.g. PFX3,PFX101).")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice([*FORMATS, REVIEW]),
    default="text",
    show_default=True,
    help="review: the GitHub review payload (needs --diff-base).",
)
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning"]),
    default="warning",
    show_default=True,
    help="Exit 1 when a finding of at least this severity remains.",
)
@click.option("--no-cache", is_flag=True, help=NO_CACHE_HELP)
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
@click.option("--no-source", is_flag=True, help=NO_SOURCE_HELP)
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
@click.option(
    "--also",
    multiple=True,
    metavar="FORMAT=FILE",
    help="Also write the report in FORMAT (text, json, sarif, github, rdjson, or review: the "
    "GitHub review payload, with --diff-base) to FILE; repeatable: one run, every format.",
)
@click.option(
    "--introspect",
    "with_introspect",
    is_flag=True,
    help="After the static phase, build the model classes these files define (phase 2).",
)
@click.option("--tp", help="With --introspect: TP sizes.  [default: 1,2,4,8]")
@click.option("--pp", help="With --introspect: PP sizes.  [default: 2,4]")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    help="With --introspect: seconds per class build.  [default: 300]",
)
@click.option(
    "--explore-budget",
    type=click.FloatRange(min=0),
    help="With --introspect: seconds per class for config variants that build unexecuted "
    "construction sites (0: the synthesised config only).  [default: 10]",
)
@click.option("--show-notes", is_flag=True, help=SHOW_NOTES_HELP)
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@NO_DRYRUN
@NO_WARM_WORKER
@CHECKPOINT
@click.option(
    "--fix",
    is_flag=True,
    help="Apply the mechanical fixes (PFX301 adds the prefix, PFX302 renames it), then report "
    "what is left.",
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Print the fixes as a unified diff without writing; exit 1 when there is one. "
    "With --fix too, the same (as ruff: --diff never writes).",
)
@click.option(
    "--diff-base",
    metavar="REV",
    help="Report only findings on lines added or changed since the merge base of REV and "
    "HEAD (committed, staged, unstaged and untracked changes).",
)
def check(paths: tuple[Path, ...], **options: Any) -> None:
    """Check model files (default: the current folder) and report findings."""
    opts = CheckOptions(paths=paths, **options)
    _refuse_conflicts(opts)
    if opts.with_introspect:
        from prefixlint.check_introspect import Phase2Unavailable, require_phase2

        try:
            require_phase2()
        except Phase2Unavailable as e:
            raise click.UsageError(str(e)) from None
    writable(opts.output)
    also = _also(opts)
    started = time.perf_counter()
    changes = changed_lines(opts.diff_base) if opts.diff_base else None
    run = lint(opts)
    if run.result.files == 0:
        # As ruff does: a warning and exit 0; --strict makes "nothing checked" an error.
        click.echo(
            "prefixlint: no Python files found under the given paths: nothing was checked",
            err=True,
        )
    if opts.fix or opts.show_diff:
        # --fix --diff is ruff's --diff: the diff, nothing written
        changed = _apply_fixes(run.result.diagnostics, write=not opts.show_diff)
        if opts.show_diff:
            sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
        if changed:  # report what the fixes left
            run = lint(opts)
    result = run.result
    phases, head_phase2 = "", None
    if opts.with_introspect:
        head_phase2, phases = _phase2(run, opts, changes)
    if changes is not None:
        from prefixlint.commands.basecheck import findings_of_change

        # the same checks on the base: the findings the change caused, wherever they sit
        result.diagnostics = findings_of_change(
            run,
            opts,
            changes,
            head_phase2,
            lambda files, configs_for: _phase2(run, opts, None, files, configs_for),
        )
        if changes.not_caused and opts.output_format == "text":  # the others: data only
            n = changes.not_caused
            click.echo(
                f"prefixlint: {n} finding{'s' if n != 1 else ''} the change did not cause "
                f"(already at the base {changes.base[:12]}) left out",
                err=True,
            )
    elif head_phase2 is not None:
        from prefixlint.check_introspect import one_per_site

        found = [d for d in head_phase2.diagnostics if run.selected(d)]
        result.diagnostics = one_per_site(result.diagnostics, found)
    elapsed = time.perf_counter() - started
    for output_format, output in [(opts.output_format, opts.output), *also]:
        report(
            result.diagnostics,
            output_format,
            result.files,
            output,
            show_source=not opts.no_source,
            elapsed=elapsed,
            phases=phases,
            changes=changes,
            show_notes=opts.show_notes,
        )
    if result.internal_errors:
        report_internal_errors(result.internal_errors)
        sys.exit(EXIT_ERROR)
    if result.files == 0 and opts.strict:
        sys.exit(EXIT_ERROR)
    exit_for(result.diagnostics, opts.fail_on, opts.strict)


def _also(opts: CheckOptions) -> list[tuple[str, Path]]:
    """``--also FORMAT=FILE`` pairs, refused now (not after a long run) when wrong."""
    out = []
    for value in opts.also:
        output_format, sep, file = value.partition("=")
        if not sep or not file or output_format not in (*FORMATS, REVIEW):
            raise click.BadParameter(
                f"expected FORMAT=FILE with FORMAT one of {', '.join([*FORMATS, REVIEW])}, "
                f"got {value!r}",
                param_hint="--also",
            )
        writable(Path(file), "--also")
        out.append((output_format, Path(file)))
    if REVIEW in [opts.output_format, *(f for f, _ in out)] and not opts.diff_base:
        raise click.UsageError("the review payload comments on changed lines: give --diff-base")
    return out


def _refuse_conflicts(opts: CheckOptions) -> None:
    """Options that would do nothing are refused, never silently ignored."""
    if not opts.with_introspect:
        given = [
            f"--{n.replace('_', '-')}"
            for n in ("tp", "pp", "timeout", "explore_budget")
            if getattr(opts, n) is not None
        ]
        given += ["--no-dryrun"] if opts.no_dryrun else []
        given += ["--no-warm-worker"] if opts.no_warm_worker else []
        given += ["--checkpoint"] if opts.checkpoint else []
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --introspect")
    refuse_checkpoint_without_dryrun(opts.checkpoint, opts.no_dryrun)


def _phase2(
    run: LintRun,
    opts: CheckOptions,
    changes: Any,
    files: list[Path] | None = None,
    configs_for: Any = None,
) -> tuple[Any, str]:
    """Phase 2 for the architecture classes of the checked files (with --diff-base: of
    the changed ones; ``files``: of those, with ``configs_for``: the base's copies with
    head's configs), with live progress: (its ``Phase2Result``, findings polished, and
    what it verified)."""
    from prefixlint.check_introspect import polish, run_phase2
    from prefixlint.introspect.process.stopping import stop_on_signals
    from prefixlint.introspect.process.warm import warm_folder
    from prefixlint.introspect.targets.checkpoint import CheckpointError
    from prefixlint.progress import Progress
    from prefixlint.static.cache import ResultCache
    from prefixlint.static.vllm_source import facts_in

    files = run.files if files is None else files
    if changes is not None:
        files = [f for f in files if changes.file_changed(changes.repo_path(str(f)) or "")]
    found = checkpoints(opts.checkpoint)
    # stderr: stdout stays parseable in every format
    with (
        stop_on_signals(),
        Progress() as progress,
        usage_error(CheckpointError),
        fresh_vllm_cache(opts.no_cache),
        # which classes are architectures reads vLLM's registry: from the fact cache
        facts_in(None if opts.no_cache else ResultCache.folder_for(opts.cache_dir)),
    ):
        out = run_phase2(
            files,
            int_list(opts.tp or "1,2,4,8", "--tp"),
            int_list(opts.pp or "2,4", "--pp"),
            opts.timeout or 300.0,
            configs_for or _configs_for,
            progress,
            dryrun=not opts.no_dryrun,
            explore_budget=10.0 if opts.explore_budget is None else opts.explore_budget,
            checkpoints=found,
            # --no-cache: an empty vLLM cache folder, which a zygote started elsewhere lacks
            warm=warm_folder(opts.no_warm_worker or opts.no_cache),
        )
    verified = (
        f"phase 2 built {out.built} architecture class{'es' if out.built != 1 else ''}"
        if out.built or out.diagnostics
        else "phase 2: no architecture class in these files"
        if files or changes is None
        else "phase 2: no checked file changed"
    )
    out.diagnostics = polish(out.diagnostics)
    return out, verified


def _configs_for(path: Path) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]`` of the pyproject closest to ``path``."""
    return config_table(path.parent)


def _apply_fixes(diagnostics: list, write: bool) -> int:
    """Fix (or, without ``write``, print the diff of) every file with a fixable finding.
    Returns how many files change; what is left alone and why goes to stderr."""
    from prefixlint.codes import FIXABLE
    from prefixlint.static.fix import fix_file

    by_file: dict[str, set[str]] = {}
    for d in diagnostics:
        if d.code in FIXABLE:
            by_file.setdefault(d.filename, set()).add(d.code)
    changed = applied = 0
    for filename, codes in sorted(by_file.items()):
        diff, outcome = fix_file(filename, write=write, codes=tuple(sorted(codes)))
        if diff:
            changed += 1
            applied += len(outcome.applied)
            if not write:
                sys.stdout.write(diff)
        for line, reason in outcome.skipped:
            click.echo(f"{filename}:{line}: not fixed: {reason}", err=True)
    verb = "Fixed" if write else "Would fix"
    click.echo(f"{verb} {applied} finding(s) in {changed} file(s).", err=True)
    return changed
