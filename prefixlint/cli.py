"""The ``prefixlint`` command line."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from prefixlint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ["text", "json", "sarif", "github", "rdjson"]


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
@click.option("--tp", default="1,2,4,8", show_default=True, help="With --introspect: TP sizes.")
@click.option("--pp", default="2", show_default=True, help="With --introspect: PP sizes.")
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
    started = time.perf_counter()
    changes = _changed_lines(opts.diff_base) if opts.diff_base else None
    files, codes, result = _lint(opts)
    if opts.fix or opts.show_diff:
        changed = _apply_fixes(result.diagnostics, write=opts.fix and not opts.show_diff)
        if opts.show_diff:
            sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
        if changed:  # report what the fixes left
            files, codes, result = _lint(opts)
    if opts.with_introspect:
        found = _introspect_files(files, _int_list(opts.tp), _int_list(opts.pp))
        result.diagnostics.extend(d for d in found if d.code in codes)
    if changes is not None:
        result.diagnostics = changes.filter(result.diagnostics)
    _report(
        result.diagnostics,
        opts.output_format,
        result.files,
        opts.output,
        show_source=not opts.no_source,
        elapsed=time.perf_counter() - started,
    )
    if result.internal_errors:
        from prefixlint.static.runner import INTERNAL_ERROR

        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    _exit_for(result.diagnostics, opts.fail_on)


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
    tp: str = "1,2,4,8"
    pp: str = "2"
    fix: bool = False
    show_diff: bool = False
    diff_base: str | None = None


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


def _lint(opts: CheckOptions):
    """The static phase over the paths: (the files checked, the selected codes of every
    phase, the runner's result)."""
    from prefixlint.codes import CODES, STATIC
    from prefixlint.config import ConfigError, load_config, select_codes, validate_selectors
    from prefixlint.static.discovery import MissingPath, discover, installed_vllm_model_dirs
    from prefixlint.static.runner import run_static

    try:
        config = load_config(opts.config_path)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    targets = list(opts.paths)
    if opts.installed_vllm:
        found = installed_vllm_model_dirs()
        if not found:
            raise click.UsageError("--installed-vllm: no vLLM installation found on sys.path")
        targets.extend(found)
    if not targets:
        targets = [Path(".")]
    selectors = _split(opts.select) or config.select
    ignores = config.ignore + _split(opts.ignore)
    bad = validate_selectors(selectors + ignores, CODES)
    if bad:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(bad)}")
    codes = select_codes({c: e.default_enabled for c, e in CODES.items()}, selectors, ignores)
    try:
        files = discover(targets, config)
    except MissingPath as e:
        raise click.UsageError(f"path does not exist: {e}") from None
    static = {c for c in codes if CODES[c].phase == STATIC}
    result = run_static(
        files,
        config,
        static,
        jobs=opts.jobs,
        use_cache=not opts.no_cache,
        cache_dir=opts.cache_dir,
    )
    return files, codes, result


