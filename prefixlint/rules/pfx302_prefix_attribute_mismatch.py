"""PFX302 prefix-attribute-mismatch."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.model_classes import in_draft_file, is_model_architecture
from prefixlint.static.prefix_fixes import NoFix, PlannedFix, mismatch_fix
from prefixlint.static.prefix_sites import (
    Site,
    Value,
    builds_module,
    dotted_name,
    has_variable,
    is_known,
    quant_reaches,
    render,
)
from prefixlint.static.renames import Renames, differing
from prefixlint.static.root_prefix import leading_dot_fix, leading_dot_name
from prefixlint.static.rule import PREFIX_CALLS, Invalid, LintRule, example
from prefixlint.static.scope import Role
from prefixlint.static.walk import walk

# Conventions of vLLM's own layers, where the prefix names another attribute on purpose:
# (attribute, prefix name). ``layers/mla.py`` stores ``MLAAttention`` at ``mla_attn`` with
# the prefix ``{prefix}.attn``, the name checkpoints and KV-cache specs use.
CONVENTIONS: frozenset[tuple[str, str]] = frozenset({("mla_attn", "attn")})
# A draft model's own namespace, kept apart from the target's ``model.layers.N``.
DRAFT_NAMESPACES: frozenset[str] = frozenset({"mtp", "draft_model"})


class PrefixAttributeMismatch(LintRule):
    """
    ## What it does
    Checks that the prefix given to a module equals the attribute path it is stored at:
    `self.self_attn.qkv_proj = QKVParallelLinear(prefix=f"{prefix}.self_attn.qkv_proj")`,
    `self.layers = nn.ModuleList([... prefix=f"{prefix}.layers.{i}" ...])`, and, inside
    `make_layers`' layer function, exactly the prefix that function receives.

    Also checks the class vLLM builds as the whole model (`prefix=""`): there
    `prefix=f"{prefix}.model"` names the module `.model`, with a leading dot; the fix is
    `maybe_prefix(prefix, "model")`, right at the root and nested alike.

    ## Why is this bad?
    `named_modules()` reports the attribute path; the quantization config, the KV cache
    and the weight loader see the prefix. When they differ, a layer silently gets another
    layer's treatment (FP8 although the checkpoint lists it as unquantized), or none. A
    leading dot makes every name under the module differ from the checkpoint's
    (`.model.layers.0.mlp` against `model.layers.0.mlp`).

    ## Example
    ```python
    self.short_conv = ShortConv(config, prefix=f"{prefix}.conv")
    ```

    Use instead:
    ```python
    self.short_conv = ShortConv(config, prefix=f"{prefix}.short_conv")
    ```
    """

    code = "PFX302"
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(8, 2, 4, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(8, 8, prefix=maybe_prefix(prefix, "o_proj"))
        self.attn = Attention(4, 2, 1.0, prefix=prefix + ".attn")
"""
        ),
        example(
            """
class Model(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: Attn(prefix=prefix), prefix=f"{prefix}.layers"
        )
        self.heads = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"{prefix}.heads.{i}") for i in range(4)]
        )
"""
        ),
        example(
            """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.prefix = prefix
        self.proj = (
            RowParallelLinear(8, 8, prefix="{}.proj".format(self.prefix))
            if True
            else None
        )
"""
        ),
        example(
            """
class _MTPLayers(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleDict(
            {str(i): RowParallelLinear(8, 8, prefix=f"{prefix}.{i}") for i in range(2)}
        )


class MultiTokenPredictor(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        # the offsets cancel: the composed name is {prefix}.mtp.layers.{i}, as the path
        self.mtp = _MTPLayers(prefix=maybe_prefix(prefix, "mtp.layers"))
"""
        ),
        example(
            """
class MLAWrapper(nn.Module):
    def __init__(self, quant_config=None, prefix: str = ""):
        super().__init__()
        # vLLM's MLA convention (layers/mla.py): stored at mla_attn, named attn
        self.mla_attn = Attention(4, 2, 1.0, quant_config=quant_config, prefix=f"{prefix}.attn")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
from vllm.model_executor.models.utils import WeightsMapper

class Layer(nn.Module):
    def __init__(self, quant_config=None, prefix: str = ""):
        super().__init__()
        self.short_conv = RowParallelLinear(8, 8, quant_config=quant_config,
                                            prefix=f"{prefix}.conv")

class MyForCausalLM(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_substr={".conv.": ".short_conv."})
"""
            ),
            line=8,
            contains="WeightsMapper",
            fixed="""
from vllm.model_executor.models.utils import WeightsMapper

class Layer(nn.Module):
    def __init__(self, quant_config=None, prefix: str = ""):
        super().__init__()
        self.short_conv = RowParallelLinear(8, 8, quant_config=quant_config,
                                            prefix=f"{prefix}.short_conv")

class MyForCausalLM(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_substr={".conv.": ".short_conv."})
""",
        ),
        Invalid(
            example(
                """
class MLP(nn.Module):
    def __init__(self, quant_config=None, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(8, 8, quant_config=quant_config,
                                           prefix=f"{prefix}.w2")

    def load_weights(self, weights):
        for name, w in weights:
            name = name.replace(".w2.", ".down_proj.")
"""
            ),
            line=6,
            contains="only weight-loading code bridges",
        ),
        Invalid(
            example(
                """
class Block(nn.Module):
    def __init__(self, config, prefix: str = ""):
        super().__init__()
        self.short_conv = RowParallelLinear(8, 8, prefix=f"{prefix}.conv")
"""
            ),
            line=5,
            contains="short_conv",
        ),
        Invalid(
            example(
                """
class Layer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = QKVParallelLinear(
            8, 2, 4, prefix=maybe_prefix(prefix, "qkv_proj"))
"""
            ),
            line=7,
        ),
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: Attn(prefix=f"{prefix}.layers"), prefix=f"{prefix}.layers"
        )

