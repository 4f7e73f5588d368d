"""PFX504 plugin-registration."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import libcst as cst

from prefixlint.static.index import bound_names
from prefixlint.static.prefix_sites import dotted_name, string_value, target_names
from prefixlint.static.rule import Invalid, LintRule
from prefixlint.static.vllm_source import VllmSource
from prefixlint.static.walk import walk

# -- PFX504 ---------------------------------------------------------------------------------

_BLANK = cst.Module(body=[])


def _code(node: cst.CSTNode) -> str:
    return _BLANK.code_for_node(node).strip()


def _argument(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    return positional[index].value if index < len(positional) else None


def _reads_registry(node: cst.CSTNode, names: frozenset[str] | set[str]) -> bool:
    """Whether ``node`` reads the registry's architectures: ``get_supported_archs()``,
    ``ModelRegistry.models``, or a name ``names`` says holds them (or a copy)."""
    attrs = {id(sub.attr) for sub in walk(node) if isinstance(sub, cst.Attribute)}
    for sub in walk(node):
        if isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if name and name.rsplit(".", 1)[-1] == "get_supported_archs":
                return True
        elif isinstance(sub, cst.Attribute):
            if (dotted_name(sub) or "").endswith("ModelRegistry.models"):
                return True
        elif isinstance(sub, cst.Name) and id(sub) not in attrs and sub.value in names:
            return True
    return False


_GROWS = frozenset({"add", "update", "append", "extend"})


def _bindings(function: cst.FunctionDef) -> list[tuple[list[str], cst.CSTNode]]:
    """(names bound, the expression they come from) for every assignment, loop target and
    growing call (``seen.add(x)``, ``seen.update(xs)``) in ``function``."""
    out: list[tuple[list[str], cst.CSTNode]] = []
    for sub in walk(function.body):
        if isinstance(sub, cst.Assign) and sub.value is not None:
            names = [n for t in sub.targets for n in target_names(t.target)]
            out.append((names, sub.value))
        elif isinstance(sub, (cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
            if sub.value is not None:
                out.append((list(target_names(sub.target)), sub.value))
        elif isinstance(sub, cst.For):
            out.append((list(target_names(sub.target)), sub.iter))
        elif isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute):
            receiver = sub.func.value
            if sub.func.attr.value in _GROWS and isinstance(receiver, cst.Name):
                out.append(([receiver.value], sub))
    return out


def registry_names(function: cst.FunctionDef) -> frozenset[str]:
    """Names in ``function`` that the registry's architectures flow into (held in a
    variable, copied into a set, a name per element): a membership test against one is
    the registry guard."""
    names: set[str] = set()
    bindings = _bindings(function)
    changed = True
    while changed:
        changed = False
        for bound, value in bindings:
            if set(bound) - names and _reads_registry(value, names):
                names.update(bound)
                changed = True
    return frozenset(names)


def _negated(test: cst.CSTNode) -> set[int]:
    """The comparisons under a ``not`` in ``test`` (their sense is reversed)."""
    out: set[int] = set()
    for sub in walk(test):
        if isinstance(sub, cst.UnaryOperation) and isinstance(sub.operator, cst.Not):
            out.update(id(c) for c in walk(sub.expression) if isinstance(c, cst.Comparison))
    return out


def _guard_for(test: cst.CSTNode, arch: str, absent: bool, names: frozenset[str]) -> bool:
    """Whether ``test`` is true only when ``arch`` is ``absent`` from the registry
    (``arch not in <the registry's architectures>``), or, with ``absent`` False, only
    when it is present."""
    flipped = _negated(test)
    for sub in walk(test):
        if not isinstance(sub, cst.Comparison) or _code(sub.left) != arch:
            continue
        for target in sub.comparisons:
            says_absent = isinstance(target.operator, cst.NotIn)
            if not isinstance(target.operator, (cst.In, cst.NotIn)):
                continue
            if id(sub) in flipped:
                says_absent = not says_absent
            if says_absent == absent and _reads_registry(target.comparator, names):
                return True
    return False


def _without_registered(node: cst.CSTNode, names: frozenset[str]) -> bool:
    """Whether iterating ``node`` yields only names the registry lacks: a comprehension
    filtered by ``x not in <registry>``, or ``table - <registry>``."""
    for sub in walk(node):
        if isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.Subtract):
            removed: list[cst.CSTNode] = [sub.right]
        elif isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute):
            removed = [a.value for a in sub.args] if sub.func.attr.value == "difference" else []
        elif isinstance(sub, cst.CompFor):
            loop = _code(sub.target)
            if any(_guard_for(clause.test, loop, True, names) for clause in sub.ifs):
                return True
            continue
        else:
            continue
        if any(_reads_registry(r, names) for r in removed):
            return True
    return False


def _iter_names(node: cst.CSTNode) -> list[str]:
    """The plain names an iterable reads (``missing``, ``sorted(missing)``)."""
    return [sub.value for sub in walk(node) if isinstance(sub, cst.Name)]


def _exits(block: cst.BaseSuite) -> bool:
    stmts = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for stmt in stmts:
        for sub in walk(stmt):
            if isinstance(sub, (cst.Return, cst.Continue, cst.Raise)):
                return True
    return False


def _inside(node: cst.CSTNode, block: cst.CSTNode | None) -> bool:
    return block is not None and any(sub is node for sub in walk(block))


_MODULE_CACHE: dict[Path, frozenset[str] | None] = {}


def _module_names(path: Path) -> frozenset[str] | None:
    """Names bound at the top level of a module file; None when they cannot be known."""
    if path not in _MODULE_CACHE:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            _MODULE_CACHE[path] = None
        else:
            _MODULE_CACHE[path] = bound_names(tree)
    return _MODULE_CACHE[path]


@functools.lru_cache(maxsize=8)
def _vllm_architectures(source: VllmSource | None) -> frozenset[str]:
    """The architecture names vLLM's own registry serves (read from its code)."""
    if source is None:
        return frozenset()
    return frozenset(e.architecture for e in source.registry())


class PluginRegistration(LintRule):
    """
    ## What it does
    Checks a plugin's top-level `register()` function: every
    `ModelRegistry.register_model("Arch", ...)` must be guarded by
    `if "Arch" not in ModelRegistry.get_supported_archs():` (or follow an early
    `if "Arch" in ModelRegistry.get_supported_archs(): return`), and a lazy
    `"package.module:Class"` target must name a class that the module defines. The module
    is looked up on disk under the checked package's root and the installed vLLM; when it
    cannot be found, or its names cannot be known statically, nothing is reported.

    Any flow of the registry's architectures into the condition is the guard: the list
    held in a variable (`registered = ModelRegistry.get_supported_archs()`), copied into a
    set before a loop over the plugin's table (`if arch not in supported:`), a loop over
    only the absent ones (`[a for a in TABLE if a not in registered]`, `TABLE.keys() -
    registered`), or the `else:` of a test for presence.

    ## Why is this bad?
    vLLM calls `register()` in every process it starts (engine, workers, API server).
    Unguarded, a plugin replaces an architecture vLLM already serves, in every process;
    vLLM 0.32 and 0.33 log the overwrite (`registry.py`, "is already registered, and will be
    overwritten") only at DEBUG level, which the default `VLLM_LOGGING_LEVEL=INFO` hides. A
    wrong `module:Class` is imported only when the model is first loaded: the plugin
    installs cleanly and the server fails later, on the worker, with an import error.

    ## Example
    ```python
    def register():
        from vllm import ModelRegistry
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
    ```

    Use instead:
    ```python
    def register():
        from vllm import ModelRegistry
        if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
    ```
    """

    code = "PFX504"
    triggers = ("register_model",)
    statement_triggers = ("register_model",)  # a registration at import time

    VALID = [
        """
def register():
    from vllm import ModelRegistry

    if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(
            "MyForCausalLM", "vllm.model_executor.models.llama:LlamaForCausalLM"
        )
""",
        """
MODELS = {"A": "my_pkg.a:A", "B": "my_pkg.b:B"}

def register():
    from vllm import ModelRegistry

    for arch, target in MODELS.items():
        if arch in ModelRegistry.get_supported_archs():
            continue
        ModelRegistry.register_model(arch, target)
""",
        # the guard held in a variable
        """
def register():
    from vllm import ModelRegistry

    registered = ModelRegistry.get_supported_archs()
    if "MyForCausalLM" not in registered:
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
        # a loop over a table whose guard reads a set built earlier
        """
MODELS = {"A": "my_pkg.a:A", "B": "my_pkg.b:B"}

def register():
    from vllm import ModelRegistry

    supported = set()
    for name in ModelRegistry.get_supported_archs():
        supported.add(name)
    for arch, target in MODELS.items():
        if not arch in supported:
            ModelRegistry.register_model(arch, target)
""",
        # a loop over only the architectures the registry lacks
        """
MODELS = {"A": "my_pkg.a:A", "B": "my_pkg.b:B"}

def register():
    from vllm import ModelRegistry

    known = ModelRegistry.get_supported_archs()
    missing = [arch for arch in MODELS if arch not in known]
    for arch in missing:
        ModelRegistry.register_model(arch, MODELS[arch])
""",
        # the else of a test for presence
        """
def register():
    from vllm import ModelRegistry

    if "MyForCausalLM" in set(ModelRegistry.get_supported_archs()):
        print("already there")
    else:
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
    ]
    INVALID = [
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
            line=5,
            contains="get_supported_archs",
        ),
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(
            "MyForCausalLM", "vllm.model_executor.models.llama:MyForCausalLM"
        )
""",
            line=7,
            contains="MyForCausalLM",
        ),
        # the variable holds the registry's architectures, but the test is of another name
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    registered = ModelRegistry.get_supported_archs()
    if "OtherForCausalLM" not in registered:
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
            line=7,
            contains="DEBUG level",
        ),
        # the registry's own architectures iterated: every one re-registered
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    for arch in list(ModelRegistry.get_supported_archs()):
        if arch.startswith("Llama"):
            ModelRegistry.register_model(arch, "my_pkg.model:MyForCausalLM")
""",
            line=7,
        ),
        # the call in the branch of a test for presence
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    registered = ModelRegistry.get_supported_archs()
    if "MyForCausalLM" not in registered:
        print("new")
    else:
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
            line=9,
        ),
    ]

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        if callee is None or not callee.endswith("register_model"):
            return
        if not (callee.endswith("ModelRegistry.register_model") or callee == "register_model"):
            return
        functions = self.ctx.prefixes.function_stack
        if self.ctx.prefixes.class_stack:
            return
        if not functions or functions[0].name.value != "register":
            self._outside_register(node, functions[0] if functions else None)
            return
        arch = _argument(node, 0, "model_arch")
        target = _argument(node, 1, "model_cls")
        if arch is not None and not self._guarded(node, _code(arch), functions[0]):
            shown = _code(arch)
            self.report(
                node,
                f"`register_model({shown}, ...)` is not guarded by `if {shown} not in "
                "ModelRegistry.get_supported_archs()`: it replaces an architecture of that "
                "name that vLLM or another plugin already provides, in every process, and "
                "vLLM logs the overwrite only at DEBUG level (hidden at its default INFO)",
                site=self.here(),
            )
        if target is not None:
            self._check_target(target)

    def _outside_register(self, node: cst.Call, function: cst.FunctionDef | None) -> None:
        """A registration at import time, or in another function (a console entry point),
        of an architecture vLLM itself serves: it replaces vLLM's model wherever it runs.
        Only a literal name of vLLM's registry is judged (the third blind corpus's miss);
        another name outside ``register()`` is the plugin's own business."""
        arch = _argument(node, 0, "model_arch")
        name = string_value(arch) if arch is not None else None
        if name is None or name not in _vllm_architectures(self.ctx.resolver.loader.vllm):
            return
        if self._guarded(node, _code(arch), function):
            return
        where = f"in `{function.name.value}()`" if function is not None else "at import time"
        self.report(
            node,
            f"`register_model({_code(arch)}, ...)` {where}, outside the plugin's "
            f"`register()` and unguarded, replaces vLLM's own `{name}` in every process "
            "that runs it (vLLM logs the overwrite only at DEBUG level); register a name of "
            "the plugin's own, or guard it with `ModelRegistry.get_supported_archs()`",
            site=self.here(),
        )

    def _guarded(self, node: cst.Call, arch: str, function: cst.FunctionDef | None) -> bool:
        """Any flow of the registry's architectures into a condition that holds ``node``
        back for a registered ``arch``: an enclosing ``if`` (or the ``else`` of one that
        tests presence), a loop over only the absent ones, or an early exit."""
        names = registry_names(function) if function is not None else frozenset()
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, cst.If):
                if _guard_for(anchor.test, arch, True, names) and not _inside(node, anchor.orelse):
                    return True
                if _guard_for(anchor.test, arch, False, names) and _inside(node, anchor.orelse):
                    return True
            if isinstance(anchor, cst.For) and arch in set(target_names(anchor.target)):
                absent = [n for n in _iter_names(anchor.iter) if n in names]
                if _without_registered(anchor.iter, names) or any(
                    self._absent_only(n, function, names) for n in absent
                ):
                    return True
        if function is None:
            return False
        # ``if arch in <registry>: return`` (or ``continue``) earlier on
        return any(
            isinstance(sub, cst.If)
            and _guard_for(sub.test, arch, False, names)
            and _exits(sub.body)
            for sub in walk(function.body)
        )

    @staticmethod
    def _absent_only(name: str, function: cst.FunctionDef, names: frozenset[str]) -> bool:
        """``name`` was bound to the table less the registry's architectures."""
        return any(
            name in bound and _without_registered(value, names)
            for bound, value in _bindings(function)
        )

    def _check_target(self, target: cst.BaseExpression) -> None:
        value = string_value(target)
        if value is None:
            return
        if value.count(":") != 1:
            self.report(
                target,
                f"`{value}` is not of the form `module:Class`; `register_model` raises "
                "`ValueError` for it",
                site=self.here(),
            )
            return
        module, _, cls = value.partition(":")
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module) or not cls.isidentifier():
            return
        path = self.ctx.resolver.loader.path_for(module)
        if path is None:
            return  # not on disk where we look: say nothing rather than guess
        names = _module_names(path)
        if names is None or cls in names:
            return
        self.report(
            target,
            f"`{module}` ({path.name}) defines no `{cls}`: the plugin installs, and the "
            "import fails on the worker when the model is first loaded",
            site=self.here(),
        )
