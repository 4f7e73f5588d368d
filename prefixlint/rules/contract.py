"""PFX101-PFX203: the constructor and forward contract vLLM holds every model class to."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.rules.base import FileContext, Invalid, LintRule, Where
from prefixlint.rules.prefixes import Site
from prefixlint.rules.walk import children

_HEADER = """
import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.models.interfaces import SupportsPP
from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel
from vllm.model_executor.models.utils import maybe_prefix
"""


def _example(body: str) -> str:
    return _HEADER + body


# ``For`` + an upper-case word: ``LlamaForCausalLM``, not ``FeedForward`` or ``QFormerModel``.
_STRICT_ARCHITECTURE_NAME = re.compile(r"For[A-Z0-9]\w*$")

# Methods that only a model the engine drives has, own or inherited.
_MODEL_METHODS = ("load_weights", "compute_logits", "embed_input_ids")

_KWONLY = "kwonly"
_POS = "pos"
_POSONLY = "posonly"
_VARARGS = "varargs"
_VARKW = "varkw"


def _params(fn: cst.FunctionDef) -> list[tuple[cst.Param, str]]:
    """Parameters in order, each with its kind (as in ``inspect.Parameter``)."""
    p = fn.params
    out = [(x, _POSONLY) for x in p.posonly_params]
    out += [(x, _POS) for x in p.params]
    if isinstance(p.star_arg, cst.Param):
        out.append((p.star_arg, _VARARGS))
    out += [(x, _KWONLY) for x in p.kwonly_params]
    if isinstance(p.star_kwarg, cst.Param):
        out.append((p.star_kwarg, _VARKW))
    return out


def _named(params: list[tuple[cst.Param, str]]) -> list[tuple[cst.Param, str]]:
    """Parameters without ``self``/``cls`` and without ``*args``/``**kwargs``."""
    named = [(p, k) for p, k in params if k not in (_VARARGS, _VARKW)]
    if named and named[0][1] != _KWONLY and named[0][0].name.value in ("self", "cls"):
        named = named[1:]
    return named


def _is_none(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _method_of(ctx: FileContext, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> bool:
    """``node`` is a method written directly in the body of a top-level class."""
    if class_node is None or len(ctx.prefixes.class_stack) != 1:
        return False
    body = class_node.body.body if isinstance(class_node.body, cst.IndentedBlock) else ()
    return any(stmt is node for stmt in body)


def is_model_architecture(ctx: FileContext, node: cst.ClassDef) -> bool:
    """A class the engine instantiates and drives as a whole model.

    Named in the model registry; or named like an architecture (``...ForCausalLM``) and an
    ``nn.Module`` that has, itself or through a resolvable base, a method only such models
    have (``load_weights``, ``compute_logits``, ``embed_input_ids``) or a ``forward`` that
    takes ``input_ids``. The name alone also matches poolers (``JinaForRankingPool``) and,
    through the loose base pattern, ``FeedForward`` and ``QFormer`` blocks.
    """
    if len(ctx.prefixes.class_stack) > 1 and ctx.prefixes.class_stack[-1] is node:
        return False  # a nested class
    name = node.name.value
    if name in ctx.architectures:
        # Same name, other class: models/config.py has config fixers named like models.
        return ctx.is_module_class(node) or not _all_bases_resolve(ctx, node)
    if not ctx.is_architecture(node) or not _STRICT_ARCHITECTURE_NAME.search(name):
        return False
    cls = ctx.class_summary(node)
    if cls is None:
        return False
    forward = cls.methods.get("forward")
    if forward is not None and forward.param("input_ids") is not None:
        return True
    if any(m in cls.methods and not cls.methods[m].is_stub for m in _MODEL_METHODS):
        return True
    symbol = ctx.symbol(node)
    return symbol is not None and any(
        ctx.resolver.class_has(symbol, m) is True for m in _MODEL_METHODS
    )


def _all_bases_resolve(ctx: FileContext, node: cst.ClassDef) -> bool:
    cls = ctx.class_summary(node)
    if cls is None:
        return False
    return all(
        b in ctx.summary.classes or ctx.resolver.resolve(ctx.summary, b) is not None
        for b in cls.bases
    )


# Draft models of speculative decoding, called by their proposer, not by the model runner.
_DRAFT_MODEL_NAME = re.compile(r"^(Eagle\d*|DFlash\d*)|DSpark|MTP|Medusa|Speculator|Drafter")
_SPECULATIVE_SECTION = re.compile(r"^_SPECULATIVE_DECODING_MODELS\s*=\s*\{(.*?)^\}", re.S | re.M)
_REGISTRY_ENTRY = re.compile(r"\(\s*\"[\w.]+\"\s*,\s*\"(\w+)\"\s*,?\s*\)")


@functools.lru_cache(maxsize=4)
def _speculative_classes(registry: Path | None) -> frozenset[str]:
    """Classes in the ``_SPECULATIVE_DECODING_MODELS`` section of vLLM's registry."""
    try:
        text = registry.read_text("utf-8") if registry is not None else ""
    except (OSError, UnicodeDecodeError):
        return frozenset()
    m = _SPECULATIVE_SECTION.search(text)
    return frozenset(_REGISTRY_ENTRY.findall(m.group(1))) if m else frozenset()


