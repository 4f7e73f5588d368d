"""The ``prefixlint`` command line."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from prefixlint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ["text", "json", "sarif", "github", "rdjson"]


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip().upper() for value in values for v in value.split(",") if v.strip()]


def _rule_table() -> dict[str, tuple[str, str, bool, str]]:
    """code -> (name, default severity, default-enabled, summary); importing the rules
    themselves (and libcst) waits until a file actually needs linting."""
    from prefixlint.ruletable import RULE_TABLE

    return RULE_TABLE


class _Group(click.Group):
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
@click.option("--pp", default="2,4", show_default=True, help="With --introspect: PP sizes.")
@click.option(
    "--explore-budget",
    type=float,
    default=10.0,
    show_default=True,
    help="With --introspect: seconds per class for config variants that build unexecuted "
    "construction sites (0: the synthesised config only).",
)
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
def check(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    output_format: str,
    fail_on: str,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    config_path: Path | None,
    installed_vllm: bool,
    no_source: bool,
    output: Path | None,
    with_introspect: bool,
    tp: str,
    pp: str,
    explore_budget: float,
    fix: bool,
    show_diff: bool,
    diff_base: str | None,
) -> None:
    """Check model files (default: the current folder) and report findings."""
    from prefixlint.diagnostic import Severity
    from prefixlint.reporters import REPORTERS
    from prefixlint.runner import INTERNAL_ERROR

    started = time.perf_counter()
    changes = _changed_lines(diff_base) if diff_base else None
    files, result = _lint(
        paths, select, ignore, config_path, installed_vllm, no_cache, cache_dir, jobs
    )
    if fix or show_diff:
        changed = _apply_fixes(result.diagnostics, write=fix and not show_diff)
        if show_diff:
            sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
        if changed:  # report what the fixes left
            files, result = _lint(
                paths, select, ignore, config_path, installed_vllm, no_cache, cache_dir, jobs
            )
    if with_introspect:
        found = _introspect_files(files, _int_list(tp), _int_list(pp), explore_budget)
        result.diagnostics = _one_per_site(result.diagnostics, found)
    if changes is not None:
        result.diagnostics = changes.filter(result.diagnostics)
    reporter = REPORTERS[output_format]
    options = {
        "files": result.files,
        "names": _names(),
        "show_source": not no_source,
        "elapsed": time.perf_counter() - started,
        "root": Path.cwd(),
    }
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            reporter(result.diagnostics, fh, options)
    else:
        reporter(result.diagnostics, sys.stdout, options)
    if result.internal_errors:
        click.echo(
            f"prefixlint: {result.internal_errors} file(s) hit an internal error "
            f"({INTERNAL_ERROR}); please report it",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    failing = any(d.severity.rank >= threshold for d in result.diagnostics)
    sys.exit(EXIT_FINDINGS if failing else EXIT_OK)


FIXABLE = ("PFX301", "PFX302")


def _apply_fixes(diagnostics: list, write: bool) -> int:
    """Fix (or, without ``write``, print the diff of) every file with a fixable finding.
    Returns how many files change; what is left alone and why goes to stderr."""
    from prefixlint.fix import fix_file

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


def _lint(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_path: Path | None,
    installed_vllm: bool,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
):
    """The static phase over PATHS: (the files checked, the runner's result)."""
    from prefixlint.config import ConfigError, load_config, select_codes, validate_selectors
    from prefixlint.discovery import MissingPath, discover, installed_vllm_model_dirs
    from prefixlint.runner import run_static

    try:
        config = load_config(config_path)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    targets = list(paths)
    if installed_vllm:
        found = installed_vllm_model_dirs()
        if not found:
            raise click.UsageError("--installed-vllm: no vLLM installation found on sys.path")
        targets.extend(found)
    if not targets:
        targets = [Path(".")]
    table = _rule_table()
    selectors = _split(select) or config.select
    ignores = config.ignore + _split(ignore)
    bad = validate_selectors(selectors + ignores, table)
    if bad:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(bad)}")
    codes = select_codes({c: v[2] for c, v in table.items()}, selectors, ignores)
    try:
        files = discover(targets, config)
    except MissingPath as e:
        raise click.UsageError(f"path does not exist: {e}") from None

    result = run_static(
        files, config, codes, jobs=jobs, use_cache=not no_cache, cache_dir=cache_dir
    )
    return files, result


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
    from prefixlint.config import ConfigError, find_pyproject

    path = find_pyproject(Path.cwd())
    if path is None:
        return {}, None
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise click.UsageError(str(ConfigError(f"cannot read {path}: {e}"))) from None
    table = data.get("tool", {}).get("prefixlint", {}).get("configs", {})
    if not isinstance(table, dict):
        raise click.UsageError(f"{path}: [tool.prefixlint.configs] must be a table")
    return {str(k): str(v) for k, v in table.items()}, str(path.parent)


def _names() -> dict[str, str]:
    from prefixlint.ruletable import RULE_TABLE, phase_rules

    return {c: v[0] for c, v in (RULE_TABLE | phase_rules()).items()}


def _report(diagnostics, output_format: str, files: int, output: Path | None = None) -> None:
    from prefixlint.reporters import REPORTERS

    options = {"files": files, "names": _names(), "show_source": True, "root": Path.cwd()}
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            REPORTERS[output_format](diagnostics, fh, options)
    else:
        REPORTERS[output_format](diagnostics, sys.stdout, options)


