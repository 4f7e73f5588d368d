"""Which packages make one scope (a plugin and the packages its entry points and imports
reach), and the cache of scopes the linter asks: split from ``scope.py``, which reads one
scope's registrations and roles."""

from __future__ import annotations

import re
from pathlib import Path

from prefixlint.static.resolve import Resolver
from prefixlint.static.scope import (
    ClassRef,
    PackageScope,
    package_files,
    read_scope,
)

# -- which packages make one scope -------------------------------------------------------

_IMPORT = re.compile(rb"^[ \t]*(?:from|import)[ \t]+([A-Za-z_]\w*)", re.M)
PLUGIN_GROUP = "vllm.general_plugins"


def scope_unit(package_dirs: list[Path]) -> list[Path]:
    """The packages whose registrations decide the scope of ``package_dirs`` (top-level
    package folders): themselves, the packages their distribution's
    ``vllm.general_plugins`` entry points name (``pyproject.toml`` beside them, or the
    ``entry_points.txt`` of an installed distribution), and the sibling packages any of
    these import, transitively: a plugin may register its models from another of its
    top-level packages (``plugins.x:register`` calling ``forge.registration``)."""
    unit = {d.resolve() for d in package_dirs}
    if any(d.name == "vllm" for d in unit):
        return sorted(unit)  # vLLM's own tree: its registry decides (``vllm_scope``)
    roots = {_distribution_root(d) for d in unit}
    names = {d.name for d in unit}
    # In an installation folder (site-packages) only the distribution's own packages
    # count: the plugin imports torch and transformers too.
    owned = {r: _owned_packages(r, names) for r in roots}
    for root in roots:
        for dotted in entry_point_modules(root, names):
            found = _regular_package(root, dotted)
            if found is not None:
                unit.add(found)
    search = roots | {d.parent for d in unit}
    todo = sorted(unit)
    while todo:
        package_dir = todo.pop()
        for name in sorted(_imported_names(package_dir)):
            for root in sorted(search):
                allowed = owned.get(root)
                if allowed is not None and name not in allowed:
                    continue
                sibling = (root / name).resolve()
                if name != "vllm" and sibling not in unit and (sibling / "__init__.py").is_file():
                    unit.add(sibling)
                    todo.append(sibling)
    return sorted(unit)


def _owned_packages(root: Path, packages: set[str]) -> set[str] | None:
    """The top-level packages of the installed distributions that hold ``packages``; None
    when ``root`` is no installation folder (a checkout: every sibling is the project's)."""
    infos = list(root.glob("*.dist-info"))
    if not infos:
        return None
    out: set[str] = set()
    for info in infos:
        top = _distribution_packages(info)
        if top & packages:
            out |= top
    return out


def _distribution_root(package_dir: Path) -> Path:
    """The folder the package is installed or checked out in: above the namespace
    folders (PEP 420, no ``__init__.py``) it sits in, up to one that holds a
    ``pyproject.toml`` or a ``*.dist-info``."""
    folder = package_dir.parent
    probe = folder
    for _ in range(3):
        if (probe / "pyproject.toml").is_file() or any(probe.glob("*.dist-info")):
            return probe
        if (probe / "__init__.py").exists() or probe.parent == probe:
            break
        probe = probe.parent
    return folder


def _regular_package(root: Path, dotted: str) -> Path | None:
    """The top regular package (holding ``__init__.py``) on the path of ``dotted``."""
    folder = root
    for part in dotted.split("."):
        folder = folder / part
        if (folder / "__init__.py").is_file():
            return folder.resolve()
        if not folder.is_dir():
            return None
    return None


def _imported_names(package_dir: Path) -> set[str]:
    names: set[str] = set()
    for path in package_files(package_dir):
        try:
            names.update(m.decode() for m in _IMPORT.findall(path.read_bytes()))
        except OSError:
            continue
    return names


def entry_point_modules(root: Path, packages: set[str]) -> set[str]:
    """Modules named by the ``vllm.general_plugins`` entry points of the distribution that
    holds ``packages`` under ``root``."""
    out: set[str] = set()
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(pyproject.read_text("utf-8"))
        except (OSError, ValueError):
            data = {}
        group = data.get("project", {}).get("entry-points", {}).get(PLUGIN_GROUP, {})
        out |= {str(v).split(":")[0].strip() for v in group.values()}
    for info in root.glob("*.dist-info"):
        if not _distribution_packages(info) & packages:
            continue
        out |= _entry_point_targets(info / "entry_points.txt")
    return out


def _distribution_packages(info: Path) -> set[str]:
    try:
        lines = (info / "top_level.txt").read_text("utf-8").split()
        if lines:
            return set(lines)
        record = (info / "RECORD").read_text("utf-8")
    except OSError:
        try:
            record = (info / "RECORD").read_text("utf-8")
        except OSError:
            return set()
    return {line.split("/", 1)[0] for line in record.splitlines() if "/" in line.split(",")[0]}


def _entry_point_targets(path: Path) -> set[str]:
    try:
        text = path.read_text("utf-8")
    except OSError:
        return set()
    out: set[str] = set()
    group = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            group = line.strip("[]").strip()
        elif group == PLUGIN_GROUP and "=" in line:
            out.add(line.split("=", 1)[1].strip().split(":")[0].strip())
    return out


class Scopes:
    """The scope of each checked package, read once per process (``known``: scopes the
    runner read before linting, by top-level package folder)."""

    def __init__(self, resolver: Resolver, known: dict[str, PackageScope] | None = None) -> None:
        self.resolver = resolver
        self.known: dict[str, PackageScope] = dict(known or {})

    def for_file(self, path: Path) -> PackageScope | None:
        package_dir = top_package_dir(path)
        if package_dir is None:
            return None
        key = str(package_dir)
        if key not in self.known:
            self.read([package_dir])
        return self.known.get(key)

    def read(self, package_dirs: list[Path]) -> None:
        """Read the scopes of ``package_dirs``, one per distribution."""
        groups: dict[Path, list[Path]] = {}
        for d in package_dirs:
            groups.setdefault(_distribution_root(d.resolve()), []).append(d.resolve())
        for group in groups.values():
            unit = scope_unit(group)
            scope = vllm_scope(unit, self.resolver) or read_scope(unit, self.resolver)
            for d in unit:
                self.known.setdefault(str(d), scope)


def top_package_dir(path: Path) -> Path | None:
    from prefixlint.static.index import package_root_for

    try:
        root = package_root_for(path)
        if root is None:
            return None
        return root / path.resolve().relative_to(root).parts[0]
    except (OSError, ValueError):
        return None


def vllm_scope(unit: list[Path], resolver: Resolver) -> PackageScope | None:
    """vLLM's own package: its registry tables define the roots (read from the checked
    tree when it has ``registry.py``, else from the vLLM the resolver reads)."""
    vllm_dir = next((d for d in unit if d.name == "vllm"), None)
    if vllm_dir is None:
        return None
    from prefixlint.static.vllm_source import InstalledVllm

    entries = InstalledVllm(vllm_dir).registry()
    if not entries and resolver.loader.vllm is not None:
        entries = resolver.loader.vllm.registry()
    registry: dict[ClassRef, set[str]] = {}
    for e in entries:
        for module, name in e.definitions or ((e.module, e.cls),):
            registry.setdefault(ClassRef(module, name), set()).add(e.architecture)
    return read_scope(unit, resolver, registry=registry)
