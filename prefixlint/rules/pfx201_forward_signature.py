"""PFX201 forward-signature."""

from __future__ import annotations

import ast

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.model_classes import (
    KWONLY,
    V0_FORWARD_PARAMS,
    VARARGS,
    VARKW,
    is_draft_model,
    is_method_of,
    is_model_architecture,
    named_params,
    param_kinds,
    removed_vllm_imports,
)
from prefixlint.static.rule import INTERFACE, Invalid, LintRule, Where, example


def _is_none(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


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

    A `forward` without `inputs_embeds` whose `**kwargs` swallows it (the body neither
    reads that key nor passes the mapping on) is judged by what vLLM's runner passes
    (`gpu_model_runner._preprocess`): a multimodal decoder (`SupportsMultiModal`) always
    gets `input_ids=None` and every token's embedding as `inputs_embeds` (an error: it
    sees no input); a text-only decoder gets `inputs_embeds=None` except for prompt
    embeddings under `--enable-prompt-embeds` (a warning); an encoder-decoder model (a
    `forward` taking `encoder_outputs`) is given token ids only, and vLLM refuses prompt
    embeddings for it (not reported; vLLM's own Whisper does this).

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
    applies_to = INTERFACE

    VALID = [
        example(
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
        example(
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
        example(
            """
class MyForConditionalGeneration(LlamaForCausalLM):  # encoder-decoder, no pipeline stages
    def forward(self, input_ids, positions, encoder_outputs=None, **kwargs):
        return input_ids
"""
        ),
        # ``**kwargs`` passes the runner's ``inputs_embeds`` on, or reads it
        example(
            """
class MyForCausalLM(LlamaForCausalLM, SupportsMultiModal):
    def forward(self, input_ids, positions, intermediate_tensors=None, **kwargs):
        return self.language_model(input_ids, positions, intermediate_tensors, **kwargs)

class MyOtherForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None, **kw):
        return self.model(input_ids, positions, intermediate_tensors, kw.get("inputs_embeds"))
"""
        ),
        example(
            """
class MyMTPForCausalLM(LlamaForCausalLM):  # a draft model: the proposer's convention
    def forward(self, input_ids, positions, hidden_states, inputs_embeds=None):
        return hidden_states
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, inputs_embeds=None, intermediate_tensors=None):
        return input_ids
"""
            ),
            line=3,
            contains="`intermediate_tensors`",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors, inputs_embeds=None):
        return input_ids
"""
            ),
            line=3,
            contains="default `None`",
        ),
        Invalid(
            example(
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
            line=11,
            contains="`image_sizes`",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, inputs_embeds=None):
        return input_ids
"""
            ),
            line=3,
            contains="takes no `intermediate_tensors`",
        ),
        # a multimodal decoder: the runner gives input_ids=None and everything as embeddings
        Invalid(
            example(
                """
class MyForConditionalGeneration(LlamaForCausalLM, SupportsMultiModal):
    def forward(self, input_ids, positions, intermediate_tensors=None, **kwargs):
        pixels = kwargs.get("pixel_values")
        return self.model(input_ids, positions, intermediate_tensors, pixels)
"""
            ),
            line=3,
            contains="sees no input",
        ),
        # a text-only decoder: only prompt embeddings reach inputs_embeds (a warning)
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None, **kwargs):
        return self.model(input_ids, positions, intermediate_tensors)
