"""Signature index: what each module defines and imports, read without importing anything.

The rules need facts that live in other files (does ``QKVParallelLinear.__init__`` take a
``prefix``? does a base class define ``embed_input_ids``?). The index answers them from the
stdlib ``ast`` of each file, which parses but never runs code, and is four times cheaper than
a concrete syntax tree. Summaries are plain data, cached by content hash (see ``cache.py``).
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The shape of a summary (``summary_to_json``): part of every cache key that holds one, and
# of the vLLM summaries that ship with prefixlint.
SUMMARY_FORMAT = 3

# Parameter kinds, as in inspect.Parameter.
POSITIONAL_ONLY = "posonly"
POSITIONAL_OR_KEYWORD = "pos"
KEYWORD_ONLY = "kwonly"
VAR_POSITIONAL = "varargs"
VAR_KEYWORD = "varkw"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: str | None  # source text of the default, None when there is none


@dataclass
class FunctionSig:
    name: str
    params: list[Param]
    lineno: int
    is_stub: bool = False  # body is only a docstring, ``...``, ``pass`` or a raise
    # Top-level functions: whether the body builds and returns a module (True), returns
    # something else (False: a generator, literals, a class), or does not say (None).
    returns_module: bool | None = None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def positional_index(self, name: str) -> int | None:
        """Index among the positional parameters (``self`` excluded), if positional."""
        positional = [p for p in self.params if p.kind in (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD)]
        if positional and positional[0].name in ("self", "cls"):
            positional = positional[1:]
        for i, p in enumerate(positional):
            if p.name == name:
                return i
        return None

    @property
    def has_var_keyword(self) -> bool:
        return any(p.kind == VAR_KEYWORD for p in self.params)


@dataclass
class ClassSummary:
    name: str
    bases: list[str]  # dotted source text, e.g. "nn.Module", "SupportsPP"
    decorators: list[str]  # dotted name of each decorator (the callee when called)
    methods: dict[str, FunctionSig]
    attributes: set[str]  # class-level names and ``self.x`` assigned in any method
    lineno: int
    end_lineno: int
    # Its own ``forward`` calls an all-reduce (``tensor_model_parallel_all_reduce``, ...):
    # vLLM's layers that reduce their output say so in their code.
    forward_all_reduces: bool = False
    # Class-like names its body refers to (``LlamaDecoderLayer``, ``layers.Block``): what
    # it may build, followed to tell which classes a registered model builds.
    mentions: list[str] = field(default_factory=list)


@dataclass
class ModuleSummary:
    path: str
    module: str | None  # dotted module name when the file sits in a package
    is_package: bool
    # local name -> (absolute module, attribute or None for ``import x``)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    functions: dict[str, FunctionSig] = field(default_factory=dict)
    # Every name bound at the top level (classes, functions, imports, assignments); None
    # when they cannot be known statically (``__getattr__``, ``import *``,
    # ``globals().update``).
    names: frozenset[str] | None = frozenset()


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for Name/Attribute chains (call chains keep their callee), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if isinstance(node, ast.Subscript):  # Generic[T], nn.Module[...]
        return dotted(node.value)
    return None


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, top_level: bool = False) -> FunctionSig:
    a = fn.args
    params: list[Param] = []
    pos = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, arg in enumerate(pos):
        kind = POSITIONAL_ONLY if i < len(a.posonlyargs) else POSITIONAL_OR_KEYWORD
        d = defaults[i]
        params.append(Param(arg.arg, kind, ast.unparse(d) if d is not None else None))
    if a.vararg:
        params.append(Param(a.vararg.arg, VAR_POSITIONAL, None))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append(Param(arg.arg, KEYWORD_ONLY, ast.unparse(d) if d is not None else None))
    if a.kwarg:
        params.append(Param(a.kwarg.arg, VAR_KEYWORD, None))
    returns = returns_module(fn) if top_level and isinstance(fn, ast.FunctionDef) else None
    return FunctionSig(fn.name, params, fn.lineno, _is_stub(fn), returns)


def _is_stub(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if any(
        dotted(d) in ("overload", "typing.overload", "abstractmethod") for d in fn.decorator_list
    ):
        return True
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if not body:
        return True
    if len(body) != 1:
        return False
    stmt = body[0]
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return stmt.value.value is Ellipsis
    if isinstance(stmt, ast.Raise):
        exc = stmt.exc
        name = dotted(exc) if exc is not None else None
        return name is not None and name.split(".")[-1] == "NotImplementedError"
    return False


def _self_attributes(body: list[ast.stmt], out: set[str]) -> None:
    """``self.x = ...`` targets among statements (not expressions: that walk is costly)."""
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if (
                        isinstance(el, ast.Attribute)
                        and isinstance(el.value, ast.Name)
                        and el.value.id == "self"
                    ):
                        out.add(el.attr)
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            _self_attributes(stmt.body, out)
            _self_attributes(getattr(stmt, "orelse", []), out)
            for h in getattr(stmt, "handlers", []):
                _self_attributes(h.body, out)


def _class_summary(node: ast.ClassDef) -> ClassSummary:
    methods: dict[str, FunctionSig] = {}
    attributes: set[str] = set()
    reduces = False
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sig = _signature(stmt)
            # An @overload stub must not hide the implementation that follows it.
            if stmt.name not in methods or methods[stmt.name].is_stub:
                methods[stmt.name] = sig
            # Any method: ``__init__`` often delegates to a ``_build`` helper.
            _self_attributes(stmt.body, attributes)
            if stmt.name == "forward":
                reduces = reduces or _calls_all_reduce(stmt)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    attributes.add(t.id)
        elif (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.value is not None
        ):
            attributes.add(stmt.target.id)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return ClassSummary(
        name=node.name,
        bases=[b for b in (dotted(x) for x in node.bases) if b],
        decorators=[d for d in (dotted(x) for x in node.decorator_list) if d],
        methods=methods,
        attributes=attributes,
        lineno=start,
        end_lineno=node.end_lineno or node.lineno,
        forward_all_reduces=reduces,
        mentions=_mentions(node),
    )


def _mentions(node: ast.ClassDef) -> list[str]:
    out: set[str] = set()
    for stmt in node.body:
        for sub in ast.walk(stmt):
            name = None
            if isinstance(sub, ast.Name):
                name = sub.id
            elif isinstance(sub, ast.Attribute) and isinstance(
                sub.value, (ast.Name, ast.Attribute)
            ):
                name = dotted(sub)
            if name and name.rsplit(".", 1)[-1][:1].isupper() and not name.startswith("self."):
                out.add(name)
    return sorted(out)


def _calls_all_reduce(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Call):
            name = dotted(sub.func)
            if name is not None and name.rsplit(".", 1)[-1].endswith("all_reduce"):
                return True
    return False


def _resolve_relative(module: str | None, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = (module or "").split(".") if module else []
    if not is_package and parts:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if len(parts) >= level - 1 else []
    if target:
        parts = [*parts, target]
    return ".".join(parts)


def summarize(tree: ast.Module, path: str, module: str | None, is_package: bool) -> ModuleSummary:
    summary = ModuleSummary(path=path, module=module, is_package=is_package)

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        summary.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        summary.imports[top] = (top, None)
            elif isinstance(stmt, ast.ImportFrom):
                base = _resolve_relative(module, is_package, stmt.level, stmt.module)
                for alias in stmt.names:
                    if alias.name != "*":
                        summary.imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(stmt, ast.ClassDef):
                summary.classes[stmt.name] = _class_summary(stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                summary.functions[stmt.name] = _signature(stmt, top_level=True)
            elif isinstance(stmt, (ast.If, ast.Try)):
                # ``if TYPE_CHECKING:`` imports and try/except import fallbacks.
                visit(stmt.body)
                if isinstance(stmt, ast.Try):
                    for h in stmt.handlers:
                        visit(h.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                # ``Alias = SomeClass`` re-exports a class under another name.
                t, v = stmt.targets[0], stmt.value
                if isinstance(t, ast.Name) and isinstance(v, (ast.Name, ast.Attribute)):
                    name = dotted(v)
                    if name and name in summary.classes:
                        summary.classes[t.id] = summary.classes[name]
                    elif name:
                        head = name.split(".")[0]
                        if head in summary.imports and "." not in name:
                            summary.imports[t.id] = summary.imports[head]

    visit(tree.body)
    summary.names = bound_names(tree)
    return summary


def bound_names(tree: ast.Module) -> frozenset[str] | None:
    """Names bound at the top level of a module; None when they cannot be known."""
    names: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> bool:
        for stmt in stmts:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(stmt.name)
                if stmt.name == "__getattr__":
                    return False  # lazy attributes: anything may exist
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    if alias.name == "*":
                        return False
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                blocks = [stmt.body, getattr(stmt, "orelse", [])]
                blocks += [h.body for h in getattr(stmt, "handlers", [])]
                blocks.append(getattr(stmt, "finalbody", []))
                if not all(visit(b) for b in blocks):
                    return False
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = stmt.value.func
                if isinstance(func, ast.Attribute) and func.attr == "update":
                    return False  # globals().update(...)
        return True

    return frozenset(names) if visit(tree.body) else None


# Return annotations that name something other than a module instance.
_NOT_A_MODULE = (
    "type[",
    "Type[",
    "typing.Type[",
    "str",
    "int",
    "float",
    "bool",
    "None",
    "dict",
    "list",
    "tuple",
    "set",
    "Iterator",
    "Iterable",
    "Generator",
    "Callable",
)


def returns_module(fn: ast.FunctionDef) -> bool | None:
    """Whether a function's body builds and returns a module: False for a generator, one
    annotated to return a class (``type[...]``) or a plain value, or one that returns only
    literals, names or non-class calls; None when its returns say nothing."""
    own = [n for n in ast.walk(fn) if not isinstance(n, ast.Lambda)]
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        return False  # a generator
    annotation = ast.unparse(fn.returns) if fn.returns is not None else ""
    if annotation.rsplit(".", 1)[-1].startswith(("Module", "nn.Module")):
        return True
    if annotation.startswith(_NOT_A_MODULE):
        return False  # ``-> type[AttentionBackend]``: builds a class, not a layer
    built: set[str] = set()  # names bound to a constructed class
    for n in own:
        if isinstance(n, ast.Assign) and _constructs_class(n.value):
            built |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    returns = [n.value for n in own if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return False
    for value in returns:
        if _constructs_class(value) or (isinstance(value, ast.Name) and value.id in built):
            return True
    if all(isinstance(v, (ast.Constant, ast.JoinedStr, ast.Compare, ast.BoolOp)) for v in returns):
        return False
    return None


def _constructs_class(node: ast.expr) -> bool:
    """``Layer(...)`` / ``nn.Sequential(...)``: a call of a capitalised name."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name[:1].isupper()