def is_draft_model(ctx: FileContext, node: cst.ClassDef) -> bool:
    """A draft model of speculative decoding (EAGLE, MTP, Medusa, DFlash, ...): listed as
    one in vLLM's registry, or named like one. Its proposer calls it, with its own
    arguments, and embeds tokens itself unless the draft is multimodal."""
    name = node.name.value
    if _DRAFT_MODEL_NAME.search(name):
        return True
    registry = ctx.resolver.loader.path_for("vllm.model_executor.models.registry")
    return name in _speculative_classes(registry)


# -- PFX101 --------------------------------------------------------------------------------


class InitSignature(LintRule):
    """
    ## What it does
    Checks the constructor of a model class: an architecture class (named in the model
    registry, or named and shaped like one), or any `nn.Module` whose `__init__` takes
    `vllm_config`. Such an `__init__` must accept `vllm_config` and `prefix` as keywords
    (keyword-only, after `*`, is the documented form; positional-or-keyword works too and
    is not reported), and an architecture's `prefix` must have a default (`""`, a warning)
    and every other parameter of an architecture must have a default.

    A `prefix` default other than `""` is not reported: the loader always passes `prefix`
    explicitly, and several in-tree models (Qwen3-VL, Qwen3.5) use `"model"`.

    An inner class (not an architecture) that takes `vllm_config` is only required to take
    a `prefix` when its `__init__` builds a layer that takes one; its other parameters and
    `prefix`'s default are up to its caller.

    ## Why is this bad?
    vLLM's loader calls every architecture as `model_class(vllm_config=..., prefix=...)`,
    after checking by name that `__init__` has both parameters. Without them the class is
    treated as an "old-style" model: a `DeprecationWarning`, then a guess of the arguments
    that fails or builds the model without its configuration. A required extra parameter
    makes the call fail, and so does a positional-only `vllm_config` or `prefix`. The
    root's prefix is `""` (`VllmModel.__init__(self, vllm_config, prefix="")`), and an
    inner class with no `prefix` cannot name its layers, so quantization and LoRA look
    them up under the wrong name.

    ## Example
    ```python
    class MyModelForCausalLM(nn.Module):
        def __init__(self, config, quant_config=None):
            ...
    ```

    Use instead:
    ```python
    class MyModelForCausalLM(nn.Module):
        def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
            ...
    ```
    """

    code = "PFX101"
    name = "init-signature"
    severity = Severity.ERROR
    summary = "A model class's `__init__` does not take `vllm_config` and `prefix` as vLLM calls it"

    VALID = [
        _example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(8, 8, prefix=maybe_prefix(prefix, "lm_head"))

    def load_weights(self, weights):
        return set()
"""
        ),
        _example(
            """
class MyModel(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str, layer_idx: int):
        super().__init__()
        self.proj = RowParallelLinear(8, 8, prefix=f"{prefix}.proj")
"""
        ),
        _example(
            """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", **kwargs):
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
"""
        ),
        _example(
            """
class Pooler(nn.Module):  # not a model: takes no vllm_config, builds no prefixed layer
    def __init__(self, vllm_config: VllmConfig):
        super().__init__()
        self.dim = vllm_config.model_config.get_hidden_size()
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()

    def load_weights(self, weights):
        return set()
"""
            ),
            line=15,
            contains="vllm_config",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
            ),
            line=15,
            contains="no default",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig):
        super().__init__(vllm_config=vllm_config)
"""
            ),
            line=15,
            contains="prefix",
        ),
        Invalid(
            _example(
                """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(8, 8)
"""
            ),
            line=15,
            contains="VocabParallelEmbedding",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", draft_config):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""
            ),
            line=15,
            contains="draft_config",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # inner classes' __init__ without ``prefix``: decided once their sites are known
        self._pending: list[tuple[cst.ClassDef, cst.FunctionDef]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "__init__" or not _method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        params = _params(node)
        by_name = {p.name.value: (p, k) for p, k in params}
        cls = class_node.name.value
        at = self.here(node)
        if is_model_architecture(self.ctx, class_node):
            self._check_architecture(node, cls, params, by_name, at)
        elif "vllm_config" in by_name and self.ctx.is_module_class(class_node):
            self._check_keyword(by_name["vllm_config"], cls, at)
            if "prefix" in by_name:
                self._check_keyword(by_name["prefix"], cls, at)
            elif not any(k == _VARKW for _, k in params):
                self._pending.append((class_node, node))

    def _check_architecture(
        self,
        node: cst.FunctionDef,
        cls: str,
        params: list[tuple[cst.Param, str]],
        by_name: dict[str, tuple[cst.Param, str]],
        at: Where,
    ) -> None:
        wanted = 'def __init__(self, *, vllm_config: VllmConfig, prefix: str = "")'
        missing = [n for n in ("vllm_config", "prefix") if n not in by_name]
        if missing:
            what = " and ".join(f"`{n}`" for n in missing)
            self.report(
                node.name,
                f"architecture `{cls}` is built as `{cls}(vllm_config=..., prefix=...)`, but "
                f"its `__init__` does not take {what}; make it `{wanted}`",
                site=at,
            )
            return  # the whole signature is to be rewritten: no detail on the rest
        for name in ("vllm_config", "prefix"):
            if self._check_keyword(by_name[name], cls, at, architecture=True):
                break  # one finding per signature: `*,` before the first fixes both
        param, kind = by_name["prefix"]
        if kind != _POSONLY and param.default is None:
            self.report(
                param,
                f'`prefix` of architecture `{cls}` has no default; give it `""` (the '
                'root module\'s name, as in `VllmModel.__init__`): `prefix: str = ""`',
                severity=Severity.WARNING,
                site=at,
            )
        for param, _ in _named(params):
            name = param.name.value
            if name in ("vllm_config", "prefix") or param.default is not None:
                continue
            self.report(
                param,
                f"`{name}` has no default, but vLLM builds architecture `{cls}` with only "
                f"`vllm_config` and `prefix`; give `{name}` a default or read it from "
                "`vllm_config`",
                site=at,
            )

    def _check_keyword(
        self, entry: tuple[cst.Param, str], cls: str, at: Where, architecture: bool = False
    ) -> bool:
        """Report a parameter vLLM cannot pass by keyword; True when one was reported."""
        param, kind = entry
        name = param.name.value
        if kind == _POSONLY:
            self.report(
                param,
                f"`{name}` of `{cls}.__init__` is positional-only, but vLLM passes it by "
                f"keyword; move it after `/` and `*` (`*, {name}`)",
                site=at,
            )
            return True
        if kind != _KWONLY and architecture:
            # Works today (the loader passes keywords), but the contract of the classes the
            # loader builds is keyword-only; inner layers are free to take them positionally.
            self.report(
                param,
                f"`{name}` of `{cls}.__init__` may be passed positionally; the contract is "
                f"keyword-only: put `*,` before it",
                severity=Severity.WARNING,
                site=at,
            )
            return True
        return False

    def leave_Module(self) -> None:
        for class_node, init in self._pending:
            sites = [s for s in self.ctx.prefixes.sites if any(a is init for a in s.anchors)]
            if not sites:
                continue
            site = sites[0]
            cls = class_node.name.value
            self.report(
                init.name,
                f"`{cls}.__init__` takes `vllm_config` but no `prefix`, yet builds "
                f'`{site.callee}`, which needs one; add `prefix: str = ""` after `*` and '
                "build the layers' prefixes from it",
                site=dataclasses.replace(site, anchors=_anchors_to(site.anchors, init)),
            )


def _anchors_to(anchors: tuple[cst.CSTNode, ...], node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The anchors down to ``node``, included: a report then points inside ``node``."""
    for i, a in enumerate(anchors):
        if a is node:
            return anchors[: i + 1]
    return anchors


# -- PFX102 --------------------------------------------------------------------------------


def _reads(node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` is read anywhere in ``node``: the prefix walk does not look at
    ``with`` items, ``match`` subjects or the defaults of nested functions and lambdas, so
    its ``referenced`` misses these reads. Keyword names and attribute names are not reads;
    a nested function or lambda whose own parameter is ``name`` shadows it."""
    if isinstance(node, cst.Name):
        return node.value == name
    if isinstance(node, cst.Arg):
        return _reads(node.value, name)
    if isinstance(node, cst.Attribute):
        return _reads(node.value, name)
    if isinstance(node, cst.Param):
        return node.default is not None and _reads(node.default, name)
    if isinstance(node, (cst.Lambda, cst.FunctionDef)):
        p = node.params
        params = [*p.posonly_params, *p.params, *p.kwonly_params]
        params += [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
        if any(_reads(x, name) for x in params):
            return True
        if isinstance(node, cst.FunctionDef) and any(
            _reads(d.decorator, name) for d in node.decorators
        ):
            return True
        if any(x.name.value == name for x in params):
            return False
        return _reads(node.body, name)
    return any(_reads(c, name) for c in children(node))


class PrefixUnused(LintRule):
    """
    ## What it does
    Checks that a function or constructor that takes `prefix` and builds at least one
    layer that takes a prefix actually uses its `prefix`.

    ## Why is this bad?
    The caller handed down the module's full name, and it is dropped: the layers are named
    from something else (a literal, `""`, another variable), so they lose their parents'
    path. Quantization configs and LoRA then look them up under the wrong name, and
    attention layers of different parents collide.

    ## Example
    ```python
    def __init__(self, config, prefix: str = ""):
        self.o_proj = RowParallelLinear(h, h, prefix="o_proj")
    ```

    Use instead:
    ```python
    def __init__(self, config, prefix: str = ""):
        self.o_proj = RowParallelLinear(h, h, prefix=f"{prefix}.o_proj")
    ```
    """

    code = "PFX102"
    name = "prefix-unused"
    severity = Severity.WARNING
    summary = "`prefix` is taken but never used, while prefix-taking layers are built"

    VALID = [
        _example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
"""
        ),
        _example(
            """
class Norm(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
"""
        ),
        _example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.prefix = prefix
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{self.prefix}.o_proj")
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class Attn(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(hidden, hidden, prefix="o_proj")
"""
            ),
            line=15,
            contains="`prefix` is never used",
        ),
        Invalid(
            _example(
                """
def build_head(vocab: int, hidden: int, prefix: str = ""):
    return ParallelLMHead(vocab, hidden)
"""
            ),
            line=14,
            contains="ParallelLMHead",
        ),
    ]

    def leave_Module(self) -> None:
        for pp in self.ctx.prefixes.prefix_params:
            if pp.referenced or not pp.sites or _reads(pp.function.body, "prefix"):
                continue
            fn = pp.function.name.value
            where = f"`{pp.class_node.name.value}.{fn}`" if pp.class_node else f"`{fn}`"
            callees = sorted({f"`{s.callee}`" for s in pp.sites})
            built = ", ".join(callees[:3]) + (", ..." if len(callees) > 3 else "")
            site = pp.sites[0]
            self.report(
                pp.param,
                f"`prefix` is never used in {where}, which builds {built}; derive those "
                'layers\' prefixes from it (e.g. `prefix=maybe_prefix(prefix, "name")`)',
                site=dataclasses.replace(site, anchors=_anchors_to(site.anchors, pp.function)),
            )


# -- PFX201 --------------------------------------------------------------------------------

_FORWARD_HEAD = ("input_ids", "positions", "intermediate_tensors", "inputs_embeds")
_FORWARD_SHAPE = (
    "forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, ...)"
)


class ForwardSignature(LintRule):
    """
    ## What it does
    Checks that an architecture class's own `forward` has vLLM's signature:
    `forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None,
    ...)`. The four names come first, in this order; `intermediate_tensors` and
    `inputs_embeds` default to `None` (they may be keyword-only); any further parameter
    has a default or is `*args`/`**kwargs`.

    Draft models of speculative decoding (EAGLE, MTP, Medusa, DFlash: listed in the
    registry's speculative section, named like one, or a `forward` that takes
    `hidden_states`) follow their proposer's calling convention and are not checked. A
    `forward` without `intermediate_tensors` but with `**kwargs` has opted out of pipeline
    parallelism (encoder-decoder and audio models): the runner's keyword lands in
    `**kwargs`, and the order of its other parameters is not checked.

    A missing default of `intermediate_tensors` or `inputs_embeds` is a warning: today's
    runners always pass both, but the `VllmModel` protocol requires only `input_ids` and
    `positions`.

    ## Why is this bad?
    The model runner calls every model the same way: `input_ids` and `positions` (flat,
    one batch dimension), `intermediate_tensors` on later pipeline stages, `inputs_embeds`
    for multimodal input, by keyword. A renamed or reordered parameter makes that call fail,
    or (worse, for the two first positional ones) silently swaps tensors; a parameter
    without default is never passed.

    ## Example
    ```python
    def forward(self, input_ids, attention_mask, positions):
        ...
    ```

    Use instead:
    ```python
    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        ...
    ```
    """

    code = "PFX201"
    name = "forward-signature"
    severity = Severity.ERROR
    summary = "An architecture's `forward` does not have vLLM's signature"

    VALID = [
        _example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids

    def load_weights(self, weights):
        return set()
"""
        ),
        _example(
            """
class MyForConditionalGeneration(LlamaForCausalLM):
    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        *,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **kwargs: object,
    ):
        return input_ids
"""
        ),
        _example(
            """
class MyForConditionalGeneration(LlamaForCausalLM):  # encoder-decoder, no pipeline stages
    def forward(self, input_ids, positions, encoder_outputs=None, **kwargs):
        return input_ids
"""
        ),
        _example(
            """
class MyMTPForCausalLM(LlamaForCausalLM):  # a draft model: the proposer's convention
    def forward(self, input_ids, positions, hidden_states, inputs_embeds=None):
        return hidden_states
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, inputs_embeds=None, intermediate_tensors=None):
        return input_ids
"""
            ),
            line=15,
            contains="`intermediate_tensors`",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors, inputs_embeds=None):
        return input_ids
"""
            ),
            line=15,
            contains="default `None`",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(
        self,
        input_ids,
        positions,
        intermediate_tensors=None,
        inputs_embeds=None,
        *,
        pixel_values=None,
        image_sizes,
    ):
        return input_ids
