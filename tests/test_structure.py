"""The project's shape (issue 17): no import circle anywhere in ``prefixlint/`` and no
module over 800 lines. Imports are read with ``ast`` (nothing is imported), at module
level and inside functions alike: a function-level import only defers a circle, it
still ties the two modules together. Imports under ``if TYPE_CHECKING:`` never run
and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "prefixlint"
MAX_LINES = 800
# Modules over MAX_LINES that another branch is splitting: drop each once it lands.
KNOWN_LONG: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _executed(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imported(name: str, tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The modules of ``prefixlint`` that module ``name`` imports, anywhere in it. An
    import of ``a.b.c`` also runs the packages ``a.b`` and ``a`` that do not contain the
    importer (their ``__init__`` executes first, and may import the importer back)."""
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _executed(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from a.b import c``: ``c`` is a module of its own, or a name of ``a.b``
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
    out: set[str] = set()
    for target in targets:
        if not target.startswith("prefixlint"):
            continue
        parts = target.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if candidate not in modules or candidate == name:
                continue
            contains_importer = name.startswith(f"{candidate}.")
            if i < len(parts) and contains_importer:
                continue  # an enclosing package of the importer is already running
            out.add(candidate)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: _imported(name, ast.parse(path.read_text(encoding="utf-8")), modules)
        for name, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_walker_sees_function_level_and_package_imports(tmp_path: Path) -> None:
    """A circle closed by an import inside a function, and one closed through a package's
    ``__init__`` (importing ``pkg.sub`` runs ``pkg/__init__.py`` first), are both found;
    a submodule importing a sibling while its package initialises is no circle, nor is
    an import under ``if TYPE_CHECKING:``."""
    modules = {
        "prefixlint.a": tmp_path / "a.py",
        "prefixlint.b": tmp_path / "b.py",
        "prefixlint.pkg": tmp_path / "pkg" / "__init__.py",
        "prefixlint.pkg.sub": tmp_path / "pkg" / "sub.py",
        "prefixlint.pkg.other": tmp_path / "pkg" / "other.py",
        "prefixlint.c": tmp_path / "c.py",
        "prefixlint.d": tmp_path / "d.py",
    }
    sources = {
        "prefixlint.a": "from prefixlint import b\n",
        "prefixlint.b": "def f():\n    from prefixlint.a import x\n",
        "prefixlint.pkg": "from prefixlint.pkg.sub import y\nfrom . import other\n",
        "prefixlint.pkg.sub": "from prefixlint.pkg.other import z\n",
        "prefixlint.pkg.other": "def g():\n    from prefixlint.c import w\n",
        "prefixlint.c": "import prefixlint.pkg.sub\n",
        "prefixlint.d": "if TYPE_CHECKING:\n    import prefixlint.a\n",
    }
    graph = {n: _imported(n, ast.parse(s), modules) for n, s in sources.items()}
    assert graph["prefixlint.b"] == {"prefixlint.a"}
    assert graph["prefixlint.pkg"] == {"prefixlint.pkg.sub", "prefixlint.pkg.other"}
    assert graph["prefixlint.pkg.sub"] == {"prefixlint.pkg.other"}  # not its own package
    assert graph["prefixlint.c"] == {"prefixlint.pkg", "prefixlint.pkg.sub"}
    assert graph["prefixlint.d"] == set()  # annotations only: never run
    assert circles(graph) == [
        ["prefixlint.a", "prefixlint.b"],
        ["prefixlint.c", "prefixlint.pkg", "prefixlint.pkg.other", "prefixlint.pkg.sub"],
    ]
    del graph["prefixlint.c"]
    assert circles(graph) == [["prefixlint.a", "prefixlint.b"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.name))
def test_no_module_over_800_lines(path: Path) -> None:
    relative = path.relative_to(PACKAGE.parent).as_posix()
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if relative in KNOWN_LONG:
        return
    assert lines <= MAX_LINES, f"{relative} has {lines} lines (split it along its jobs)"


def test_known_long_modules_are_still_long() -> None:
    """An exception that no longer applies is dropped, so the list cannot hide a new one."""
    for relative in KNOWN_LONG:
        path = PACKAGE.parent / relative
        assert path.is_file(), f"{relative} is gone: drop it from KNOWN_LONG"
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines > MAX_LINES, f"{relative} has {lines} lines now: drop it from KNOWN_LONG"
