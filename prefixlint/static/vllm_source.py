"""vLLM's code as the static phase reads it: the installed package, or a shipped summary.

Every rule that needs a fact of vLLM (which layers take a prefix, which reduce their
output, what an interface declares, which classes the model registry builds) reads it from
index summaries of vLLM's modules. With vLLM installed they are made from its files (read,
never imported); without it, from the summary of a vLLM release that ships with prefixlint
(``vllm_summaries/vllm-<version>.json.gz``, written by ``scripts/vllm_summary.py``). Both
views cover the same modules, ``VLLM_SCOPE``, so a file gets the same verdict on a machine
with vLLM and in a hook environment without it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gzip
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixlint.static.index import (
    SUMMARY_FORMAT,
    ModuleSummary,
    module_name_for,
    summarize,
    summary_from_json,
    summary_to_json,
)

# The packages model code builds on: layers, model base classes and interfaces, the
# registry (``model_executor``), the per-vendor model packages the registry points into
# (``models``), and the attention package of older releases. Names resolved anywhere else
# in vLLM (engine, workers, config) are unknown in both views alike.
VLLM_SCOPE: tuple[str, ...] = ("vllm.model_executor", "vllm.models", "vllm.attention")
REGISTRY_MODULE = "vllm.model_executor.models.registry"
SUMMARY_DIR = Path(__file__).with_name("vllm_summaries")
# Bumped when what is derived from vLLM's files changes: the facts cached on disk from an
# older derivation are then made again.
FACTS_FORMAT = 1
_SUMMARY_FILE = re.compile(r"^vllm-(\d+(?:\.\d+)*)\.json\.gz$")


def is_vllm(module: str) -> bool:
    """``module`` is vLLM or inside it; ``vllm_omni`` and other plugins are not."""
    return module == "vllm" or module.startswith("vllm.")


def in_scope(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in VLLM_SCOPE)


@dataclass(frozen=True)
class RegistryEntry:
    """One architecture of vLLM's model registry and where its class is defined."""

    architecture: str
    module: str  # the module the registry names (``vllm.model_executor.models.llama``)
    cls: str
    table: str  # ``_TEXT_GENERATION_MODELS``, ``_SPECULATIVE_DECODING_MODELS``, ...
    # (module, class) of each definition the name reaches through re-exports: a
    # per-platform package (``vllm.models.deepseek_v4``) re-exports several.
    definitions: tuple[tuple[str, str], ...]


class VllmSource:
    """What the static phase knows of one vLLM release."""

    kind = ""
    version: str | None = None

    def path_for(self, module: str) -> Path | None:
        """The file of an in-scope module, when it is on disk."""
        return None

    def summary(self, module: str) -> ModuleSummary | None:
        """The summary of an in-scope module that is not on disk (shipped)."""
        return None

    def registry(self) -> tuple[RegistryEntry, ...]:
        return ()

    def modules(self, package: str) -> list[str]:
        """The in-scope modules under ``package``, sorted."""
        return []

    def old_style_arguments(self) -> frozenset[str] | None:
        """The parameters vLLM's loader passes by name to a model class whose
        ``__init__`` lacks ``vllm_config``/``prefix`` (its "old-style" path in
        ``model_loader.utils.initialize_model``); None when that cannot be read."""
        return None

    def defining(self, package: str, name: str) -> list[str]:
        """The modules under ``package`` that define a top-level class or function
        ``name``, sorted."""
        return []

    @property
    def identity(self) -> str:
        """What a cached result depends on."""
        return f"{self.kind}:{self.version}"

    @property
    def origin(self) -> str:
        """In words, for messages: where prefixlint read vLLM from."""
        return f"vLLM {self.version or '(unknown version)'}"


