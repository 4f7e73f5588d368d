"""PFX501 pp-interface-incomplete."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.index import ClassSummary
from prefixlint.static.model_classes import (
    accepts_param,
    interface_mro,
    is_drafter,
    is_protocol,
    raising_method,
    top_level_class,
)
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import INTERFACE, Invalid, LintRule, example

# what a finding about the method (not forward's parameter) says it is about, read by
# `check --introspect` to fold phase 2's PFX606 of the same method into it
ABOUT_THE_METHOD = {"about": "make_empty_intermediate_tensors"}


def _method_node(node: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
    found = None
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            found = stmt  # the last definition wins, as in Python
    return found


# -- PFX501 ---------------------------------------------------------------------------------


class PPInterfaceIncomplete(LintRule):
    """
    ## What it does
    Checks that a class declaring `SupportsPP` (directly or through a base) provides
    `make_empty_intermediate_tensors` (a method, a class attribute, or a `self.` attribute
    set in `__init__`, on the class or a resolvable base) and that its `forward` accepts
    `intermediate_tensors`. When a base cannot be read, a "not verified" note names it.

    ## Why is this bad?
    vLLM trusts the declaration. With pipeline parallelism, a stage after the first calls
    `make_empty_intermediate_tensors` while profiling and capturing CUDA graphs, and passes
    the previous stage's activations as `forward(..., intermediate_tensors=...)`. Without
    the attribute the start-up fails with an `AttributeError`; without the parameter vLLM
    logs a warning and treats the model as not supporting PP at all. For speculative
    drafters (MTP, EAGLE), which inherit the declaration from their target model and never
    run as a pipeline stage, the finding is a warning.

    ## Example
    ```python
    class MyForCausalLM(nn.Module, SupportsPP):
        def forward(self, input_ids, positions):
            return self.model(input_ids, positions)
    ```

    Use instead:
    ```python
    class MyForCausalLM(nn.Module, SupportsPP):
        def __init__(self, *, vllm_config, prefix=""):
            ...
            self.make_empty_intermediate_tensors = (
                self.model.make_empty_intermediate_tensors
            )

        def forward(self, input_ids, positions, intermediate_tensors=None,
                    inputs_embeds=None):
            return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
    ```
    """

    code = "PFX501"
    applies_to = INTERFACE
    triggers = (
        "get_pp_group",
        "PPMissingLayer",
        "make_layers",
        "SupportsPP",
        "intermediate_tensors",
    )

    VALID = [
        example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
        ),
        example(
            """
from vllm.model_executor.models.llama import LlamaForCausalLM

class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, **kwargs):
        return super().forward(input_ids, positions, **kwargs)
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
from somewhere_unknown import Base

class MyForCausalLM(Base, SupportsPP):
    def forward(self, input_ids, positions, intermediate_tensors=None):
        return self.model(input_ids, positions, intermediate_tensors)
"""
            ),
            line=4,
            contains="not verified",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=2,
            contains="make_empty_intermediate_tensors",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device):
        return None

    def forward(self, input_ids, positions, inputs_embeds=None):
        return self.model(input_ids, positions)
"""
            ),
            line=6,
            contains="intermediate_tensors",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        cls = top_level_class(self, node)
        if cls is None or is_protocol(cls) or not self.ctx.declares(node, "SupportsPP"):
            return
        symbol = Symbol(self.ctx.summary, cls.name, cls=cls)
        name = cls.name
        # A speculative drafter runs beside the target's last stage, never as a PP stage:
        # the inconsistency is real (vLLM's registry warns about it) but not an error.
        severity = Severity.WARNING if is_drafter(self, cls) else None
        has = self.ctx.resolver.class_has(symbol, "make_empty_intermediate_tensors")
        owner = raising_method(self, cls, "make_empty_intermediate_tensors") if not has else None
        if has is False and owner is not None:
            self.report(
                node.name,
                f"`{name}` declares `SupportsPP` but its `make_empty_intermediate_tensors` "
                f"(in `{owner}`) only raises `NotImplementedError`; later pipeline stages "
                "call it at start-up",
                severity=severity,
                site=self.here(node),
                data=ABOUT_THE_METHOD,
            )
        elif has is False:
            self.report(
                node.name,
                f"`{name}` declares `SupportsPP` but has no `make_empty_intermediate_tensors` "
                "(method, class attribute or `self.` attribute set in `__init__`); later "
                "pipeline stages call it at start-up",
                severity=severity,
                site=self.here(node),
                data=ABOUT_THE_METHOD,
            )
        elif has is None:
            unread = ", ".join(f"`{b}`" for b in self.ctx.resolver.unreadable_bases(symbol))
            self.report(
                node.name,
                f"not verified: whether `{name}` (declaring `SupportsPP`) has "
                f"`make_empty_intermediate_tensors`: it may inherit it from {unread or 'a base'}, "
                "which prefixlint cannot read (make its package importable from the checked "
                "folder, or check it too)",
                site=self.here(node),
                not_verified=True,
                data=ABOUT_THE_METHOD,
            )
        self._check_forward(node, cls, severity)

    def _check_forward(
        self, node: cst.ClassDef, cls: ClassSummary, severity: Severity | None
    ) -> None:
        own = cls.methods.get("forward")
        if own is not None:
            if not own.is_stub and not accepts_param(own, "intermediate_tensors"):
                fn = _method_node(node, "forward")
                self.report(
                    fn.name if fn is not None else node.name,
                    f"`{cls.name}.forward` takes no `intermediate_tensors`, but the class "
                    "declares `SupportsPP`: later stages receive the previous stage's "
                    "activations through it (vLLM then treats the model as not supporting PP)",
                    severity=severity,
                    site=self.here(node, *([fn] if fn is not None else [])),
                )
            return
        mro, complete = interface_mro(self, cls)
        if not complete:
            return
        for entry in mro[1:]:
            assert entry.cls is not None
            if is_protocol(entry.cls):
                continue
            sig = entry.cls.methods.get("forward")
            if sig is None or sig.is_stub:
                continue
            if self.ctx.resolver.inherits(entry.module, entry.cls, "SupportsPP"):
                return  # reported on that base, where the declaration is
            if not accepts_param(sig, "intermediate_tensors"):
                self.report(
                    node.name,
                    f"`{cls.name}` declares `SupportsPP` but inherits `forward` from "
                    f"`{entry.name}`, which takes no `intermediate_tensors`",
                    severity=severity,
                    site=self.here(node),
                )
            return