class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
"""
            ),
            line=6,
            contains="make_layers",
            fixed="""
class Model(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: Attn(prefix=prefix), prefix=f"{prefix}.layers"
        )

class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
""",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=f"{prefix}.model")

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=5,
            contains="starts with a dot",
            fixed="""
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
""",
        ),
        # the mapper renames the checkpoint's name into the prefix's: quantization matches
        Invalid(
            example(
                """
from vllm.model_executor.models.utils import WeightsMapper as _Mapper

class MyForCausalLM(nn.Module):
    hf_to_vllm_mapper = _Mapper(orig_to_new_prefix={"model.": "inner_model."})

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.inner = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "inner_model"))
"""
            ),
            line=9,
            contains="a warning: the file's `WeightsMapper` renames `model.` into `inner_model.`",
        ),
        # the same under SupportsLoRA: LoRA's mapped names miss the module's path
        Invalid(
            example(
                """
from vllm.model_executor.models.interfaces import SupportsLoRA
from vllm.model_executor.models.utils import WeightsMapper

class MyForCausalLM(nn.Module, SupportsLoRA):
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"model.": "inner_model."})

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.inner = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "inner_model"))
"""
            ),
            line=10,
            contains="declares `SupportsLoRA`",
        ),
    ]

    def leave_Module(self) -> None:
        self._renames: Renames | None = None
        sites = self.ctx.prefixes.sites
        self._built_by = _constructions(self.ctx.summary.classes, sites)
        self._children = _children(sites)
        for site in sites:
            self._check(site)
            self._leading_dot(site)

    def _leading_dot(self, site: Site) -> None:
        """``f"{prefix}.model"`` in the class vLLM builds as the root (``prefix=""``)."""
        name = leading_dot_name(site)
        owner = site.scope.class_node
        if name is None or owner is None or not builds_module(site):
            return
        method = site.scope.node
        if not isinstance(method, cst.FunctionDef) or method.name.value != "__init__":
            return
        if not is_model_architecture(self.ctx, owner) or self.ctx.role(owner.name.value) in (
            Role.STAGE,
            Role.BUILT,
        ):
            return  # a stage or a sub-model gets its parent's name, never ""
        cls = owner.name.value
        # A config reaching the module is a consumer only when something under it looks a
        # name up: a class of this file whose layers take no name from it reads none
        # (third blind corpus: contested as an error).
        consumer = self.ctx.name_has_consumer(site) and self._reads_below(site.callee, set())
        message = (
            f"prefix `{render(site.value or ())}` starts with a dot where `{cls}` is the root: "
            f'vLLM builds it with `prefix=""`, so the module is named `.{name}` and every '
            f"layer under it `.{name}...`"
        )
        if consumer:
            message += (
                f"; a quantized checkpoint's ignore list and per-layer schemes name them "
                f"`{name}...`, which does not match, so those layers are quantized or fail to "
                "load"
            )
        else:
            message += (
                " (a note: nothing looks the name up yet: no `quant_config` reaches it, or "
                f"nothing `{site.callee}` builds takes a name from it)"
            )
        self.report(
            site.prefix_arg or site.call,
            message + f'; use `maybe_prefix(prefix, "{name}")`',
            severity=None if consumer else Severity.NOTE,
            site=site,
            fix=lambda: leading_dot_fix(site, self.ctx.uses_maybe_prefix),
        )

    def _reads_below(self, callee: str, seen: set[str]) -> bool:
        """Whether a module built by ``callee`` may look a name under its prefix up: true
        unless ``callee`` is a class of this file with its own ``__init__`` whose every
        prefix-taking child is built from the class's own prefix and is either such a class
        that reads none, or a layer no config reaches (none passed, by keyword or by
        position). A prefix prefixlint cannot follow counts as read."""
        name = callee.rsplit(".", 1)[-1]
        cls = self.ctx.summary.classes.get(name)
        if cls is None or "." in callee or "__init__" not in cls.methods:
            return True  # another file's class, or an inherited constructor: assume it reads
        if name in seen:
            return False
        seen.add(name)
        for site in self.ctx.prefixes.sites:
            owner = site.scope.class_node
            if owner is None or owner.name.value != name or site.prefix_arg is None:
                continue
            if site.value is None or not is_known(site.value) or site.value[0][0] != "root":
                return True
            if site.callee.rsplit(".", 1)[-1] in self.ctx.summary.classes:
                if self._reads_below(site.callee, seen):
                    return True
            elif self.ctx.name_has_consumer(site) or _passes_a_config(site.call):
                return True
        return False

    def _check(self, site: Site) -> None:
        exp, value = site.expected, site.value
        if exp is None or value is None or not is_known(value) or not value:
            return
        if value[0][0] != "root" or value[0][1] != "prefix":
            return  # not relative to this scope's own prefix: PFX303's business
        if not exp.whole and not builds_module(site):
            return  # a helper that takes a prefix but returns a flag or a config
        if len(value) == 1 and not exp.whole:
            # ``self.inner = Inner(prefix=prefix)``: a transparent wrapper hands its own name
            # down on purpose (vLLM's MLA and MTP wrappers); phase 2 checks the result.
            return
        got = render(value)
        if exp.whole:
            if got != "{prefix}":
                root = value[0][1]
                self.report(
                    site.prefix_arg or site.call,
                    f"inside `make_layers`' layer function `{root}` is already the layer's "
                    f"full path (`...layers.N`); pass it as is, not `{got}`",
                    site=site,
                    fix=lambda: mismatch_fix(site),
                )
            return
        if exp.indexed and exp.index is None:
            if not has_variable(value):
                return  # a loop without index: PFX304
            if _shape(value) == exp.render():
                return
        elif has_variable(value) or got == exp.render():
            return
        if self._deliberate(site, value):
            return
        self._report(site, got, exp.render())

    def _deliberate(self, site: Site, value: Value) -> bool:
        """A divergence vLLM makes on purpose, or one the composed name undoes."""
        assert site.expected is not None
        got_name, attr = differing(_shape(value).removeprefix("{prefix}."), site.expected.path)
        if (attr, got_name) in CONVENTIONS:
            return True
        if got_name.split(".")[0] in DRAFT_NAMESPACES and in_draft_file(self.ctx):
            return True
        return self._composes(site)

    def _composes(self, site: Site) -> bool:
        """The name composed across a parent and a child built in this file equals the
        attribute path: the parent passes ``mtp.layers``, the child appends ``{i}``."""
        owner = site.scope.class_node.name.value if site.scope.class_node else None
        parents = self._built_by.get(owner or "", [])
        if parents and all(_composed_match(p, site) for p in parents):
            return True
        children = self._children.get(site.callee.rsplit(".", 1)[-1], [])
        return bool(children) and all(_composed_match(site, c) for c in children)

    def _report(self, site: Site, got: str, want: str) -> None:
        assert site.expected is not None and site.value is not None
        target = "self." + site.expected.path
        relative = _shape(site.value).removeprefix("{prefix}.")
        path = want.removeprefix("{prefix}.")
        got_name, attr = differing(relative, path)
        renames = self._renames = self._renames or Renames.of(self.ctx.source_text)
        mapped = renames.mapper_maps(relative, path)
        loader = None if mapped else renames.loader_maps(got_name, attr)
        elsewhere = ""
        if mapped is None and loader is None and self.ctx.scope is not None:
            # The package's weight loader may live in another file (a shared backbone).
            loader = Renames((), self.ctx.scope.renames).loader_maps(got_name, attr)
            elsewhere = " elsewhere in the package" if loader else ""
        head = (
            f"prefix `{got}` does not match the attribute path: the module is stored at "
            f"`{target}`, so its prefix must be `{want}`"
        )
        fix = lambda: mismatch_fix(site)  # noqa: E731
        if mapped is not None:
            why = (
                f"; the file's `WeightsMapper` maps `{mapped[0]}` to `{mapped[1]}` and vLLM "
                "applies it to the quantization config, so only the attribute path can "
                "match the checkpoint's ignore list"
            )
            severity = Severity.ERROR if quant_reaches(site) else Severity.WARNING
        elif loader is not None:
            why = (
                f"; only weight-loading code{elsewhere} bridges the two names (`{loader[0]}` / "
                f"`{loader[1]}`): quantization matches the checkpoint's name, but LoRA and "
                "the KV cache see two names"
            )
            severity = Severity.WARNING
            fix = _no_fix(
                "renaming the prefix would move the quantization lookup off the checkpoint's "
                "name; map the name with a `WeightsMapper` entry first"
            )
        elif (into := renames.mapper_renames_into(got_name)) is not None and quant_reaches(site):
            severity, why = self._mapped_into_prefix(site, into)
            fix = _no_fix(
                "renaming the prefix would move the quantization lookup off the name the "
                "`WeightsMapper` gives the checkpoint; change the mapper's target with it"
            )
        elif quant_reaches(site):
            why = "; nothing in the file renames one to the other, and `quant_config` reaches it"
            severity = Severity.ERROR
        elif self.ctx.owns_cache(site.callee):
            why = (
                "; its engine cache is registered under the prefix, which the module's path "
                "does not match (KV-cache scales and specs are found by the path)"
            )
            severity = Severity.WARNING
        else:
            why = (
                "; a note: no `quant_config` reaches this module, so no consumer sees the "
                "divergence yet"
            )
            severity = Severity.NOTE
        self.report(site.prefix_arg or site.call, head + why, severity=severity, site=site, fix=fix)

    def _mapped_into_prefix(self, site: Site, into: tuple[str, str]) -> tuple[Severity, str]:
        """The file's mapper renames the checkpoint's name into the prefix's (issue 30's
        contested divergences): quantization, mapped by vLLM with the same mapper, matches
        the prefix; LoRA matches the adapter's mapped names against the module paths."""
        owner = site.scope.class_node
        mapped = (
            f"the file's `WeightsMapper` renames `{into[0]}` into `{into[1]}`, the prefix's name"
        )
        if owner is not None and self.ctx.declares(owner, "SupportsLoRA"):
            return Severity.ERROR, (
                f"; {mapped}, so quantization matches the prefix, but `{owner.name.value}` "
                "declares `SupportsLoRA` and LoRA looks the mapped names up among the module "
                "paths, where this module is not"
            )
        return Severity.WARNING, (
            f"; a warning: {mapped}, and vLLM maps the quantization config with it, so "
            "quantization matches the prefix; no LoRA is declared, so nothing looks the "
            "module up by its path yet"
        )


