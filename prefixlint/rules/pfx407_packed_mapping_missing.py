"""PFX407 packed-mapping-missing."""

from __future__ import annotations

import ast

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.layer_configs import callee_symbols, fused_layer
from prefixlint.static.model_classes import is_protocol, top_level_class
from prefixlint.static.prefix_sites import Site
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import (
    INTERFACE,
    PREFIX_CALLS,
    FileContext,
    Invalid,
    LintRule,
    Where,
    example,
)
from prefixlint.static.scope import Role
from prefixlint.static.stacked import separate_parts

_TABLE = "packed_modules_mapping"
# The model's classes vLLM reads the table of: its LoRA and quantization interfaces.
_LORA = "SupportsLoRA"
_QUANT = "SupportsQuant"

_DECODER = """
from vllm.model_executor.layers.linear import MergedColumnParallelLinear
from vllm.model_executor.models.interfaces import SupportsLoRA


class MyMLP(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden, [hidden] * 2, quant_config=quant_config, prefix=f"{prefix}.gate_up_proj"
        )


class MyModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.mlp = MyMLP(8, vllm_config.quant_config, prefix=f"{prefix}.mlp")

    def load_weights(self, weights):
        stacked_params_mapping = [
            (".gate_up_proj", ".gate_proj", 0),
            (".gate_up_proj", ".up_proj", 1),
        ]
"""


