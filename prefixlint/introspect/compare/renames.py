"""The reference checkpoint's names where transformers' reverted conversion is ambiguous:
the model's loader chooses among names transformers reads as the same tensor.

transformers reverts a renaming that drops a segment by putting the segment back at the
first place its pattern matches. HY V4's conversion drops ``hc_pre`` (``\\.hc_pre\\.hc_`` ->
``.hc_``, ``conversion_mapping.py``): reverted, ``model.layers.0.hc_attn_layer.hc_fn``
becomes ``model.layers.0.hc_pre.hc_attn_layer.hc_fn``, while the checkpoints hold
``model.layers.0.hc_attn_layer.hc_pre.hc_fn`` (and ``model.hc_head.hc_head_fn``, no
``hc_pre`` at all). transformers loads every one of these names as the same tensor, so each
is a checkpoint of the reference's weights; which one real checkpoints use it cannot say.
Where the model's loader leaves parameters unset (vLLM's own loader would refuse the load),
each name transformers' conversion renames is tried with one dotted segment moved or
dropped, among those transformers reads as the same name, and a name that fills an unset
parameter replaces it. Nothing changes where the loader took every parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prefixlint.introspect import vllm_api


def equivalents(key: str, renaming: Callable[[str], str]) -> list[str]:
    """Names that differ from ``key`` by one segment moved or dropped (never the last one)
    and that ``renaming`` (transformers' loader) turns into the same name as ``key``; none
    for a name it does not rename."""
    target = renaming(key)
    if target == key:
        return []
    parts = key.split(".")
    out: list[str] = []
    for i in range(len(parts) - 1):
        rest = parts[:i] + parts[i + 1 :]
        for shape in [rest] + [[*rest[:j], parts[i], *rest[j:]] for j in range(len(rest))]:
            name = ".".join(shape)
            if name != key and name not in out and renaming(name) == target:
                out.append(name)
    return out


def placed(
    model: torch.nn.Module, reference: torch.nn.Module, state: dict[str, Any], loaded: Any
) -> tuple[dict[str, Any], Any]:
    """``state`` and the names ``model.load_weights`` loaded, with each renamed name whose
    load filled no parameter replaced by an equivalent one that fills a parameter left
    unset (``equivalents``); as given where vLLM's loader check passes, the loader returned
    no names, or transformers renames nothing. Tried names are loaded as they are tried."""
    if not isinstance(loaded, (set, frozenset)) or not vllm_api.weights_not_loaded(model, loaded):
        return state, loaded
    renaming = vllm_api.checkpoint_renaming(reference)
    if renaming is None:
        return state, loaded
    unset = {name for name, _ in model.named_parameters()} - set(loaded)
    out, took_all = dict(state), set(loaded)
    for key in list(out):
        names = equivalents(key, renaming)
        if not names or _takes(model, key, out[key]):  # the loader takes it as written
            continue
        for name in names:
            took = _takes(model, name, out[key]) & unset
            if took:
                out[name] = out.pop(key)
                took_all |= took
                unset -= took
                break
    return out, took_all


def _takes(model: torch.nn.Module, name: str, tensor: Any) -> set[str]:
    """The parameters ``model``'s loader fills from ``name`` alone (none where it raises)."""
    try:
        got = model.load_weights(iter([(name, tensor)]))
    except Exception:  # a name this loader refuses: not the one
        return set()
    return set(got) if isinstance(got, (set, frozenset)) else set()