def _no_fix(reason: str):
    def plan() -> PlannedFix:
        raise NoFix(reason)

    return plan


def _shape(value: Value) -> str:
    """The prefix with every variable part as ``{*}`` (the root stays ``{prefix}``)."""
    out = []
    for kind, text in value:
        out.append("{" + text + "}" if kind == "root" else text if kind == "lit" else "{*}")
    return "".join(out)


def _constructions(classes: dict, sites: list[Site]) -> dict[str, list[Site]]:
    """Local class name -> the sites that build it, stored at a known path."""
    out: dict[str, list[Site]] = {}
    for site in sites:
        short = site.callee.rsplit(".", 1)[-1]
        if short in classes and _composable(site):
            out.setdefault(short, []).append(site)
    return out


def _children(sites: list[Site]) -> dict[str, list[Site]]:
    """Class name -> the sites written in its methods, stored at a known path."""
    out: dict[str, list[Site]] = {}
    for site in sites:
        if site.scope.class_node is not None and _composable(site):
            out.setdefault(site.scope.class_node.name.value, []).append(site)
    return out


def _composable(site: Site) -> bool:
    exp, value = site.expected, site.value
    return (
        exp is not None
        and not exp.whole
        and value is not None
        and is_known(value)
        and len(value) > 0
        and value[0] == ("root", "prefix")
    )


def _composed_match(parent: Site, child: Site) -> bool:
    assert parent.value is not None and child.value is not None
    assert parent.expected is not None and child.expected is not None
    got = _shape(parent.value) + _shape(child.value).removeprefix("{prefix}")
    want = parent.expected.render().replace("{prefix}", "", 1)
    want = "{prefix}" + want + child.expected.render().removeprefix("{prefix}")
    return got == want


def _passes_a_config(call: cst.Call) -> bool:
    """Any argument that names a quantization, cache or vLLM config (positional ones too)."""
    return any(
        isinstance(sub, (cst.Name, cst.Attribute))
        and (dotted_name(sub) or "").rsplit(".", 1)[-1]
        in ("quant_config", "cache_config", "vllm_config")
        for arg in call.args
        for sub in walk(arg.value)
    )