"""
            ),
            line=23,
            contains="`image_sizes`",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, inputs_embeds=None):
        return input_ids
"""
            ),
            line=15,
            contains="takes no `intermediate_tensors`",
        ),
    ]

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "forward" or not _method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        cls = class_node.name.value
        if not is_model_architecture(self.ctx, class_node) or is_draft_model(self.ctx, class_node):
            return
        params = _params(node)
        at = self.here(node)
        if any(p.name.value == "hidden_states" for p, _ in params[:5]):
            return  # a draft model: EAGLE/MTP/Medusa take the target's hidden states
        named = _named(params)
        positional = [p for p, k in named if k != _KWONLY]
        by_name = {p.name.value: (p, k) for p, k in named}
        varkw = any(k == _VARKW for _, k in params)
        splat = varkw or any(k == _VARARGS for _, k in params)
        where = f"`{cls}.forward`"
        # input_ids, positions: the first two, positional (callers pass them positionally).
        for i, want in enumerate(_FORWARD_HEAD[:2]):
            if i < len(positional) and positional[i].name.value == want:
                continue
            if i < len(positional):
                got = positional[i].name.value
                self.report(
                    positional[i],
                    f"parameter {i + 1} of {where} is `{got}`, expected `{want}`; "
                    f"vLLM calls `{_FORWARD_SHAPE}`",
                    site=at,
                )
            elif want in by_name:
                self.report(
                    by_name[want][0],
                    f"`{want}` of {where} is keyword-only; make it positional (before `*`): "
                    f"`{_FORWARD_SHAPE}`",
                    site=at,
                )
            elif not splat:
                self.report(
                    node.name,
                    f"{where} takes no `{want}`; vLLM calls `{_FORWARD_SHAPE}`",
                    site=at,
                )
            return
        # intermediate_tensors, inputs_embeds: the runner always passes both, by keyword.
        for want in _FORWARD_HEAD[2:]:
            if want not in by_name:
                if not varkw:
                    self.report(
                        node.name,
                        f"{where} takes no `{want}`, but the model runner always passes it "
                        f"(by keyword); add `{want}=None`: `{_FORWARD_SHAPE}`",
                        site=at,
                    )
                continue
            param, _ = by_name[want]
            if not _is_none(param.default):
                now = "no default" if param.default is None else "another default"
                self.report(
                    param,
                    f"`{want}` of {where} has {now}; give it the default `None`, as the "
                    "`VllmModel` protocol requires only `input_ids` and `positions`",
                    severity=Severity.WARNING,
                    site=at,
                )
        # Positional callers (a multimodal model's language model, pooling adapters) pass
        # ``(input_ids, positions, intermediate_tensors, inputs_embeds)`` in this order.
        # A model without ``intermediate_tensors`` (no pipeline parallelism) has opted out.
        if "intermediate_tensors" in by_name:
            for i, want in ((2, "intermediate_tensors"), (3, "inputs_embeds")):
                param, kind = by_name.get(want, (None, _KWONLY))
                if kind == _KWONLY:
                    break  # this one and the rest keyword-only: the order is free
                got = positional[i] if i < len(positional) else None
                if got is not param:
                    shown = f"`{got.name.value}`" if got is not None else "missing"
                    self.report(
                        got or param,
                        f"parameter {i + 1} of {where} is {shown}, expected `{want}`; "
                        f"positional callers pass `{_FORWARD_SHAPE}`",
                        site=at,
                    )
                    break
        for param, _ in named:
            name = param.name.value
            if name in _FORWARD_HEAD or param.default is not None:
                continue
            self.report(
                param,
                f"`{name}` of {where} has no default, but the model runner passes only "
                f"`{'`, `'.join(_FORWARD_HEAD)}` and model-specific keyword inputs; give "
                f"`{name}` a default (e.g. `None`)",
                site=at,
            )


