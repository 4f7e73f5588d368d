"""PFX606: a declared capability does not hold in the built model.

The fused layers the mapping does not name (the other direction, read with the dry-run's
checkpoint mapping) are found by ``packed.missing_entries``, which the pipeline calls
after the dry-run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, ClassVar

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.introspect.checks.base import Case, Findings, Subject, TargetCheck
from prefixlint.introspect.checks.packed import unbuilt_key_reason
from prefixlint.introspect.finding import Finding

_PACKED = """"qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],"""


class PipelineInterface(TargetCheck):
    """## What it does
    A class that declares `SupportsPP` must have a callable
    `make_empty_intermediate_tensors` that works, and its buffers must be the tensors a
    stage's `forward` sends (`IntermediateTensors({...})`) and reads
    (`intermediate_tensors["..."]`).

    ## Details
    `SupportsPP` without a working `make_empty_intermediate_tensors`, or whose buffers
    lack a key a stage's `forward` reads from `intermediate_tensors` or hold one its
    `IntermediateTensors({...})` never sends (errors); a `packed_modules_mapping` key
    that no build of any layout or explored config variant made: an error when none of
    its keys was built (the mapping does not describe the model), a warning per unbuilt
    key otherwise (nothing is packed under it; a maintainer removes it), a note where
    the class builds that module in a branch no explored config took or wraps a model
    its config chooses (one table for all of them). A key with a dot (`attn.qkv`) is a
    warning: vLLM looks a fused layer up by the last part of its prefix, so it never
    applies. The other direction too: a fused `QKVParallelLinear` or
    `MergedColumnParallelLinear` whose checkpoint holds the parts separately (as the
    dry-run's checkpoint mapping or the model's own stacked-params tables say) and that
    the mapping does not name, at the line that built it: an error when quantization or
    LoRA looks the parts up through the table, a note otherwise (nothing looks them up
    today). Fused MoE experts are matched by their own prefix and the expert mapping,
    not by this table, and are not checked.

    ## Why is this bad?
    A later pipeline stage receives its inputs in those tensors: the first pipeline-parallel
    run fails (a `KeyError` on a key the buffers lack).

    ## Example
    `class M(nn.Module, SupportsPP)` without `self.make_empty_intermediate_tensors = ...`.

    ## Fix
    Assign the inner model's `make_empty_intermediate_tensors` (as `llama.py` does).
    """

    code = "PFX606"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            "        self.make_empty_intermediate_tensors = (\n"
            "            self.model.make_empty_intermediate_tensors\n        )\n",
            "",
            "class LlamaForCausalLM(",
        ),
    )

    def check(self, built: list[Any], subject: Subject, out: Findings) -> None:
        cls = subject.cls
        build = next((b for b in built if b.layout.tp == 1 and b.layout.pp == 1), None)
        if build is None or not getattr(cls, "supports_pp", False):
            return
        make = getattr(build.model, "make_empty_intermediate_tensors", None)
        problem = None
        if not callable(make):
            problem = "has no callable `make_empty_intermediate_tensors`"
        else:
            try:
                import torch

                make(2, torch.float32, torch.device("meta"))
            except Exception as e:
                problem = f"`make_empty_intermediate_tensors(...)` raises {type(e).__name__}: {e}"
        if problem:
            message = f"`{cls.__name__}` declares `SupportsPP` but {problem}"[:300]
            severity = "error"
            if subject.draft is not None and not subject.draft.pipelined:
                severity, message = "note", message + _DRAFT_PP_NOTE
            found = Finding(self.code, severity, message, *subject.class_site, group="pp")
            found.facts["kind"] = "supports-pp"
            out.add(found, build)
            return
        for module in build.model.modules():
            if "make_empty_intermediate_tensors" in vars(module):
                for finding in buffer_mismatches(module):
                    out.add(finding, build)


# a draft that inherits ``SupportsPP`` from its target's class (EAGLE from Llama) without
# the methods: nothing calls them today (issue 20)
_DRAFT_PP_NOTE = (
    " (a note: a speculative draft, which vLLM runs beside the last pipeline stage, so "
    "nothing calls it today; it matters only once drafts are pipelined)"
)


