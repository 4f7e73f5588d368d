"""A smaller config for the comparison alone, for a synthesised config that synthesis
could not shrink: families that name their sizes otherwise than transformers' standard
names (GPT-2's ``n_embd``, ``n_head``, ``n_layer``; DBRX's ``d_model`` and its
``ffn_config``) keep their default widths, hundreds of millions of parameters.

The smaller sizes are set on the config objects in place only while the comparison
builds, loads and runs (``coverage.variants.applied`` restores every attribute, and the
model config's derived architecture is restored too), so no other stage of phase 2 ever
sees them (a shrinking in ``configs/shrink.py`` changed every stage's config: issue 38).

The relations real checkpoints keep are kept: a size equal to the hidden size stays
equal to it (DBRX's ``ffn_config.hidden_size``), a feed-forward width keeps its ratio to
the hidden size, a partial rotary dimension its fraction of the head size."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

from prefixlint.introspect import vllm_api

HIDDEN = 128
HEADS = 16  # divides HIDDEN: a head size of 8
LAYERS = 2
# feed-forward widths, scaled with the hidden size (GPT-2's ``n_inner`` None is 4x)
# (and their ``attribute_map`` aliases: LongCat's ``ffn_hidden_size``, ``expert_ffn_hidden_size``)
WIDTHS = ("ffn_hidden_size", "n_inner", "intermediate_size", "moe_intermediate_size")
WIDTHS += ("intermediate_size_mlp",)  # Llama 4's dense layers
ROTARY = ("rotary_dim",)  # a partial rotary dimension: a fraction of the head size


def _aliases(config: Any, standard: str) -> list[str]:
    """The names a config object holds a standard size under (its ``attribute_map``)."""
    names = [standard] + [
        alias
        for key, alias in (getattr(type(config), "attribute_map", None) or {}).items()
        if key == standard
    ]
    return [n for n in names if isinstance(vars(config).get(n), int)]


def overrides(model_config: Any) -> dict[str, Any]:
    """The attribute values of the smaller config; {} when nothing is known to shrink."""
    from prefixlint.introspect.coverage.variants import config_objects

    configs = config_objects(model_config)
    out = _vocabularies(configs)
    top = configs[0]
    hidden = next((vars(top)[n] for n in _aliases(top, "hidden_size")), None)
    heads = next((vars(top)[n] for n in _aliases(top, "num_attention_heads")), None)
    narrower = isinstance(hidden, int) and hidden > HIDDEN and isinstance(heads, int)
    for config in configs:
        if narrower:
            out.update(_narrower(config, hidden, heads))
        else:  # synthesis shrank the width: what it left at the class's default
            out.update(_widths_left_at_default(config))
        # a count synthesis set is kept (Gemma 3n's KV sharing counts its last layers)
        out.update(_fewer_layers(config, LAYERS if narrower else _synthesised_layers()))
        out.update(_top_k_of_the_family(config))
    return out


def _narrower(config: Any, hidden: int, heads: int) -> dict[str, Any]:
    """The hidden size, the widths and a partial rotary dimension scaled to ``HIDDEN``."""
    out: dict[str, Any] = {}
    ratio = HIDDEN / hidden
    widths = _widths(config)
    for name, value in vars(config).items():
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if value == hidden and ("hidden" in name or name in _aliases(config, "hidden_size")):
            out[name] = HIDDEN
        elif name in widths and value > 0:
            out[name] = _scaled(value, ratio)
        elif name in ROTARY and value > 0:
            out[name] = _rotary_size(value / (hidden / heads))
    for name in _aliases(config, "num_attention_heads"):
        out[name] = HEADS
    return out


def _rotary_size(fraction: float) -> int:
    """A partial rotary dimension of ``fraction`` of the smaller head, of two pairs at
    least: one pair rotates alike in every layout, so a rotation of the wrong layout
    (GPT-J's pairs of neighbours turned into NeoX's halves) would agree with the
    reference (GPT-J's 64 of 256 became 2 of 8)."""
    head = HIDDEN // HEADS
    return min(head, max(4, round(fraction * head / 2) * 2))


def _widths(config: Any) -> set[str]:
    """The feed-forward widths a config holds, under their names or their aliases
    (LongCat's ``ffn_hidden_size`` is its ``intermediate_size``)."""
    return {alias for name in WIDTHS for alias in _aliases(config, name)}


def _scaled(width: int, ratio: float) -> int:
    return max(8, round(width * ratio / 8) * 8)


def _widths_left_at_default(config: Any) -> dict[str, int]:
    """A width synthesis did not shrink (it knows ``intermediate_size``, not Llama 4's
    ``intermediate_size_mlp`` nor LongCat's ``ffn_hidden_size``) is still the class's
    default, sized for the default's hidden size: it keeps its ratio to that hidden size
    (LongCat's 12288 of 6144 -> 256 of 128), as a checkpoint's widths keep theirs."""
    default = _class_default(config)
    hidden = vars(config).get("hidden_size")
    old = getattr(default, "hidden_size", None)
    if not isinstance(hidden, int) or not isinstance(old, int) or old <= hidden:
        return {}
    out = {}
    for name in _widths(config):
        value = vars(config)[name]
        if value > 0 and value == getattr(default, name, None):
            out[name] = _scaled(value, hidden / old)
    return out


def _class_default(config: Any) -> Any:
    try:
        return type(config)()
    except Exception:  # a class that needs arguments: nothing is known of its defaults
        return None


def _synthesised_layers() -> int:
    """The layer count synthesis gives a config it shrinks (``synth_config``'s)."""
    import inspect

    from prefixlint.introspect.configs.synthesis import synth_config

    return int(inspect.signature(synth_config).parameters["num_layers"].default)


def _fewer_layers(config: Any, above: int) -> dict[str, Any]:
    """For a config of more than ``above`` layers: ``LAYERS`` layers, or the fewest first
    layers that hold every kind of layer the config has (each distinct combination of its
    per-layer lists' values): per-layer lists are cut to them, layer-index lists (Llama 4's
    ``moe_layers``) keep the indices below. A prefix keeps every relation of indices (an
    MoE layer every ``step``)."""
    names = _aliases(config, "num_hidden_layers")
    if not names and "num_hidden_layers" not in vars(config):
        names = [n for n in ("num_layers",) if type(vars(config).get(n)) is int]
    count = next((vars(config)[n] for n in names), None)
    if not isinstance(count, int) or count <= max(above, LAYERS):
        return {}
    lists = {n: v for n, v in vars(config).items() if isinstance(v, list) and v}
    indices = {n: v for n, v in lists.items() if _is_index_list(v, count)}
    per_layer = {n: v for n, v in lists.items() if len(v) == count and n not in indices}
    kinds = [tuple(repr(v[i]) for v in per_layer.values()) for i in range(count)]
    keep = max(LAYERS, max((kinds.index(k) for k in kinds), default=0) + 1)
    if keep >= count:
        return {}
    out: dict[str, Any] = dict.fromkeys(names, keep)
    out.update({n: v[:keep] for n, v in per_layer.items()})
    out.update({n: [i for i in v if i < keep] for n, v in indices.items() if "layer" in n})
    return out


def _is_index_list(value: list, count: int) -> bool:
    """Layer indices: increasing ints below the layer count ([0, 1, ..., 47] as well)."""
    ints = all(type(i) is int for i in value)
    return ints and all(a < b for a, b in itertools.pairwise(value)) and value[-1] < count


def _top_k_of_the_family(config: Any) -> dict[str, int]:
    """The experts per token of the config class's default where synthesis raised it
    (``shrink.SHRINK``'s 2 for every MoE): a family's default is its checkpoints' value
    (Llama 4's top-1, which vLLM's Llama 4 relies on: it weights the expert's input)."""
    default = _class_default(config)
    out = {}
    for name in _aliases(config, "num_experts_per_tok"):
        value, family = vars(config)[name], getattr(default, name, None)
        if type(family) is int and 0 < family < value:
            out[name] = family
    return out


def _vocabularies(configs: list[Any]) -> dict[str, int]:
    """A second vocabulary larger than the (shrunk) main one, cut to it: Gemma 3n's
    per-layer embeddings (``vocab_size_per_layer_input`` 262144 rows per layer) are a
    part of the main vocabulary in real checkpoints (262144 of 262400)."""
    out: dict[str, int] = {}
    for config in configs:
        vocab = vars(config).get("vocab_size")
        if not isinstance(vocab, int) or vocab <= 0:
            continue
        for name, value in vars(config).items():
            other = "vocab_size" in name and name != "vocab_size"
            if other and type(value) is int and value > vocab:
                out[name] = vocab
    return out


@contextlib.contextmanager
def applied(model_config: Any, values: dict[str, Any]) -> Iterator[bool]:
    """``values`` set on the config objects while the context runs, then every attribute
    restored; the model config's architecture (head counts and sizes vLLM reads) is
    derived again from them, and restored too. Yields False when a value cannot be set."""
    from prefixlint.introspect.coverage import variants

    if not values:
        yield True
        return
    with variants.applied(model_config, values) as ok, vllm_api.arch_config_derived(model_config):
        yield ok


def unread_head_size(model_config: Any, files: list[str]) -> dict[str, int]:
    """A synthesised ``head_dim`` set apart from ``hidden_size // num_attention_heads``
    where the config class's default splits its width evenly over its heads and the
    model's files never read ``head_dim``: synthesis shrank the sizes it knows apart (a
    head of 16; ``configs/shrink.py`` keeps the split for sub-configs only), while the
    model computes its head size as the quotient and transformers' class may read
    ``head_dim`` (its NomicBert does). The comparison runs with the quotient, as the
    family's checkpoints have it; {} otherwise (a family with its own head size, Gemma's
    256 of 3072 over 16 heads, keeps it: a model ignoring it is the model's bug)."""
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    config = config_objects(model_config)[0]
    sizes = [_size(config, k) for k in ("head_dim", "hidden_size", "num_attention_heads")]
    default = [_size(_default(type(config)), k) for k in ("hidden_size", "num_attention_heads")]
    head, hidden, heads = sizes
    if not all(sizes) or hidden % heads or head == hidden // heads:
        return {}
    if not all(default) or _size(_default(type(config)), "head_dim") not in (
        None,
        default[0] // default[1],
    ):
        return {}
    if any("head_dim" in file_facts(f).reads for f in files):
        return {}
    return {"head_dim": hidden // heads}


def _size(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    return value if type(value) is int and value > 0 else None


def _default(config_type: type) -> Any:
    with contextlib.suppress(Exception):
        return config_type()
    return None
