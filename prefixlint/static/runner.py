"""A static run over many files: cache look-ups, then the misses linted on all cores."""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.config import Config
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.static.cache import ResultCache, content_hash, stat_key
from prefixlint.static.index import find_installed_package, package_root_for

INTERNAL_ERROR = "PFX000"
_REGISTRY_ENTRY = re.compile(r"\"(\w+)\"\s*:\s*\(\s*\"[\w.]+\"\s*,\s*\"(\w+)\"\s*\)")


@dataclass
class RunResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    cached: int = 0
    internal_errors: int = 0


def registry_architectures(vllm_dir: Path | None) -> frozenset[str]:
    """Class names the installed vLLM's model registry maps architectures to (read as text)."""
    if vllm_dir is None:
        return frozenset()
    try:
        text = (vllm_dir / "model_executor" / "models" / "registry.py").read_text("utf-8")
    except OSError:
        return frozenset()
    return frozenset(m.group(2) for m in _REGISTRY_ENTRY.finditer(text))


def display_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


# -- worker side -----------------------------------------------------------------------
_WORKER: Any = None


def _make_linter(
    codes: list[str], layers: list[str], package_dirs: list[str], cache_dir: str | None = None
) -> Any:
    from prefixlint.rules import RULES_BY_CODE
    from prefixlint.static.cache import SummaryCache
    from prefixlint.static.engine import Linter
    from prefixlint.static.resolve import ModuleLoader, Resolver

    summaries = SummaryCache(Path(cache_dir)) if cache_dir else None
    loader = ModuleLoader(roots=[Path(p) for p in package_dirs], summary_cache=summaries)
    resolver = Resolver(loader, extra_prefix_layers=layers)
    archs = registry_architectures(find_installed_package("vllm"))
    rules = [RULES_BY_CODE[c] for c in sorted(codes) if c in RULES_BY_CODE]
    return Linter(rules, resolver, archs)


def _init_worker(
    codes: list[str], layers: list[str], package_dirs: list[str], cache_dir: str | None
) -> None:
    global _WORKER
    _WORKER = _make_linter(codes, layers, package_dirs, cache_dir)


def _new_summaries(linter: Any) -> dict:
    cache = linter.resolver.loader._summary_cache
    if cache is None:
        return {}
    new, cache.new = cache.new, {}
    return new


