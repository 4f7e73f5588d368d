"""The reference: transformers' class for the same config, float32, with random weights of
a fixed seed, and the checkpoint it writes (``save_pretrained``'s tensors), with what real
checkpoints of a family carry that transformers drops."""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare import strict

SEED = 0
# 1-D parameters (norm weights, biases) get noise of this size: transformers initialises
# biases to zero and norm weights to one, where a dropped bias or a norm's ``1 + w``
# spelled ``w`` would not show.
VECTOR_NOISE = 0.1
# tensor names that older checkpoints carry and the model's loader must skip
ROTARY_EXTRAS = ("rotary_emb.inv_freq",)


@dataclass
class Reference:
    model: nn.Module
    checkpoint: dict[str, torch.Tensor]
    extras: list[str] = field(default_factory=list)  # names added that transformers drops
    # a checkpoint name -> the name the model holds it under, for each renaming of
    # transformers' conversion that the checkpoint reverted (``_own_names``)
    renamed: dict[str, str] = field(default_factory=dict)


def reference_class(hf_config: Any, cls: type | None, by_config: bool = True) -> type | None:
    from prefixlint.introspect.dryrun.layouts import architectures_of
    from prefixlint.introspect.dryrun.layouts import reference_class as known

    found = known(architectures_of(hf_config, cls))
    if found is None and by_config and cls is not None and _out_of_tree(cls):
        # a plugin's own names: its config's class says the family (only for plugins: a
        # vLLM-only architecture of a known model type, a reward head, is another model)
        found = vllm_api.causal_lm_class_of_config(hf_config)
        if found is None and vllm_api.is_pooling_model(cls):  # an encoder has no LM class
            found = vllm_api.base_model_class_of_config(hf_config)
    return found


def _out_of_tree(cls: type) -> bool:
    return not (cls.__module__ or "").startswith("vllm.")


def out_of_tree(cls: type | None) -> bool:
    """A plugin's class (outside vLLM), whose reference its config's class may choose."""
    return cls is not None and _out_of_tree(cls)


def family_known(hf_config: Any, synthesised: bool) -> bool:
    """Whether the config's class says the model's family: a config given, or one
    synthesised from a plugin's own config class (``MyMoeConfig(Qwen2MoeConfig)`` of its
    package), never prefixlint's guess (a Llama-shaped config of transformers' class)."""
    module = type(hf_config).__module__ or ""
    return not synthesised or not module.startswith(("vllm.", "transformers."))


def build(
    ref_cls: type, hf_config: Any, attention: str = "eager", vllm_config: Any = None
) -> Reference:
    """The reference model in float32 with seeded weights, eager attention (it honours a
    soft-cap and a sliding window as written), and its checkpoint. ``vllm_config``: the
    model's build's, under which a transformers class that vLLM's Transformers backend
    decorated in place builds (``vllm_api.decorated_transformers_classes``)."""
    from prefixlint.introspect.dryrun.layouts import quiet, reference_config

    config = _own_config(ref_cls, copy.deepcopy(reference_config(hf_config)))
    for c in (config, getattr(config, "text_config", None)):
        if c is not None:
            c._attn_implementation = attention
            _unused_window(c)
            _mapped_layer_types(c, ref_cls)
    torch.manual_seed(SEED)
    given = contextlib.nullcontext() if vllm_config is None else None
    with quiet(), given or vllm_api.decorated_transformers_classes(vllm_config):
        model = ref_cls(config).float().eval()
    compiled = [n or type(model).__name__ for n, m in model.named_modules() if vllm_api.compiles(m)]
    if compiled:  # the reference is transformers' code run eagerly, never a compiled graph
        raise RuntimeError(f"`{compiled[0]}` would be torch-compiled (vLLM's decorator)")
    _randomise(model)
    saved, renamed = _checkpoint(model)
    state = _without_zero_experts(saved, config)
    extras = _extras(model, state)
    return Reference(model, state, extras, {k: v for k, v in renamed.items() if k in state})