def _exit_for(diagnostics, fail_on: str) -> None:
    from prefixlint.diagnostic import Severity

    threshold = Severity.ERROR.rank if fail_on == "error" else Severity.WARNING.rank
    sys.exit(EXIT_FINDINGS if any(d.severity.rank >= threshold for d in diagnostics) else EXIT_OK)


def _one_per_site(static: list, runtime: list) -> list:
    """Phase 2's PFX601 for a leaf built without a prefix and phase 1's PFX301 are one
    defect at one line: the run-time finding (it saw the build) stands for both."""
    seen = {(d.filename, d.location.row) for d in runtime if d.code == "PFX601"}
    kept = [d for d in static if not (d.code == "PFX301" and (d.filename, d.location.row) in seen)]
    return kept + runtime


def _introspect_files(
    files: list[Path], tp: list[int], pp: list[int], explore_budget: float = 10.0
) -> list:
    """Phase 2 for the model classes defined in ``files`` (found statically first)."""
    import re

    from prefixlint.catalog import summarize_file
    from prefixlint.introspect import introspect as run
    from prefixlint.introspect.worker import Worker

    arch_like = re.compile(r"For[A-Z]\w*$|Model$")
    table, base = _config_table()
    worker = Worker()
    out = []
    executed: set[tuple[str, int]] = set()
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
                    explore_budget=explore_budget,
                )
                out.extend(report.diagnostics)
                for result in report.results:
                    for file, cov in result.get("coverage", {}).get("files", {}).items():
                        executed.update((str(Path(file).resolve()), n) for n in cov["executed"])
    finally:
        worker.close()
    return _merge_classes(out, executed)


def _merge_classes(found: list, executed: set[tuple[str, int]]) -> list:
    """Classes of one file build the same sites (a model and its ``ForCausalLM``): one
    finding per code and place (the longest message: its path is the full one), and no
    "not verified" note at a site another class's build executed."""
    best: dict[tuple, object] = {}
    for d in found:
        if (
            d.severity.value == "note"
            and (str(Path(d.filename).resolve()), d.location.row) in executed
        ):
            continue
        key = (
            (d.code, d.filename, d.location.row)
            if d.code != "PFX600"
            else (d.code, d.filename, d.location.row, d.message)
        )
        if key not in best or len(d.message) > len(best[key].message):
            best[key] = d
    return sorted(best.values(), key=lambda d: d.sort_key())


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
    explore_budget: float,
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
        explore_budget=explore_budget,
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
        _echo_coverage(result)
    _report(report.diagnostics, output_format, len(report.results))
    _exit_for(report.diagnostics, fail_on)


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
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
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
    output: Path | None,
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
    from prefixlint.runner import INTERNAL_ERROR

    changes = _changed_lines(diff_base)
    _, result = _lint(paths, select, ignore, config_path, False, no_cache, cache_dir, jobs)
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
    """List every rule: code, name, default severity, whether it is on by default."""
    import json

    table = _rule_table()
    if output_format == "json":
        click.echo(
            json.dumps(
                [
                    {"code": c, "name": n, "severity": s, "default_enabled": on, "summary": summ}
                    for c, (n, s, on, summ) in table.items()
                ],
                indent=2,
            )
        )
        return
    from prefixlint.ruletable import phase_rules

    rows = [
        (c, n, sev, "on" if on else "off", "static", summ)
        for c, (n, sev, on, summ) in table.items()
    ]
    rows += [
        (c, n, sev, "on", phase, summ) for c, (n, sev, summ, _, phase) in phase_rules().items()
    ]
    name_w = max(len(r[1]) for r in rows)
    click.echo(
        f"{'code':<7} {'name':<{name_w}} {'severity':<8} {'default':<7} {'phase':<10} summary"
    )
    for code, name, severity, on, phase, summary in rows:
        click.echo(f"{code:<7} {name:<{name_w}} {severity:<8} {on:<7} {phase:<10} {summary}")


@main.command()
@click.argument("code")
def rule(code: str) -> None:
    """Show a rule's documentation: what it does, why, example, use instead."""
    from prefixlint.rules import RULES_BY_CODE
    from prefixlint.ruletable import phase_rules

    key = code.strip().upper()
    later = phase_rules()
    match = next(
        ((c, v) for c, v in later.items() if key == c or v[0] == code.strip().lower()), None
    )
    if match is not None:
        found_code, (name, severity, summary, doc, phase) = match
        click.echo(f"# {name} ({found_code})\n")
        click.echo(f"Phase: {phase}. Default severity: {severity}.\n\n{summary}.\n\n{doc}")
        return
    found = RULES_BY_CODE.get(key)
    if found is None:
        by_name = {r.name: r for r in RULES_BY_CODE.values()}
        found = by_name.get(code.strip().lower())
    if found is None:
        raise click.UsageError(f"unknown rule: {code} (see `prefixlint rules`)")
    default = "on" if found.default_enabled else "off (enable with --select)"
    click.echo(f"# {found.name} ({found.code})\n")
    click.echo(f"Default severity: {found.severity.value}. Default: {default}.\n")
    click.echo(found.documentation())


def _register_phase3() -> None:
    from prefixlint.smoke.cli import smoke  # light: the engine runs in a child process

    main.add_command(smoke)


_register_phase3()

if __name__ == "__main__":
    main()