"""
            ),
            line=3,
            contains="--enable-prompt-embeds",
        ),
    ]

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "forward" or not is_method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        if not is_model_architecture(self.ctx, class_node) or is_draft_model(self.ctx, class_node):
            return
        params = param_kinds(node)
        if any(p.name.value == "hidden_states" for p, _ in params[:5]):
            return  # a draft model: EAGLE/MTP/Medusa take the target's hidden states
        sig = _Forward(node, params, f"`{class_node.name.value}.forward`", self.here(node))
        sig.multimodal = self.ctx.declares(class_node, "SupportsMultiModal")
        sig.cls = class_node.name.value
        if self._targets_v0(sig):
            return
        if not self._check_head(sig):
            return
        self._check_runner_keywords(sig)
        self._check_positional_order(sig)
        self._check_defaults(sig)

    def _targets_v0(self, sig: _Forward) -> bool:
        """A forward of vLLM's V0 contract (``kv_caches``, ``attn_metadata``) in a file that
        imports what the vLLM being read no longer has: the file targets another vLLM, and
        today's contract is not its contract (third blind corpus: contested as errors).
        One warning says so instead of one error per parameter."""
        v0 = [p for p in V0_FORWARD_PARAMS if p in sig.by_name]
        removed = removed_vllm_imports(self.ctx) if v0 else []
        if not removed:
            return False
        shown = ", ".join(f"`{n}`" for n in removed[:3]) + (", ..." if len(removed) > 3 else "")
        self.report(
            sig.node.name,
            f"{sig.where} follows vLLM's V0 contract (`{'`, `'.join(v0)}`) and the file "
            f"imports {shown}, which this vLLM does not define: the file targets another "
            f"(older) vLLM, so it is not judged against today's `{_FORWARD_SHAPE}`; port it "
            "to the V1 contract, or check it against the vLLM it was written for",
            severity=Severity.WARNING,
            site=sig.at,
        )
        return True

    def _check_head(self, sig: _Forward) -> bool:
        """input_ids, positions: the first two, positional (callers pass them positionally).
        False when they are not, after reporting it: the rest would only repeat it."""
        for i, want in enumerate(_FORWARD_HEAD[:2]):
            if i < len(sig.positional) and sig.positional[i].name.value == want:
                continue
            if i < len(sig.positional):
                got = sig.positional[i].name.value
                self.report(
                    sig.positional[i],
                    f"parameter {i + 1} of {sig.where} is `{got}`, expected `{want}`; "
                    f"vLLM calls `{_FORWARD_SHAPE}`",
                    site=sig.at,
                )
            elif want in sig.by_name:
                self.report(
                    sig.by_name[want][0],
                    f"`{want}` of {sig.where} is keyword-only; make it positional (before `*`):"
                    f" `{_FORWARD_SHAPE}`",
                    site=sig.at,
                )
            elif not sig.splat:
                self.report(
                    sig.node.name,
                    f"{sig.where} takes no `{want}`; vLLM calls `{_FORWARD_SHAPE}`",
                    site=sig.at,
                )
            return False
        return True

    def _check_runner_keywords(self, sig: _Forward) -> None:
        """intermediate_tensors, inputs_embeds: the runner always passes both, by keyword."""
        for want in _FORWARD_HEAD[2:]:
            if want == "inputs_embeds" and want not in sig.by_name and sig.varkw:
                self._check_swallowed(sig)
                continue
            if want not in sig.by_name:
                if not sig.varkw:
                    self.report(
                        sig.node.name,
                        f"{sig.where} takes no `{want}`, but the model runner always passes it "
                        f"(by keyword); add `{want}=None`: `{_FORWARD_SHAPE}`",
                        site=sig.at,
                    )
                continue
            param, _ = sig.by_name[want]
            if not _is_none(param.default):
                now = "no default" if param.default is None else "another default"
                self.report(
                    param,
                    f"`{want}` of {sig.where} has {now}; give it the default `None`, as the "
                    "`VllmModel` protocol requires only `input_ids` and `positions`",
                    severity=Severity.WARNING,
                    site=sig.at,
                )

    def _check_swallowed(self, sig: _Forward) -> None:
        """``**kwargs`` takes the runner's ``inputs_embeds`` and the body never reads it
        nor passes ``kwargs`` on. The runner (``gpu_model_runner._preprocess``) passes
        ``input_ids=None`` with every token's embedding in ``inputs_embeds`` for a
        multimodal decoder (``_prepare_mm_inputs``), and for any decoder a request with
        prompt embeddings under ``--enable-prompt-embeds``; an encoder-decoder model
        (``encoder_outputs``) is given token ids only."""
        if "encoder_outputs" in sig.by_name or not _drops_keyword(
            self.ctx.tree, sig.cls, "inputs_embeds"
        ):
            return
        kwargs = sig.varkw_name
        if sig.multimodal:
            self.report(
                sig.node.name,
                f"{sig.where} takes no `inputs_embeds` and `**{kwargs}` drops it: vLLM's "
                "runner gives a multimodal model `input_ids=None` and every token's "
                "embedding (text and media) as `inputs_embeds`, so this forward sees no "
                f"input; add `inputs_embeds=None`: `{_FORWARD_SHAPE}`",
                site=sig.at,
            )
            return
        self.report(
            sig.node.name,
            f"{sig.where} takes no `inputs_embeds` and `**{kwargs}` drops it (a warning: "
            "text-only requests pass `inputs_embeds=None`, but with `--enable-prompt-embeds` "
            "vLLM's runner gives `input_ids=None` and the prompt embeddings as "
            f"`inputs_embeds`, which this forward never sees); add `inputs_embeds=None`: "
            f"`{_FORWARD_SHAPE}`",
            severity=Severity.WARNING,
            site=sig.at,
        )

    def _check_positional_order(self, sig: _Forward) -> None:
        """Positional callers (a multimodal model's language model, pooling adapters) pass
        ``(input_ids, positions, intermediate_tensors, inputs_embeds)`` in this order. A
        model without ``intermediate_tensors`` (no pipeline parallelism) has opted out."""
        if "intermediate_tensors" not in sig.by_name:
            return
        for i, want in ((2, "intermediate_tensors"), (3, "inputs_embeds")):
            param, kind = sig.by_name.get(want, (None, KWONLY))
            if kind == KWONLY:
                return  # this one and the rest keyword-only: the order is free
            got = sig.positional[i] if i < len(sig.positional) else None
            if got is not param:
                shown = f"`{got.name.value}`" if got is not None else "missing"
                self.report(
                    got or param,
                    f"parameter {i + 1} of {sig.where} is {shown}, expected `{want}`; "
                    f"positional callers pass `{_FORWARD_SHAPE}`",
                    site=sig.at,
                )
                return

    def _check_defaults(self, sig: _Forward) -> None:
        for param, _ in sig.named:
            name = param.name.value
            if name in _FORWARD_HEAD or param.default is not None:
                continue
            self.report(
                param,
                f"`{name}` of {sig.where} has no default, but the model runner passes only "
                f"`{'`, `'.join(_FORWARD_HEAD)}` and model-specific keyword inputs; give "
                f"`{name}` a default (e.g. `None`)",
                site=sig.at,
            )


def _drops_keyword(tree: ast.Module | None, cls: str, keyword: str) -> bool:
    """Every ``forward`` of class ``cls`` in ``tree`` drops ``keyword`` in its ``**``
    parameter: the body names it nowhere (``kwargs.get("inputs_embeds")``) and passes
    the mapping on to no call (``self.model(..., **kwargs)``, ``f(kwargs)``). False
    when the body cannot be read."""
    found = False
    parents = {
        id(child): node
        for node in (ast.walk(tree) if tree is not None else ())
        for child in ast.iter_child_nodes(node)
    }
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.ClassDef) or node.name != cls:
            continue
        for method in node.body:
            if not isinstance(method, ast.FunctionDef) or method.name != "forward":
                continue
            if method.args.kwarg is None:
                return False
            name = method.args.kwarg.arg
            if any(
                isinstance(sub, ast.Constant) and sub.value == keyword for sub in ast.walk(method)
            ):
                return False  # ``kwargs.get("inputs_embeds")``, ``kwargs["inputs_embeds"]``
            if any(_escapes(sub, name, parents) for sub in ast.walk(method)):
                return False
            found = True
    return found


def _escapes(node: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """``node`` is the ``**`` mapping ``name`` (or ``locals()``) used other than to read
    one named key: passed on (``**kwargs``, ``f(kwargs)``), iterated, stored."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("locals", "vars")
    if not isinstance(node, ast.Name) or node.id != name:
        return False
    parent = parents.get(id(node))
    if isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Constant):
        return False
    if isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop", "setdefault"):
        call = parents.get(id(parent))
        return not (
            isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant)
        )
    return True


class _Forward:
    """A ``forward``'s parameters, sorted the ways the checks read them."""

    multimodal = False  # the class declares SupportsMultiModal
    cls = ""

    def __init__(
        self, node: cst.FunctionDef, params: list[tuple[cst.Param, str]], where: str, at: Where
    ) -> None:
        self.node = node
        self.where = where
        self.at = at
        self.named = named_params(params)
        self.positional = [p for p, k in self.named if k != KWONLY]
        self.by_name = {p.name.value: (p, k) for p, k in self.named}
        self.varkw = any(k == VARKW for _, k in params)
        self.varkw_name = next((p.name.value for p, k in params if k == VARKW), "kwargs")
        self.splat = self.varkw or any(k == VARARGS for _, k in params)