class PackedMappingKeys(TargetCheck):
    """## What it does
    A `packed_modules_mapping` key that no build (of any layout or explored config variant)
    made: an error when none of its keys was built, a warning per unbuilt key otherwise, a
    note where the class builds it in a branch no config took; a dotted key is a warning.

    ## Why is this bad?
    LoRA and quantization pack weights by these names: a stale table packs nothing, a
    wrong one misleads both.

    ## Example
    `packed_modules_mapping = {"fused_xyz": ["x", "y"]}` in a model without `fused_xyz`.

    ## Fix
    Name the fused layers the model builds, by the last part of their prefix.
    """

    code = "PFX606"
    examples: ClassVar[tuple[Case, ...]] = (
        Case("LlamaForCausalLM", _PACKED, '"fused_xyz": ["x", "y"],', "class LlamaForCausalLM("),
    )

    def check(self, built: list[Any], subject: Subject, out: Findings) -> None:
        cls = subject.cls
        mapping = getattr(cls, "packed_modules_mapping", None)
        if not built or not isinstance(mapping, dict) or not mapping:
            return
        leaf_names: set[str] = set()
        for build in built:
            leaf_names.update(n.rsplit(".", 1)[-1] for n, _ in build.model.named_modules())
        # None built: the mapping does not describe this model (an error, as before). Some
        # built: another key packs nothing in any config explored, a warning (nothing
        # breaks, a maintainer removes a stale key) when every construction site ran and
        # nothing says the class builds it elsewhere, a note when something does, not
        # verified when some construction site did not run.
        none = not any(k in leaf_names for k in mapping)
        for key, parts in mapping.items():
            if key in leaf_names:
                continue
            last = key.strip(".").rsplit(".", 1)[-1]
            if last in leaf_names and parts == [key]:
                continue  # an entry that packs a layer as itself (DotsOCR's `.attn.qkv`)
            if not none and "." in key.strip(".") and last in leaf_names:
                out.add(_dotted_key(cls, key, last, subject), built[0])
                continue
            out.add(self._unbuilt(key, parts, built, subject, none), built[0])

    def _unbuilt(
        self, key: str, parts: Any, built: list[Any], subject: Subject, none: bool
    ) -> Finding:
        cls = subject.cls
        tried = "; ".join(sorted({getattr(b, "variant", "") or "base config" for b in built}))
        packs = ", ".join(f"`{p}`" for p in parts) if isinstance(parts, list) else str(parts)
        what = (
            f"`{cls.__name__}.packed_modules_mapping` names `{key}` (packing {packs}), but no "
            f"build made a module of that name (configs: {tried})"
        )
        if not (none or subject.complete):
            message = (
                f"not verified: {what}, and some construction sites ran in no build: a "
                "config that builds them may build it"
            )
            return Finding(NOT_VERIFIED_CODE, "note", message, *subject.class_site, group=key)
        message = f"{what}; LoRA and quantization pack weights by these names"
        severity = "error" if none else "warning"
        why = "" if none else unbuilt_key_reason(key, built, cls)
        if why:
            severity = "note"
            message = f"{what} (a note: {why}; nothing breaks)"
        return Finding(self.code, severity, message, *subject.class_site, group=key)


def _dotted_key(cls: Any, key: str, last: str, subject: Subject) -> Finding:
    # vLLM looks a fused layer up by its prefix's last part (quantization's
    # is_layer_skipped, LoRA's model manager): a dotted key never applies
    message = (
        f"`{cls.__name__}.packed_modules_mapping` names `{key}`, with a dot: vLLM's "
        f"quantization and LoRA look a fused layer up by the last part of its prefix "
        f"(`{last}`), so this entry never applies and an `ignored_layers` entry or "
        f"LoRA adapter of its parts misses `{last}`; name the key `{last!r}`"
    )
    return Finding("PFX606", "warning", message, *subject.class_site, group=key)


def buffer_mismatches(module: Any) -> list[Finding]:
    """The keys ``module``'s ``forward`` reads from ``intermediate_tensors`` that its
    ``make_empty_intermediate_tensors`` buffers lack, and the buffers its
    ``IntermediateTensors({...})`` never sends (only where every send is a literal dict)."""
    import torch

    try:
        buffers = set(
            module.make_empty_intermediate_tensors(2, torch.float32, torch.device("meta")).tensors
        )
        file, reads, sends = _forward_keys(type(module).forward)
    except Exception:
        return []  # no readable forward, or buffers made some other way: nothing to compare
    out = []
    name = type(module).__name__
    for key, line in reads.items():
        if key not in buffers:
            message = (
                f"`{name}.forward` reads `intermediate_tensors[{key!r}]`, but "
                f"`make_empty_intermediate_tensors` makes only {sorted(buffers)}: a later "
                "pipeline stage raises `KeyError` at its first run"
            )
            out.append(Finding("PFX606", "error", message, file, line, group=f"pp:{key}"))
    if sends and all(keys is not None for keys, _ in sends):
        sent = set().union(*(keys for keys, _ in sends))
        for key in sorted(buffers - sent):
            message = (
                f"`{name}.forward` never sends `{key}` (its `IntermediateTensors` hold "
                f"{sorted(sent)}), which `make_empty_intermediate_tensors` makes a buffer for: "
                "the next stage waits for a tensor no stage sends"
            )
            out.append(Finding("PFX606", "error", message, file, sends[0][1], group=f"pp:{key}"))
    return out


def _forward_keys(forward: Any) -> tuple[str, dict[str, int], list[tuple[set[str] | None, int]]]:
    """The file of ``forward``, the literal keys it reads from its ``intermediate_tensors``
    parameter (first line of each), and each ``IntermediateTensors(...)`` it builds with the
    keys of its literal dict (None when not a literal dict) and its line."""
    lines, start = inspect.getsourcelines(forward)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    reads: dict[str, int] = {}
    sends: list[tuple[set[str] | None, int]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "intermediate_tensors"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and isinstance(node.ctx, ast.Load)
        ):
            reads.setdefault(node.slice.value, start + node.lineno - 1)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "IntermediateTensors":
            arg = node.args[0] if node.args else None
            keys = None
            if isinstance(arg, ast.Dict) and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in arg.keys
            ):
                keys = {k.value for k in arg.keys}  # type: ignore[union-attr]
            sends.append((keys, start + node.lineno - 1))
    return inspect.getsourcefile(forward) or "", reads, sends