def kv_heads_as_built(hf_config: Any, model: nn.Module | None) -> Any:
    """The config the reference is built for, with as many KV heads as heads where vLLM's
    model built every attention layer so although the config asks for fewer. That model
    never reads the KV head count (Zamba2's ``QKVParallelLinear`` takes the heads alone,
    ``zamba2.py:165``): the only checkpoints it loads have KV heads = heads (every
    published Zamba2: 32 and 32). The synthesised config shrinks them apart (16 and 8),
    and transformers' reference would write narrower ``k_proj``/``v_proj`` than any such
    checkpoint holds. A checkpoint with fewer KV heads fails that model's loader loudly
    (a shape), never silently. Unchanged otherwise (a copy where changed)."""
    attention, _ = vllm_api.attention_classes()
    layers = [] if model is None or attention is None else _attention_layers(model, attention)
    if not layers or any(getattr(a, "num_kv_heads", None) != a.num_heads for a in layers):
        return hf_config

    def fewer(config: Any) -> bool:
        heads = getattr(config, "num_attention_heads", None)
        kv_heads = getattr(config, "num_key_value_heads", None)
        return isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads < heads

    return kv_heads_raised(hf_config, fewer)


def kv_heads_raised(hf_config: Any, applies: Callable[[Any], bool]) -> Any:
    """``hf_config`` with ``num_key_value_heads`` = ``num_attention_heads`` in itself and
    its ``text_config``, where ``applies(config)`` (a copy where one changes; the config
    itself where none does)."""
    out = hf_config
    for attr in ("", "text_config"):
        inner = getattr(out, attr, None) if attr else out
        if inner is None or not applies(inner):
            continue
        if out is hf_config:
            out = copy.deepcopy(hf_config)
            inner = getattr(out, attr) if attr else out
        inner.num_key_value_heads = inner.num_attention_heads
    return out


def _attention_layers(model: nn.Module, attention: type) -> list[Any]:
    """vLLM's plain attention layers of ``model`` (a subclass included: it takes the same
    head counts)."""
    return [m for m in model.modules() if isinstance(m, attention) and hasattr(m, "num_heads")]


def _own_config(ref_cls: type, config: Any) -> Any:
    """The config as transformers' own class of the reference reads it. vLLM registers
    its own config classes for some model types (``deepseek_v32`` as DeepSeek V3's,
    ``hy_v4`` and ``deepseek_v4`` as vLLM's own), which lack fields transformers' model
    reads (``index_n_heads``, ``n_group``). A checkpoint's ``config.json`` goes to
    transformers' class: so do the same values here (``to_dict`` is what
    ``save_pretrained`` writes), its defaults filling what vLLM's class does not hold.
    A composite config holding a config of that class is the reference's already."""
    own = getattr(ref_cls, "config_class", None)
    if not isinstance(own, type) or isinstance(config, own):
        return config
    if any(isinstance(v, own) for v in vars(config).values()):
        return config
    # a strict class refuses a guess of another type that means the same (strict.py)
    return own.from_dict(strict.accepted(own, config.to_dict()))


def _unused_window(config: Any) -> None:
    """transformers makes a sliding-window mask for every model with ``layer_types``
    (Qwen2-MoE), and refuses a ``sliding_window`` of None even where no layer slides (a
    checkpoint's config always has a number): give it the context length."""
    kinds = getattr(config, "layer_types", None)
    if not isinstance(kinds, list) or "sliding_attention" in kinds:
        return
    if hasattr(config, "sliding_window") and config.sliding_window is None:
        config.sliding_window = getattr(config, "max_position_embeddings", None) or 4096


# the keys of the per-layer-type masks a transformers model makes in its forward
_MASK_MAPPING = re.compile(r"causal_mask_mapping\s*=\s*\{(.*?)\}", re.S)
_MASK_KEY = re.compile(r"[\"'](\w+)[\"']\s*:")


