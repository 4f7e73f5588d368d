"""A static run over many files: cache look-ups, then the misses linted on all cores."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.codes import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE
from prefixlint.config import Config
from prefixlint.diagnostic import NOT_VERIFIED, Diagnostic, Position, Severity
from prefixlint.paths import display_path, resolved
from prefixlint.static.cache import ResultCache, content_hash
from prefixlint.static.index import package_root_for


@dataclass
class RunResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    cached: int = 0
    internal_errors: int = 0


# -- worker side -----------------------------------------------------------------------
_WORKER: Any = None


def _make_linter(
    codes: list[str],
    layers: list[str],
    package_dirs: list[str],
    cache_dir: str | None = None,
    scopes: dict[str, dict] | None = None,
) -> Any:
    from prefixlint.rules import RULES_BY_CODE
    from prefixlint.static.engine import Linter
    from prefixlint.static.scope import PackageScope
    from prefixlint.static.scope_units import Scopes

    resolver = _resolver(layers, package_dirs, cache_dir)
    known = {k: PackageScope.from_json(v) for k, v in (scopes or {}).items()}
    rules = [RULES_BY_CODE[c] for c in sorted(codes) if c in RULES_BY_CODE]
    return Linter(rules, resolver, Scopes(resolver, known))


def _resolver(layers: list[str], package_dirs: list[str], cache_dir: str | None) -> Any:
    from prefixlint.static.cache import SummaryCache
    from prefixlint.static.resolve import ModuleLoader, Resolver

    summaries = SummaryCache(Path(cache_dir)) if cache_dir else None
    loader = ModuleLoader(roots=[Path(p) for p in package_dirs], summary_cache=summaries)
    return Resolver(loader, extra_prefix_layers=layers)


def read_scopes(layers: list[str], package_dirs: list[str], cache_dir: str | None) -> dict:
    """The scope of every checked package (``scope.py``), read before the files are
    linted: a file's verdict depends on what the rest of its package registers."""
    from prefixlint.static.scope_units import Scopes

    resolver = _resolver(layers, package_dirs, cache_dir)
    scopes = Scopes(resolver)
    scopes.read([Path(p) for p in package_dirs])
    summaries = resolver.loader.summary_cache
    if summaries is not None:
        summaries.save()
    return {k: v.to_json() for k, v in scopes.known.items()}


def _init_worker(
    codes: list[str],
    layers: list[str],
    package_dirs: list[str],
    cache_dir: str | None,
    scopes: dict[str, dict] | None = None,
) -> None:
    import signal

    from prefixlint.static.vllm_source import use_fact_cache

    # Ctrl-C on a terminal reaches the whole group: the parent stops the pool (_end_pool);
    # a worker's own KeyboardInterrupt would only print its traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    global _WORKER
    use_fact_cache(Path(cache_dir) if cache_dir else None)  # a spawned worker starts bare
    _WORKER = _make_linter(codes, layers, package_dirs, cache_dir, scopes)


def _new_summaries(linter: Any) -> dict:
    cache = linter.resolver.loader.summary_cache
    if cache is None:
        return {}
    new, cache.new = cache.new, {}
    return new


# A file that takes longer than this is named on stderr: a slow run says where it is slow.
SLOW_FILE_SECONDS = 5.0


def _say(text: str) -> None:
    # stderr, never stdout: JSON and SARIF there stay parseable. Workers inherit it.
    sys.stderr.write(f"prefixlint: {text}\n")
    sys.stderr.flush()


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.2f} MB"


def _lint_one(linter: Any, path: str, display: str, data: bytes) -> tuple[list[dict], list[str]]:
    loader = linter.resolver.loader
    loader.touched = set()
    # Named while it is still running, so a file that never finishes is named too.
    watch = threading.Timer(
        SLOW_FILE_SECONDS,
        _say,
        (
            f"{display} ({_megabytes(len(data))}) is slow: still checking it after "
            f"{SLOW_FILE_SECONDS:.0f} s",
        ),
    )
    watch.daemon = True
    started = time.perf_counter()
    watch.start()
    try:
        diags = linter.lint_bytes(data, Path(path), display)
    except Exception as e:  # a bug in prefixlint must not hide the other files' findings
        diags = [_internal_error(display, e)]
    finally:
        watch.cancel()
    took = time.perf_counter() - started
    if took > SLOW_FILE_SECONDS:
        _say(f"{display} ({_megabytes(len(data))}) took {took:.1f} s to check")
    deps = sorted(str(p) for p in loader.touched if str(p) != str(resolved(path)))
    return [d.to_json() for d in diags], deps