class InstalledVllm(VllmSource):
    kind = "installed"

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir.resolve()
        self.version = _installed_version(self.package_dir)

    def path_for(self, module: str) -> Path | None:
        return _module_file(self.package_dir.parent, module) if in_scope(module) else None

    def registry(self) -> tuple[RegistryEntry, ...]:
        return _installed_registry(self.package_dir)

    def old_style_arguments(self) -> frozenset[str] | None:
        return _old_style_arguments(self.package_dir)

    def modules(self, package: str) -> list[str]:
        return list(_installed_modules(self.package_dir, package))

    def defining(self, package: str, name: str) -> list[str]:
        if not _WORD.fullmatch(name):  # not one ASCII word: the index's pattern differs
            pattern = re.compile(rb"^(?:class|def)\s+" + re.escape(name.encode()) + rb"\b", re.M)
            return [
                module
                for module in self.modules(package)
                if (path := _module_file(self.package_dir.parent, module)) is not None
                and pattern.search(_read(path))
            ]
        return list(_installed_definitions(self.package_dir, package).get(name, ()))

    @property
    def identity(self) -> str:
        registry = self.package_dir / "model_executor" / "models" / "registry.py"
        try:
            stamp = registry.stat().st_mtime_ns
        except OSError:
            stamp = 0
        return f"installed:{self.package_dir}:{self.version}:{stamp}:{SUMMARY_FORMAT}"

    @property
    def origin(self) -> str:
        return f"the installed vLLM {self.version or ''} ({self.package_dir})".replace("  ", " ")


class ShippedVllm(VllmSource):
    kind = "summary"

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.version = data["vllm_version"]
        self._summaries: dict[str, ModuleSummary] = {}

    def summary(self, module: str) -> ModuleSummary | None:
        if module not in self._summaries:
            raw = self.data["modules"].get(module)
            if raw is None:
                return None
            self._summaries[module] = summary_from_json(raw)
        return self._summaries[module]

    def registry(self) -> tuple[RegistryEntry, ...]:
        return registry_from_json(self.data["registry"])

    def old_style_arguments(self) -> frozenset[str] | None:
        found = self.data.get("old_style_arguments")
        return frozenset(found) if found is not None else None

    def modules(self, package: str) -> list[str]:
        return sorted(
            m for m in self.data["modules"] if m == package or m.startswith(package + ".")
        )

    def defining(self, package: str, name: str) -> list[str]:
        return [
            m
            for m in self.modules(package)
            if name in self.data["modules"][m]["classes"]
            or name in self.data["modules"][m]["functions"]
        ]

    @property
    def identity(self) -> str:
        return f"summary:{self.version}:{self.data['format']}"

    @property
    def origin(self) -> str:
        return f"prefixlint's summary of vLLM {self.version} (vLLM is not installed here)"


def find_vllm(package_dir: Path | None = None) -> VllmSource | None:
    """The installed vLLM (``package_dir``, else found on ``sys.path``), else the newest
    shipped summary, else None."""
    installed = package_dir or installed_vllm()
    if installed is not None:
        return InstalledVllm(installed)
    shipped = shipped_summaries()
    return load_shipped(shipped[-1]) if shipped else None


def registry_architectures(vllm_dir: Path | None) -> frozenset[str]:
    """Class names vLLM's model registry maps architectures to (the installed vLLM at
    ``vllm_dir``; without it, the shipped summary's)."""
    source = find_vllm(vllm_dir)
    return frozenset(e.cls for e in source.registry()) if source is not None else frozenset()


def installed_vllm() -> Path | None:
    """The first ``vllm`` package on ``sys.path`` that is a vLLM installation (it has the
    layers package): a folder named ``vllm`` that only mirrors a few model files (a test
    tree, a partial checkout in the working directory) is not one."""
    for entry in sys.path:
        candidate = Path(entry or os.getcwd()) / "vllm"
        try:
            if (candidate / "model_executor" / "layers" / "__init__.py").is_file():
                return candidate
        except OSError:
            continue
    return None


def shipped_summaries() -> list[Path]:
    """The shipped summary files, oldest release first."""
    try:
        files = [p for p in SUMMARY_DIR.iterdir() if _SUMMARY_FILE.match(p.name)]
    except OSError:
        return []
    return sorted(files, key=lambda p: _version_key(_SUMMARY_FILE.match(p.name).group(1)))  # type: ignore[union-attr]