def is_package_folder(folder: Path, depth: int = 0) -> bool:
    """A folder Python imports as a package: a regular one (``__init__.py``), or a
    namespace portion inside one (``vllm_rbln/model_executor/models/`` holds no
    ``__init__.py`` and is still ``vllm_rbln.model_executor.models``). A top-level
    namespace folder is not: where it starts on ``sys.path`` cannot be told from the disk."""
    if (folder / "__init__.py").exists():
        return True
    if depth >= 4 or folder.parent == folder:
        return False
    return is_package_folder(folder.parent, depth + 1)


def module_name_for(path: Path) -> tuple[str | None, bool]:
    """The dotted module name of a file inside packages (walks up package folders)."""
    path = path.resolve()
    is_package = path.name == "__init__.py"
    parts: list[str] = [] if is_package else [path.stem]
    folder = path.parent
    while is_package_folder(folder):
        parts.insert(0, folder.name)
        if folder.parent == folder:
            break
        folder = folder.parent
    if not parts:
        return None, is_package
    if len(parts) == 1 and not is_package and not is_package_folder(path.parent):
        return None, False
    return ".".join(parts), is_package


def package_root_for(path: Path) -> Path | None:
    """The folder that holds the top package of ``path`` (the one to put on sys.path)."""
    folder = path.resolve().parent
    if not is_package_folder(folder):
        return None
    while is_package_folder(folder.parent) and folder.parent != folder:
        folder = folder.parent
    return folder.parent


