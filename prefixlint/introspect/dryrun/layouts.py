"""The reference checkpoint: which tensors a checkpoint of the config holds.

The reference ``transformers`` class of the same config, built on meta, says it: its
``state_dict`` as ``save_pretrained`` writes it (tied copies dropped, transformers' own
weight conversions reverted), and the other layouts the hub holds for it (renamings of
sub-models reverted or not, transposes transformers forces on load)."""

from __future__ import annotations

import contextlib
import copy
import functools
import re
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.finding import describe_error


class NotVerified(Exception):
    """The dry-run cannot answer; the message says why (a PFX600 note)."""


# -- the reference checkpoint ---------------------------------------------------------------


Reference = dict[str, tuple[tuple[int, ...], torch.dtype]]


# Renamings of up to 4 (sub-)models are reverted in every combination (15 layouts at most).
MAX_SCOPES = 4


def reference_class(archs: list[str]) -> type | None:
    """transformers' class of the first name it knows, matched exactly, then ignoring case
    (vLLM's ``PhiMoEForCausalLM`` is transformers' ``PhimoeForCausalLM``)."""
    import transformers

    for a in archs:
        if hasattr(transformers, a):
            return getattr(transformers, a)
    known = exported_names()
    for a in archs:
        name = known.get(a.lower())
        if name is not None and isinstance(getattr(transformers, name, None), type):
            return getattr(transformers, name)
    return None


@functools.cache
def exported_names() -> dict[str, str]:
    """transformers' capitalised names by their lower case: its lazy module lists them in
    ~0.2 s, once per process (they are fixed by the installed release)."""
    import transformers

    return {n.lower(): n for n in dir(transformers) if n[:1].isupper()}


def reference_config(hf_config: Any) -> Any:
    """A copy of the config the reference class accepts: a ``pad_token_id`` beyond a shrunk
    vocabulary is clamped into it (it names a row, no size; vLLM never reads it)."""

    def beyond(config: Any) -> bool:
        vocab = getattr(config, "vocab_size", None)
        pad = getattr(config, "pad_token_id", None)
        return isinstance(vocab, int) and isinstance(pad, int) and not 0 <= pad < vocab

    if not any(beyond(c) for c in (hf_config, getattr(hf_config, "text_config", None))):
        return hf_config  # nothing to clamp: the config itself, no copy
    out = copy.deepcopy(hf_config)
    for config in (out, getattr(out, "text_config", None)):
        if beyond(config):
            config.pad_token_id = config.vocab_size - 1
    return out


def architectures_of(hf_config: Any, cls: type | None) -> list[str]:
    """The config's architecture names (without phase 2's ``__prefixlint`` suffix), then
    the vLLM class's own name: an out-of-tree copy of a known class."""
    archs = [
        a.removesuffix("__prefixlint")
        for a in (getattr(hf_config, "architectures", None) or [])
        if isinstance(a, str)
    ]
    if cls is not None and cls.__name__ not in archs:
        archs.append(cls.__name__)
    return archs


def reference(hf_config: Any, cls: type | None = None) -> tuple[list[Reference], nn.Module]:
    """The checkpoint layouts (name -> (shape, dtype)) of the transformers class of the
    architecture (the config's, or the vLLM class's own name: an out-of-tree copy of a
    known class), the original layout first, and the reference model built on meta."""
    archs = architectures_of(hf_config, cls)
    ref_cls = reference_class(archs)
    if ref_cls is None:
        raise NotVerified(
            f"transformers has no reference class for {', '.join(archs) or 'this config'} "
            "(remote code or a vLLM-only architecture): no checkpoint layout to compare with"
        )
    try:
        with torch.device("meta"), quiet():
            ref = ref_cls(reference_config(hf_config))
        state = ref.state_dict()
        from transformers import modeling_utils as mu

        for key in getattr(ref, "_keys_to_ignore_on_save", None) or ():
            state.pop(key, None)
        if hasattr(mu, "remove_tied_weights_from_state_dict"):
            state = mu.remove_tied_weights_from_state_dict(state, ref)
        native = dict(state)
        variants = _revert_variants(ref, native)
        original = _forced_transposes(ref, native)
        if hasattr(mu, "revert_weight_conversion"):
            state = mu.revert_weight_conversion(ref, state)
    except Exception as e:
        raise NotVerified(
            f"the reference `{ref_cls.__name__}` cannot be built on meta for this config: "
            f"{describe_error(e)}"
        ) from None
    # save_pretrained writes the original (reverted) layout; checkpoints saved without
    # reverting, in transformers' own layout, exist too: either is a valid checkpoint.
    # A layout differs from another by its names or by a shape (a transposed tensor).
    layouts = [{k: (tuple(v.shape), v.dtype) for k, v in state.items()}]
    for other in (original, native, *variants):
        shaped = {k: (tuple(v.shape), v.dtype) for k, v in (other or {}).items()}
        if shaped and all(shaped != layout for layout in layouts):
            layouts.append(shaped)
    return layouts, ref