def _internal_error(display: str, e: Exception) -> Diagnostic:
    detail = "".join(traceback.format_exception_only(type(e), e)).strip()
    return Diagnostic.at_line(
        INTERNAL_ERROR_CODE, f"internal error while linting this file: {detail}", display
    )


def _lint_chunk(
    chunk: list[tuple[str, str]],
) -> tuple[list[tuple[str, list[dict], list[str]]], dict]:
    out = []
    for path, display in chunk:
        try:
            data = Path(path).read_bytes()
        except OSError:
            data = b""
        diags, deps = _lint_one(_WORKER, path, display, data)
        out.append((path, diags, deps))
    return out, _new_summaries(_WORKER)


# -- main side -------------------------------------------------------------------------
Outcome = tuple[str, list[dict], list[str]]  # resolved path, findings as JSON, dependencies


@dataclass
class _Plan:
    """The files of a run: those answered already (cache, unreadable, too big) and those
    to lint (resolved path, display name, content digest)."""

    todo: list[tuple[str, str, str]] = field(default_factory=list)
    by_file: dict[str, list[dict]] = field(default_factory=dict)
    displays: dict[str, str] = field(default_factory=dict)


def run_static(
    files: list[Path],
    config: Config,
    codes: set[str],
    jobs: int | None = None,
    use_cache: bool = True,
    cache_dir: Path | None = None,
) -> RunResult:
    from prefixlint.static.vllm_source import facts_in

    folder = str(ResultCache.folder_for(cache_dir)) if use_cache else None
    # vLLM's registry and loader facts are kept beside the results: read once per release.
    with facts_in(Path(folder) if folder else None):
        return _run(files, config, codes, jobs, folder)


def _run(
    files: list[Path], config: Config, codes: set[str], jobs: int | None, folder: str | None
) -> RunResult:
    result = RunResult(files=len(files))
    package_dirs = _package_dirs(files)
    scopes = read_scopes(config.extend_prefix_layers, package_dirs, folder) if files else {}
    cache = _result_cache(Path(folder), codes, config, package_dirs, scopes) if folder else None
    plan = _plan(files, cache, codes, config, result)
    if plan.todo:
        linted = [(key, display) for key, display, _ in plan.todo]
        setup = (sorted(codes), config.extend_prefix_layers, package_dirs, folder, scopes)
        outcomes = _lint_files(linted, jobs, setup)
        digests = {key: digest for key, _, digest in plan.todo}
        for key, diags, deps in outcomes:
            plan.by_file[key] = diags
            internal = any(d["code"] == INTERNAL_ERROR_CODE for d in diags)
            if cache and not internal:
                cache.put(key, digests[key], deps, diags)
    if cache:
        cache.save()
    _collect(result, plan, config)
    return result


def _package_dirs(files: list[Path]) -> list[str]:
    """The top package folder of each file that sits in a package."""
    roots: dict[Path, Path | None] = {}  # a folder's package root, looked up once
    out: set[str] = set()
    for p in files:
        real = resolved(p)
        if real.parent not in roots:
            roots[real.parent] = package_root_for(real)
        root = roots[real.parent]
        if root is not None:
            out.add(str(root / real.relative_to(root).parts[0]))
    return sorted(out)


def _result_cache(
    folder: Path, codes: set[str], config: Config, package_dirs: list[str], scopes: dict
) -> ResultCache:
    from prefixlint.static.vllm_source import find_vllm

    vllm = find_vllm()
    return ResultCache(
        folder,
        {
            "codes": sorted(codes),
            "layers": config.extend_prefix_layers,
            # Where vLLM's facts come from (its registry decides the roots of vLLM's tree).
            "vllm": vllm.identity if vllm else None,
            "packages": package_dirs,
            # What the packages register and build decides each class's contract.
            "scopes": {
                k: content_hash(json.dumps(v, sort_keys=True).encode()) for k, v in scopes.items()
            },
        },
    )


def _plan(
    files: list[Path],
    cache: ResultCache | None,
    codes: set[str],
    config: Config,
    result: RunResult,
) -> _Plan:
    """Answer what needs no lint (unreadable, over the size limit, cached); list the rest."""
    plan = _Plan()
    limit = int(config.max_file_size * 1_000_000)
    for f in files:
        key = str(resolved(f))
        display = display_path(f)
        plan.displays[key] = display
        try:
            # Sized before it is read: a file of gigabytes is never loaded.
            size = f.stat().st_size
            if size > limit:
                plan.by_file[key] = (
                    [_too_big(display, size, config)] if SYNTAX_ERROR_CODE in codes else []
                )
                continue
            data = f.read_bytes()
        except OSError as e:
            plan.by_file[key] = [_io_error(display, e)]
            continue
        digest = content_hash(data)
        hit = cache.get(key, digest) if cache else None
        if hit is not None:
            result.cached += 1
            plan.by_file[key] = hit
        else:
            plan.todo.append((key, display, digest))
    return plan


