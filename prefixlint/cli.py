"""The ``prefixlint`` command line."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from prefixlint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ["text", "json", "sarif", "github", "rdjson"]
STRICT_HELP = "Also exit 1 when something could not be verified (a PFX600 note)."


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip().upper() for value in values for v in value.split(",") if v.strip()]


class _Group(click.Group):
    # Commands whose module is imported only when they run: a one-file `check` (the
    # pre-commit case) does not pay for the smoke package.
    lazy: dict[str, tuple[str, str]] = {"smoke": ("prefixlint.smoke.cli", "smoke")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            import importlib

            module, attr = self.lazy[cmd_name]
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


NO_DRYRUN = click.option(
    "--no-dryrun",
    is_flag=True,
    help="Phase 2 without the checkpoint and quantization dry-run (PFX701, PFX702).",
)

CHECKPOINT = click.option(
    "--checkpoint",
    metavar="PATH|ORG/NAME",
    help="A checkpoint folder or hub id: the dry-run streams its tensor names and shapes "
    "and builds under its quantization config (safetensors headers only, no weights, no "
    "GPU); its config.json is the build config unless --config says otherwise.",
)


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
    type=click.Choice(FORMATS),
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
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@NO_DRYRUN
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
    help="Print the fixes as a unified diff without writing; exit 1 when there is one.",
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
    _writable(opts.output)
    started = time.perf_counter()
    changes = _changed_lines(opts.diff_base) if opts.diff_base else None
    run = _lint(opts)
    if opts.fix or opts.show_diff:
        changed = _apply_fixes(run.result.diagnostics, write=opts.fix)
        if opts.show_diff:
            sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
        if changed:  # report what the fixes left
            run = _lint(opts)
    result = run.result
    phases = ""
    if opts.with_introspect:
        found, phases = _phase2(run, opts)
        result.diagnostics = _one_per_site(
            result.diagnostics, [d for d in found if run.selected(d)]
        )
        result.diagnostics.sort(key=lambda d: d.sort_key())
    if changes is not None:
        result.diagnostics = changes.filter(result.diagnostics)
    _report(
        result.diagnostics,
        opts.output_format,
        result.files,
        opts.output,
        show_source=not opts.no_source,
        elapsed=time.perf_counter() - started,
        phases=phases,
    )
    if result.internal_errors:
        from prefixlint.static.runner import INTERNAL_ERROR

        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    _exit_for(result.diagnostics, opts.fail_on, opts.strict)


@dataclass
class CheckOptions:
    """``check``'s options, as click passes them."""

    paths: tuple[Path, ...]
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    output_format: str = "text"
    fail_on: str = "warning"
    no_cache: bool = False
    cache_dir: Path | None = None
    jobs: int | None = None
    config_path: Path | None = None
    installed_vllm: bool = False
    no_source: bool = False
    output: Path | None = None
    with_introspect: bool = False
    no_dryrun: bool = False
    checkpoint: str | None = None
    explore_budget: float | None = None
    tp: str | None = None
    pp: str | None = None
    timeout: float | None = None
    strict: bool = False
    fix: bool = False
    show_diff: bool = False
    diff_base: str | None = None


def _skipped_notes(report: Any) -> list:
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


def _refuse_conflicts(opts: CheckOptions) -> None:
    """Options that would do nothing are refused, never silently ignored."""
    if not opts.with_introspect:
        given = [
            f"--{n.replace('_', '-')}"
            for n in ("tp", "pp", "timeout", "explore_budget")
            if getattr(opts, n) is not None
        ]
        given += ["--no-dryrun"] if opts.no_dryrun else []
        given += ["--checkpoint"] if opts.checkpoint else []
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --introspect")
    _refuse_checkpoint_without_dryrun(opts.checkpoint, opts.no_dryrun)
    if opts.fix and opts.show_diff:
        raise click.UsageError(
            "--fix writes the fixes and --diff prints them without writing: choose one"
        )