class PackedMappingMissing(LintRule):
    """
    ## What it does
    Checks that a model whose layers include a fused `QKVParallelLinear` or
    `MergedColumnParallelLinear` built with `quant_config`, and whose own stacked-params
    table (or `WeightsMapper(orig_to_new_stacked=...)`) writes separate checkpoint parts
    into it (`q_proj`, `k_proj`, `v_proj` into `qkv_proj`), has a
    `packed_modules_mapping` on the model class vLLM builds, on a base, or on a class it
    builds directly. Checked on architecture classes and on classes that declare
    `SupportsLoRA` or `SupportsQuant`; the fused layers are those the class builds in its
    file, directly or through the classes it builds there.

    ## Why is this bad?
    vLLM matches a fused layer with the checkpoint's and an adapter's names through this
    table. LoRA (`SupportsLoRA`) expands `qkv_proj` into its parts to know which adapter
    modules to expect: without the table an adapter trained on `q_proj`/`k_proj`/`v_proj`
    is refused ("Expected target modules ... but received ..."), so it is an error there.
    Quantization (`is_layer_skipped` with the fused mapping) looks a fused layer's parts
    up in a checkpoint's `ignored_layers`: without the table an ignore list naming the
    parts misses the fused layer, which is then quantized while its checkpoint tensors are
    not. It is a warning without `SupportsLoRA`: only a checkpoint that leaves some layers
    unquantized by name trips it. A class with no stacked-params table is not reported
    (its checkpoint may hold the fused tensor itself, as Phi-3's `gate_up_proj`).

    ## Example
    ```python
    class MyForCausalLM(nn.Module, SupportsLoRA):
        def __init__(self, *, vllm_config, prefix=""):
            self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
    ```

    Use instead:
    ```python
    class MyForCausalLM(nn.Module, SupportsLoRA):
        packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}

        def __init__(self, *, vllm_config, prefix=""):
            self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
    ```
    """

    code = "PFX407"
    triggers = (PREFIX_CALLS,)
    applies_to = INTERFACE

    VALID = [
        example(
            _DECODER
            + """

class MyForCausalLM(nn.Module, SupportsLoRA):
    packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
        # the table is inherited from vLLM's model
        example(
            _DECODER
            + """

class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
        # no stacked-params table: the checkpoint may hold the fused tensor itself
        example(
            _DECODER.replace('(".gate_up_proj", ".gate_proj", 0),', "").replace(
                '(".gate_up_proj", ".up_proj", 1),', ""
            )
            + """

class MyForCausalLM(nn.Module, SupportsLoRA):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
        # built with quant_config=None: nothing is quantized, and no LoRA
        example(
            _DECODER.replace("quant_config=quant_config,", "quant_config=None,")
            + """

class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
        # the base is vLLM's model at run time; the class is only a stub for type checkers
        example(
            _DECODER
            + """
from typing import TYPE_CHECKING

if TYPE_CHECKING:

    class _Base(nn.Module):
        pass

else:
    _Base = LlamaForCausalLM


class MyForCausalLM(_Base):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
        # the inner model declares SupportsQuant; the model vLLM builds holds the table
        example(
            _DECODER.replace(
                "class MyModel(nn.Module):", "class MyModel(nn.Module, SupportsQuant):"
            )
            + """
from vllm.model_executor.models.interfaces import SupportsQuant


class MyForCausalLM(nn.Module, SupportsLoRA):
    packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                _DECODER
                + """

class MyForCausalLM(nn.Module, SupportsLoRA):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
            ),
            line=26,
            contains="LoRA adapter trained on `gate_proj`",
        ),
        # a mapper's stacked entries named with their parent (vLLM's qwen2_moe keeps the
        # shared expert's apart so): the table is by leaf, one entry for both (issue 40)
        Invalid(
            example(
                _DECODER.replace('(".gate_up_proj", ".gate_proj", 0),', "").replace(
                    '(".gate_up_proj", ".up_proj", 1),', ""
                )
                + """
from vllm.model_executor.models.utils import WeightsMapper


class MyForCausalLM(nn.Module, SupportsLoRA):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".mlp.gate_proj": (".mlp.gate_up_proj", 0),
            ".mlp.up_proj": (".mlp.gate_up_proj", 1),
            ".shared_expert.gate_proj": (".shared_expert.gate_up_proj", 0),
            ".shared_expert.up_proj": (".shared_expert.gate_up_proj", 1),
        }
    )

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
            ),
            line=28,
            contains="add `packed_modules_mapping = {'gate_up_proj': ['gate_proj', 'up_proj']}`",
        ),
        # no LoRA: quantization's ignore lists only, a warning
        Invalid(
            example(
                _DECODER
                + """

class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
            ),
            line=26,
            contains="(a warning: ",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._classes: list[tuple[cst.ClassDef, Where]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        cls = top_level_class(self, node)
        if cls is None or is_protocol(cls):
            return
        if self.ctx.is_architecture(node) or any(
            self.ctx.declares(node, i) for i in (_LORA, _QUANT)
        ):
            self._classes.append((node, self.here(node)))

    def leave_Module(self) -> None:
        if not self._classes or self.ctx.tree is None:
            return
        parts = separate_parts(self.ctx.tree)
        fused = self._fused_sites(parts) if parts else {}
        if not fused:
            return
        # a table given outside the class body, or a base bound at run time to another
        # class than the one the file defines (``if TYPE_CHECKING:`` stubs): not judged
        unsure = _patched_classes(self.ctx.tree) | _conditional_names(self.ctx.tree)
        candidates = {node.name.value for node, _ in self._classes}
        reported: set[str] = set()
        for node, where in self._classes:
            name = node.name.value
            built = self._built_from(name)
            sites = [s for c in sorted(built) for s in fused.get(c, [])]
            if not sites or built & unsure or not self._lacks_table(built):
                continue
            cls = self.ctx.summary.classes[name]
            if reported & set(cls.bases):
                reported.add(name)  # reported on its base, where the table belongs
                continue
            if self._covered_by_builder(name, candidates):
                continue
            reported.add(name)
            self._report(node, where, sites, parts)

    def _covered_by_builder(self, name: str, candidates: set[str]) -> bool:
        """Another model class of the file builds ``name``: the table belongs there (vLLM
        reads the model it builds, and LoRA its children's tables too), and that class is
        judged itself; unless the package's registrations say vLLM builds ``name`` too."""
        if self.ctx.role(name) in (Role.ROOT, Role.STAGE):
            return False
        return any(name in self._built_from(other, bases=False) for other in candidates - {name})

    def _fused_sites(self, parts: dict[str, list[str]]) -> dict[str, list[tuple[str, Site]]]:
        """Top-level class -> (fused layer name, site) of the fused layers it builds with a
        quantization config, whose checkpoint parts the file's tables keep separate."""
        out: dict[str, list[tuple[str, Site]]] = {}
        resolver, summary = self.ctx.resolver, self.ctx.summary
        for site in self.ctx.prefixes.sites:
            top = _class_of(site)
            if site.expected is None or not site.passes_quant_config:
                continue
            leaf = site.expected.path.rsplit(".", 1)[-1]
            if leaf not in parts:
                continue
            if any(fused_layer(resolver, s) for s in callee_symbols(resolver, summary, site)):
                out.setdefault(top, []).append((leaf, site))
        return out

    def _built_from(self, name: str, bases: bool = True) -> set[str]:
        """The file's classes ``name`` builds, directly or through what they build, and
        itself; with ``bases``, its bases in the file and what they build too."""
        classes = self.ctx.summary.classes
        out: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            cls = classes.get(current)
            if current in out or cls is None:
                continue
            out.add(current)
            todo += [m for m in cls.mentions if m in classes]
            todo += [b for b in cls.bases if b in classes] if bases else []
        return out

    def _lacks_table(self, built: set[str]) -> bool:
        """No class among ``built`` has a table, along its bases (vLLM's LoRA reads the
        model's and its children's, quantization the model class's); False when a base
        cannot be read."""
        for name in built:
            cls = self.ctx.summary.classes[name]
            has = self.ctx.resolver.class_has(Symbol(self.ctx.summary, name, cls=cls), _TABLE)
            if has is not False:
                return False
        return True

    def _report(
        self,
        node: cst.ClassDef,
        where: Where,
        sites: list[tuple[str, Site]],
        parts: dict[str, list[str]],
    ) -> None:
        name = node.name.value
        leaves = list(dict.fromkeys(leaf for leaf, _ in sites))
        lines = ", ".join(dict.fromkeys(f"`{leaf}` in `{_class_of(site)}`" for leaf, site in sites))
        table = ", ".join(f"{leaf!r}: {parts[leaf]!r}" for leaf in leaves)
        first = parts[leaves[0]]
        message = (
            f"`{name}` builds fused layers from separate checkpoint parts with "
            f"`quant_config` ({lines}) and has no `packed_modules_mapping`: add "
            f"`packed_modules_mapping = {{{table}}}`"
        )
        if self.ctx.declares(node, _LORA):
            message += (
                f"; it declares `SupportsLoRA`, and vLLM's LoRA loader expects the fused "
                f"layer's own name, so a LoRA adapter trained on `{first[0]}` is refused"
            )
            severity = Severity.ERROR
        else:
            message += (
                " (a warning: without `SupportsLoRA` only quantization reads it, and a "
                f"checkpoint whose `ignored_layers` name `{first[0]}` gets `{leaves[0]}` "
                "quantized while its tensors are not)"
            )
            severity = Severity.WARNING
        self.report(node.name, message, severity=severity, site=where)


def _class_of(site: Site) -> str:
    top = next((a for a in site.anchors if isinstance(a, cst.ClassDef)), None)
    return top.name.value if top is not None else "?"


def _conditional_names(tree: ast.Module) -> set[str]:
    """Names a top-level ``if`` binds (a class in ``if TYPE_CHECKING:``, another in its
    ``else:``): which one a base is at run time is not read."""
    out: set[str] = set()
    for stmt in tree.body:
        if not isinstance(stmt, ast.If):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.ClassDef):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _patched_classes(tree: ast.Module) -> set[str]:
    """Classes given a table outside their body (``MyModel.packed_modules_mapping =
    {...}`` at the top level of the file)."""
    out = set()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == _TABLE
                and isinstance(target.value, ast.Name)
            ):
                out.add(target.value.id)
    return out
