"""PFX703: the LoRA dry-run: an adapter module vLLM's LoRA loader refuses or drops."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.codes import LORA_TARGET_UNMAPPED_CODE
from prefixlint.introspect.checks.base import Case, FactCheck
from prefixlint.introspect.dryrun.lora import LoraIssue
from prefixlint.introspect.finding import Finding

_SHOWN = 8  # expected names quoted in a message
_PACKED = '        "qkv_proj": ["q_proj", "k_proj", "v_proj"],'


class LoraTargets(FactCheck):
    """## What it does
    For a model that declares `SupportsLoRA`, matches a LoRA adapter (`--lora`, or a
    synthetic one training every linear layer of the streamed checkpoint) on the tp=1
    meta build as vLLM's LoRA loader and manager match it, with vLLM's own functions
    (`get_supported_lora_modules`, `process_packed_modules_mapping`,
    `parse_fine_tuned_lora_name`, `is_supported_lora_module`, `can_replace_layer`). In
    `dryrun/lora.py`, reported at the line of the model that built the layer, renamed the
    checkpoint layer, or declares the class. The dry-run returns `LoraIssue` facts; this
    unit words them.

    ## Details
    For a model that declares `SupportsLoRA`, an adapter (`--lora`: a PEFT folder or hub
    id, `adapter_config.json` and the safetensors header only; without it, a synthetic
    adapter training every linear layer of the checkpoint the dry-run streamed) is
    matched on the tp=1 meta build with vLLM's own functions, as its LoRA loader and
    manager match it: the expected names (`get_supported_lora_modules` with fused layers
    replaced by their `packed_modules_mapping` parts), each adapter tensor's module
    (`parse_fine_tuned_lora_name` under `hf_to_vllm_mapper.get_rename_mapper()`,
    `lora_skip_prefixes`), and the module the manager gives it to
    (`is_supported_lora_module`, the LoRA layers' `can_replace_layer`). Reported at the
    model's line: a fused layer whose `packed_modules_mapping` lacks a part the adapter
    trains (at the line that built it; a missing entry PFX606 reports is confirmed there
    instead), a module the loader renames in code but LoRA's renames do not reach, a
    target no module of the model is, a module no LoRA layer can replace (its adapter
    weights are dropped silently), an embedding `embedding_modules` does not list, a
    `modules_to_save` classification head the model does not expose. What vLLM refuses
    in the adapter itself (DoRA, a bias, other `modules_to_save`) is a PFX600 note, as
    is a vLLM without these functions. A router's module is a warning, not an error:
    adapters train routers only with `all-linear`. Tower modules vLLM wraps only on
    request are notes.

    ## Why is this bad?
    vLLM finds an adapter's targets by module name: a target the model cannot map makes
    `--enable-lora` refuse the adapter at load, on a GPU, and a module it maps to a layer
    no LoRA layer wraps has its adapter weights dropped without an error.

    ## Example
    `packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj"], ...}`: an adapter that
    trains `v_proj` is refused.

    ## Fix
    Give the fused layer every part its checkpoint holds in `packed_modules_mapping`, put
    renames in `hf_to_vllm_mapper` (LoRA reads its renames), list embeddings in
    `embedding_modules`.
    """

    code = "PFX703"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            _PACKED,
            '        "qkv_proj": ["q_proj", "k_proj"],',
            "self.qkv_proj = QKVParallelLinear(",
            "warning",  # the synthetic adapter's: a warning; with `--lora`, an error
            at_cls="LlamaAttention",
        ),
    )
    reads: ClassVar[tuple[type, ...]] = (LoraIssue,)

    def findings(self, facts: list[Any]) -> list[Finding]:
        out = []
        for fact in facts:
            severity, message = getattr(self, f"_{fact.kind}")(fact)
            if fact.router and severity == "error":
                severity, message = (
                    "warning",
                    (
                        f"{message} (a warning: a router, one output per expert, which adapters "
                        "train only when they target every linear layer)"
                    ),
                )
            more = len(fact.names) - 1
            if more and fact.kind in ("renamed", "unmapped"):
                message += f" (the same for {more} more module{'s' if more > 1 else ''})"
            if fact.synthetic and severity == "error":
                # prefixlint's guess of an adapter (PEFT's `all-linear` of the checkpoint's
                # names): whether a user's adapter trains that layer under that name is not
                # known (on half the 0.32 zoo, 8 of its 10 findings were errors before this,
                # most on base or embedding models' renamed names); `--lora` keeps severity
                severity = "warning"
                message += (
                    " (a warning: found with a synthetic all-linear adapter; `--lora` checks yours)"
                )
            out.append(Finding(self.code, severity, message, *fact.site, group=fact.group))
        return out

    # one message per kind of issue -----------------------------------------------------------

    def _fused(self, fact: LoraIssue) -> tuple[str, str]:
        leaf = fact.path.rsplit(".", 1)[-1]
        table = f"`{fact.model}.packed_modules_mapping`"
        has = f"maps `{leaf}` to {list(fact.entry)}" if fact.entry else f"has no entry for `{leaf}`"
        fix = list(fact.fed or fact.names)
        return "error", (
            f"`{fact.path}` is a fused `{fact.module}` that loads the adapter's "
            f"{_quoted(fact.names)}, and {table} {has}: vLLM's LoRA loader expects only "
            f'{_expected(fact)} and refuses the adapter ("expected target modules in ... '
            f'but received [...]"); make the entry `{leaf!r}: {fix!r}`'
        )

    def _whole(self, fact: LoraIssue) -> tuple[str, str]:
        leaf = fact.path.rsplit(".", 1)[-1]
        return "error", (
            f"the adapter trains `{fact.path}` (a `{fact.module}`) whole, "
            f"as `{leaf}`, and `{fact.model}.packed_modules_mapping` maps `{leaf}` to "
            f"{list(fact.entry or ())}: vLLM's LoRA loader expects only "
            f'{_expected(fact)} and refuses the adapter ("expected target modules in ... '
            'but received [...]")'
        )

    def _embedding(self, fact: LoraIssue) -> tuple[str, str]:
        return "error", (
            f"the adapter trains the embedding {_quoted(fact.names)}, which "
            f"`{fact.model}.embedding_modules` does not list: vLLM's LoRA loader refuses the "
            "adapter; list the embedding there, as vLLM's models do"
        )

    def _renamed(self, fact: LoraIssue) -> tuple[str, str]:
        head = (
            f"the checkpoint's `{fact.peft}` loads into `{fact.loads_into}` (this "
            f"`load_weights` renames it), but vLLM's LoRA loader names the adapter's module "
            f"`{fact.names[0]}` (through `hf_to_vllm_mapper`'s renames only)"
        )
        return "error", f"{head}: {_consequence(fact)}; rename it in `hf_to_vllm_mapper`"

    def _unmapped(self, fact: LoraIssue) -> tuple[str, str]:
        head = f"the adapter trains `{fact.names[0]}`, which no module of `{fact.model}` is"
        return "error", f"{head}: {_consequence(fact)}"

    def _unwrapped(self, fact: LoraIssue) -> tuple[str, str]:
        leaf = fact.path.rsplit(".", 1)[-1]
        table = (
            f"`packed_modules_mapping` has no entry for `{leaf}`"
            if fact.entry is None
            else f"its `packed_modules_mapping` entry is {list(fact.entry)}"
        )
        message = (
            f"`{fact.path}` (a `{fact.module}`) takes the adapter's "
            f"{_quoted(fact.names)}, and none of vLLM's LoRA layers replaces it ({table}"
            "): vLLM's manager leaves it unwrapped and drops its adapter weights (a warning at "
            "start-up, nothing else)"
        )
        if fact.entry is None and len(fact.names) == 1:
            message += (
                f"; a fused layer the adapter trains whole needs `{leaf!r}: {[leaf]!r}`, as "
                "its checkpoint holds it fused"
            )
        return "error", message

    def _tower(self, fact: LoraIssue) -> tuple[str, str]:
        return "note", (
            f"the adapter trains {len(fact.names)} module(s) outside the language model "
            f"`{fact.language}` (`{fact.names[0]}`, ...), which vLLM applies only "
            "with `enable_tower_connector_lora` on a model that supports it (a note: a "
            "deployment choice)"
        )

    def _head(self, fact: LoraIssue) -> tuple[str, str]:
        head = fact.names[0]
        return "error", (
            f"the adapter saves the classification head `{head}` (`modules_to_save`), and "
            f"`{fact.model}` exposes none: vLLM's LoRA manager gives full weights only to a "
            f'top-level `{head}` of a pooling model, and refuses the adapter ("the model '
            'does not expose a unique ClassificationHeadWithLoRA")'
        )


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _expected(fact: LoraIssue) -> str:
    # per-expert names (``experts.0.w1``) are left out by the dry-run: hundreds say nothing
    more = len(fact.expected) - _SHOWN
    shown = ", ".join(f"`{n}`" for n in fact.expected[:_SHOWN])
    return shown + (f" and {more} more" if more > 0 else "")


def _consequence(fact: LoraIssue) -> str:
    base = fact.names[0].rsplit(".", 1)[-1]
    if fact.refused:
        return (
            f"`{base}` is none of the names LoRA expects ({_expected(fact)}), so vLLM "
            "refuses the adapter"
        )
    return "no module has that path, so vLLM drops the adapter's weights for it unsaid"


def folded(findings: list[Finding], packed: list[Finding]) -> list[Finding]:
    """A fused layer ``packed_modules_mapping`` lacks is PFX606 already, at the same line
    (``checks/packed.py``): one defect, reported once; the PFX606 finding says what vLLM's
    LoRA loader did with the adapter (refused it; or, the layer unwrapped, dropped its
    weights). Read by group (the kind of issue), never by words."""
    by_site = {(f.file, f.line): f for f in packed}
    out = []
    for f in findings:
        grouped = f.code == LORA_TARGET_UNMAPPED_CODE and f.group.startswith(
            ("lora:fused:", "lora:unwrapped:")
        )
        known = by_site.get((f.file, f.line)) if grouped else None
        if known is None:
            out.append(f)
            continue
        if f.group.startswith("lora:fused:"):
            known.severity = "error"
            known.message += (
                "; the LoRA dry-run confirms it: vLLM's LoRA loader refuses an adapter that "
                "trains the parts (PFX703)"
            )
        else:
            known.message += (
                "; the LoRA dry-run confirms it: no LoRA layer replaces it, and vLLM drops "
                "the adapter's weights for the parts (PFX703)"
            )
    return out
