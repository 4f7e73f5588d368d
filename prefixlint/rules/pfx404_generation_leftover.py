"""PFX404 generation-leftover."""

from __future__ import annotations

import ast

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.rules.pfx202_hf_forward_leftover import HF_FORWARD_PARAMS, reports_forward
from prefixlint.static.decoder_classes import qualified_callee
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import CONTRACT, FileContext, Invalid, LintRule, Where, example
from prefixlint.static.trees import module_tree

# -- PFX404 ---------------------------------------------------------------------------------

_GENERATION_METHODS = frozenset({"generate", "prepare_inputs_for_generation", "_reorder_cache"})
_KV_NAMES = frozenset({"past_key_values", "past_key_value", "layer_past", "use_cache"})
_SAMPLING = frozenset(
    {
        "torch.multinomial",
        "torch.distributions.Categorical",
        "torch.distributions.categorical.Categorical",
    }
)
_SAMPLING_SHORT = frozenset({"top_k_top_p_filtering", "sample_top_p"})


_SAMPLER_API = ("Sampler", "SamplingMetadata", "SamplerOutput")


def _vllm_sampler_api(symbol: Symbol, tree: ast.Module | None) -> str | None:
    """What of vLLM's sampler API the ``sample`` method of ``symbol``'s class uses
    (``Sampler``, ``SamplingMetadata``, ``SamplerOutput`` imported from vLLM), or "an
    inner model's `sample` hook" when it hands the step on; None when it uses neither."""
    if tree is None:
        tree = module_tree(symbol.module.path)
    method = next(
        (
            f
            for c in (tree.body if tree is not None else ())
            if isinstance(c, ast.ClassDef) and c.name == symbol.name
            for f in c.body
            if isinstance(f, ast.FunctionDef) and f.name == "sample"
        ),
        None,
    )
    if method is None:
        return None
    for sub in ast.walk(method):
        if isinstance(sub, ast.Name) and sub.id in _SAMPLER_API:
            origin = symbol.module.imports.get(sub.id, ("", None))[0]
            if origin == "vllm" or origin.startswith("vllm."):
                return f"`{sub.id}`"
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "sample"
            and any(isinstance(a, ast.Name) and a.id == "sampling_metadata" for a in sub.args)
        ):
            return "an inner model's `sample` hook (it hands the step on)"
    return None


class GenerationLeftover(LintRule):
    """
    ## What it does
    Checks model classes (`nn.Module`s) for what belongs to a generation loop: a `generate`,
    `prepare_inputs_for_generation` or `_reorder_cache` method; sampling
    (`torch.multinomial`, `torch.distributions.Categorical`, top-k/top-p filtering); and
    KV-cache plumbing (`past_key_values`, `past_key_value`, `layer_past`, `use_cache`).
    KV-cache names are reported once per function. Classes that subclass a Transformers
    model (vLLM occasionally runs one as a tower) are not checked.

    ## Why is this bad?
    vLLM's engine runs the loop, samples and owns the paged KV cache. A `generate` method
    is never called; a model that samples returns tokens where logits are expected;
    `past_key_values` is always `None` (the cache lives inside `Attention`), so code that
    depends on it silently recomputes or drops the context. Such leftovers mark a port
    that was not finished. Sampling is a note in a sub-module that samples what the model
    consumes itself (residual audio codes), and in a class that has taken sampling over on
    purpose, on evidence: it sets `prefer_model_sampler` (vllm-omni's runner calls
    `model.sample` only then), or its `sample(logits, sampling_metadata)` uses vLLM's
    sampler API (vLLM's `Sampler`, `SamplingMetadata` or `SamplerOutput`, as vLLM's own
    `hy_v3_mtp.py` does) or hands the step to an inner model's `sample`. A `sample` over a
    sampler of its own (its own `Sampler`, top-k and temperature from the reference) is
    generation code like the rest: a warning.

    ## Example
    ```python
    def forward(self, input_ids, positions, past_key_values=None, use_cache=False):
        ...
    ```

    Use instead:
    ```python
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        ...
    ```
    """

    code = "PFX404"
    applies_to = CONTRACT
    triggers = (
        "multinomial",
        "Categorical",
        "past_key_value",
        "layer_past",
        "use_cache",
        "top_k_top_p",
        "sample_top_p",
    )

    VALID = [
        example(
            """
class MyForCausalLM(nn.Module):
    # PFX202 reports the parameter (vLLM calls this forward): one finding, not two
    def forward(self, input_ids, positions, past_key_values=None):
        if past_key_values is not None:
            return past_key_values
        return input_ids
"""
        ),
        example(
            """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states):
        return self.logits_processor(self.lm_head, hidden_states)
"""
        ),
        example(
            """
from transformers import PretrainedConfig

class MyConfig(PretrainedConfig):
    def __init__(self, use_cache=True, **kwargs):
        self.use_cache = use_cache

def sample_noise(n):
    return torch.multinomial(torch.ones(n), 1)
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions):
        return self.model(input_ids, positions)

    def generate(self, input_ids, max_new_tokens=16):
        for _ in range(max_new_tokens):
            logits = self.forward(input_ids, None)
        return input_ids
"""
            ),
            line=6,
            contains="generate",
        ),
        Invalid(
            example(
                """
class MyAttention(nn.Module):
    def forward(self, hidden_states, layer_past=None, use_cache=False):
        if layer_past is not None:
            hidden_states = torch.cat([layer_past, hidden_states])
        return hidden_states
"""
            ),
            line=3,
            contains="layer_past",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions):
        logits = self.model(input_ids, positions)
        return torch.multinomial(torch.softmax(logits, -1), 1)