def _int_list(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not out or any(v < 1 for v in out):
        raise click.BadParameter(f"expected positive integers, got {value!r}")
    return out


def _config_table() -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]``: architecture -> config path (relative to pyproject)."""
    from prefixlint.config import ConfigError, load_configs_table

    try:
        return load_configs_table()
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
) -> None:
    from prefixlint.reporters import REPORTERS

    options = {
        "files": files,
        "names": _names(),
        "show_source": show_source,
        "root": Path.cwd(),
        "elapsed": elapsed,
    }
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            REPORTERS[output_format](diagnostics, fh, options)
    else:
        REPORTERS[output_format](diagnostics, sys.stdout, options)


def _exit_for(diagnostics, fail_on: str) -> None:
    from prefixlint.diagnostic import Severity

    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    sys.exit(EXIT_FINDINGS if any(d.severity.rank >= threshold for d in diagnostics) else EXIT_OK)


def _introspect_files(files: list[Path], tp: list[int], pp: list[int]) -> list:
    """Phase 2 for the model classes defined in ``files`` (found statically first)."""
    import re

    from prefixlint.introspect import introspect as run
    from prefixlint.introspect.worker import Worker
    from prefixlint.static.resolve import summarize_file

    arch_like = re.compile(r"For[A-Z]\w*$|Model$")
    table, base = _config_table()
    worker = Worker()
    out = []
    try:
        for path in files:
            summary = summarize_file(path)
            if summary is None:
                continue
            for cls in summary.classes.values():
                init = cls.methods.get("__init__")
                if init is None or init.param("vllm_config") is None:
                    continue
                if not arch_like.search(cls.name) or cls.name.startswith("_"):
                    continue
                report = run(
                    f"{path}:{cls.name}",
                    tp=tp,
                    pp=pp,
                    configs=table,
                    config_base=base,
                    worker=worker,
                )
                out.extend(report.diagnostics)
    finally:
        worker.close()
    # Subclasses inherit their base's construction: one finding per place, not per class.
    unique = {(d.code, d.filename, d.location.row, d.message): d for d in out}
    return sorted(unique.values(), key=lambda d: d.sort_key())


@main.command()
@click.argument("target")
@click.option(
    "--config", "config_path", help="config.json (or a folder holding one) to build with."
)
@click.option("--tp", default="1,2,4,8", show_default=True, help="Tensor-parallel sizes.")
@click.option("--pp", default="2", show_default=True, help="Pipeline sizes (SupportsPP only).")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="text")
@click.option("--fail-on", type=click.Choice(["error", "warning"]), default="warning")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds per build.")
def introspect(
    target: str,
    config_path: str | None,
    tp: str,
    pp: str,
    output_format: str,
    fail_on: str,
    timeout: float,
) -> None:
    """Build TARGET on the meta device for several TP/PP layouts and check what it built.

    TARGET is an architecture of the installed vLLM registry (LlamaForCausalLM),
    module:Class, or path/to/file.py[:Class].
    """
    from prefixlint.introspect import introspect as run

    table, base = _config_table()
    report = run(
        target,
        tp=_int_list(tp),
        pp=_int_list(pp),
        config=config_path,
        configs=table,
        config_base=base,
        timeout=timeout,
    )
    if report.error:
        raise click.UsageError(f"cannot introspect {target}: {report.error}")
    # The layout table goes to stderr in every format: JSON on stdout stays parseable.
    for result in report.results:
        click.echo(
            f"{result['arch']}: {result['status']} (config: {result['config_source'] or '-'})"
            + (f" {result['reason']}" if result["reason"] else ""),
            err=True,
        )
        for layout in result["layouts"]:
            extra = f" {layout['reason']}" if layout["reason"] else ""
            click.echo(
                f"  {layout['name']:<28} {layout['status']:<7} {layout['seconds']:.2f}s{extra}",
                err=True,
            )
    _report(report.diagnostics, output_format, len(report.results))
    _exit_for(report.diagnostics, fail_on)


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
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
def zoo(
    output_format: str,
    jobs: int,
    shard: str,
    tp: str,
    pp: str,
    timeout: float,
    only: tuple[str, ...],
    output: Path | None,
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
    )
    if output_format in ("text", "json"):
        text = summary.to_json_text() if output_format == "json" else summary.to_text()
        if output is not None:
            output.write_text(text, encoding="utf-8")
        else:
            click.echo(text)
    else:
        from prefixlint.diagnostic import Diagnostic

        findings = [Diagnostic.from_json(f) for row in summary.rows for f in row.findings]
        findings.sort(key=lambda d: d.sort_key())
        _report(findings, output_format, len(summary.rows), output)
    sys.exit(EXIT_FINDINGS if summary.findings else EXIT_OK)


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
    _, _, result = _lint(opts)
    if result.internal_errors:
        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
    payload = build_review(result.diagnostics, changes)
    text = json.dumps(payload, indent=2)
    if output is not None:
        output.write_text(text + "\n", encoding="utf-8")
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
