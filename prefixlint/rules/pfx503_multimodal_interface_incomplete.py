"""PFX503 multimodal-interface-incomplete."""

from __future__ import annotations

import libcst as cst

from prefixlint.static.index import ClassSummary
from prefixlint.static.model_classes import (
    interface_mro,
    is_draft_model,
    is_drafter,
    is_protocol,
    raising_method,
    top_level_class,
)
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import INTERFACE, Invalid, LintRule, example

# -- PFX503 ---------------------------------------------------------------------------------

_EMBED_METHODS = ("embed_multimodal", "get_multimodal_embeddings")


class MultiModalInterfaceIncomplete(LintRule):
    """
    ## What it does
    Checks that a class declaring `SupportsMultiModal` implements `embed_multimodal` (or
    `get_multimodal_embeddings`, its name in older vLLM), on itself or a resolvable base,
    and that an architecture class has a multimodal processor registered with
    `@MULTIMODAL_REGISTRY.register_processor(...)` on itself or on a resolvable base (vLLM
    looks the processor up with `hasattr(model_cls, "_processor_factory")`, so a base's
    registration is inherited). Nothing is reported when a base cannot be read.

    Two kinds of classes need no `embed_multimodal`: models that set
    `supports_multimodal_raw_input_only` (media reach `forward` raw), and speculative
    drafters (MTP, EAGLE: their `forward` takes the target's `hidden_states`), which declare
    the interface to receive the target's multimodal embeddings. A draft (named like one, or
    listed in the registry's `_SPECULATIVE_DECODING_MODELS`) needs no processor either: vLLM
    looks the processor up on the target model.

    ## Why is this bad?
    The interface's `embed_multimodal` is a stub returning `None`: media inputs are
    silently dropped, or the runner fails on the missing embeddings. Without a registered
    processor vLLM raises "has no registered multimodal processor" for the first request
    (and at start-up, while profiling), because it cannot count placeholder tokens.

    ## Example
    ```python
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
        def forward(self, input_ids, positions, intermediate_tensors=None,
                    inputs_embeds=None):
            ...
    ```

    Use instead:
    ```python
    @MULTIMODAL_REGISTRY.register_processor(
        MyMultiModalProcessor, info=MyProcessingInfo, dummy_inputs=MyDummyInputsBuilder
    )
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
        def embed_multimodal(self, **kwargs):
            ...
    ```
    """

    code = "PFX503"
    applies_to = INTERFACE
    triggers = ("SupportsMultiModal",)

    VALID = [
        example(
            """
@MULTIMODAL_REGISTRY.register_processor(Proc, info=Info, dummy_inputs=Dummy)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        return self.vision(kwargs["pixel_values"])
"""
        ),
        example(
            """
from vllm.model_executor.models.llava import LlavaForConditionalGeneration

class MyForConditionalGeneration(LlavaForConditionalGeneration):
    pass
"""
        ),
        example(
            """
class Qwen3_5MTP(nn.Module, SupportsMultiModal):
    # a draft: it receives the target's embeddings, the target owns the processor
    def forward(self, input_ids, positions, hidden_states, inputs_embeds=None):
        return hidden_states
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
@MULTIMODAL_REGISTRY.register_processor(Proc, info=Info, dummy_inputs=Dummy)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.language_model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=3,
            contains="embed_multimodal",
        ),
        Invalid(
            example(
                """
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        return self.vision(kwargs["pixel_values"])
"""
            ),
            line=2,
            contains="register_processor",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        cls = top_level_class(self, node)
        if cls is None or is_protocol(cls):
            return
        if not self.ctx.declares(node, "SupportsMultiModal"):
            return
        symbol = Symbol(self.ctx.summary, cls.name, cls=cls)
        has = [self.ctx.resolver.class_has(symbol, m) for m in _EMBED_METHODS]
        if all(h is False for h in has) and not self._embeds_elsewhere(cls):
            owner = next(
                (f"`{o}.{m}`" for m in _EMBED_METHODS if (o := raising_method(self, cls, m))),
                None,
            )
            self.report(
                node.name,
                f"`{cls.name}` declares `SupportsMultiModal` but its {owner} only raises "
                "`NotImplementedError`: media inputs never reach the model"
                if owner
                else f"`{cls.name}` declares `SupportsMultiModal` but implements no "
                "`embed_multimodal`: the interface's stub returns nothing, so media inputs "
                "never reach the model",
                site=self.here(node),
            )
        if (
            self.ctx.is_architecture(node)
            and not is_draft_model(self.ctx, node)
            and self._registered(cls) is False
        ):
            self.report(
                node.name,
                f"`{cls.name}` declares `SupportsMultiModal` but neither it nor a base is "
                "decorated with `@MULTIMODAL_REGISTRY.register_processor(...)`: vLLM finds "
                "no processor for its inputs",
                site=self.here(node),
            )

    def _embeds_elsewhere(self, cls: ClassSummary) -> bool:
        """Raw-input models take media in ``forward``; drafters get the target's embeddings."""
        for entry in interface_mro(self, cls)[0]:
            if entry.cls is None or entry.cls.name == "SupportsMultiModal":
                continue
            if "supports_multimodal_raw_input_only" in entry.cls.attributes:
                return True
        return is_drafter(self, cls)

    def _registered(self, cls: ClassSummary) -> bool | None:
        mro, complete = interface_mro(self, cls)
        for entry in mro:
            if entry.cls is None:
                continue
            if any(d.rsplit(".", 1)[-1] == "register_processor" for d in entry.cls.decorators):
                return True
            if "_processor_factory" in entry.cls.attributes:
                return True
        return False if complete else None
