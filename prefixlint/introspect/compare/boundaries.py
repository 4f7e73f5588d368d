"""Module boundaries: which of the model's modules match one of transformers' by name,
what each computed (forward hooks), and how far apart the two are."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.compare.facts import Boundary
from prefixlint.introspect.dryrun.divergence import vllm_name

LOGITS = "logits"  # the boundary of compute_logits: no module of its own in either model
OUTPUT = "output"  # a pooling model's forward output (``pooling.py``): no module of its own
ENDS = (LOGITS, OUTPUT)


def matched(
    model: nn.Module,
    reference: nn.Module,
    cls: type | None,
    pooling: bool = False,
    saved: dict[str, str] | None = None,
) -> dict[str, tuple[str, ...]]:
    """vLLM module path -> transformers module paths, matched by the checkpoint name: a
    transformers module's weights, mapped by the class's ``hf_to_vllm_mapper``, land in
    the vLLM module of that path (vLLM's prefix is its attribute path). A fused module
    (``qkv_proj``) gets its parts in the order of ``packed_modules_mapping``, whose outputs
    it computes side by side at tp=1. A ``pooling`` model's loader takes a base model's
    names (no ``model.``) under its ``model`` (vLLM's embedding adapter and BERT's
    embedding model add the prefix where no name has it): so do its boundaries. ``saved``
    (a checkpoint name -> the reference's own name, for the names transformers' conversion
    renames) gives a module whose own name no vLLM module has the name its weights are
    saved under (transformers 5's Mixtral-style ``mlp``, saved as ``block_sparse_moe``)."""
    ours = [name for name, _ in model.named_modules() if name]  # parents first
    present = set(ours)
    # vLLM's Transformers backend makes its mapper per model, in ``__init__``
    owner = model if getattr(model, "hf_to_vllm_mapper", None) is not None else cls
    theirs: dict[str, list[str]] = {}
    for name, module in reference.named_modules():
        # a module without weights (an activation, a rotary embedding) has no checkpoint
        # name, and vLLM's of the same name may compute another thing (SiluAndMul)
        if not name or not any(True for _ in module.parameters()):
            continue
        mapped = vllm_name(owner, f"{name}.weight")
        path = mapped.removesuffix(".weight") if mapped.endswith(".weight") else name
        if pooling and path not in present and f"model.{path}" in present:
            path = f"model.{path}"
        if path not in present:
            path = _nested(model, path, present)
        if path not in present and (where := _saved_as(name, saved or {})) is not None:
            mapped = vllm_name(owner, f"{where}.weight")
            path = mapped.removesuffix(".weight") if mapped.endswith(".weight") else where
        theirs.setdefault(path, []).append(name)
    packed = getattr(model, "packed_modules_mapping", None) or {}
    known = {n for n, _ in reference.named_modules()}
    out: dict[str, tuple[str, ...]] = {}
    for path in ours:
        parent, _, leaf = path.rpartition(".")
        parts = packed.get(leaf) if isinstance(packed, dict) else None
        if isinstance(parts, (list, tuple)) and len(parts) > 1:
            base = out.get(parent, (parent,))[0]
            fused = tuple(f"{base}.{p}" if base else p for p in parts)
            if all(f in known for f in fused):
                out[path] = fused
                continue
        names = theirs.get(path, [])
        if len(names) == 1:
            out[path] = (names[0],)
    return out


def _saved_as(module: str, saved: dict[str, str]) -> str | None:
    """The name the checkpoint saves the reference's ``module`` under, from a weight of it
    that transformers' conversion renames segment for segment (Mixtral's
    ``...mlp.gate.weight`` saved as ``...block_sparse_moe.gate.weight``, PhiMoE's
    ``...mlp.router.weight`` as ``...block_sparse_moe.gate.weight``: the module ``...mlp``
    is ``...block_sparse_moe``); None when none is (a conversion that moves or drops a
    segment says nothing of where a module went)."""
    depth = module.count(".") + 1
    for name, own in saved.items():
        if own.startswith(module + ".") and name.count(".") == own.count("."):
            return ".".join(name.split(".")[:depth])
    return None


def _nested(model: nn.Module, path: str, present: set[str]) -> str:
    """``path`` through the ``hf_to_vllm_mapper`` of the vLLM module it falls under, for a
    loader that hands its names on to a submodule's ``load_weights`` (ModernBERT's
    classifiers pass ``model.*`` to their ``ModernBertModel``, which maps ``layers.`` to
    ``encoder_layer.layers.``); ``path`` as it is when that finds no module."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        head, rest = ".".join(parts[:i]), ".".join(parts[i:])
        if head not in present:
            continue
        mapped = vllm_name(model.get_submodule(head), f"{rest}.weight")
        inner = f"{head}.{mapped.removesuffix('.weight')}"
        if mapped.endswith(".weight") and inner in present:
            return inner
    return path


@dataclass
class Seen:
    """What the hooked modules computed: output and input per path, in completion order."""

    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    inputs: dict[str, torch.Tensor | None] = field(default_factory=dict)
    # the other reading of a ``(hidden, residual)`` pair: ``hidden`` alone, for a layer
    # that has added the residual already and passes it on only for the next one (Cohere)
    other_outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    other_inputs: dict[str, torch.Tensor] = field(default_factory=dict)


def _floats(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    values = list(args) + [kwargs[k] for k in ("hidden_states", "residual", "x") if k in kwargs]
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _input(args: tuple, kwargs: dict) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A module's input stream: its first float tensor plus a deferred residual of the
    same shape (vLLM's layers and fused norms take ``(hidden, residual)``), and the first
    alone as the other reading."""
    floats = _floats(args, kwargs)
    if not floats:
        return None, None
    first = floats[0]
    same = [t for t in floats if t.shape == first.shape]
    return (first, None) if len(same) == 1 else (sum(same[1:], same[0]), first)


def _output(value: Any, layer: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A module's output stream: a tensor, the first tensor of a tuple (a norm's
    ``(normed, residual)``, an MoE block's ``(hidden, router_logits)``), and for a decoder
    layer that defers its residual add, ``hidden + residual`` (and ``hidden`` alone as
    the other reading)."""
    if isinstance(value, torch.Tensor):
        return value, None
    items = list(value.values()) if isinstance(value, dict) else value
    if not isinstance(items, (list, tuple)):
        items = [getattr(value, "last_hidden_state", None)]
    tensors = [t for t in items if isinstance(t, torch.Tensor)]
    if not tensors:
        return None, None
    first = tensors[0]
    other = items[1] if len(items) >= 2 else None
    if layer and isinstance(other, torch.Tensor) and other.shape == first.shape:
        return first + other, first
    return first, None


@contextlib.contextmanager
def hooked(root: nn.Module, paths: dict[str, str], seen: Seen) -> Iterator[None]:
    """Forward hooks on ``root``'s modules at the keys of ``paths``, recording under the
    values (so that both models record under one name)."""
    handles = []
    for path, key in paths.items():
        try:
            module = root.get_submodule(path)
        except AttributeError:
            continue
        layer = path.rsplit(".", 1)[-1].isdigit()

        def hook(m: nn.Module, args: tuple, kwargs: dict, out: Any, key=key, layer=layer):
            if out is None:  # a layer that writes into its ``output`` argument
                out, args, kwargs = _written(m, args, kwargs)
            value, other = _output(out, layer)
            if value is not None and key not in seen.outputs:  # the first call only
                seen.outputs[key] = _kept(value)
                given, given_other = _input(args, kwargs)
                seen.inputs[key] = None if given is None else _kept(given)
                if other is not None:
                    seen.other_outputs[key] = _kept(other)
                if given_other is not None:
                    seen.other_inputs[key] = _kept(given_other)

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    with removed_after(handles):
        yield


@contextlib.contextmanager
def removed_after(handles: list[Any]) -> Iterator[None]:
    """Open while the hooks of ``handles`` record; each removed on leaving, whatever
    raised (a hook left on a module would record the next run too)."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _written(module: nn.Module, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """(the ``output`` argument, the other arguments) of a vLLM layer that returns None and
    writes its result into ``output`` (``MambaMixer``, ``ShortConv``: ``forward(
    hidden_states, output)``); (None, as given) for others. The written tensor is no
    input: it holds the result by the time the hook reads it."""
    if "output" in kwargs:
        rest = {k: v for k, v in kwargs.items() if k != "output"}
        return kwargs["output"], args, rest
    try:
        names = [n for n in inspect.signature(module.forward).parameters if n != "self"]
    except (TypeError, ValueError):
        return None, args, kwargs
    at = names.index("output") if "output" in names else len(args)
    if at >= len(args) or not isinstance(args[at], torch.Tensor):
        return None, args, kwargs
    return args[at], args[:at] + args[at + 1 :], kwargs


def _kept(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().clone()


def _closest(
    ours: torch.Tensor | None, other: torch.Tensor | None, theirs: torch.Tensor | None
) -> tuple[float, float]:
    """``difference`` of the reading of ours that is closest to theirs."""
    found = difference(ours, theirs)
    if other is None:
        return found
    second = difference(other, theirs)
    return second if second[1] == second[1] and not second[1] >= found[1] else found


def difference(
    ours: torch.Tensor | None, theirs: torch.Tensor | None, padded: bool = False
) -> tuple[float, float]:
    """(max |ours - theirs|, that over max |theirs|); NaN where the shapes do not line
    up (nothing compared). A batch dimension of one is dropped, and with ``padded`` (the
    logits) the columns of vLLM's vocabulary padding."""
    if ours is None or theirs is None:
        return float("nan"), float("nan")
    a, b = ours.squeeze(0), theirs.squeeze(0)
    if padded and a.dim() == b.dim() and a.shape[:-1] == b.shape[:-1]:
        a = a[..., : b.shape[-1]]  # logits over a padded vocabulary
    if a.numel() != b.numel():
        return float("nan"), float("nan")
    gap = (a.reshape(-1) - b.reshape(-1)).abs()
    delta = float("inf") if bool(torch.isnan(gap).any()) else float(gap.max())
    scale = max(float(b.abs().max()), 1e-6)
    return delta, delta / scale


def join_parts(seen: Seen, names: dict[str, tuple[str, ...]]) -> None:
    """The outputs of a fused module's transformers parts side by side, under the key the
    vLLM module recorded (``key``); its input is the first part's."""
    for parts in names.values():
        if len(parts) < 2 or not all(p in seen.outputs for p in parts):
            continue
        outputs = [seen.outputs[p] for p in parts]
        seen.outputs[key(parts)] = torch.cat(outputs, -1)
        seen.inputs[key(parts)] = seen.inputs.get(parts[0])


def key(parts: tuple[str, ...]) -> str:
    return "+".join(parts)


def boundaries(
    ours: Seen, theirs: Seen, names: dict[str, str], sites: dict[str, tuple[str, int]]
) -> list[Boundary]:
    """Every boundary both models computed, in the order the model completed them."""
    out = []
    for name in ours.outputs:
        if name not in theirs.outputs:
            continue
        if name in ENDS:  # a head over a padded vocabulary
            max_abs, max_rel = difference(ours.outputs[name], theirs.outputs[name], True)
        else:
            mine, other = ours.outputs[name], ours.other_outputs.get(name)
            max_abs, max_rel = _closest(mine, other, theirs.outputs[name])
        if max_abs != max_abs:  # NaN: shapes that do not line up
            continue
        given, other = ours.inputs.get(name), ours.other_inputs.get(name)
        _, input_rel = _closest(given, other, theirs.inputs.get(name))
        given = None if input_rel != input_rel else input_rel
        path = names.get(name, name)
        out.append(Boundary(path, name, max_abs, max_rel, given, sites.get(path, ("", 0))))
    return out


def first_divergent(found: list[Boundary], tolerance: float) -> Boundary | None:
    """The first boundary whose output diverges while its input agrees, and whose
    difference persists: where the difference starts. A difference the next boundary
    no longer sees is a module that splits its work otherwise than transformers' (Gemma
    scales the embedding in the model, transformers inside the embedding module), not a
    divergence. Without a start (inputs never compared), the first that persists."""
    persisting = [b for i, b in enumerate(found) if _persists(found, i, tolerance)]
    started = [b for b in persisting if b.input_agrees(tolerance)]
    return (started or persisting or [None])[0]


def first_tight(found: list[Boundary], tolerance: float, given: float) -> Boundary | None:
    """The first boundary whose difference beyond ``tolerance`` persists and whose input
    agrees to ``given``, far below it: a small, systematic difference a module adds to
    an input that agrees to the float32 noise (an activation's approximation swapped). A
    boundary without a compared input (an embedding, the logits) is one only where every
    boundary before it agrees to ``given``. Never the first that merely persists: a
    difference that grew through earlier modules within the noise is no start."""
    for i, here in enumerate(found):
        if here.input_rel is None:
            given_agrees = all(b.max_rel <= given for b in found[:i])
        else:
            given_agrees = here.input_rel <= given
        if given_agrees and _persists(found, i, tolerance):
            return here
    return None


def _persists(found: list[Boundary], i: int, tolerance: float) -> bool:
    """``found[i]`` diverges, no enclosing boundary (its block, its decoder layer) agrees,
    and the next boundary completed after it that does not contain it diverges too, in
    its input or output (Qwen2-MoE's shared expert applies its gate inside in vLLM,
    outside in transformers: the MoE block around both agrees)."""
    here = found[i]
    if not here.differs(tolerance):
        return False
    later = found[i + 1 :]
    enclosing = [b for b in later if here.path.startswith(b.path + ".")]
    if any(not b.differs(tolerance) for b in enclosing):
        return False  # the block around it agrees: it splits its work otherwise
    block = here.path.rpartition(".")[0]
    for after in later:
        if after.input_rel is None and after.path not in ENDS:
            continue  # reads token ids (Gemma's per-layer embedding): not downstream of it
        if _beside(after, block, tolerance):
            continue
        if after not in enclosing:
            return after.differs(tolerance) or not after.input_agrees(tolerance)
    return True  # the last boundary (the logits, a pooling model's output)


def _beside(after: Boundary, block: str, tolerance: float) -> bool:
    """``after`` runs beside the module, in the same block, without reading its output:
    its input and output agree while a module before it in that block differs (GPT-J's
    MLP next to its attention, both on the layer's normed input: a parallel block's MLP
    says nothing of whether the attention's difference persists; the next layer does).
    Only inside a layer (a path through a numbered layer list) or a block of one: at the
    model's own level, or a stack's (Gemma 3n's ``self_decoder``: its embedding next to
    its layers), an agreeing layer is a consumer of a split otherwise (Gemma's scale)."""
    layer = any(part.isdigit() for part in block.split("."))
    inside = layer and after.path.startswith(block + ".")
    return inside and not after.differs(tolerance) and after.input_agrees(tolerance)
