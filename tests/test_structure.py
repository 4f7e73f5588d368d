"""The project's shape (issue 17): no import circle anywhere in ``prefixlint/`` and no
module over 800 lines. Imports are read with ``ast`` (nothing is imported), at module
level and inside functions alike: a function-level import only defers a circle, it
still ties the two modules together. Imports under ``if TYPE_CHECKING:`` never run
and are left out."""

from __future__ import annotations

import ast
import re
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


MAX_FUNCTION_LINES = 80
INTROSPECT = PACKAGE / "introspect"


def long_functions(tree: ast.AST) -> list[tuple[str, int]]:
    """Every function (methods and nested ones too) over MAX_FUNCTION_LINES lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_over_80_lines() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{name} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in long_functions(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "split along its steps: " + "; ".join(found)


def test_long_functions_are_found() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(ast.parse(f"def f():\n{body}")) == [("f", MAX_FUNCTION_LINES + 1)]
    assert long_functions(ast.parse("def f():\n    pass\n")) == []


def _sub_package(module: str) -> str:
    """The sub-package of ``prefixlint.introspect`` a module is in (its own name for a
    top-level module of it)."""
    return module.split(".")[2] if module.count(".") >= 2 else ""


def private_crossings(modules: dict[str, Path]) -> list[str]:
    """Private names (``_x``) of one introspect sub-package used by another: imported by
    name, or read as an attribute of an imported module."""
    found = []
    for me, path in modules.items():
        if not me.startswith("prefixlint.introspect."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                elif _private(alias.name) and _crosses(me, node.module):
                    found.append(f"{me} imports {node.module}.{alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = aliases.get(node.value.id)
                if owner and _private(node.attr) and _crosses(me, owner):
                    found.append(f"{me} reads {owner}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _crosses(me: str, other: str) -> bool:
    return other.startswith("prefixlint.introspect.") and _sub_package(me) != _sub_package(other)


def test_no_private_name_crosses_an_introspect_sub_package() -> None:
    found = private_crossings(_modules())
    assert not found, "make it public or move it: " + "; ".join(found)


def test_private_crossings_are_found(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from prefixlint.introspect.dryrun import _note\n")
    (tmp_path / "b.py").write_text(
        "from prefixlint.introspect.dryrun import selflayout\nselflayout._mapper\n"
    )
    (tmp_path / "c.py").write_text("from prefixlint.introspect.dryrun import _note\n")
    (tmp_path / "d.py").write_text("")
    modules = {
        "prefixlint.introspect.checks.a": tmp_path / "a.py",
        "prefixlint.introspect.checks.b": tmp_path / "b.py",
        "prefixlint.introspect.dryrun.c": tmp_path / "c.py",
        "prefixlint.introspect.dryrun.selflayout": tmp_path / "d.py",
    }
    assert private_crossings(modules) == [
        "prefixlint.introspect.checks.a imports prefixlint.introspect.dryrun._note",
        "prefixlint.introspect.checks.b reads prefixlint.introspect.dryrun.selflayout._mapper",
    ]


def test_introspect_has_few_top_level_entries() -> None:
    entries = [p for p in INTROSPECT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    # 14: the comparison with transformers is a stage of its own (compare/, issue 38)
    assert len(entries) <= 14, sorted(p.name for p in entries)


def test_architecture_tree_is_fresh() -> None:
    import subprocess
    import sys

    script = PACKAGE.parent / "scripts" / "architecture_tree.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# What the command line imports of phase 2 before a worker starts: none may pull in torch,
# vLLM or transformers (a missing path or an unreadable checkpoint is answered at once,
# and `check` runs without them).
LIGHT = (
    "prefixlint.introspect",
    "prefixlint.introspect.targets.checkpoint",
    "prefixlint.introspect.targets.adapter",
    "prefixlint.commands.introspect",
    "prefixlint.introspect.coverage.sites",
    "prefixlint.introspect.process.client",
    "prefixlint.introspect.zoo.run",
    "prefixlint.introspect.vllm_api",
    "prefixlint.check_introspect",
    "prefixlint.config",
)


@pytest.mark.parametrize("module", LIGHT)
def test_command_line_side_of_phase_2_is_light(module: str) -> None:
    import subprocess
    import sys

    code = (
        f"import sys, {module}; "
        "print([m for m in ('torch', 'vllm', 'transformers') if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"{module} imports {done.stdout.strip()}"


# -- a finding's message is for people (issue 37) ------------------------------------------
# Reading its words as logic (a comparison, `in`, a string method, a regex, a key, any
# function of it) makes a reworded message silently change a verdict: code passes the
# fact itself. Formatting for output is allowed: inside an f-string, a keyword
# ``message=`` that carries it on, a constructor (a capitalised name) or these callables.
_WORD_METHODS = {"startswith", "endswith", "removeprefix", "removesuffix", "split", "rsplit"}
_WORD_METHODS |= {"replace", "find", "rfind", "index", "rindex", "partition", "strip", "lower"}
# public_name rewrites phase 2's internal class names for people, deciding nothing
_CARRIERS = {"print", "echo", "str", "append", "setdefault", "public_name"}
# Reads not yet replaced by a fact, by module and function: each must still read (drop
# it once fixed). It groups findings whose words are the same (one per line and kind of
# words), for which no producer says a kind yet.
KNOWN_MESSAGE_READS: set[tuple[str, str]] = set()


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _reads_words(node: ast.Attribute, parents: dict[ast.AST, ast.AST]) -> bool:
    """``node`` (an ``x.message`` load) is used as logic, not carried or formatted."""
    up: ast.AST | None = parents.get(node)
    if isinstance(up, ast.Attribute):  # a method of the words
        return up.attr in _WORD_METHODS or up.attr.startswith(("is", "count"))
    if isinstance(up, ast.Compare | ast.Tuple) or (isinstance(up, ast.Dict) and node in up.keys):
        return True  # compared, tested with `in`, or made (part of) a key
    if isinstance(up, ast.Subscript) and up.slice is node:
        return True
    if isinstance(up, ast.Call) and node in up.args:
        name = _callee(up)
        return not (name in _CARRIERS or name[:1].isupper())
    return False


def message_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Lines (and their function) where a ``.message`` is read as logic, f-strings left out."""
    parents = _parents(tree)
    out = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute)
            and node.attr == "message"
            and isinstance(node.ctx, ast.Load)
        ):
            continue
        up, formatted = parents.get(node), False
        while up is not None and not formatted:
            formatted, up = isinstance(up, ast.JoinedStr), parents.get(up)
        if not formatted and _reads_words(node, parents):
            out.append((node.lineno, _function(node, parents)))
    return sorted(out)