@functools.lru_cache(maxsize=4)
def load_shipped(path: Path) -> ShippedVllm:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return ShippedVllm(json.load(f))


@functools.lru_cache(maxsize=16)
def _installed_modules(package_dir: Path, package: str) -> tuple[str, ...]:
    """The in-scope modules under ``package`` of the vLLM at ``package_dir``, sorted by path
    (listed once per process: a run asks for them once per unresolved name)."""
    folder = package_dir.parent / Path(*package.split("."))
    out = []
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package_dir.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append(".".join(parts))
    return tuple(m for m in out if in_scope(m))


_WORD = re.compile(r"\w+", re.ASCII)
# Zero-width, so a statement split over lines never hides the one after it: each line
# start is tried, as ``re.search`` of one name's pattern would.
_DEFINED = re.compile(rb"^(?=(?:class|def)\s+(\w+))", re.M)


@functools.lru_cache(maxsize=16)
def _installed_definitions(package_dir: Path, package: str) -> dict[str, tuple[str, ...]]:
    """Name -> the modules under ``package`` with a line ``class NAME`` or ``def NAME``, in
    ``modules`` order: every file read once, not once per name asked (and, with a cache
    folder, once per release)."""
    derive = functools.partial(_read_definitions, package_dir, package)
    return _cached_fact(package_dir, f"definitions:{package}", derive, _definitions_from_json)