def _forced_transposes(ref: nn.Module, native: dict[str, Any]) -> dict[str, Any] | None:
    """The original layout of tensors that transformers transposes on load only when their
    shape is not the parameter's (``Transpose(check_dims=True)``). Reverted on save, the op
    sees the parameter's own shape and keeps it, so ``save_pretrained`` writes transformers'
    layout and never the one the converter exists for (Qwen3-VL-MoE's fused experts are
    (E, H, 2I) on the hub, (E, 2I, H) in transformers). Both load in transformers; this is
    the second. None where no converter has such an op (or before transformers 5)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            PrefixChange,
            Transpose,
            WeightConverter,
            revert_weight_conversion,
        )

        # what revert_weight_conversion uses for a model not loaded with from_pretrained
        conversions = [
            c
            for c in get_model_conversion_mapping(ref, add_legacy=False)
            if not isinstance(c, PrefixChange)
        ]
    except Exception:
        return None

    def checked(op: Any) -> bool:
        return isinstance(op, Transpose) and bool(getattr(op, "check_dims", False))

    forced = []
    for c in conversions:
        if isinstance(c, WeightConverter) and any(checked(op) for op in c.operations):
            c = copy.copy(c)
            c.operations = [
                Transpose(op.dim0, op.dim1) if checked(op) else op for op in c.operations
            ]
        forced.append(c)
    if all(a is b for a, b in zip(forced, conversions, strict=True)):
        return None
    ref._weight_conversions = forced
    try:
        return revert_weight_conversion(ref, dict(native))
    except Exception:
        return None
    finally:
        del ref._weight_conversions


def _revert_variants(ref: nn.Module, native: dict[str, Any]) -> list[dict[str, Any]]:
    """Other original layouts of the same checkpoint. transformers reverts the renamings of
    the model and of each sub-model all together, and drops prefix changes for a model it
    did not load; for composite models that is not always what the hub holds (a
    sub-model's renaming applied on top of the parent's gives ``language_model.model.model.``;
    PaliGemma's ``vision_tower.vision_model.`` prefix is dropped). So the renamings of each
    subset of the (sub-)models are reverted, and a result is kept when transformers' own
    loading maps every one of its names back onto the model: a layout transformers loads
    is a checkpoint layout. Empty where this transformers has no such API (before 5)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            rename_source_key,
            revert_weight_conversion,
        )

        scopes = list(
            dict.fromkeys(
                getattr(c, "scope_prefix", None)
                for c in get_model_conversion_mapping(ref, add_legacy=False)
                if not isinstance(c, WeightConverter)
            )
        )
    except Exception:
        return []
    if not scopes or len(scopes) > MAX_SCOPES:
        return []
    out = []
    for mask in range(1, 1 << len(scopes)):
        kept = {scope for bit, scope in enumerate(scopes) if mask >> bit & 1}
        try:
            ref._weight_conversions = [
                c
                for c in get_model_conversion_mapping(ref, add_legacy=False)
                if isinstance(c, WeightConverter) or getattr(c, "scope_prefix", None) in kept
            ]
            try:
                state = revert_weight_conversion(ref, dict(native))
            finally:
                del ref._weight_conversions
            forward = get_model_conversion_mapping(ref, add_legacy=False)
            renamings = [c for c in forward if not isinstance(c, WeightConverter)]
            converters = [c for c in forward if isinstance(c, WeightConverter)]
            loads = all(
                rename_source_key(name, renamings, converters)[0] in native for name in state
            )
        except Exception:
            continue
        if loads:
            out.append(state)
    return out[::-1]  # the most renamings reverted first


@contextlib.contextmanager
def quiet() -> Any:
    import logging
    import warnings

    log = logging.getLogger("transformers")
    level = log.level
    log.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            log.setLevel(level)


_EXPERT = re.compile(r"^(?P<owner>.*\.experts\.)(?P<index>\d+)\.(?P<rest>.+)$")


def incomplete_experts(layout: Reference) -> tuple[set[str], str]:
    """Per-expert tensors of experts that lack a tensor every other expert of the same
    block has, and why. An expert without, say, its down projection computes nothing, so
    no checkpoint holds one: such rows are an allocation of the reference class
    (transformers' Longcat-Flash sizes ``gate_up_proj`` for its routed *and* its weightless
    identity experts, ``down_proj`` for the routed ones only). They are not streamed; a
    loader that misses whole experts is still judged (every expert is complete there)."""
    kinds: dict[str, dict[str, set[int]]] = {}
    for name in layout:
        m = _EXPERT.match(name)
        if m:
            kinds.setdefault(m["owner"], {}).setdefault(m["rest"], set()).add(int(m["index"]))
    dropped: set[str] = set()
    why = ""
    for owner, by_kind in kinds.items():
        complete = set.intersection(*by_kind.values())
        partial = set.union(*by_kind.values()) - complete
        if not partial:
            continue
        for name in layout:
            m = _EXPERT.match(name)
            if m and m["owner"] == owner and int(m["index"]) in partial:
                dropped.add(name)
        if not why:
            counts = ", ".join(f"`{k}` {len(v)}" for k, v in sorted(by_kind.items()))
            why = (
                f"the reference class holds experts of `{normal(owner.rstrip('.'))}` that "
                f"lack tensors the others have ({counts}): {len(partial)} incomplete "
                "experts, which no checkpoint holds, are not streamed"
            )
    return dropped, why


# -- transformers and vLLM reading a synthesised config differently -------------------------


def normal(name: str) -> str:
    """Layer numbers left out, also where a name ends inside a message (before a backtick)."""
    return re.sub(r"\.\d+(?=[.`]|$)", ".N", name)