def _lint_one(linter: Any, path: str, display: str, data: bytes) -> tuple[list[dict], list[str]]:
    loader = linter.resolver.loader
    loader.touched = set()
    try:
        diags = linter.lint_bytes(data, Path(path), display)
    except Exception as e:  # a bug in prefixlint must not hide the other files' findings
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        diags = [
            Diagnostic(
                code=INTERNAL_ERROR,
                message=f"internal error while linting this file: {detail}",
                severity=Severity.ERROR,
                filename=display,
                location=Position(1, 1),
                end_location=Position(1, 1),
            )
        ]
    deps = sorted(str(p) for p in loader.touched if str(p) != str(Path(path).resolve()))
    return [d.to_json() for d in diags], deps


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
def run_static(
    files: list[Path],
    config: Config,
    codes: set[str],
    jobs: int | None = None,
    use_cache: bool = True,
    cache_dir: Path | None = None,
) -> RunResult:
    result = RunResult(files=len(files))
    package_dirs = sorted(
        {
            str(root / p.resolve().relative_to(root).parts[0])
            for p in files
            if (root := package_root_for(p))
        }
    )
    vllm = find_installed_package("vllm")
    cache = None
    if use_cache:
        cache = ResultCache(
            cache_dir or ResultCache.default_folder(),
            {
                "codes": sorted(codes),
                "layers": config.extend_prefix_layers,
                "vllm": str(vllm) if vllm else None,
                # The registry decides which classes are architectures.
                "registry": stat_key(str(vllm / "model_executor" / "models" / "registry.py"))
                if vllm
                else None,
                "packages": package_dirs,
            },
        )
    todo: list[tuple[str, str, str]] = []  # (resolved path, display, digest)
    by_file: dict[str, list[dict]] = {}
    displays: dict[str, str] = {}
    for f in files:
        key = str(f.resolve())
        display = display_path(f)
        displays[key] = display
        try:
            data = f.read_bytes()
        except OSError as e:
            by_file[key] = [_io_error(display, e)]
            continue
        digest = content_hash(data)
        hit = cache.get(key, digest) if cache else None
        if hit is not None:
            result.cached += 1
            by_file[key] = hit
        else:
            todo.append((key, display, digest))

    if todo:
        digests = {k: d for k, _, d in todo}
        workers = min(jobs or os.cpu_count() or 1, len(todo))
        folder = str(cache_dir or ResultCache.default_folder()) if use_cache else None
        if workers <= 1 or len(todo) < 8:
            linter = _make_linter(sorted(codes), config.extend_prefix_layers, package_dirs, folder)
            outcomes = []
            for key, display, _ in todo:
                diags, deps = _lint_one(linter, key, display, Path(key).read_bytes())
                outcomes.append((key, diags, deps))
            summaries = linter.resolver.loader._summary_cache
            if summaries is not None:
                summaries.save()
        else:
            from concurrent.futures.process import BrokenProcessPool

            try:
                outcomes = _lint_parallel(
                    todo, workers, sorted(codes), config, package_dirs, folder
                )
            except BrokenProcessPool:
                # A worker died (out of memory, a signal): lint in this process instead, so
                # the run still ends in findings or a clean internal error.
                linter = _make_linter(
                    sorted(codes), config.extend_prefix_layers, package_dirs, folder
                )
                outcomes = [
                    (key, *_lint_one(linter, key, display, Path(key).read_bytes()))
                    for key, display, _ in todo
                ]
        for key, diags, deps in outcomes:
            by_file[key] = diags
            internal = any(d["code"] == INTERNAL_ERROR for d in diags)
            if cache and not internal:
                cache.put(key, digests[key], deps, diags)
    if cache:
        cache.save()

    for key, diags in by_file.items():
        ignored = config.ignored_for(Path(key))
        for obj in diags:
            d = Diagnostic.from_json({**obj, "filename": displays[key]})
            if d.code == INTERNAL_ERROR:
                result.internal_errors += 1
            if ignored and any(d.code.startswith(i) for i in ignored):
                continue
            result.diagnostics.append(d)
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _lint_parallel(
    todo: list[tuple[str, str, str]],
    workers: int,
    codes: list[str],
    config: Config,
    package_dirs: list[str],
    cache_dir: str | None,
) -> list[tuple[str, list[dict], list[str]]]:
    # Imported here: a warm or one-file run never starts a pool.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Largest files first, dealt round-robin into several chunks per worker: even load.
    sized = sorted(
        todo, key=lambda t: os.path.getsize(t[0]) if os.path.exists(t[0]) else 0, reverse=True
    )
    n_chunks = workers * 4
    chunks: list[list[tuple[str, str]]] = [[] for _ in range(n_chunks)]
    for i, (key, display, _) in enumerate(sized):
        chunks[i % n_chunks].append((key, display))
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    outcomes: list[tuple[str, list[dict], list[str]]] = []
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(codes, config.extend_prefix_layers, package_dirs, cache_dir),
    ) as pool:
        new_summaries: dict = {}
        for part, summaries in pool.map(_lint_chunk, [c for c in chunks if c]):
            outcomes.extend(part)
            new_summaries.update(summaries)
    if cache_dir is not None and new_summaries:
        from prefixlint.static.cache import SummaryCache

        store = SummaryCache(Path(cache_dir))
        store.merge(new_summaries)
        store.save()
    return outcomes


def _io_error(display: str, e: OSError) -> dict:
    return Diagnostic(
        code="PFX001",
        message=f"cannot read file: {e.strerror or e}",
        severity=Severity.ERROR,
        filename=display,
        location=Position(1, 1),
        end_location=Position(1, 1),
    ).to_json()
