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
from collections.abc import Iterator
from typing import Any

from prefixlint.introspect import vllm_api

HIDDEN = 128
HEADS = 16  # divides HIDDEN: a head size of 8
LAYERS = 2
# feed-forward widths, scaled with the hidden size (GPT-2's ``n_inner`` None is 4x)
WIDTHS = ("ffn_hidden_size", "n_inner", "intermediate_size", "moe_intermediate_size")
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
    if not isinstance(hidden, int) or hidden <= HIDDEN or not isinstance(heads, int):
        return out
    ratio = HIDDEN / hidden
    for config in configs:
        for name, value in vars(config).items():
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            if value == hidden and ("hidden" in name or name in _aliases(config, "hidden_size")):
                out[name] = HIDDEN
            elif name in WIDTHS and value > 0:
                out[name] = max(8, round(value * ratio / 8) * 8)
            elif name in ROTARY and value > 0:
                fraction = value / (hidden / heads)
                out[name] = max(2, round(fraction * HIDDEN / HEADS / 2) * 2)
        for name in _aliases(config, "num_attention_heads"):
            out[name] = HEADS
        for name in _aliases(config, "num_hidden_layers"):
            if vars(config)[name] > LAYERS:
                out[name] = LAYERS
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
