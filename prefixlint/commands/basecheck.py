"""``check --diff-base`` and ``review``: the same checks on the base, and the findings the
change caused (``prefixlint.basediff``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefixlint.commands.lint import CheckOptions, LintRun
from prefixlint.diagnostic import Diagnostic

# check's phase 2 over given files with given configs: (its result, what it verified)
Phase2 = Callable[..., tuple[Any, str]]


def findings_of_change(
    run: LintRun,
    opts: CheckOptions,
    changes: Any,
    head_phase2: Any = None,
    phase2: Phase2 | None = None,
) -> list[Diagnostic]:
    """Head's findings (``run``'s static ones and ``head_phase2``'s) that are new against
    the base: the changed files are materialised at the base and checked the same way
    (phase 2 too, with head's configs, when ``head_phase2`` is given). Sets
    ``changes.not_caused``."""
    import click

    from prefixlint.basediff import judge, materialise
    from prefixlint.basediff_builds import compare_builds, settled
    from prefixlint.check_introspect import one_per_site
    from prefixlint.diffbase import DiffError

    changed = []
    for f in run.files:
        path = changes.repo_path(str(f))
        if path is not None and changes.file_changed(path):
            changed.append(path)
    from prefixlint.static.cache import ResultCache

    cache = None if opts.no_cache else ResultCache.folder_for(opts.cache_dir)
    try:
        tree = materialise(changes, changed, cache)
    except (DiffError, OSError) as e:
        raise click.UsageError(f"--diff-base: cannot check out the base's files: {e}") from None
    try:
        head_found = [] if head_phase2 is None else head_phase2.diagnostics
        base_found: list[Diagnostic] = []
        if head_phase2 is not None and tree.files and phase2 is not None:
            head_of = {str(c): changes.root / h for h, c in tree.files.items()}
            base_phase2, _ = phase2(
                list(tree.files.values()),
                lambda p: _head_configs(Path(head_of.get(str(p), p))),
            )
            head_found = compare_builds(base_phase2, head_phase2, head_found)
            base_found = base_phase2.diagnostics
        head = one_per_site(run.result.diagnostics, [d for d in head_found if run.selected(d)])
        base = one_per_site(_base_static(run, opts, changes, tree), base_found)
        verdict = judge(head, base, changes, tree)
    finally:
        tree.close()
    changes.not_caused = verdict.not_caused
    return settled(verdict.kept)


def _head_configs(path: Path) -> tuple[dict[str, str], str | None]:
    from prefixlint.commands.common import config_table

    return config_table(path.parent)


def _base_static(run: LintRun, opts: CheckOptions, changes: Any, tree: Any) -> list[Diagnostic]:
    """The static phase on the base copies, each with its head file's configuration."""
    from prefixlint.codes import CODES, STATIC
    from prefixlint.static.runner import run_static

    out: list[Diagnostic] = []
    for group in run.groups:
        files = []
        for f in group.files:
            path = changes.repo_path(str(f))
            if path in tree.files:
                files.append(tree.files[path])
        if not files:
            continue
        part = run_static(
            files,
            group.config,
            {c for c in group.codes if CODES[c].phase == STATIC},
            jobs=opts.jobs,
            use_cache=not opts.no_cache,
            cache_dir=opts.cache_dir,
        )
        out += part.diagnostics
    return out