def _definitions_from_json(found: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {str(k): tuple(str(m) for m in v) for k, v in found.items()}


def _read_definitions(package_dir: Path, package: str, deps: set[str]) -> dict[str, list[str]]:
    folder = package_dir.parent / Path(*package.split("."))
    # The folders too: a module added or removed changes their listing.
    for parent, dirs, _ in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # its listing changes by itself
        deps.add(parent)
    found: dict[str, list[str]] = {}
    for module in _installed_modules(package_dir, package):
        path = _module_file(package_dir.parent, module)
        if path is None:
            continue
        deps.add(str(path))
        for name in dict.fromkeys(m.group(1).decode() for m in _DEFINED.finditer(_read(path))):
            found.setdefault(name, []).append(module)
    return found


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


@functools.lru_cache(maxsize=4096)
def _module_file(root: Path, module: str) -> Path | None:
    rel = Path(*module.split("."))
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def _installed_version(package_dir: Path) -> str | None:
    """The release, from ``vllm/_version.py`` (written by the build), read as text."""
    try:
        text = (package_dir / "_version.py").read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = _VERSION.search(text)
    return found.group(1) if found else None


# -- the model registry ------------------------------------------------------------------


def resolve_registry_module(name: str) -> str:
    """The module a registry entry names, as vLLM's ``_resolve_module_name`` reads it: a
    fully qualified ``vllm.`` path as it is, else a module of ``vllm.model_executor.models``."""
    return name if name.startswith("vllm.") else f"vllm.model_executor.models.{name}"


def registry_tables(tree: ast.Module) -> list[tuple[str, str, str, str]]:
    """(architecture, module, class, table) of every top-level table of the registry: a
    dict literal whose entries map a name to a ``(module, class)`` pair of strings."""
    out = []
    for stmt in tree.body:
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        for key, entry in zip(value.keys, value.values, strict=True):
            pair = _string_pair(entry)
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and pair:
                out.append((key.value, resolve_registry_module(pair[0]), pair[1], target.id))
    return out


def _string_pair(node: ast.expr) -> tuple[str, str] | None:
    if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
        return None
    a, b = node.elts
    if all(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (a, b)):
        return a.value, b.value  # type: ignore[union-attr,return-value]
    return None


def registry_to_json(entries: tuple[RegistryEntry, ...]) -> list[list]:
    return [
        [e.architecture, e.module, e.cls, e.table, [list(d) for d in e.definitions]]
        for e in entries
    ]


def registry_from_json(rows: list[list]) -> tuple[RegistryEntry, ...]:
    """The entries ``registry_to_json`` wrote; TypeError or ValueError on any other shape
    (a cache file is untrusted input)."""
    out = []
    for a, m, c, t, defs in rows:
        if not all(isinstance(x, str) for x in (a, m, c, t)):
            raise TypeError(f"not a registry entry: {a!r}")
        out.append(RegistryEntry(a, m, c, t, tuple((str(dm), str(dc)) for dm, dc in defs)))
    return tuple(out)


# -- facts of the installed vLLM, cached on disk ------------------------------------------

_FACT_FOLDER: list[Path] = []  # the cache folder of this process's run, when it has one


def use_fact_cache(folder: Path | None) -> None:
    """Keep the facts derived from the installed vLLM's files in ``folder`` (the results
    cache folder); None: derive them in this process only."""
    _FACT_FOLDER[:] = [folder] if folder is not None else []


@contextlib.contextmanager
def facts_in(folder: Path | None) -> Iterator[None]:
    """``use_fact_cache(folder)`` for the block's duration."""
    use_fact_cache(folder)
    try:
        yield
    finally:
        use_fact_cache(None)


def _cached_fact(package_dir: Path, name: str, derive: Any, load: Any) -> Any:
    """``load(derive(deps))`` (``derive`` adds the files it reads to ``deps``), or ``load``
    of its value cached in the fact cache while none of those files changed."""
    from prefixlint.static.cache import FactCache

    deps: set[str] = set()
    if not _FACT_FOLDER:
        return load(derive(deps))
    key = f"{FACTS_FORMAT}:{package_dir}:{_installed_version(package_dir)}"
    store = FactCache(_FACT_FOLDER[0], key)
    cached = store.get(name)  # wrapped in a list: a fact may be None
    if isinstance(cached, list) and len(cached) == 1:
        try:
            return load(cached[0])
        except (TypeError, ValueError, KeyError, AttributeError):
            pass  # not the shape this version writes (a corrupt or foreign file): made again
    value = derive(deps)
    store.put(name, [value], deps)
    return load(value)


@functools.lru_cache(maxsize=4)
def _installed_registry(package_dir: Path) -> tuple[RegistryEntry, ...]:
    derive = functools.partial(_read_registry, package_dir)
    return _cached_fact(package_dir, "registry", derive, registry_from_json)


def _read_registry(package_dir: Path, deps: set[str]) -> list[list]:
    path = package_dir / "model_executor" / "models" / "registry.py"
    deps.add(str(path))
    tree = _parse(path)
    if tree is None:
        return []
    root = package_dir.parent
    seen: set[str] = set()
    entries = tuple(
        RegistryEntry(arch, module, cls, table, definitions(root, module, cls, seen=seen))
        for arch, module, cls, table in registry_tables(tree)
    )
    for module in seen:  # each file its module could be, found or not
        rel = root / Path(*module.split("."))
        deps.update((str(rel.with_suffix(".py")), str(rel / "__init__.py")))
    return registry_to_json(entries)


def definitions(
    root: Path, module: str, name: str, depth: int = 0, seen: set[str] | None = None
) -> tuple[tuple[str, str], ...]:
    """Where ``module.name`` is defined, following re-exports in every branch (a package
    that picks a per-platform implementation re-exports each one under one name).
    ``seen``: the modules looked at are added to it."""
    if seen is not None:
        seen.add(module)
    path = _module_file(root, module)
    if path is None or depth >= 6:
        return ()
    if _defines_class(path, name):
        return ((module, name),)  # defined here (a top-level class statement)
    tree = _parse(path)
    if tree is None:
        return ()
    is_package = path is not None and path.name == "__init__.py"
    out: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name and node in tree.body:
            out.append((module, name))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = absolute_module(module, is_package, node.level, node.module)
                    out += definitions(root, source, alias.name, depth + 1, seen)
    return tuple(dict.fromkeys(out))


_CLASS_LINE = re.compile(rb"^(?=class\s+(\w+))", re.M)  # zero-width: see ``_DEFINED``


@functools.lru_cache(maxsize=1024)
def _class_lines(path: Path) -> frozenset[str]:
    """The names of the lines ``class NAME`` of a file, read once."""
    return frozenset(m.group(1).decode() for m in _CLASS_LINE.finditer(_read(path)))


def _defines_class(path: Path, name: str) -> bool:
    """A line of the file starts ``class NAME``."""
    if _WORD.fullmatch(name):
        return name in _class_lines(path)
    pattern = re.compile(rb"^class\s+" + re.escape(name.encode()) + rb"\b", re.M)
    return pattern.search(_read(path)) is not None


def absolute_module(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The module a ``from`` import in ``module`` names (``level`` dots)."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([target] if target else [])])


@functools.lru_cache(maxsize=1024)
def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@functools.lru_cache(maxsize=512)
def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


LOADER_MODULE = ("model_executor", "model_loader", "utils.py")


@functools.lru_cache(maxsize=4)
def _old_style_arguments(package_dir: Path) -> frozenset[str] | None:
    derive = functools.partial(_read_old_style, package_dir)
    return _cached_fact(package_dir, "old_style_arguments", derive, _names_from_json)


def _names_from_json(found: list[str] | None) -> frozenset[str] | None:
    return frozenset(str(n) for n in found) if found is not None else None


def _read_old_style(package_dir: Path, deps: set[str]) -> list[str] | None:
    """``if "config" in all_params: kwargs["config"] = ...`` in ``initialize_model``: the
    names compared with the constructor's parameters."""
    path = package_dir.joinpath(*LOADER_MODULE)
    deps.add(str(path))
    tree = _parse(path)
    fn = next(
        (
            n
            for n in (tree.body if tree is not None else [])
            if isinstance(n, ast.FunctionDef) and n.name == "initialize_model"
        ),
        None,
    )
    if fn is None:
        return None
    names: set[str] = set()
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and any(isinstance(op, ast.In) for op in node.ops)
        ):
            names.add(node.left.value)
    return sorted(names - {"vllm_config"})


# -- the shipped summary -----------------------------------------------------------------

SHIPPED_FORMAT = 1


def build_summary(package_dir: Path) -> dict[str, Any]:
    """The summary of the vLLM package at ``package_dir`` that ships with prefixlint: the
    index summary of every module of ``VLLM_SCOPE`` (trimmed of what no rule reads: line
    numbers, imports of other packages) and the registry with its definitions."""
    package_dir = package_dir.resolve()
    root = package_dir.parent
    modules: dict[str, Any] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        module, is_package = module_name_for(path)
        if module is None or not in_scope(module):
            continue
        tree = _parse(path)
        if tree is None:
            continue
        modules[module] = _trim(
            summary_to_json(summarize(tree, rel.as_posix(), module, is_package))
        )
    return {
        "format": SHIPPED_FORMAT,
        "summary_format": SUMMARY_FORMAT,
        "vllm_version": _installed_version(package_dir),
        "scope": list(VLLM_SCOPE),
        "modules": modules,
        "registry": registry_to_json(_installed_registry(package_dir)),
        "old_style_arguments": sorted(_old_style_arguments(package_dir) or ()),
    }


def _trim(summary: dict[str, Any]) -> dict[str, Any]:
    def sig(f: list) -> list:
        return [f[0], f[1], 0, *f[3:]]

    summary["imports"] = {k: v for k, v in summary["imports"].items() if v[0].startswith("vllm")}
    summary["functions"] = {k: sig(f) for k, f in summary["functions"].items()}
    summary["classes"] = {
        # Mentions say which of vLLM's classes build a cache-owning layer (a model's
        # decoder keeps its attention in vLLM's paged layers): the scope of a checked
        # package follows them into vLLM.
        k: [c[0], c[1], c[2], {m: sig(f) for m, f in c[3].items()}, c[4], 0, 0, c[7], c[8]]
        for k, c in summary["classes"].items()
    }
    return summary


def write_summary(data: dict[str, Any], folder: Path) -> Path:
    """Write ``data`` as ``vllm-<version>.json.gz``, byte-identical for the same input."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"vllm-{data['vllm_version']}.json.gz"
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    with open(target, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(raw)
    return target
