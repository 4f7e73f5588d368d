"""PFX504 plugin-registration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import libcst as cst

from prefixlint.static.index import bound_names
from prefixlint.static.prefix_sites import dotted_name, string_value
from prefixlint.static.rule import Invalid, LintRule
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


def _is_supported_archs(node: cst.CSTNode) -> bool:
    for sub in walk(node):
        if isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if name and name.rsplit(".", 1)[-1] == "get_supported_archs":
                return True
    return False


def _guard_for(test: cst.CSTNode, arch: str, negated: bool) -> bool:
    """``arch not in ModelRegistry.get_supported_archs()`` (``in`` when not ``negated``)."""
    for sub in walk(test):
        if not isinstance(sub, cst.Comparison) or _code(sub.left) != arch:
            continue
        for target in sub.comparisons:
            op = target.operator
            wanted = cst.NotIn if negated else cst.In
            if isinstance(op, wanted) and _is_supported_archs(target.comparator):
                return True
    return False


def _exits(block: cst.BaseSuite) -> bool:
    stmts = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for stmt in stmts:
        for sub in walk(stmt):
            if isinstance(sub, (cst.Return, cst.Continue, cst.Raise)):
                return True
    return False


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

    ## Why is this bad?
    vLLM calls `register()` in every process it starts (engine, workers, API server).
    Unguarded, a plugin silently replaces an architecture vLLM already serves (registering
    an existing name only logs at debug level), and re-registers it in every process. A
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
    ]

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        if callee is None or not callee.endswith("register_model"):
            return
        if not (callee.endswith("ModelRegistry.register_model") or callee == "register_model"):
            return
        functions = self.ctx.prefixes.function_stack
        if self.ctx.prefixes.class_stack or not functions or functions[0].name.value != "register":
            return
        arch = _argument(node, 0, "model_arch")
        target = _argument(node, 1, "model_cls")
        if arch is not None and not self._guarded(_code(arch), functions[0]):
            shown = _code(arch)
            self.report(
                node,
                f"`register_model({shown}, ...)` is not guarded by `if {shown} not in "
                "ModelRegistry.get_supported_archs()`: the plugin silently overrides an "
                "architecture of that name that vLLM or another plugin already provides, "
                "in every process",
                site=self.here(),
            )
        if target is not None:
            self._check_target(target)

    def _guarded(self, arch: str, function: cst.FunctionDef) -> bool:
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, cst.If) and _guard_for(anchor.test, arch, negated=True):
                return True
        # ``if arch in ModelRegistry.get_supported_archs(): return`` earlier on
        for sub in walk(function.body):
            if (
                isinstance(sub, cst.If)
                and _guard_for(sub.test, arch, negated=False)
                and _exits(sub.body)
            ):
                return True
        return False

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
