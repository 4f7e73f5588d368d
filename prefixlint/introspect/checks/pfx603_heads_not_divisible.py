"""PFX603: query or KV heads do not divide for a tensor-parallel size of the grid."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.introspect.checks.base import Case, FailureCheck, Subject
from prefixlint.introspect.finding import Finding
from prefixlint.introspect.verdict.gaps import describe
from prefixlint.introspect.verdict.own import fixed_head_count, vllm_root

TP_CANDIDATES = tuple(range(1, 17))


class HeadsNotDivisible(FailureCheck):
    """## What it does
    A build that failed at a tensor-parallel size its head counts do not divide by is
    reported once, naming every layout that failed, with the sizes that work (a warning:
    the config's counts).
    When the counts that failed are not the config's but an integer literal of the model's
    code (`num_heads=6` in the call being run, `self.num_heads = 6` before it;
    `verdict/own.py`), it is reported at that line, in every layout it failed in, whatever
    the config (synthesised or given): an error in a plugin's file (the model ignores the
    checkpoint's count), a warning in vLLM's own model files, whose fixed counts belong to
    sub-modules of a fixed shape (a vision tower) that no config here describes.

    ## Details
    For each TP size of the grid, the query heads must divide by it and the KV heads
    must divide by it or it by them. The message names the TP sizes that work.

    ## Why is this bad?
    vLLM refuses to start the model at that `--tensor-parallel-size`; a count fixed in the
    code builds a model whose shapes are not the checkpoint's.

    ## Example
    32 query / 8 KV heads at tp=3; `num_heads=6` where the config says 8.

    ## Fix
    Document the sizes that work; nothing in the model is wrong when the config's counts
    are the checkpoint's. Read a fixed count from the config.
    """

    code = "PFX603"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            "",
            "",
            "class LlamaForCausalLM(",
            "warning",
            tp=(1, 3),
            config=(("num_attention_heads", 32), ("num_key_value_heads", 8)),
            clean_config=(("num_attention_heads", 24), ("num_key_value_heads", 3)),
        ),
    )

    def judge(self, build: Any, subject: Subject) -> Finding | None:
        layout, heads, kv_heads = build.layout, subject.heads, subject.kv_heads
        fixed = fixed_head_count(
            build.error_tb, build.error, build.recorder.external, (heads, kv_heads)
        )
        if fixed is not None:
            file, line, name, value = fixed
            message = (
                f"the model's code fixes `{name}={value}` whatever the config says ({heads} query "
                f"/ {kv_heads} KV heads), and building failed: {describe(build.error)}"
            )
            # vLLM's own models fix counts of sub-modules whose checkpoints hold them (a
            # vision tower's): a warning there; a plugin's literal is its defect
            root = vllm_root()
            severity = "warning" if root and file.startswith(root) else "error"
            return Finding(self.code, severity, message, file, line, group=f"{name}={value}")
        divisible = "divisible" in str(build.error) or (
            heads
            and (heads % layout.tp or (kv_heads and kv_heads % layout.tp and layout.tp % kv_heads))
        )
        if not (divisible and layout.tp > 1):
            return None
        ok = ", ".join(map(str, working_tp_sizes(heads, kv_heads)))
        message = (
            f"{heads} query / {kv_heads} KV heads do not divide by the tensor parallel size; "
            f"sizes that work: {ok}"
        )
        # one finding for every size that fails: the merge lists their layouts
        return Finding(self.code, "warning", message, *subject.class_site)


def working_tp_sizes(heads: int | None, kv_heads: int | None) -> list[int]:
    if not heads:
        return []
    kv = kv_heads or heads
    return [tp for tp in TP_CANDIDATES if heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)]