def _refuse_checkpoint_without_dryrun(checkpoint: str | None, no_dryrun: bool) -> None:
    if checkpoint and no_dryrun:
        raise click.UsageError("--checkpoint is checked by the dry-run: drop --no-dryrun")


def _checkpoints(explicit: str | None) -> Any:
    """``--checkpoint`` and ``[tool.prefixlint.checkpoints]``, resolved here (a hub id's
    headers fetched) before any build: a bad one is a usage error."""
    from prefixlint.introspect.checkpoint import CheckpointError, Checkpoints

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


def _writable(output: Path | None) -> None:
    """-o must name a file that can be written: a usage error now, not a traceback after
    the run."""
    if output is None:
        return
    if output.is_dir():
        raise click.UsageError(f"--output {output} is a folder; name a file")
    if not output.parent.is_dir():
        raise click.UsageError(f"--output {output}: folder {output.parent} does not exist")


def _phase2(run: LintRun, opts: CheckOptions) -> tuple[list, str]:
    """Phase 2 for the architecture classes of the checked files, with live progress:
    (its findings and notes, what it verified in words)."""
    from prefixlint.check_introspect import polish, run_phase2
    from prefixlint.introspect.checkpoint import CheckpointError
    from prefixlint.progress import Progress

    checkpoints = _checkpoints(opts.checkpoint)
    with Progress() as progress, _usage_error(CheckpointError):
        out = run_phase2(
            run.files,
            _int_list(opts.tp or "1,2,4,8", "--tp"),
            _int_list(opts.pp or "2,4", "--pp"),
            opts.timeout or 300.0,
            _configs_for,
            progress,
            dryrun=not opts.no_dryrun,
            explore_budget=10.0 if opts.explore_budget is None else opts.explore_budget,
            checkpoints=checkpoints,
        )
    verified = (
        f"phase 2 built {out.built} architecture class{'es' if out.built != 1 else ''}"
        if out.built or out.diagnostics
        else "phase 2: no architecture class in these files"
    )
    return polish(out.diagnostics), verified


@contextlib.contextmanager
def _usage_error(*errors: type[BaseException]) -> Any:
    """These errors, raised inside, are usage errors (exit 2) with their message."""
    try:
        yield
    except errors as e:
        raise click.UsageError(str(e)) from None


def _configs_for(path: Path) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]`` of the pyproject closest to ``path``."""
    return _config_table(path.parent)


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


def _changed_lines(rev: str):
    from prefixlint.diffbase import DiffError, changed_lines

    try:
        return changed_lines(rev)
    except DiffError as e:
        raise click.UsageError(str(e)) from None


@dataclass
class _Group:
    """Files that share one pyproject, its configuration and its selected codes."""

    config: Any
    codes: set[str]
    files: list[Path]


@dataclass
class LintRun:
    files: list[Path]
    groups: list[_Group]
    result: Any  # the runner's RunResult, over every group

    def selected(self, d: Any) -> bool:
        """Whether a finding of another phase is selected for its file (codes and
        per-file-ignores of the file's configuration)."""
        path = Path(d.filename).resolve()
        for g in self.groups:
            if any(f.resolve() == path for f in g.files):
                ignored = g.config.ignored_for(path)
                return d.code in g.codes and not any(d.code.startswith(i) for i in ignored)
        return True  # a file the run did not list (an imported module): its finding stays


def _lint(opts: CheckOptions) -> LintRun:
    """The static phase over the paths. Each file uses the configuration of the closest
    pyproject.toml above it (or --config for all)."""
    from prefixlint.codes import CODES, STATIC
    from prefixlint.config import ConfigError, validate_selectors
    from prefixlint.static.discovery import MissingPath, NotAFile, discover
    from prefixlint.static.runner import RunResult, run_static

    targets = _targets(opts)
    bad = validate_selectors(_split(opts.select) + _split(opts.ignore), CODES)
    if bad:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(bad)}")
    groups: dict[Any, _Group] = {}
    seen: dict[Any, Any] = {}
    try:
        for target in targets:
            config = _config_at(opts.config_path, target, seen)
            for f in discover([target], config):
                own = config if opts.config_path else _config_at(None, f, seen)
                if own is not config and own.is_excluded(f):
                    continue
                group = groups.setdefault(own.source, _Group(own, _codes(opts, own), []))
                if f not in group.files:
                    group.files.append(f)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    except MissingPath as e:
        raise click.UsageError(f"path does not exist: {e}") from None
    except NotAFile as e:
        raise click.UsageError(str(e)) from None
    result = RunResult()
    for g in groups.values():
        static = {c for c in g.codes if CODES[c].phase == STATIC}
        part = run_static(
            g.files,
            g.config,
            static,
            jobs=opts.jobs,
            use_cache=not opts.no_cache,
            cache_dir=opts.cache_dir,
        )
        result.diagnostics += part.diagnostics
        result.files += part.files
        result.cached += part.cached
        result.internal_errors += part.internal_errors
    result.diagnostics.sort(key=lambda d: d.sort_key())
    files = [f for g in groups.values() for f in g.files]
    return LintRun(files, list(groups.values()), result)


