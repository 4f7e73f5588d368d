"""The static phase as ``check`` and ``review`` run it: files found under the paths, each
with the configuration of its closest pyproject, linted group by group."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from prefixlint.commands.common import split_codes


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
    show_notes: bool = False
    with_introspect: bool = False
    no_dryrun: bool = False
    no_compare: bool = False
    no_warm_worker: bool = False
    checkpoint: str | None = None
    explore_budget: float | None = None
    tp: str | None = None
    pp: str | None = None
    timeout: float | None = None
    strict: bool = False
    fix: bool = False
    show_diff: bool = False
    diff_base: str | None = None
    also: tuple[str, ...] = ()


@dataclass
class FileGroup:
    """Files that share one pyproject, its configuration and its selected codes."""

    config: Any
    codes: set[str]
    files: list[Path]


@dataclass
class LintRun:
    files: list[Path]
    groups: list[FileGroup]
    result: Any  # the runner's RunResult, over every group

    def selected(self, d: Any) -> bool:
        """Whether a finding of another phase is selected for its file (codes and
        per-file-ignores of the file's configuration)."""
        from prefixlint.paths import resolved

        path = resolved(d.filename)
        for g in self.groups:
            if any(resolved(f) == path for f in g.files):
                ignored = g.config.ignored_for(path)
                return d.code in g.codes and not any(d.code.startswith(i) for i in ignored)
        return True  # a file the run did not list (an imported module): its finding stays


def lint(opts: CheckOptions) -> LintRun:
    """The static phase over the paths. Each file uses the configuration of the closest
    pyproject.toml above it (or --config for all)."""
    from prefixlint.codes import CODES, STATIC
    from prefixlint.config import ConfigError, validate_selectors
    from prefixlint.paths import forget_resolved
    from prefixlint.static.discovery import MissingPath, NotAFile, discover
    from prefixlint.static.runner import RunResult, run_static

    forget_resolved()  # links may have changed since this process's last run
    targets = _targets(opts)
    bad = validate_selectors(split_codes(opts.select) + split_codes(opts.ignore), CODES)
    if bad:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(bad)}")
    groups: dict[Any, FileGroup] = {}
    seen: dict[Any, Any] = {}
    listed: set[tuple[Any, Path]] = set()
    try:
        for target in targets:
            config = _config_at(opts.config_path, target, seen)
            for f in discover([target], config):
                own = config if opts.config_path else _config_at(None, f, seen)
                if own is not config and own.is_excluded(f):
                    continue
                if own.source not in groups:  # its codes worked out once, not per file
                    groups[own.source] = FileGroup(own, _codes(opts, own), [])
                group = groups[own.source]
                if (own.source, f) not in listed:  # a set: a list's ``in`` is quadratic
                    listed.add((own.source, f))
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
    (``seen``: the configurations this run has read, by source, and the source found for
    each folder)."""
    from prefixlint.config import Config, find_config_file, load_config

    start = path if path.is_dir() else path.parent
    if explicit:
        source = explicit
    else:
        # Files of one folder share their pyproject: looked up (and read) once per folder.
        key = ("folder", start)
        if key not in seen:
            seen[key] = find_config_file(start if start.exists() else Path.cwd())
        source = seen[key]
    if source not in seen:
        seen[source] = load_config(source) if source else Config()
    return seen[source]


def _codes(opts: CheckOptions, config: Any) -> set[str]:
    from prefixlint.codes import CODES
    from prefixlint.config import ConfigError, select_codes, validate_selectors

    selectors = split_codes(opts.select) or config.select
    ignores = config.ignore + split_codes(opts.ignore)
    bad = validate_selectors(selectors + ignores, CODES)
    if bad:
        raise ConfigError(f"{config.source}: unknown rule code or prefix: {', '.join(bad)}")
    return select_codes({c: e.default_enabled for c, e in CODES.items()}, selectors, ignores)