# -- PFX202 --------------------------------------------------------------------------------

HF_FORWARD_PARAMS: dict[str, str] = {
    "attention_mask": "request boundaries are the attention backend's business",
    "past_key_values": "the KV cache is paged and owned by the engine",
    "use_cache": "the KV cache is always on and owned by the engine",
    "output_attentions": "attention weights are never materialised",
    "output_hidden_states": "the engine asks for hidden states through the pooler",
    "return_dict": "`forward` returns a tensor (or `IntermediateTensors`)",
    "labels": "there is no training loss in inference",
    "head_mask": "heads cannot be masked in vLLM's attention",
    "cache_position": "positions come in `positions`, the cache is paged",
}


# vLLM's attention layers over the paged KV cache: a module that builds one runs on the flat
# batch, whatever its ``forward`` is called with.
PAGED_ATTENTION_LAYERS = frozenset(
    {
        "Attention",
        "MLAAttention",
        "ChunkedLocalAttention",
        "CrossAttention",
        "EncoderOnlyAttention",
        "StaticSinkAttention",
        "MultiHeadLatentAttentionWrapper",
    }
)


class HFForwardLeftover(LintRule):
    """
    ## What it does
    Checks the `forward` of a model class for parameters of a Hugging Face Transformers
    model that have no meaning in vLLM: `attention_mask`, `past_key_values`, `use_cache`,
    `output_attentions`, `output_hidden_states`, `return_dict`, `labels`, `head_mask`,
    `cache_position`.

    A model class here is one on vLLM's paged-attention path: an architecture class, an
    `nn.Module` whose `__init__` takes `vllm_config`, one whose `forward` takes
    `positions` (decoder layers, attention blocks), or one that builds a vLLM attention
    layer (`Attention`, `MLAAttention`, ...). Vision and audio encoders, which run their
    own attention over a padded batch, legitimately take `attention_mask` and are not
    checked.

    ## Why is this bad?
    vLLM runs a flat batch without padding: there is no mask to pass, the KV cache is
    paged and owned by the engine, and nothing asks for attention weights or a dict. The
    parameters are never passed, so the code behind them is dead, and often wrong (a
    cache branch that never runs, a mask that is always `None`).

    ## Example
    ```python
    def forward(self, input_ids, positions, attention_mask=None, past_key_values=None):
        ...
    ```

    Use instead:
    ```python
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        ...
    ```
    """

    code = "PFX202"
    name = "hf-forward-leftover"
    severity = Severity.ERROR
    summary = "A model class's `forward` takes a Hugging Face-only parameter"

    VALID = [
        _example(
            """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
        _example(
            """
class VisionEncoderLayer(nn.Module):  # a vision tower: its own padded attention
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()

    def forward(self, hidden_states, attention_mask=None):
        return hidden_states
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None,
                inputs_embeds=None, attention_mask=None):
        return input_ids
"""
            ),
            line=16,
            contains="`attention_mask`",
        ),
        Invalid(
            _example(
                """
class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()

    def forward(self, positions, hidden_states, past_key_values=None, use_cache=False):
        return hidden_states
"""
            ),
            line=18,
            contains="`past_key_values`",
        ),
        Invalid(
            _example(
                """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, output_hidden_states: bool = False):
        return input_ids