def _lint_files(
    todo: list[tuple[str, str]],
    jobs: int | None,
    setup: tuple,
) -> list[Outcome]:
    """Lint ``todo`` (resolved path, display name) in this process or on all cores.
    ``setup`` is what each linter is made from: codes, layers, package folders, cache,
    package scopes."""
    workers = min(jobs or os.cpu_count() or 1, len(todo))
    if workers > 1 and len(todo) >= 8:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return _lint_parallel(todo, workers, setup)
        except BrokenProcessPool:
            # A worker died (out of memory, a signal): lint in this process instead, so
            # the run still ends in findings or a clean internal error.
            pass
    linter = _make_linter(*setup)
    outcomes = [(key, *_lint_one(linter, key, display, _read(key))) for key, display in todo]
    summaries = linter.resolver.loader.summary_cache
    if summaries is not None:
        summaries.save()
    return outcomes


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:  # gone since it was planned: linted as empty, as a worker does
        return b""


def _collect(result: RunResult, plan: _Plan, config: Config) -> None:
    """Every file's findings into ``result``, less its per-file ignores, sorted."""
    for key, diags in plan.by_file.items():
        ignored = config.ignored_for(Path(key))
        for obj in diags:
            d = Diagnostic.from_json({**obj, "filename": plan.displays[key]})
            if d.code == INTERNAL_ERROR_CODE:
                result.internal_errors += 1
            if ignored and any(d.code.startswith(i) for i in ignored):
                continue
            result.diagnostics.append(d)
    result.diagnostics.sort(key=Diagnostic.sort_key)


def _lint_parallel(
    todo: list[tuple[str, str]],
    workers: int,
    setup: tuple,
) -> list[Outcome]:
    # Imported here: a warm or one-file run never starts a pool.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Largest files first, dealt round-robin into several chunks per worker: even load.
    sized = sorted(
        todo, key=lambda t: os.path.getsize(t[0]) if os.path.exists(t[0]) else 0, reverse=True
    )
    n_chunks = workers * 4
    chunks: list[list[tuple[str, str]]] = [[] for _ in range(n_chunks)]
    for i, item in enumerate(sized):
        chunks[i % n_chunks].append(item)
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    outcomes: list[Outcome] = []
    new_summaries: dict = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=setup
    ) as pool:
        try:
            # submit and result, not map: map cancels what is pending when interrupted,
            # and the pool's thread then fails on a cancelled future (InvalidStateError)
            for future in [pool.submit(_lint_chunk, c) for c in chunks if c]:
                part, summaries = future.result()
                outcomes.extend(part)
                new_summaries.update(summaries)
        except BaseException:
            _end_pool(pool)  # Ctrl-C: now, not when every chunk under way is linted
            raise
    cache_dir = setup[3]
    if cache_dir is not None and new_summaries:
        from prefixlint.static.cache import SummaryCache

        store = SummaryCache(Path(cache_dir))
        store.merge(new_summaries)
        store.save()
    return outcomes


def _end_pool(pool: Any) -> None:
    """Kill a pool's processes: leaving the ``with`` block then waits for nothing (its own
    shutdown waits for every chunk under way)."""
    import signal

    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.join(1)  # reaped: none is left behind, even for a moment
    pool.shutdown(wait=False)  # not cancel_futures: see _lint_parallel


def _too_big(display: str, size: int, config: Config) -> dict:
    """A note, not an error: the file was not checked, and the message says how to."""
    where = f" in {config.source}" if config.source else ""
    return Diagnostic(
        code=SYNTAX_ERROR_CODE,
        message=(
            f"not checked: file is {_megabytes(size)}, over the limit of "
            f"{config.max_file_size:g} MB (set `max-file-size` in [tool.prefixlint]{where})"
        ),
        severity=Severity.NOTE,
        filename=display,
        location=Position(1, 1),
        end_location=Position(1, 1),
        data={NOT_VERIFIED: True},
    ).to_json()


def _io_error(display: str, e: OSError) -> dict:
    return Diagnostic.at_line(
        SYNTAX_ERROR_CODE, f"cannot read file: {e.strerror or e}", display
    ).to_json()
