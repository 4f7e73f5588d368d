"""Construction coverage: which prefix-taking construction sites of a model's files ran.

A *site* is a call in the model's source that passes a ``prefix`` (``Foo(..., prefix=p)``,
``make_layers(..., prefix=p)``, ``layer_type(prefix=p)``) or that builds one of vLLM's
prefix-taking layers without one (``VocabParallelEmbedding(v, h)``). The index is the
stdlib ``ast`` over the file (it never imports it). A site is *executed* when its line ran
in at least one build (the recorder traces the model's files line by line). A site that no
build executed was not verified: phase 2 says so instead of passing it silently.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Calls that pass ``prefix=`` but construct nothing (or are the class's own ``super()``).
_NOT_CONSTRUCTORS = frozenset(
    {"__init__", "is_layer_skipped", "dict", "set_current_vllm_config", "maybe_prefix"}
)
# vLLM layers that take a prefix: a call without one is still a construction site.
_PREFIX_LAYERS = frozenset(
    {
        "VocabParallelEmbedding",
        "ParallelLMHead",
        "ColumnParallelLinear",
        "RowParallelLinear",
        "QKVParallelLinear",
        "MergedColumnParallelLinear",
        "ReplicatedLinear",
        "Attention",
        "MLAAttention",
        "FusedMoE",
        "SharedFusedMoE",
    }
)
_INTERFACES = ("Supports", "Has", "Is")
_INTERFACE_FILES = ("interfaces", "interfaces_base")
# Functions whose calls run after construction: not construction sites.
_RUNTIME_FUNCTIONS = frozenset({"forward", "load_weights", "compute_logits", "_forward"})


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    callee: str
    owner: str  # enclosing top-level class ("" at module level)
    prefixed: bool  # passes ``prefix=``


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


class _Collector(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.owner = ""
        self.function = ""
        self.sites: list[Site] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.owner
        self.owner = self.owner or node.name
        self.generic_visit(node)
        self.owner = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.function
        self.function = node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        if self.function in _RUNTIME_FUNCTIONS:
            return
        name = _callee(node)
        prefixed = any(k.arg == "prefix" for k in node.keywords)
        if (prefixed and name and name not in _NOT_CONSTRUCTORS) or name in _PREFIX_LAYERS:
            self.sites.append(Site(self.file, node.lineno, name, self.owner, prefixed))


@functools.lru_cache(maxsize=512)
def construction_sites(path: str) -> tuple[Site, ...]:
    """Every prefix-taking construction site of ``path`` (empty when it does not parse)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return ()
    collector = _Collector(path)
    collector.visit(tree)
    return tuple(sorted(set(collector.sites), key=lambda s: (s.line, s.callee)))


@functools.lru_cache(maxsize=4096)
def passes_quant_config(file: str, line: int) -> bool:
    """The call at ``file:line`` hands a ``quant_config`` to what it builds: the quantization
    method is then resolved by the module's prefix."""
    return line in _quant_lines(file)


@functools.lru_cache(maxsize=512)
def _quant_lines(path: str) -> frozenset[int]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            values = [k.value for k in node.keywords if k.arg == "quant_config"] + [
                a for a in node.args if "quant_config" in ast.unparse(a)
            ]
            if any(not (isinstance(v, ast.Constant) and v.value is None) for v in values):
                out.add(node.lineno)
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def _source_file(cls: type) -> str:
    try:
        return inspect.getsourcefile(cls) or ""
    except (OSError, TypeError):
        return ""


def own_files(cls: type | None, external: Any) -> list[str]:
    """The files of the model class and its bases that are model code (``external``)."""
    out: list[str] = []
    for klass in getattr(cls, "__mro__", ()):
        if klass.__name__.startswith(_INTERFACES) or klass.__module__.endswith(_INTERFACE_FILES):
            continue  # vLLM's interface mixins: their helpers are not the model's sites
        f = _source_file(klass)
        if f and external(f) and f not in out and construction_sites(f):
            out.append(f)
    return out


def _built_classes(recorder: Any) -> dict[str, set[str]]:
    """Model file -> top-level classes of the modules a build made (cached per recorder:
    exploration measures the same builds many times)."""
    cached = getattr(recorder, "built_classes", None)
    if cached is not None:
        return cached
    out: dict[str, set[str]] = {}
    for klass in {type(r.module) for r in recorder.records.values()}:
        f = _source_file(klass)
        if f and recorder.external(f):
            out.setdefault(f, set()).add(klass.__qualname__.split(".")[0])
    recorder.built_classes = out
    return out