"""
            ),
            line=18,
            contains="output_hidden_states",
        ),
        Invalid(
            _example(
                """
from vllm.model_executor.layers.attention import Attention

class SelfAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")

    def forward(self, hidden_states, attention_mask=None):
        return self.attn(hidden_states, hidden_states, hidden_states)
"""
            ),
            line=21,
            contains="builds `Attention`",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # forwards of other classes: reported when the class builds a paged attention layer
        self._pending: list[tuple[cst.ClassDef, cst.FunctionDef, Site]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "forward" or not _method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        params = _params(node)
        names = {p.name.value for p, _ in params}
        if not names & HF_FORWARD_PARAMS.keys():
            return
        at = self.here(node)
        if (
            "positions" in names
            or is_model_architecture(self.ctx, class_node)
            or (self.ctx.takes_vllm_config(class_node) and self.ctx.is_module_class(class_node))
        ):
            self._report(class_node, node, at, "")
        else:
            self._pending.append((class_node, node, at))

    def leave_Module(self) -> None:
        for class_node, node, at in self._pending:
            paged = next(
                (
                    s.callee
                    for s in self.ctx.prefixes.sites
                    if s.callee.rsplit(".", 1)[-1] in PAGED_ATTENTION_LAYERS
                    and any(a is class_node for a in s.anchors)
                ),
                None,
            )
            if paged is not None:
                self._report(class_node, node, at, f", and the class builds `{paged}`")

    def _report(self, class_node: cst.ClassDef, node: cst.FunctionDef, at: Where, why: str) -> None:
        cls = class_node.name.value
        for param, _ in _params(node):
            name = param.name.value
            what = HF_FORWARD_PARAMS.get(name)
            if what is not None:
                self.report(
                    param,
                    f"`{name}` is a Hugging Face parameter that vLLM never passes to "
                    f"`{cls}.forward` ({what}{why}); remove it and the code that reads it",
                    site=at,
                )


# -- PFX203 --------------------------------------------------------------------------------


class MissingEmbedInputIds(LintRule):
    """
    ## What it does
    Checks that an architecture class has an `embed_input_ids` method, its own or one of
    a base class. It reports only when every base class can be read; a base outside the
    checked files and vLLM could define it. Draft models of speculative decoding (MTP,
    Medusa, ...) are not checked: their proposer embeds the tokens itself unless the draft
    is multimodal.

    ## Why is this bad?
    The engine calls `model.embed_input_ids(input_ids)` to obtain the text embeddings
    separately, for multimodal input (placeholder positions are overwritten before the
    layers run), prompt embeddings and speculative decoding. The registry's check of the
    model interface fails without it ("The model is missing the `embed_input_ids`
    method").

    ## Example
    ```python
    class MyModelForCausalLM(nn.Module):
        def forward(self, input_ids, positions, ...): ...
    ```

    Use instead:
    ```python
    class MyModelForCausalLM(nn.Module):
        def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model.embed_input_ids(input_ids)

        def forward(self, input_ids, positions, ...): ...
    ```
    """

    code = "PFX203"
    name = "missing-embed-input-ids"
    severity = Severity.WARNING
    summary = "An architecture class has no `embed_input_ids`"

    VALID = [
        _example(
            """
class MyForCausalLM(LlamaForCausalLM):
    pass
"""
        ),
        _example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(8, 8, prefix=maybe_prefix(prefix, "embed"))

    def embed_input_ids(self, input_ids):
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
        _example(
            """
from some_plugin.base import PluginBase  # cannot be read: unknowable

class MyForCausalLM(PluginBase):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
            ),
            line=14,
            contains="embed_input_ids",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=14,
            contains="self.model.embed_input_ids",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if len(self.ctx.prefixes.class_stack) != 1 or not is_model_architecture(self.ctx, node):
            return
        if is_draft_model(self.ctx, node):
            return
        symbol = self.ctx.symbol(node)
        if symbol is None or self.ctx.resolver.class_has(symbol, "embed_input_ids") is not False:
            return
        cls = node.name.value
        inner = ""
        summary = self.ctx.class_summary(node)
        if summary is not None and "model" in summary.attributes:
            inner = ": e.g. `return self.model.embed_input_ids(input_ids)`"
        self.report(
            node.name,
            f"architecture `{cls}` has no `embed_input_ids` (own or inherited); the engine "
            f"calls it to embed text separately from `forward`. Add "
            f"`def embed_input_ids(self, input_ids)`{inner}",
        )