def _mapped_layer_types(config: Any, ref_cls: type) -> None:
    """A synthesised ``layer_types`` entry transformers' modeling and config modules never
    name, given the one layer type the reference's mask mapping has that the config does
    not use. The model's code tells ``full_attention`` apart from the rest, so synthesis
    guessed the rest's name (``sliding_attention``); LFM2-MoE's layers are
    ``full_attention`` or ``conv``, and vLLM's ``lfm2_moe.py:433`` and transformers'
    decoder layer both build every layer not ``full_attention`` as a short convolution,
    but transformers' forward looks each layer's mask up by its type (``KeyError:
    'sliding_attention'``). A type transformers names elsewhere (Zamba2's ``hybrid``) is
    its own. The copy of the config the reference is built for changes, never the model's."""
    from prefixlint.introspect.compare.guesses import module_source

    kinds = getattr(config, "layer_types", None)
    modeling = module_source(inspect.getmodule(ref_cls))
    found = _MASK_MAPPING.search(modeling)
    if not isinstance(kinds, list) or found is None:
        return
    text = modeling + module_source(inspect.getmodule(getattr(ref_cls, "config_class", None)))
    known = _MASK_KEY.findall(found.group(1))
    quoted = set(re.findall(r"[\"'](\w+)[\"']", text))
    unnamed = {k for k in kinds if isinstance(k, str) and k not in quoted}
    unused = [k for k in known if k not in kinds]
    if len(unnamed) == 1 and len(unused) == 1:
        config.layer_types = [unused[0] if k in unnamed else k for k in kinds]


def _randomise(model: nn.Module) -> None:
    """Weights whose products keep the activations' size (std 1/sqrt(fan-in)), so that a
    wrong scale, a dropped bias or a wrong norm moves the outputs by far more than float32
    rounding does."""
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in model.parameters():
            if not p.is_floating_point():
                continue
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=generator)
            else:
                p.add_(torch.randn(p.shape, generator=generator) * VECTOR_NOISE)


