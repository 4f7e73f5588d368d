"""Where transformers and vLLM read a *synthesised* config into different structures
(which layers are MoE, an optional bias or norm, a size from another attribute): what a
checkpoint holds there is unknown, so those parts are a PFX600 note, not judged."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from prefixlint.introspect.dryrun.layouts import normal

if TYPE_CHECKING:
    from prefixlint.introspect.dryrun.streaming import Stream


@dataclass
class Divergence:
    """Where the reference and the vLLM model, built from the same *synthesised* config,
    are different structures: the two read it differently (which layers are MoE, an
    optional bias or norm, a size from another attribute), so what a checkpoint of this
    config holds there is unknown. Those parts are a PFX600 note, not judged. A config
    from a real checkpoint is consistent with it, so there every divergence is judged."""

    names: set[str] = field(default_factory=set)  # reference tensors not streamed
    paths: set[str] = field(default_factory=set)  # vLLM modules whose parameters are not judged
    reasons: list[str] = field(default_factory=list)

    def add(self, reason: str) -> None:
        if normal(reason) not in {normal(r) for r in self.reasons}:
            self.reasons.append(reason)

    def covers(self, vllm_name: str) -> bool:
        return any(vllm_name.startswith(f"{p}.") for p in self.paths)


MISSING = object()


def block_of(name: str) -> str | None:
    """The layer's child a tensor lies in (``model.layers.2.mlp``), or None outside layers."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 2]) if i + 2 < len(parts) else None
    return None


def vllm_name(cls: Any, name: str) -> str:
    """The vLLM name of a checkpoint name through the ``hf_to_vllm_mapper`` of a class (or
    of a model: vLLM's Transformers backend makes its mapper per model)."""
    fn = getattr(getattr(cls, "hf_to_vllm_mapper", None), "_map_name", None)
    if callable(fn):
        with contextlib.suppress(Exception):
            out = fn(name)
            if isinstance(out, str):
                return out
    return name


def submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def walk(model: nn.Module, name: str) -> tuple[str, Any]:
    """How far ``name`` resolves in the vLLM model: (deepest resolved path, the value of the
    next component: ``None`` when the model set it to None, ``MISSING`` when absent)."""
    obj: Any = model
    path: list[str] = []
    for part in name.split("."):
        value = getattr(obj, part, MISSING) if isinstance(obj, nn.Module) else MISSING
        if value is None or value is MISSING:
            return ".".join(path), value
        obj, path = value, [*path, part]
    return ".".join(path), obj


def _is_moe(module: nn.Module) -> bool:
    """Routed experts: a child named ``experts``, an experts class, or stacked 3-D expert
    weights (class names alone say nothing: ``Glm4MoeLiteRMSNorm``)."""
    return any(
        name.rsplit(".", 1)[-1] == "experts" or type(m).__name__.endswith(("Experts", "FusedMoE"))
        for name, m in module.named_modules()
    ) or any(p.dim() == 3 for p in module.parameters())


def _expert_widths(
    reference: dict[str, Any], names: list[str], module: nn.Module
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The routed experts' down-projection dims in the reference (``experts...down_proj``)
    and in vLLM (``w2_weight``) when they differ; only the sizes of one expert, never a
    count of experts or a name, so a loader that misses experts is still judged."""
    # (in, out) of one expert's down projection, in either orientation: transformers
    # stores some fused experts transposed (GptOss, Llama4: (E, I, H); vLLM (E, H, I))
    mine = {
        tuple(sorted(reference[n][0][-2:]))
        for n in names
        if ".experts." in n and "shared" not in n and "down_proj" in n and len(reference[n][0]) >= 2
    }
    theirs = {
        tuple(sorted(p.shape[-2:]))
        for n, p in module.named_parameters()
        if n.endswith("w2_weight") and "shared" not in n and p.dim() == 3
    }
    if len(mine) == 1 and len(theirs) == 1 and mine != theirs:
        return mine.pop(), theirs.pop()
    return None


def reconcile(
    cls: type | None, ref: nn.Module, model: nn.Module, reference: dict[str, Any]
) -> Divergence:
    """Before streaming: layer blocks that are MoE on one side and dense on the other, or
    MoE on both with weights of other sizes, and tensors vLLM explicitly set to None."""
    out = Divergence()
    blocks: dict[str, list[str]] = {}
    for name in reference:
        block = block_of(name)
        if block is not None:
            blocks.setdefault(block, []).append(name)
    for block, names in blocks.items():
        mine, theirs = submodule(ref, block), submodule(model, vllm_name(cls, block))
        if mine is None or theirs is None:
            continue
        moe_ref, moe_vllm = _is_moe(mine), _is_moe(theirs)
        if moe_ref != moe_vllm:
            kinds = ("MoE", "dense") if moe_vllm else ("dense", "MoE")
            why = f"`{block}` is {kinds[0]} in vLLM, {kinds[1]} in transformers"
        elif moe_ref and _expert_widths(reference, names, theirs) is not None:
            mine_w, theirs_w = _expert_widths(reference, names, theirs)  # type: ignore[misc]
            why = (
                f"the experts of `{block}` are {theirs_w} in vLLM, {mine_w} in transformers "
                "(the intermediate size comes from another attribute)"
            )
        else:
            continue
        out.names.update(names)
        out.paths.add(vllm_name(cls, block))
        out.add(why)
    for name in reference:
        if name in out.names:
            continue
        path, value = walk(model, vllm_name(cls, name))
        if value is None:
            out.names.add(name)
            leaf = vllm_name(cls, name)[len(path) :].lstrip(".").split(".")[0]
            out.add(f"vLLM builds `{path or type(model).__name__}` with `{leaf}` = None")
    return out


def explained_drop(cls: type | None, model: nn.Module, name: str, stream: Stream) -> str | None:
    """After streaming: a checkpoint tensor inside a layer for which vLLM has no module or
    parameter at all, in a module whose parameters were all written (a renamed module
    would leave its own parameter unwritten): vLLM built the module without it. Or one
    whose vLLM parameter is a tied alias of another, written, parameter (a head tied in
    vLLM and not in the reference: each read the tie flag from another sub-config)."""
    block = block_of(name)
    mapped = vllm_name(cls, name)
    path, value = walk(model, mapped)
    tied = stream.recorder.owner(value) if isinstance(value, torch.Tensor) else None
    if tied is not None and tied.name != mapped and tied.written:
        # the config's tie flag, read from another (sub-)config by one of the two
        return f"vLLM ties `{mapped}` to `{tied.name}`, transformers keeps both"
    if block is None or value is not MISSING or not path.startswith(vllm_name(cls, block)):
        return None
    written = {t.name for t in stream.recorder.by_storage.values() if t.written}
    under = [n for n, _ in submodule(model, path).named_parameters(prefix=path)]  # type: ignore[union-attr]
    if not under or any(n not in written for n in under):
        return None
    leaf = mapped[len(path) :].lstrip(".").split(".")[0]
    return f"vLLM builds `{path}` without `{leaf}`, transformers with it"


# -- streaming through load_weights ----------------------------------------------------------