"""
            ),
            line=5,
            contains="multinomial",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._module_cache: dict[int, bool] = {}
        self._kv_reported: set[int] = set()
        # ``forward`` parameters PFX202 may own: (class, forward, parameter, where)
        self._forward_params: list[tuple[cst.ClassDef, cst.FunctionDef, cst.Name, Where]] = []

    def _in_model_class(self) -> bool:
        stack = self.ctx.prefixes.class_stack
        if not stack:
            return False
        node = stack[-1]
        key = id(node)
        if key not in self._module_cache:
            self._module_cache[key] = self._is_model_class(node)
        return self._module_cache[key]

    def _is_model_class(self, node: cst.ClassDef) -> bool:
        bases = [dotted_name(b.value) for b in node.bases]
        for base in bases:
            if base and (qualified_callee(self, base) or "").startswith("transformers."):
                return False  # a Transformers model run as is
        stack = self.ctx.prefixes.class_stack
        if node is stack[0] and self.ctx.class_summary(node) is not None:
            return self.ctx.is_module_class(node)
        return any(b and b.rsplit(".", 1)[-1] == "Module" for b in bases)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if class_node is None or not self._in_model_class():
            return
        name = node.name.value
        if name in _GENERATION_METHODS and self.ctx.prefixes.class_stack[-1] is class_node:
            self.report(
                node.name,
                f"`{name}` in a model class: vLLM's engine runs the generation loop and "
                "never calls it; delete it",
                site=self._inside(node),
            )
        p = node.params
        params = [*p.posonly_params, *p.params, *p.kwonly_params]
        for param in params:
            if param.name.value not in _KV_NAMES:
                continue
            if name == "forward" and param.name.value in HF_FORWARD_PARAMS:
                # One finding per defect: PFX202 reports it when vLLM calls this forward.
                self._kv_reported.add(id(node))
                self._forward_params.append((class_node, node, param.name, self._inside(node)))
            else:
                self._kv(node, param.name, param.name.value, self._inside(node))
            break

    def leave_Module(self) -> None:
        for class_node, function, name, where in self._forward_params:
            if not reports_forward(self.ctx, class_node, function):
                self._kv_reported.discard(id(function))
                self._kv(function, name, name.value, where)

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        if not self._in_model_class():
            return
        if callee is not None:
            short = callee.rsplit(".", 1)[-1]
            qualified = qualified_callee(self, callee) or callee
            if qualified in _SAMPLING or short in _SAMPLING_SHORT:
                top = self.ctx.prefixes.class_stack[0].name.value
                inner = self.ctx.inner_part(top)
                why = (
                    f" (a note: {inner}; what it samples is a value the model consumes "
                    "itself, such as residual audio codes, not the engine's next token)"
                    if inner
                    else ""
                )
                hook = None if why else self._own_sampler(top)
                if hook:
                    why = (
                        f" (a note: {hook}: the model's own sampler, which a runner calls in "
                        "place of vLLM's; the class has taken sampling over on purpose)"
                    )
                self.report(
                    node,
                    f"`{callee}` samples inside the model: vLLM's sampler does that from "
                    "the logits `compute_logits` returns" + why,
                    severity=Severity.NOTE if why else None,
                    site=self.here(),
                )
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _KV_NAMES:
                self._kv_current(arg.keyword, arg.keyword.value)
                break

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        last = name.rsplit(".", 1)[-1]
        if last in _KV_NAMES and self._in_model_class():
            self._kv_current(node, last)

    def _inside(self, function: cst.FunctionDef) -> Where:
        """Locate within ``function``, whether or not the walk has pushed it yet."""
        return self.here(function)

    def _kv_current(self, node: cst.CSTNode, name: str) -> None:
        functions = self.ctx.prefixes.function_stack
        if functions:
            self._kv(functions[-1], node, name, self.here())

    def _kv(self, function: cst.FunctionDef, node: cst.CSTNode, name: str, where: Where) -> None:
        if id(function) in self._kv_reported:
            return
        self._kv_reported.add(id(function))
        top = next((a for a in where.anchors if isinstance(a, cst.ClassDef)), None)
        own = top is not None and self._own_cache(top.name.value)
        whose = ""
        if own and top is not None:
            whose = self.ctx.inner_part(top.name.value) or (
                f"`{top.name.value}` is a model its package registers"
            )
        self.report(
            node,
            f"`{name}` in `{function.name.value}`: KV-cache handling from the reference "
            "implementation; in vLLM the paged cache lives inside `Attention` and this is "
            "never set"
            + (
                f" (a note: {whose}, which keeps its decoder's attention in vLLM's layers; "
                "this part keeps a cache of its own on purpose, as a streaming codec or "
                "local decoder does)"
                if whose
                else ""
            ),
            severity=Severity.NOTE if whose else None,
            site=where,
        )

    def _own_sampler(self, top: str) -> str | None:
        """Whether class ``top`` (or a base) has taken sampling over on purpose, and the
        evidence: it sets ``prefer_model_sampler`` (the flag vllm-omni's runner reads before
        it calls ``model.sample``), or its ``sample(logits, sampling_metadata)`` speaks
        vLLM's sampler API, as vLLM's own hook does (``hy_v3_mtp.py``: vLLM's
        ``Sampler``, ``SamplingMetadata``, ``SamplerOutput``) or hands the step to an inner
        model's hook. A ``sample`` over a sampler of its own is generation code: None."""
        cls = self.ctx.summary.classes.get(top)
        if cls is None:
            return None
        mro, _ = self.ctx.resolver.class_mro(Symbol(self.ctx.summary, top, cls=cls))
        for e in mro:
            if "prefer_model_sampler" in e.cls.attributes:  # type: ignore[union-attr]
                return f"`{e.name}` sets `prefer_model_sampler`, so a runner calls its `sample`"
        for e in mro:
            sig = e.cls.methods.get("sample")  # type: ignore[union-attr]
            if sig is None or sig.param("sampling_metadata") is None:
                continue
            used = _vllm_sampler_api(e, self.ctx.tree if e.module is self.ctx.summary else None)
            if used:
                return f"`{e.name}.sample(logits, sampling_metadata)` uses vLLM's {used}"
        return None

    def _own_cache(self, top: str) -> bool:
        """A registered model whose decoder uses vLLM's cache layers, or a part of one, that
        builds none itself: a cache it keeps besides (a streaming codec's, a local
        decoder's) is its own, not a leftover of the reference."""
        if not self.ctx.in_paged_model(top):
            return False
        return not any(
            self.ctx.owns_cache(s.callee)
            for s in self.ctx.prefixes.sites
            if s.scope.class_node is not None and s.scope.class_node.name.value == top
        )