def _targets(opts: CheckOptions) -> list[Path]:
    from prefixlint.static.discovery import installed_vllm_model_dirs

    targets = list(opts.paths)
    if opts.installed_vllm:
        found = installed_vllm_model_dirs()
        if not found:
            raise click.UsageError("--installed-vllm: no vLLM installation found on sys.path")
        targets.extend(found)
    return targets or [Path(".")]


def _config_at(explicit: Path | None, path: Path, seen: dict[Any, Any]) -> Any:
    """The configuration for ``path``: --config, else the closest pyproject above it
    (``seen``: the configurations this run has read, by source)."""
    from prefixlint.config import Config, find_config_file, load_config

    start = path if path.is_dir() else path.parent
    source = explicit or find_config_file(start if start.exists() else Path.cwd())
    if source not in seen:
        seen[source] = load_config(source) if source else Config()
    return seen[source]


def _codes(opts: CheckOptions, config: Any) -> set[str]:
    from prefixlint.codes import CODES
    from prefixlint.config import ConfigError, select_codes, validate_selectors

    selectors = _split(opts.select) or config.select
    ignores = config.ignore + _split(opts.ignore)
    bad = validate_selectors(selectors + ignores, CODES)
    if bad:
        raise ConfigError(f"{config.source}: unknown rule code or prefix: {', '.join(bad)}")
    return select_codes({c: e.default_enabled for c, e in CODES.items()}, selectors, ignores)


def _int_list(value: str, hint: str | None = None) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated integers, got {value!r}", param_hint=hint
        ) from None
    if not out or any(v < 1 for v in out):
        raise click.BadParameter(f"expected positive integers, got {value!r}", param_hint=hint)
    return out