def _function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    up = parents.get(node)
    while up is not None and not isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
        up = parents.get(up)
    return up.name if up is not None else ""


def test_no_finding_message_is_read_as_logic() -> None:
    found = {
        (path.relative_to(PACKAGE.parent).as_posix(), function): line
        for path in sorted(PACKAGE.rglob("*.py"))
        if "reporters" not in path.parts  # output is words for people
        for line, function in message_reads(ast.parse(path.read_text()))
    }
    new = [
        f"{p}:{line} ({fn})"
        for (p, fn), line in found.items()
        if (p, fn) not in KNOWN_MESSAGE_READS
    ]
    assert not new, "pass the fact, not the words: " + ", ".join(new)
    assert set(found) >= KNOWN_MESSAGE_READS, "fixed: drop it from KNOWN_MESSAGE_READS"


def test_message_reads_are_found() -> None:
    read = (
        "a = f.message.startswith('x')\n"
        "b = 'x' in f.message\n"
        "c = re.match(P, f.message)\n"
        "d = f.message == 'x'\n"
        "e = {(f.code, f.message): f}\n"
        "g = _kind(f.message)\n"
    )
    assert [line for line, _ in message_reads(ast.parse(read))] == [1, 2, 3, 4, 5, 6]
    inside = "def merge(f):\n    return len(f.message)\n"
    assert message_reads(ast.parse(inside)) == [(2, "merge")]
    carried = (
        "f.message += ' (more)'\n"
        "print(f'{f.code} {f.message.strip()}')\n"
        "d = Diagnostic(code, message=f.message)\n"
        "out = {'message': f.message}\n"
        "m = f.message\n"
    )
    assert message_reads(ast.parse(carried)) == []


def test_only_the_check_units_build_a_finding() -> None:
    """Issue 37: the stages return typed facts; a phase-2 finding is built by its unit
    under ``introspect/checks/`` only (and by nothing in ``check_introspect.py``)."""
    introspect = PACKAGE / "introspect"
    builders = []
    for path in [*introspect.rglob("*.py"), PACKAGE / "check_introspect.py"]:
        if "checks" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding":
                builders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not builders, "a fact for the unit, not a finding: " + ", ".join(builders)


# A file opened at a path written in the code (a debugging trace left behind) fails
# wherever that folder is missing, inside the except handler that would say why.
FIXED_PATH_OPEN = re.compile(r"""\bopen\(\s*f?["'](/|~)""")


def test_no_file_is_opened_at_a_path_written_in_the_code() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent).as_posix()}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FIXED_PATH_OPEN.search(line)
    ]
    assert not found, "open a path the caller gives: " + ", ".join(found)
    assert FIXED_PATH_OPEN.search('with open("/tmp/h3/tb.txt", "a") as f:')
    assert not FIXED_PATH_OPEN.search("with open(path) as f:")
