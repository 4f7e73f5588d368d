"""Which classes vLLM builds, and how: the scope of the architecture contract.

vLLM builds a class as a whole model (a *root*) only when it can find it by an
architecture name: in its own registry tables, or registered by a plugin with
``ModelRegistry.register_model`` (a class or a lazy ``"module:Class"`` string, in a loop
over a table, through a wrapper function). A registered class that another model of the
same plugin builds with ``init_vllm_registered_model(architectures=[...])`` is a *stage*:
vLLM sees the wrapper, which carries the interfaces. Whatever a root or stage refers to
(its attributes, layer types, bases) is built under it (*sub-models and modules*). A class
of a package that registers its models, and that no registered model builds, is built by
another loader (a diffusion engine, an SDK's own runner) and is outside the contract.

A package that registers nothing that can be read (a loose file, a fork of vLLM's
layout) has no scope: the rules fall back to what a class looks like. Everything here is
read with ``ast`` and the index summaries, never imported.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prefixlint.static.index import module_name_for
from prefixlint.static.renames import package_renames
from prefixlint.static.resolve import Resolver, Symbol
from prefixlint.static.vllm_facts import builds_engine_cache
from prefixlint.static.vllm_source import absolute_module

# Folders a package walk never enters (build outputs, caches, virtual environments).
_SKIPPED = frozenset({"__pycache__", "build", "dist", "node_modules", ".git", ".venv", "venv"})
_MAX_ITEMS = 2000  # loop iterations expanded per ``for``: a table of architectures, not data
_MAX_DEPTH = 4  # wrapper functions followed from ``register_model`` to the literal names
UNREAD_NAME = "?"  # a registered class whose architecture name is computed
STAGE_BUILDER = "init_vllm_registered_model"  # vLLM builds a registered model as a part


class Role(enum.Enum):
    ROOT = "root"  # vLLM builds it as the model
    STAGE = "stage"  # registered, and built by another model of its package as a sub-model
    BUILT = "built"  # built under a root or a stage (a sub-model, a layer)
    OUTSIDE = "outside"  # in a package that registers models, built by none of them
    UNKNOWN = "unknown"  # no scope: the package registers nothing prefixlint can read


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}:{self.name}"


@dataclass(frozen=True)
class _Module:
    """A module object (``import_module("pkg.mod")``)."""

    name: str


@dataclass(frozen=True)
class _Param:
    """A parameter of a top-level function: its callers supply the value."""

    module: str
    function: str
    name: str
    index: int  # among the positional parameters; -1 when keyword-only


@dataclass
class PackageScope:
    package: str
    registered: dict[ClassRef, tuple[str, ...]] = field(default_factory=dict)
    stages: dict[ClassRef, ClassRef] = field(default_factory=dict)  # stage -> its builder
    built: frozenset[ClassRef] = frozenset()
    # Registered, but with a constructor vLLM cannot call (no ``vllm_config``): another
    # model of the package builds it itself, and the registration is not how it is built.
    inert: frozenset[ClassRef] = frozenset()
    # Built under a root that keeps its decoder's attention in vLLM's paged cache layers.
    paged: frozenset[ClassRef] = frozenset()
    complete: bool = False  # every registration was read; else unknown classes stay UNKNOWN
    # Weight-loading renames of the package's files that load weights (``renames.py``).
    renames: tuple[tuple[str, str], ...] = ()
    unread: tuple[str, ...] = ()  # registrations that could not be read, where

    @property
    def known(self) -> bool:
        return bool(self.registered)

    def role(self, module: str | None, name: str) -> Role:
        if module is None or not self.known:
            return Role.UNKNOWN
        ref = ClassRef(module, name)
        if ref in self.stages:
            return Role.STAGE
        if ref in self.registered and not (ref in self.inert and ref in self.built):
            return Role.ROOT
        if ref in self.built:
            return Role.BUILT
        return Role.OUTSIDE if self.complete else Role.UNKNOWN

    def builder_of(self, module: str | None, name: str) -> ClassRef | None:
        return self.stages.get(ClassRef(module or "", name))

    @property
    def digest(self) -> str:
        """What a cached result of a file of this package depends on."""
        payload = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.blake2b(payload.encode(), digest_size=12).hexdigest()

    def to_json(self) -> dict:
        return {
            "package": self.package,
            "registered": sorted([str(k), list(v)] for k, v in self.registered.items()),
            "stages": sorted([str(k), str(v)] for k, v in self.stages.items()),
            "built": sorted(str(r) for r in self.built),
            "paged": sorted(str(r) for r in self.paged),
            "inert": sorted(str(r) for r in self.inert),
            "complete": self.complete,
            "unread": list(self.unread),
            "renames": [list(p) for p in self.renames],
        }

    @classmethod
    def from_json(cls, d: dict) -> PackageScope:
        def ref(text: str) -> ClassRef:
            module, _, name = text.rpartition(":")
            return ClassRef(module, name)

        return cls(
            package=d["package"],
            registered={ref(k): tuple(v) for k, v in d["registered"]},
            stages={ref(k): ref(v) for k, v in d["stages"]},
            built=frozenset(ref(r) for r in d["built"]),
            paged=frozenset(ref(r) for r in d["paged"]),
            inert=frozenset(ref(r) for r in d["inert"]),
            complete=d["complete"],
            unread=tuple(d["unread"]),
            renames=tuple((a, b) for a, b in d["renames"]),
        )


class _Package:
    """The files of the top-level packages of a scope, parsed on demand."""

    def __init__(self, package_dirs: list[Path]) -> None:
        self.dirs = sorted({d.resolve() for d in package_dirs})
        self.name = ",".join(d.name for d in self.dirs)
        self._files: dict[str, Path] | None = None
        self._trees: dict[str, ast.Module | None] = {}
        self._imports: dict[str, dict[str, tuple[str, str | None]]] = {}
        self._calls: dict[str, list[_Call]] = {}

    @property
    def files(self) -> dict[str, Path]:
        if self._files is None:
            self._files = {}
            for package_dir in self.dirs:
                for path in package_files(package_dir):
                    module, _ = module_name_for(path)
                    if module is not None:
                        self._files.setdefault(module, path)
        return self._files

    def with_text(self, needle: bytes) -> list[str]:
        out = []
        for module, path in self.files.items():
            try:
                if needle in path.read_bytes():
                    out.append(module)
            except OSError:
                continue
        return out

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.files.get(module)
            try:
                self._trees[module] = ast.parse(path.read_bytes()) if path else None
            except (OSError, SyntaxError, ValueError):
                self._trees[module] = None
        return self._trees[module]

    def is_package_module(self, module: str) -> bool:
        path = self.files.get(module)
        return path is not None and path.name == "__init__.py"

    def imports(self, module: str) -> dict[str, tuple[str, str | None]]:
        """Every import of the file, at any depth (``register()`` imports inside itself)."""
        if module not in self._imports:
            out: dict[str, tuple[str, str | None]] = {}
            tree = self.tree(module)
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            out[a.asname] = (a.name, None)
                        else:
                            out[a.name.split(".")[0]] = (a.name.split(".")[0], None)
                elif isinstance(node, ast.ImportFrom):
                    base = absolute_module(
                        module, self.is_package_module(module), node.level, node.module
                    )
                    for a in node.names:
                        if a.name != "*":
                            out[a.asname or a.name] = (base, a.name)
            self._imports[module] = out
        return self._imports[module]

    def binding(self, module: str, name: str, depth: int = 0) -> tuple | None:
        """What a top-level name of ``module`` is bound to: ("class", ref),
        ("function", module, node), ("value", module, node) or ("external", ref)."""
        tree = self.tree(module)
        if tree is None or depth > 8:
            return None
        for stmt in _top_statements(tree.body):
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                return ("class", ClassRef(module, name))
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return ("function", module, stmt)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    if isinstance(stmt.value, ast.Name) and stmt.value.id != name:
                        return self.binding(module, stmt.value.id, depth + 1)
                    return ("value", module, stmt.value)
        found = self.imports(module).get(name)
        if found is None or found[1] is None:
            return None
        source, attr = found
        if source in self.files:
            return self.binding(source, attr, depth + 1)
        if f"{source}.{attr}" in self.files:
            return None  # a module, not a value
        return ("external", ClassRef(source, attr))

    def calls(self, module: str) -> list[_Call]:
        """Every call of the file with the loop bindings, function and class around it."""
        if module not in self._calls:
            tree = self.tree(module)
            out: list[_Call] = []
            if tree is not None:
                _Walker(self, module, out).block(tree.body, {}, None, None)
            self._calls[module] = out
        return self._calls[module]


@dataclass
class _Call:
    node: ast.Call
    env: dict[str, object]
    function: ast.FunctionDef | ast.AsyncFunctionDef | None  # the top-level function
    cls: str | None  # the top-level class


def _top_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_statements(stmt.body)
            yield from _top_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _top_statements(stmt.body)
            for h in stmt.handlers:
                yield from _top_statements(h.body)


def package_files(package_dir: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED and not d.startswith("."))
        for n in sorted(names):
            if n.endswith(".py"):
                yield Path(folder) / n


class _Walker:
    """Collects the calls of a module, expanding ``for`` loops over literal tables."""

    def __init__(self, package: _Package, module: str, out: list[_Call]) -> None:
        self.package = package
        self.module = module
        self.out = out

    def block(self, body: list[ast.stmt], env: dict, fn, cls: str | None) -> None:
        for stmt in body:
            self.statement(stmt, env, fn, cls)

    def statement(self, stmt: ast.stmt, env: dict, fn, cls: str | None) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in [*stmt.decorator_list, *stmt.args.defaults, *stmt.args.kw_defaults]:
                if d is not None:
                    self.expression(d, env, fn, cls)
            self.block(stmt.body, dict(env), fn if fn is not None or cls else stmt, cls)
        elif isinstance(stmt, ast.ClassDef):
            self.block(stmt.body, dict(env), fn, cls or stmt.name)
        elif (
            isinstance(stmt, ast.Assign)
            and (fn is not None or cls is not None)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            # A local name (``module = import_module(...)``): later statements read it.
            self.expression(stmt.value, env, fn, cls)
            got = _Eval(self.package).values(self.module, stmt.value, env, fn)
            env[stmt.targets[0].id] = got[0] if len(got) == 1 else None
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expression(stmt.iter, env, fn, cls)
            items = _Eval(self.package).items(self.module, stmt.iter, env, fn)
            if items is None or len(items) > _MAX_ITEMS:
                items = [None]
            for item in items:
                inner = dict(env)
                _bind(stmt.target, item, inner)
                self.block(stmt.body, inner, fn, cls)
            self.block(stmt.orelse, env, fn, cls)
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    self.statement(child, env, fn, cls)
                elif isinstance(child, ast.excepthandler):
                    self.block(child.body, env, fn, cls)
                elif isinstance(child, ast.expr):
                    self.expression(child, env, fn, cls)
                elif isinstance(child, (ast.withitem, ast.match_case)):
                    for sub in ast.iter_child_nodes(child):
                        if isinstance(sub, ast.stmt):
                            self.statement(sub, env, fn, cls)
                        elif isinstance(sub, ast.expr):
                            self.expression(sub, env, fn, cls)

    def expression(self, node: ast.expr, env: dict, fn, cls: str | None) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                self.out.append(_Call(sub, env, fn, cls))


def _bind(target: ast.expr, item: object, env: dict) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = item
    elif isinstance(target, (ast.Tuple, ast.List)):
        parts = item if isinstance(item, tuple) and len(item) == len(target.elts) else None
        for i, elt in enumerate(target.elts):
            _bind(elt, parts[i] if parts is not None else None, env)


class _Eval:
    """Values of expressions, as far as literals, module constants and loops say."""

    def __init__(self, package: _Package) -> None:
        self.package = package

    def values(self, module: str, node: ast.expr | None, env: dict, fn, depth: int = 0) -> list:
        if node is None or depth > 10:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            parts: list[list] = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    parts.append([str(part.value)])
                elif isinstance(part, ast.FormattedValue):
                    got = [v for v in self.values(module, part.value, env, fn, depth + 1)]
                    if not got or not all(isinstance(v, str) for v in got):
                        return []
                    parts.append(got)
            combos = list(itertools.islice(itertools.product(*parts), _MAX_ITEMS))
            return ["".join(c) for c in combos]
        if isinstance(node, (ast.Tuple, ast.List)):
            elts = [self.values(module, e, env, fn, depth + 1) for e in node.elts]
            return [tuple(e[0] if e else None for e in elts)]
        if isinstance(node, ast.Name):
            if node.id == "__name__":
                return [module]
            if node.id in env:
                value = env[node.id]
                return [] if value is None else [value]
            param = _param(module, fn, node.id)
            if param is not None:
                return [param]
            return self._bound(module, node.id, depth)
        if isinstance(node, ast.Call):
            return self._call_value(module, node, env, fn, depth)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = self.package.imports(module).get(node.value.id)
            if target is not None:
                mod = target[0] if target[1] is None else f"{target[0]}.{target[1]}"
                if mod in self.package.files:
                    return self._bound(mod, node.attr, depth)
        return []

    def _call_value(self, module: str, node: ast.Call, env: dict, fn, depth: int) -> list:
        """``import_module("pkg.mod")`` (a module) and ``getattr(that, "Cls")``."""
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        args = [self.values(module, a, env, fn, depth + 1) for a in node.args]
        if name == "import_module" and len(args) == 1:
            return [_Module(a) for a in args[0] if isinstance(a, str)]
        if name == "getattr" and len(args) >= 2:
            owners = [o for o in args[0] if isinstance(o, _Module)]
            attrs = [a for a in args[1] if isinstance(a, str)]
            return [ClassRef(o.name, a) for o in owners for a in attrs]
        return []

    def _bound(self, module: str, name: str, depth: int) -> list:
        found = self.package.binding(module, name)
        if found is None:
            return []
        kind = found[0]
        if kind in ("class", "external"):
            return [found[1]]
        if kind == "value":
            return self.values(found[1], found[2], {}, None, depth + 1)
        return []

    def items(self, module: str, node: ast.expr, env: dict, fn) -> list | None:
        """What a ``for`` iterates over: a literal list/tuple, a literal dict (its keys),
        or ``.items()``/``.keys()``/``.values()`` of one; None when unknown."""
        view = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("items", "keys", "values")
            and not node.args
        ):
            view, node = node.func.attr, node.func.value
        literal = self._literal(module, node)
        if literal is None:
            return None
        lit_module, lit = literal
        if isinstance(lit, (ast.List, ast.Tuple, ast.Set)) and view is None:
            return [
                v[0] if v else None
                for v in (self.values(lit_module, e, {}, None) for e in lit.elts)
            ]
        if isinstance(lit, ast.Dict):
            entries = self._dict_entries(lit_module, lit)
            if entries is None:
                return None
            if view == "items":
                return [(k, v) for k, v in entries]
            if view == "values":
                return [v for _, v in entries]
            return [k for k, _ in entries]
        return None

    def _literal(self, module: str, node: ast.expr, depth: int = 0) -> tuple[str, ast.expr] | None:
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return module, node
        if isinstance(node, ast.Name) and depth < 8:
            found = self.package.binding(module, node.id)
            if found is not None and found[0] == "value":
                return self._literal(found[1], found[2], depth + 1)
        return None

    def _dict_entries(self, module: str, node: ast.Dict, depth: int = 0) -> list | None:
        out = []
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # ``**OTHER_TABLE``
                inner = self._literal(module, value)
                if inner is None or not isinstance(inner[1], ast.Dict) or depth > 6:
                    return None
                sub = self._dict_entries(inner[0], inner[1], depth + 1)
                if sub is None:
                    return None
                out += sub
                continue
            keys = self.values(module, key, {}, None)
            if not keys or not isinstance(keys[0], str):
                return None
            got = self.values(module, value, {}, None)
            out.append((keys[0], got[0] if got else None))
        return out


def _param(module: str, fn, name: str) -> _Param | None:
    if fn is None:
        return None
    a = fn.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    if name in positional:
        return _Param(module, fn.name, name, positional.index(name))
    if name in [p.arg for p in a.kwonlyargs]:
        return _Param(module, fn.name, name, -1)
    return None


# -- reading the package -----------------------------------------------------------------


def _is_vllm_registry(package: _Package, module: str, receiver: ast.expr) -> bool:
    """``ModelRegistry`` imported from vLLM (``from vllm import ModelRegistry``), or
    ``vllm.ModelRegistry``; a registry object of the plugin's own is another loader's."""
    if isinstance(receiver, ast.Name):
        found = package.imports(module).get(receiver.id)
        return found is not None and found[0].split(".")[0] == "vllm" and found[1] is not None
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name):
        found = package.imports(module).get(receiver.value.id)
        return found is not None and found[0] == "vllm" and receiver.attr == "ModelRegistry"
    return False


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == keyword:
            return k.value
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[index] if index < len(positional) else None


class _Reader:
    def __init__(self, package: _Package) -> None:
        self.package = package
        self.eval = _Eval(package)
        self.registered: dict[ClassRef, set[str]] = {}
        self.unread: list[str] = []

    def read_registrations(self) -> None:
        for module in self.package.with_text(b"register_model"):
            for call in self.package.calls(module):
                func = call.node.func
                if not (isinstance(func, ast.Attribute) and func.attr == "register_model"):
                    continue
                if not _is_vllm_registry(self.package, module, func.value):
                    continue
                archs = _argument(call.node, 0, "model_arch")
                target = _argument(call.node, 1, "model_cls")
                self._register(module, call, archs, target, 0)

    def _register(self, module: str, call: _Call, archs, target, depth: int) -> None:
        where = f"{module}:{call.node.lineno}"
        names = self.eval.values(module, archs, call.env, call.function)
        classes = self.eval.values(module, target, call.env, call.function)
        params = [v for v in (*names, *classes) if isinstance(v, _Param)]
        if params and depth < _MAX_DEPTH:
            # A wrapper (``register_with_vllm(name, cls)``): its callers name the model.
            # Its callers name the model. A wrapper no file of the package calls is API
            # for other packages: what it registers is theirs (vLLM calls entry points
            # with no arguments).
            for site_module, site in self._call_sites(params[0].module, params[0].function):
                self._register(
                    site_module,
                    site,
                    _supplied(site.node, names, archs),
                    _supplied(site.node, classes, target),
                    depth + 1,
                )
            return
        refs = [r for r in (self._class_of(c) for c in classes) if r is not None]
        if not refs:  # some class is registered, and we cannot tell which
            self.unread.append(where)
            return
        # The class is what decides the scope; a name that cannot be read is still a name.
        strings = [n for n in names if isinstance(n, str)] or [UNREAD_NAME]
        for ref in refs:
            self.registered.setdefault(ref, set()).update(strings)

    def _class_of(self, value: object) -> ClassRef | None:
        if isinstance(value, str) and value.count(":") == 1:
            module, _, name = value.partition(":")
            value = ClassRef(module, name)
        if not isinstance(value, ClassRef):
            return None
        if value.module in self.package.files:
            found = self.package.binding(value.module, value.name)
            if found is not None and found[0] == "class":
                return found[1]
        return value

    def _call_sites(self, module: str, function: str) -> Iterator[tuple[str, _Call]]:
        for caller in self.package.with_text(function.encode()):
            for call in self.package.calls(caller):
                func = call.node.func
                name = func.id if isinstance(func, ast.Name) else None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    target = self.package.imports(caller).get(func.value.id)
                    base = None
                    if target is not None:
                        base = target[0] if target[1] is None else f"{target[0]}.{target[1]}"
                    if base == module and func.attr == function:
                        yield caller, call
                    continue
                if name is None:
                    continue
                found = self.package.binding(caller, name)
                if (
                    found is not None
                    and found[0] == "function"
                    and found[1] == module
                    and found[2].name == function
                ):
                    yield caller, call

    def stage_builds(self) -> list[tuple[ClassRef | None, str]]:
        """(the class that builds it, the architecture) of every
        ``init_vllm_registered_model(architectures=[...])`` with literal names."""
        out: list[tuple[ClassRef | None, str]] = []
        for module in self.package.with_text(b"init_vllm_registered_model"):
            for call in self.package.calls(module):
                func = call.node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                imported = self.package.imports(module).get(name)
                if imported is not None and imported[1] is not None:
                    name = imported[1]  # ``from ... import init_vllm_registered_model as x``
                if name != STAGE_BUILDER:
                    continue
                archs = _argument(call.node, 99, "architectures")
                values = self.eval.values(module, archs, call.env, call.function)
                builder = ClassRef(module, call.cls) if call.cls else None
                for value in values:
                    for arch in value if isinstance(value, tuple) else (value,):
                        if isinstance(arch, str):
                            out.append((builder, arch))
        return out


def _supplied(call: ast.Call, values: list, fallback):
    """The argument of a wrapper's call site that fills the wrapper's parameter."""
    param = next((v for v in values if isinstance(v, _Param)), None)
    if param is None:
        return fallback
    if param.index >= 0:
        got = _argument(call, param.index, param.name)
    else:
        got = next((k.value for k in call.keywords if k.arg == param.name), None)
    return got


def read_scope(
    package_dirs: list[Path], resolver: Resolver, registry: dict | None = None
) -> PackageScope:
    """The scope of the packages at ``package_dirs`` (see ``scope_unit``). ``registry``:
    the roots vLLM's own registry defines (class -> architectures), for vLLM itself."""
    package = _Package(package_dirs)
    scope = PackageScope(package.name)
    if registry is not None:  # vLLM itself: its registry tables are the whole story
        scope.registered = {ref: tuple(sorted(a)) for ref, a in registry.items()}
        scope.complete = False  # classes vLLM resolves at run time stay UNKNOWN
        return scope
    reader = _Reader(package)
    reader.read_registrations()
    registered = {r: tuple(sorted(a)) for r, a in reader.registered.items()}
    by_arch = {a: r for r, archs in registered.items() for a in archs}
    stages: dict[ClassRef, ClassRef] = {}
    edges: dict[ClassRef, set[ClassRef]] = {}
    builds_paged_vllm_model: set[ClassRef] = set()
    for builder, arch in reader.stage_builds():
        built = by_arch.get(arch)
        if built is None and builder is not None and _vllm_model_is_paged(arch, resolver):
            builds_paged_vllm_model.add(builder)  # a stage of vLLM's own: ``Qwen2ForCausalLM``
        if built is None or builder is None:
            continue
        edges.setdefault(builder, set()).add(built)
        if builder != built and built.module in package.files:
            stages.setdefault(built, builder)
    roots = [r for r in registered if r.module in package.files]
    scope.registered = {r: a for r, a in registered.items() if r.module in package.files}
    scope.stages = {s: b for s, b in stages.items() if b in scope.registered or b in stages}
    scope.built, scope.paged = _reachable(roots, edges, package, resolver, builds_paged_vllm_model)
    scope.inert = frozenset(
        r for r in scope.registered if not _vllm_can_build(r, package, resolver)
    )
    if scope.inert & scope.built:  # what the others build, without the inert roots
        live = [r for r in roots if r not in scope.inert]
        built_by_live, _ = _reachable(live, edges, package, resolver)
        scope.inert = frozenset(r for r in scope.inert if r in built_by_live)
    scope.complete = not reader.unread
    scope.unread = tuple(reader.unread)
    if scope.registered:
        scope.renames = package_renames(
            _text(package.files[m]) for m in package.with_text(b"load_weights")
        )
    return scope


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def _vllm_can_build(ref: ClassRef, package: _Package, resolver: Resolver) -> bool:
    """vLLM builds a model as ``cls(vllm_config=..., prefix=...)``: its constructor must
    take ``vllm_config`` (or ``**kwargs``); unknown when it cannot be read."""
    path = package.files.get(ref.module)
    summary = resolver.loader.by_path(path) if path is not None else None
    cls = summary.classes.get(ref.name) if summary is not None else None
    if summary is None or cls is None:
        return True
    sig = resolver.init_signature(Symbol(summary, ref.name, cls=cls))
    return sig is None or sig.param("vllm_config") is not None or sig.has_var_keyword


