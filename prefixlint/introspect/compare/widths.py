"""A guessed size aligned with the size transformers builds the same tensors with, for the
comparison alone.

Synthesis gives a config the integers the model reads and the config class lacks, by
guessing (``configs/hints.py``: a ``*_dim`` becomes the head size). Where transformers'
class neither declares nor reads such an attribute, it sizes the same tensors from an
attribute of its own: vLLM's ``hy_v3.py:144`` builds HY V3's experts
``config.expert_hidden_dim`` wide (guessed 16), transformers' ``HYV3Experts``
``config.moe_intermediate_size`` wide (64). Real checkpoints carry both, equal (Hy3's
config.json: 1536 and 1536); on the synthesised config the reference checkpoint does not
fit the model and the comparison cannot load it: a gap of the guess, not the model's.

So where a tensor of the reference checkpoint and the model's parameter of that name (or
one expert's weights of a layer) differ in exactly one size, and that size of the model's
is the value of exactly one such guessed integer, the comparison runs with the guess set
to transformers' size (set only while it runs, ``coverage.variants.applied``), and says
so (``Comparison.aligned``). An attribute transformers reads or declares is never
changed: a model that sizes a tensor from the wrong declared attribute stays a failed
load. A guess several sizes would fit is left alone.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from torch import nn

from prefixlint.introspect.compare.guesses import _source, declared
from prefixlint.introspect.dryrun.divergence import block_of, vllm_name


def aligned(
    model_config: Any,
    ref_cls: type,
    files: list[str],
    sizes: tuple[nn.Module, dict[str, Any], type | None],
) -> dict[str, int]:
    """Attribute -> transformers' size, for each guessed integer the model's files read
    whose value is the model's side of a size the two builds disagree on (``sizes``: the
    model built on this config, the reference checkpoint, the model's class)."""
    model, checkpoint, cls = sizes
    guesses = unread_integers(model_config, ref_cls, files)
    if not guesses:
        return {}
    theirs: dict[int, set[int]] = collections.defaultdict(set)
    for mine, other in _differing_sizes(model, checkpoint, cls):
        theirs[mine].add(other)
    by_value = collections.Counter(guesses.values())
    out = {}
    for attr, value in guesses.items():
        found = theirs.get(value, set())
        if len(found) == 1 and by_value[value] == 1:  # one guess, one size of transformers'
            out[attr] = found.pop()
    return out


def unread_integers(model_config: Any, ref_cls: type, files: list[str]) -> dict[str, int]:
    """Attribute -> value, for each integer above 1 the model's files read that the text
    config holds and transformers' config class neither declares nor its modules name:
    on a synthesised config only a guess puts such an attribute there."""
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    config = config_objects(model_config)[0]
    read = set().union(*(file_facts(f).reads for f in files)) if files else set()
    source = _source(ref_cls)
    out = {}
    for attr in sorted(read):
        value = vars(config).get(attr)
        if type(value) is not int or value <= 1 or attr in declared(type(config)):
            continue
        if not re.search(rf"\b{re.escape(attr)}\b", source):
            out[attr] = value
    return out


def _differing_sizes(
    model: nn.Module, checkpoint: dict[str, Any], cls: type | None
) -> list[tuple[int, int]]:
    """(the model's size, transformers' size) for each pair of tensors that should hold
    the same weights and differ in exactly one size: a checkpoint tensor and the model's
    parameter of its name, and per layer block one routed expert's down projection in
    either (vLLM's fused ``w2_weight``, transformers' ``experts...down_proj``)."""
    params = dict(model.named_parameters())
    pairs = []
    experts: dict[str, tuple[int, ...]] = {}
    for name, tensor in checkpoint.items():
        shape = tuple(tensor.shape)
        param = params.get(vllm_name(cls, name))
        if param is not None and param.dim() == len(shape):
            pairs.append((tuple(param.shape), shape))
        block = block_of(name)
        routed = ".experts." in name and "shared" not in name and "down_proj" in name
        if block is not None and routed and len(shape) >= 2:
            experts.setdefault(vllm_name(cls, block), shape[-2:])
    for block, shape in experts.items():
        w2 = [p for n, p in params.items() if n.startswith(f"{block}.") and n.endswith("w2_weight")]
        if len(w2) == 1 and w2[0].dim() == 3:
            pairs.append((tuple(w2[0].shape[-2:]), shape))
    return [d for mine, other in pairs if (d := _one_size(mine, other)) is not None]


def _one_size(mine: tuple[int, ...], other: tuple[int, ...]) -> tuple[int, int] | None:
    """The one size ``mine`` has and ``other`` lacks, with the one ``other`` has instead
    (in any order: transformers stores some experts transposed); None otherwise."""
    extra = collections.Counter(mine) - collections.Counter(other)
    missing = collections.Counter(other) - collections.Counter(mine)
    if sum(extra.values()) != 1 or sum(missing.values()) != 1:
        return None
    return next(iter(extra)), next(iter(missing))