def _checkpoint(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """What ``save_pretrained`` writes (tied copies dropped, ignored keys dropped,
    transformers' own weight conversions reverted), and its renamed names
    (``_own_names``)."""
    from transformers import modeling_utils as mu

    state = model.state_dict()  # the tensors themselves: ties are found by identity
    for key in getattr(model, "_keys_to_ignore_on_save", None) or ():
        state.pop(key, None)
    if hasattr(mu, "remove_tied_weights_from_state_dict"):
        state = mu.remove_tied_weights_from_state_dict(state, model)
    renamed: dict[str, str] = {}
    if hasattr(mu, "revert_weight_conversion"):
        reverted = _renamed_by_layer_kind(state, mu.revert_weight_conversion(model, dict(state)))
        renamed = _own_names(state, reverted)
        state = reverted
        _conv_split_like_projections(model, state)
    return {k: v.detach().clone() for k, v in state.items()}, renamed


def _sole_names(state: dict[str, torch.Tensor]) -> dict[int, str]:
    """Each tensor's name by its identity; a tensor held under several names (a shared
    block) is no renaming of one of them and has none."""
    counts: dict[int, int] = {}
    for t in state.values():
        counts[id(t)] = counts.get(id(t), 0) + 1
    return {id(t): k for k, t in state.items() if counts[id(t)] == 1}


def _own_names(
    original: dict[str, torch.Tensor], reverted: dict[str, torch.Tensor]
) -> dict[str, str]:
    """Each name of ``reverted`` that is a renaming of a tensor ``original`` holds under
    another name (the same tensor, not a converted one) -> that other name, the model's.
    transformers loads a checkpoint under either name (its renaming finds nothing to rename
    in one that names the tensor as the model does), and real checkpoints carry either:
    OLMo-Hybrid's released ones (``allenai/Olmo-Hybrid-7B``) name a linear-attention
    layer's norms ``input_layernorm``/``post_attention_layernorm``, as the model holds
    them, while ``convert_olmo_hybrid_weights_to_hf.py`` and ``save_pretrained`` write
    ``attention_layer_norm``/``feedforward_layer_norm``."""
    names = _sole_names(original)
    return {k: names[id(t)] for k, t in reverted.items() if names.get(id(t)) not in (None, k)}


def _without_zero_experts(state: dict[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
    """LongCat's zero-computation experts (``zero_expert_num``, after the
    ``n_routed_experts`` real ones) are identities: real checkpoints hold no weights for
    them, and vLLM builds none. transformers sizes its fused ``gate_up_proj`` for them all
    the same (``modeling_longcat_flash.py``: ``total_experts`` rows, of which its forward
    reads the routed ones only), so the reverted checkpoint has ``experts.{i}.gate_proj``
    and ``up_proj`` (no ``down_proj``) for every zero expert ``i``: they are dropped."""
    zero = getattr(config, "zero_expert_num", None)
    routed = getattr(config, "n_routed_experts", None)
    if type(zero) is not int or zero <= 0 or type(routed) is not int:
        return state
    pattern = re.compile(r"\.experts\.(\d+)\.")

    def zero_expert(name: str) -> bool:
        found = pattern.search(name)
        return found is not None and int(found.group(1)) >= routed

    return {k: v for k, v in state.items() if not zero_expert(k)}


def _renamed_by_layer_kind(
    original: dict[str, torch.Tensor], reverted: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The reverted state with the renamings of a conversion kept only in the modules
    that hold every name they rename. OLMo-Hybrid's conversion renames a linear-attention
    layer's ``attention_layer_norm``/``feedforward_layer_norm`` to ``input_layernorm``/
    ``post_attention_layernorm``; reverted, it renames the attention layers'
    ``post_attention_layernorm`` too, which their checkpoints hold under that name
    (transformers' ``convert_olmo_hybrid_weights_to_hf.py``). A module holding some of a
    conversion's renamed names but not the others is another kind of layer: its names
    stay as the model holds them."""
    names = _sole_names(original)
    moves: dict[str, tuple[str, str, str, str]] = {}  # new key -> (parent, old, new, key)
    for key, tensor in reverted.items():
        old = names.get(id(tensor))
        if old is None or old == key:
            continue
        a, b = old.split("."), key.split(".")
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if at is not None and len(a) == len(b) and a[at + 1 :] == b[at + 1 :]:
            moves[key] = (".".join(a[:at]), a[at], b[at], old)
    pairs = {(m[1], m[2]) for m in moves.values()}
    by_parent: dict[str, set[tuple[str, str]]] = {}
    for parent, old, new, _ in moves.values():
        by_parent.setdefault(parent, set()).add((old, new))
    out = dict(reverted)
    for key, (parent, *_, old_key) in moves.items():
        held = by_parent[parent]
        missing = pairs - held
        absent = all(not k.startswith(f"{parent}.{a}.") for a, _ in missing for k in original)
        if missing and absent:  # another kind of layer: the model's own name
            out[old_key] = out.pop(key)
    return out


def _conv_split_like_projections(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """transformers reverts a concatenation into equal chunks (``Chunk``): OLMo-Hybrid's
    convolution over (q, k, v) comes out as three equal parts, while its checkpoints hold
    each part as wide as the projection it convolves (key, key and value widths:
    transformers' ``convert_olmo_hybrid_weights_to_hf.py`` copies OLMo-core's
    ``fla.inner.q_conv1d`` etc. as they are). Such a fused ``conv1d`` is split again at
    the widths of its module's own ``q_proj``, ``k_proj``, ``v_proj``."""
    for name, module in model.named_modules():
        conv = getattr(getattr(module, "conv1d", None), "weight", None)
        keys = [f"{name}.{p}_conv1d.weight" for p in "qkv"]
        if not isinstance(conv, torch.Tensor) or not all(k in state for k in keys):
            continue
        projections = [getattr(module, f"{p}_proj", None) for p in "qkv"]
        widths = [getattr(p, "out_features", None) for p in projections]
        if not all(isinstance(w, int) for w in widths) or sum(widths) != conv.shape[0]:
            continue
        for key, part in zip(keys, torch.split(conv.detach(), widths), strict=True):
            state[key] = part


def _extras(model: nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """Names real checkpoints carry and transformers drops, added to ``state``: a tied
    head's duplicate ``lm_head.weight`` (many hub checkpoints hold both), and per attention
    layer the ``rotary_emb.inv_freq`` buffer checkpoints saved before transformers 4.38
    hold."""
    added: list[str] = []
    head = getattr(model, "lm_head", None)
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and "lm_head.weight" not in state:
        state["lm_head.weight"] = weight.detach().clone()
        added.append("lm_head.weight")
    rotary = next((m for n, m in model.named_modules() if n.endswith("rotary_emb")), None)
    inv_freq = getattr(rotary, "inv_freq", None)
    if not isinstance(inv_freq, torch.Tensor):
        return added
    for name, _ in model.named_modules():
        if name.endswith(".self_attn") and any(k.startswith(name + ".") for k in state):
            for extra in ROTARY_EXTRAS:
                state[f"{name}.{extra}"] = inv_freq.detach().clone()
                added.append(f"{name}.{extra}")
    return added