def _vllm_model_is_paged(arch: str, resolver: Resolver) -> bool:
    """vLLM's registry maps ``arch`` to a class that builds a cache-owning layer."""
    source = resolver.loader.vllm
    for entry in source.registry() if source is not None else ():
        if entry.architecture == arch:
            summary = resolver.loader.by_name(entry.module)
            cls = summary.classes.get(entry.cls) if summary is not None else None
            return cls is not None and builds_engine_cache(
                resolver, Symbol(summary, entry.cls, cls=cls)
            )
    return False


def _reachable(
    roots: list[ClassRef],
    edges: dict[ClassRef, set[ClassRef]],
    package: _Package,
    resolver: Resolver,
    builds_paged_vllm_model: set[ClassRef] | frozenset[ClassRef] = frozenset(),
) -> tuple[frozenset[ClassRef], frozenset[ClassRef]]:
    """Every class of the package a root may build (what its body names, its bases, the
    stages it builds, followed through the index summaries), and those built under a
    root that also builds one of vLLM's cache-owning layers (``Attention``), itself or as
    a model of vLLM's registry (``builds_paged_vllm_model``)."""
    neighbours: dict[ClassRef, tuple[list[ClassRef], bool]] = {}

    def look(ref: ClassRef) -> tuple[list[ClassRef], bool]:
        if ref not in neighbours:
            out = list(edges.get(ref, ()))
            paged = ref in builds_paged_vllm_model
            summary = resolver.loader.by_path(package.files[ref.module])
            cls = summary.classes.get(ref.name) if summary is not None else None
            for name in (*cls.bases, *cls.mentions) if cls is not None else ():
                symbol = resolver.resolve(summary, name)  # type: ignore[arg-type]
                if not isinstance(symbol, Symbol) or symbol.cls is None:
                    continue
                if symbol.module.module in package.files:
                    out.append(ClassRef(symbol.module.module, symbol.cls.name))
                elif builds_engine_cache(resolver, symbol):
                    paged = True
            neighbours[ref] = (out, paged)
        return neighbours[ref]

    seen: set[ClassRef] = set()
    paged_trees: set[ClassRef] = set()
    for root in roots:
        tree: set[ClassRef] = set()
        todo = [root]
        paged = False
        while todo:
            ref = todo.pop()
            if ref in tree or ref.module not in package.files:
                continue
            tree.add(ref)
            out, owns = look(ref)
            paged = paged or owns
            todo.extend(out)
        seen |= tree
        if paged:
            paged_trees |= tree
    return frozenset(seen), frozenset(paged_trees)