def find_installed_package(name: str) -> Path | None:
    """Where a top-level package lives on sys.path, found on disk without importing it."""
    for entry in sys.path:
        if not entry:
            entry = os.getcwd()
        candidate = Path(entry) / name / "__init__.py"
        try:
            if candidate.is_file():
                return candidate.parent
        except OSError:
            continue
    return None


def summary_to_json(s: ModuleSummary) -> dict:
    def sig(f: FunctionSig) -> list:
        params = [[p.name, p.kind, p.default] for p in f.params]
        return [f.name, params, f.lineno, f.is_stub, f.returns_module]

    return {
        "path": s.path,
        "names": sorted(s.names) if s.names is not None else None,
        "module": s.module,
        "is_package": s.is_package,
        "imports": {k: list(v) for k, v in s.imports.items()},
        "classes": {
            k: [
                c.name,
                c.bases,
                c.decorators,
                {m: sig(f) for m, f in c.methods.items()},
                sorted(c.attributes),
                c.lineno,
                c.end_lineno,
                c.forward_all_reduces,
                c.mentions,
            ]
            for k, c in s.classes.items()
        },
        "functions": {k: sig(f) for k, f in s.functions.items()},
    }


def summary_from_json(d: dict) -> ModuleSummary:
    def sig(v: list) -> FunctionSig:
        return FunctionSig(v[0], [Param(*p) for p in v[1]], v[2], v[3], v[4])

    classes = {
        k: ClassSummary(
            name=c[0],
            bases=c[1],
            decorators=c[2],
            methods={m: sig(f) for m, f in c[3].items()},
            attributes=set(c[4]),
            lineno=c[5],
            end_lineno=c[6],
            forward_all_reduces=c[7],
            mentions=c[8],
        )
        for k, c in d["classes"].items()
    }
    return ModuleSummary(
        path=d["path"],
        module=d["module"],
        is_package=d["is_package"],
        imports={k: (v[0], v[1]) for k, v in d["imports"].items()},
        classes=classes,
        functions={k: sig(f) for k, f in d["functions"].items()},
        names=frozenset(d["names"]) if d["names"] is not None else None,
    )