def measure(cls: type | None, builds: Iterable[Any]) -> dict[str, Any]:
    """Sites of the model's own files (every site) and of other model files whose classes
    were built (the sites inside those classes), against the lines that ran in any build."""
    builds = list(builds)
    if not builds:
        return {"sites": 0, "executed": 0, "files": {}, "not_executed": []}
    external = builds[0].recorder.external
    ran: dict[str, set[int]] = {}
    used: dict[str, set[str]] = {}  # other file -> top-level classes built from it
    for build in builds:
        for file, lines in build.recorder.lines.items():
            ran.setdefault(file, set()).update(lines)
        for f, owners in _built_classes(build.recorder).items():
            used.setdefault(f, set()).update(owners)
    own = own_files(cls, external)
    files: dict[str, dict[str, list[int]]] = {}
    for f in [*own, *sorted(set(used) - set(own))]:
        sites = [
            s.line for s in construction_sites(f) if f in own or (s.owner and s.owner in used[f])
        ]
        if sites:
            lines = sorted(set(sites))
            files[f] = {"sites": lines, "executed": [n for n in lines if n in ran.get(f, ())]}
    return summarize(files, own)


def summarize(files: dict[str, dict[str, list[int]]], own: list[str] | None = None) -> dict:
    total = sum(len(v["sites"]) for v in files.values())
    done = sum(len(v["executed"]) for v in files.values())
    missing = [
        f"{f}:{n}" for f, v in files.items() for n in v["sites"] if n not in set(v["executed"])
    ]
    return {
        "sites": total,
        "executed": done,
        "files": files,
        "own_files": list(own or []),
        "not_executed": missing,
    }


def describe(coverage: dict[str, Any], display: Any = str, limit: int = 8) -> str:
    """``41/43 construction sites executed; not executed: file:line, ...``."""
    total, done = coverage.get("sites", 0), coverage.get("executed", 0)
    text = f"{done}/{total} construction sites executed"
    missing = coverage.get("not_executed", [])
    if missing:
        shown = [_short(m, display) for m in missing[:limit]]
        more = f", ... ({len(missing) - limit} more)" if len(missing) > limit else ""
        text += f"; not executed: {', '.join(shown)}{more}"
    return text


def _short(site: str, display: Any) -> str:
    file, _, line = site.rpartition(":")
    return f"{display(file)}:{line}"


def covered(result: Any, cls: type | None, builds: list[Any], explored: Any) -> None:
    """Set ``result.coverage`` (over the union of builds) and ``result.variants``; kept
    variants are named in the config source, like the guessed attributes."""
    coverage = measure(cls, [b for b in builds if b.error is None] or builds[:1])
    coverage["built"] = any(b.error is None for b in builds)
    coverage["explored"] = len(explored.variants)
    coverage["stopped"] = explored.stopped
    result.coverage = coverage
    result.variants = [v.to_json() for v in explored.variants]
    kept = [v.label() for v in explored.variants if v.status == "kept"]
    if kept:
        result.config_source += f"; variants {'; '.join(kept)}"


# The group of the note at a construction site no build executed.
UNEXECUTED_SITE = "unexecuted-site"


def not_verified(coverage: dict[str, Any]) -> list[Any]:
    """What no build executed: an ``Unverified`` fact (a PFX600 note) at each such site,
    since nothing there was checked."""
    from prefixlint.introspect.finding import Unverified

    tried = coverage.get("explored", 0)
    why = {
        "budget": "the exploration budget ran out",
        "exhausted": "no config variant derived from its guards reached it",
    }.get(coverage.get("stopped", ""), "no config variant was explored")
    out: list[Any] = []
    if not coverage.get("built"):
        return out  # nothing built: the failure is reported, not each site
    for site in coverage.get("not_executed", []):
        file, _, line = site.rpartition(":")
        callee = next((s.callee for s in construction_sites(file) if s.line == int(line)), "")
        out.append(Unverified(callee, why, (file, int(line)), "site", tried=tried))
    return out


def registry_share(rows: Iterable[Any], groups: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Sites of the built architectures' own files executed by any build of the zoo (one
    file counts once however many architectures share it); ``groups`` restricts the files
    to those of architectures of these registry groups."""
    sites: dict[str, set[int]] = {}
    ran: dict[str, set[int]] = {}
    chosen: set[str] = set()
    for row in rows:
        coverage = getattr(row, "coverage", None) or {}
        for f, v in coverage.get("files", {}).items():
            sites.setdefault(f, set()).update(v["sites"])
            ran.setdefault(f, set()).update(v["executed"])
        if row.status == "built" and (groups is None or row.group in groups):
            chosen.update(coverage.get("own_files", []))
    total = sum(len(sites.get(f, ())) for f in chosen)
    done = sum(len(sites.get(f, set()) & ran.get(f, set())) for f in chosen)
    missing = sorted(f"{f}:{n}" for f in chosen for n in sites.get(f, set()) - ran.get(f, set()))
    return {
        "files": len(chosen),
        "sites": total,
        "executed": done,
        "ratio": round(done / total, 4) if total else None,
        "not_executed": missing,
    }
