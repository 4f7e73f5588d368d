"""PFX408 class-attribute-reassigned."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.rule import MODULE, Invalid, LintRule, example
from prefixlint.static.walk import walk

# -- PFX408 ---------------------------------------------------------------------------------


def _assigned(statement: cst.CSTNode) -> tuple[str, cst.CSTNode, cst.CSTNode] | None:
    """``(name, the assignment, its value)`` of a class-body statement ``name = value``
    (or ``name: T = value``) with one plain name as target; None for anything else."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = small.targets[0].target
        if isinstance(target, cst.Name):
            return target.value, small, small.value
    if (
        isinstance(small, cst.AnnAssign)
        and small.value is not None
        and isinstance(small.target, cst.Name)
    ):
        return small.target.value, small, small.value
    return None


def _reads(nodes: list[cst.CSTNode], name: str) -> bool:
    """Any mention of ``name`` in ``nodes`` (a method that reads it included: a mention
    means the first value may be used, so nothing is said)."""
    return any(
        isinstance(sub, cst.Name) and sub.value == name for node in nodes for sub in walk(node)
    )


class ClassAttributeReassigned(LintRule):
    """
    ## What it does
    Checks class bodies for an attribute assigned twice, at the class body's own level,
    with nothing between the two assignments (nor the second's value) reading the first:
    the first is dead. A class attribute assigned under `if` or `try`, or read in between
    (`mapper = mapper | other`), is not reported. The same value written twice is a note.
    Model classes are checked (with `__init__` or `forward`, an architecture's name, or
    one of vLLM's class tables).

    ## Why is this bad?
    Python keeps the last assignment. The tables vLLM reads off a model class
    (`hf_to_vllm_mapper`, `packed_modules_mapping`, `embedding_modules`) are long literals,
    and a second one added below the first (a prefix mapper pasted under a stacked one)
    silently drops every entry of the first: here the checkpoint's `q_proj`/`gate_proj`
    tensors are no longer stacked into `qkv_proj`/`gate_up_proj` and the load fails, or
    LoRA and quantization read a table without the fused layers.

    ## Example
    ```python
    class MyModel(nn.Module):
        hf_to_vllm_mapper = WeightsMapper(
            orig_to_new_stacked={".q_proj": (".qkv_proj", "q")}
        )
        hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"transformer.": "model."})
    ```

    Use instead:
    ```python
    class MyModel(nn.Module):
        hf_to_vllm_mapper = WeightsMapper(
            orig_to_new_stacked={".q_proj": (".qkv_proj", "q")},
            orig_to_new_prefix={"transformer.": "model."},
        )
    ```
    """

    code = "PFX408"
    applies_to = MODULE
    # classes the static phase keeps anyway (with `__init__`/`forward`, an architecture
    # name) are all checked; these keep the classes that hold vLLM's tables
    triggers = ("hf_to_vllm_mapper", "packed_modules_mapping", "embedding_modules")

    VALID = [
        example(
            """
class MyModel(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"model.": "language_model."})
    hf_to_vllm_mapper = hf_to_vllm_mapper | WeightsMapper(orig_to_new_suffix={".w": ".weight"})

class Other(nn.Module):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    if USE_FUSED:
        packed_modules_mapping = {"qkv_proj": ["qkv_proj"]}
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyModel(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={".q_proj": (".qkv_proj", "q")}
    )
    supports_pp = True
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"transformer.": "model."})
"""
            ),
            line=7,
            contains="nothing reads the assignment above",
        ),
        Invalid(
            example(
                """
class MyModel(nn.Module):
    embedding_modules = {"embed_tokens": "input_embeddings"}
    embedding_modules = {"embed_tokens": "input_embeddings"}
"""
            ),
            line=4,
            contains="the same value",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not isinstance(node.body, cst.IndentedBlock):
            return
        body = list(node.body.body)
        last: dict[str, tuple[int, cst.CSTNode, cst.CSTNode]] = {}
        for i, statement in enumerate(body):
            found = _assigned(statement)
            if found is None:
                continue
            name, assignment, value = found
            before = last.get(name)
            last[name] = (i, assignment, value)
            if before is None or _reads([*body[before[0] + 1 : i], value], name):
                continue
            message = (
                f"`{node.name.value}.{name}` is assigned again here, and nothing reads the "
                "assignment above: Python keeps this one, and everything the first says is "
                "lost"
            )
            severity = None
            if before[2].deep_equals(value):
                severity = Severity.NOTE
                message += " (a note: the same value twice, so nothing is lost)"
            self.report(assignment, message, severity=severity)