def _config_table(start: Path | None = None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]`` of the closest pyproject above ``start`` (default:
    the current folder): architecture -> config path (relative to the pyproject)."""
    from prefixlint.config import ConfigError, find_config_file, load_configs_table

    try:
        found = find_config_file(start or Path.cwd())
        return load_configs_table(found.parent) if found else ({}, None)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def _names() -> dict[str, str]:
    from prefixlint.codes import CODES

    return {c: entry.name for c, entry in CODES.items()}


def _report(
    diagnostics,
    output_format: str,
    files: int,
    output: Path | None = None,
    *,
    show_source: bool = True,
    elapsed: float | None = None,
    phases: str = "",
) -> None:
    from prefixlint.reporters import REPORTERS

    options = {
        "phases": phases,
        "files": files,
        "names": _names(),
        "show_source": show_source,
        "root": Path.cwd(),
        "elapsed": elapsed,
    }
    if output is not None:
        try:
            with output.open("w", encoding="utf-8") as fh:
                REPORTERS[output_format](diagnostics, fh, options)
        except OSError as e:
            raise click.UsageError(f"cannot write {output}: {e.strerror or e}") from None
    else:
        REPORTERS[output_format](diagnostics, sys.stdout, options)


def _exit_for(diagnostics, fail_on: str, strict: bool = False) -> None:
    from prefixlint.diagnostic import Severity

    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    if strict:  # a "not verified" note fails the run too
        threshold = Severity.NOTE.rank
    sys.exit(EXIT_FINDINGS if any(d.severity.rank >= threshold for d in diagnostics) else EXIT_OK)


def _one_per_site(static: list, runtime: list) -> list:
    """Phase 2's PFX601 for a leaf built without a prefix and phase 1's PFX301 are one
    defect at one line: the run-time finding (it saw the build) stands for both."""
    seen = {(d.filename, d.location.row) for d in runtime if d.code == "PFX601"}
    kept = [d for d in static if not (d.code == "PFX301" and (d.filename, d.location.row) in seen)]
    return kept + runtime


@main.command()
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
    checkpoint: str | None,
    explore_budget: float,
) -> None:
    """Build TARGET on the meta device for several TP/PP layouts and check what it built.

    TARGET is an architecture of the installed vLLM registry (LlamaForCausalLM),
    module:Class, or path/to/file.py[:Class].
    """
    from prefixlint.check_introspect import polish, public_name
    from prefixlint.introspect import introspect as run
    from prefixlint.introspect.checkpoint import CheckpointError

    _refuse_checkpoint_without_dryrun(checkpoint, no_dryrun)
    table, base = _config_table()
    checkpoints = _checkpoints(checkpoint)
    with _usage_error(CheckpointError):
        # --checkpoint for every class of TARGET; else the table's entry of each class
        by_class = {
            name: found
            for name in _target_classes(target)
            if (found := checkpoints.for_class(None, name)) is not None
        }
    report = run(
        target,
        tp=_int_list(tp),
        pp=_int_list(pp),
        config=config_path,
        configs=table,
        config_base=base,
        timeout=timeout,
        dryrun=not no_dryrun,
        explore_budget=explore_budget,
        checkpoint=checkpoints.explicit.folder if checkpoints.explicit else None,
        checkpoints=by_class,
    )
    if report.error:
        raise click.UsageError(f"cannot introspect {target}: {public_name(report.error)}")
    report.diagnostics = polish(report.diagnostics + _skipped_notes(report))
    # The layout table goes to stderr in every format: JSON on stdout stays parseable.
    for result in report.results:
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
    _report(report.diagnostics, output_format, len(report.results))
    _exit_for(report.diagnostics, fail_on, strict)


def _target_classes(target: str) -> list[str]:
    """The class names TARGET builds, found without importing it (``[tool.prefixlint.
    checkpoints]`` is keyed by them)."""
    if ".py:" in target or ":" in target:
        return [target.rpartition(":")[2]]
    if target.endswith(".py"):
        from prefixlint.check_introspect import architectures_in
        from prefixlint.static.index import find_installed_package
        from prefixlint.static.model_classes import registry_architectures

        registry = registry_architectures(find_installed_package("vllm"))
        return [c.name for c in architectures_in(Path(target), registry)]
    return [target]


def _echo_coverage(result: dict) -> None:
    from prefixlint.introspect.coverage import describe

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


@main.command()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="text",
    help="text/json: the zoo's summary; sarif/github/rdjson: its findings only.",
)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--shard", default="0/1", show_default=True, help="i/n: every n-th architecture from i."
)
@click.option("--tp", default="1", show_default=True, help="Tensor-parallel sizes per build.")
@click.option("--pp", default="1", show_default=True, help="Pipeline sizes (SupportsPP only).")
@click.option(
    "--timeout", type=float, default=120.0, show_default=True, help="Seconds per architecture."
)
@click.option("--only", multiple=True, help="Restrict to these architectures (repeatable).")
@NO_DRYRUN
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.option(
    "--explore-budget",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds per architecture for config variants that build unexecuted construction "
    "sites (0: the synthesised config only).",
)
def zoo(
    output_format: str,
    jobs: int,
    shard: str,
    tp: str,
    pp: str,
    timeout: float,
    only: tuple[str, ...],
    no_dryrun: bool,
    output: Path | None,
    strict: bool,
    explore_budget: float,
) -> None:
    """Build every architecture of the installed vLLM registry and summarise."""
    from prefixlint.introspect.zoo import run_zoo

    try:
        index, count = (int(x) for x in shard.split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"--shard must be i/n with 0 <= i < n, got {shard!r}") from None
    summary = run_zoo(
        jobs=jobs,
        shard=(index, count),
        tp=_int_list(tp),
        pp=_int_list(pp),
        timeout=timeout,
        only=list(only),
        progress=output_format == "text" or output is not None,
        dryrun=not no_dryrun,
        explore_budget=explore_budget,
    )
    if output_format in ("text", "json"):
        text = summary.to_json_text() if output_format == "json" else summary.to_text()
        if output is not None:
            output.write_text(text, encoding="utf-8")
        else:
            click.echo(text)
    else:
        from prefixlint.diagnostic import Diagnostic

        findings = [
            Diagnostic.from_json(f) for row in summary.rows for f in row.findings + row.notes
        ]
        findings.sort(key=lambda d: d.sort_key())
        _report(findings, output_format, len(summary.rows), output)
    unverified = strict and any(r.status != "built" for r in summary.rows)
    sys.exit(EXIT_FINDINGS if summary.findings or unverified else EXIT_OK)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--diff-base",
    metavar="REV",
    required=True,
    help="Comment only on lines added or changed since the merge base of REV and HEAD.",
)
@click.option("--select", multiple=True, help="Codes or prefixes to enable.")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="pyproject.toml to use."
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the results cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Results cache folder.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: cores).")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the payload here.")
@click.option(
    "--post",
    is_flag=True,
    help="Send the review to GitHub (GITHUB_TOKEN, GITHUB_REPOSITORY, the PR number).",
)
@click.option(
    "--pr", type=click.IntRange(min=1), help="Pull request number (default: from GITHUB_REF)."
)
@click.option(
    "--api-url",
    default="https://api.github.com",
    show_default=True,
    envvar="GITHUB_API_URL",
    help="GitHub REST API root (GitHub Enterprise: https://HOST/api/v3).",
)
def review(
    paths: tuple[Path, ...],
    diff_base: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_path: Path | None,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    output: Path | None,
    post: bool,
    pr: int | None,
    api_url: str,
) -> None:
    """Print a GitHub pull-request review for the findings on changed lines (JSON).

    The body of POST /repos/{owner}/{repo}/pulls/{n}/reviews: one comment per finding on a
    line added or changed since --diff-base, with a suggestion when the fix is one line.
    With --post, send it (nothing is sent when there is no comment). Exit 0 when the
    review was printed (and posted), 2 on a usage error or when GitHub refused it.
    """
    import json

    from prefixlint.review import ReviewError, build_review, post_review
    from prefixlint.static.runner import INTERNAL_ERROR

    changes = _changed_lines(diff_base)
    opts = CheckOptions(
        paths=paths,
        select=select,
        ignore=ignore,
        config_path=config_path,
        no_cache=no_cache,
        cache_dir=cache_dir,
        jobs=jobs,
    )
    _writable(output)
    result = _lint(opts).result
    if result.internal_errors:
        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
    payload = build_review(result.diagnostics, changes)
    text = json.dumps(payload, indent=2)
    if output is not None:
        try:
            output.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            raise click.UsageError(f"cannot write {output}: {e.strerror or e}") from None
    else:
        click.echo(text)
    if not post:
        return
    if not payload["comments"]:
        click.echo("prefixlint review: no finding on changed lines, nothing posted", err=True)
        return
    try:
        answer = post_review(payload, pr=pr, api_url=api_url)
    except ReviewError as e:
        click.echo(f"prefixlint review: {e}", err=True)
        sys.exit(EXIT_ERROR)
    where = answer.get("html_url") or "GitHub"
    click.echo(
        f"prefixlint review: posted {len(payload['comments'])} comment(s) to {where}", err=True
    )


@main.command()
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


@main.command()
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


if __name__ == "__main__":
    main()
