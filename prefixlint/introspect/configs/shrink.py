"""How a default config is shrunk: sizes to tiny consistent values (head counts keep
dividing 1, 2, 4 and 8), per-layer lists and layer-keyed overrides trimmed to the new
layer count, layer-index lists kept inside it, token ids inside the shrunk vocabulary,
towers a default leaves out filled with their own class's shrunk defaults."""

from __future__ import annotations

import re
from typing import Any

from prefixlint.introspect.configs.subconfigs import is_text_config

# name -> tiny value; only applied where the default config has the attribute
SHRINK: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,  # divisible by tp 1/2/4/8
    "num_key_value_heads": 8,  # some models do kv_heads // tp with no max(1, .)
    "head_dim": 16,
    "num_heads": 16,  # SSM heads (Mamba2: num_heads * head_dim == expand * hidden_size)
    "vocab_size": 512,
    "max_position_embeddings": 256,
    # MoE
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "num_experts": 8,  # >= tp
    "num_local_experts": 8,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,  # layer 0 dense, layer 1 MoE
    # MLA
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    # misc
    "sliding_window": 64,
    # encoder-decoder and audio towers (Whisper's names): their layer counts
    "encoder_layers": 2,
    "decoder_layers": 2,
}


# Defaults that are None where the model needs a number (a checkpoint always says): the
# value keeps the shrunk sizes consistent (8 KV heads divide 16 query heads). DeepSeek-V2's
# routing (top-k of None; vLLM's GPU router refuses groups of None) as V2-Lite's is.
FILL_NONE: dict[str, Any] = {
    "num_key_value_heads": 8,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
}


def _pick_layers(values: list, n: int) -> list:
    """n entries covering every distinct value (first occurrences first)."""
    seen: list = []
    for v in values:
        if v not in seen:
            seen.append(v)
    picked = list(seen)
    for v in values:
        if len(picked) >= n:
            break
        picked.append(v)
    return picked[: max(n, len(seen))]


def shrink_kwargs(default, num_layers: int = 2) -> dict[str, Any]:
    d = default.to_dict()
    kw: dict[str, Any] = {}
    for k, v in SHRINK.items():
        # a 0 is a part switched off (Glm5Next's NoPE ``qk_rope_head_dim = 0``), not a size
        if k in d and d[k] is not None and not isinstance(d[k], bool) and d[k] != 0:
            kw[k] = _like(d[k], v)
    if d.get("num_key_value_heads") == 1 and d.get("multi_query"):
        # multi-query attention: one KV head by design, and it divides any head count
        # (the query heads may keep a name SHRINK does not know, GPTBigCode's n_head)
        kw.pop("num_key_value_heads", None)
    for k, v in FILL_NONE.items():
        if k in d and d[k] is None:
            kw[k] = v
    if "num_hidden_layers" not in d and isinstance(d.get("num_layers"), int):
        kw["num_layers"] = num_layers  # families that name the layer count so (LongCat)
    old_n = d.get("num_hidden_layers")
    new_n = num_layers
    if isinstance(old_n, int):
        # per-layer lists: same length as the layer count
        for k, v in d.items():
            if isinstance(v, list) and len(v) == old_n and old_n > 1:
                kw[k] = _pick_layers(v, num_layers)
                new_n = max(new_n, len(kw[k]))
        for k, v in list(kw.items()):
            if isinstance(v, list) and k in d and len(d[k]) == old_n:
                kw[k] = (kw[k] * new_n)[:new_n] if len(kw[k]) < new_n else kw[k][:new_n]
        # layer-index lists (e.g. mlp_only_layers): keep indices that still exist
        for k, v in d.items():
            if (
                k not in kw
                and "layer" in k
                and isinstance(v, (list, tuple))
                and v
                and all(isinstance(x, int) for x in v)
                and max(v) < old_n
                and len(v) != old_n
            ):
                # none left (MoE from layer 4 on): the last layer keeps the kind built
                kw[k] = [x for x in v if x < new_n] or [new_n - 1]
        for k, v in d.items():
            if k not in kw and layer_keyed(v, old_n):
                kw[k] = remap_layer_keyed(v, d, kw, new_n)
        kw["num_hidden_layers"] = new_n
    # nested sub-configs (text_config, vision_config, ...)
    for k, v in d.items():
        if not isinstance(v, dict):
            continue
        try:
            sub = getattr(default, k, None)
        except Exception:  # e.g. a per-layer attribute read globally
            continue
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
            kw[k] = {**v, **shrink_kwargs(sub, num_layers)}
            if not is_text_config(k):  # a language model's is shrunk as a text config
                kw[k] = _keep_head_split(v, kw[k])
    _fill_sub_configs(default, d, kw, num_layers)
    _clamp_token_ids(d, kw)
    _scale_layer_counts(d, kw)
    return kw


def _keep_head_split(default: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """A sub-config (a vision tower, an adapter) whose default splits its width evenly
    over its heads (``head_dim == hidden_size // num_attention_heads``: Molmo 2's adapter,
    which vLLM's layer asserts) keeps that split when shrunk, as encoder stand-ins have it
    (``subconfigs.ENCODER_DEFAULTS``)."""
    sizes = [default.get(k) for k in ("head_dim", "hidden_size", "num_attention_heads")]
    new = [kw.get(k) for k in ("head_dim", "hidden_size", "num_attention_heads")]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sizes + new):
        return kw
    head_dim, hidden, heads = sizes
    if head_dim * heads == hidden and new[0] * new[2] != new[1] and new[1] % new[2] == 0:
        kw = {**kw, "head_dim": new[1] // new[2]}
    return kw


_LAYER_COUNT = re.compile(r"^num_\w+_layers$")


def _scale_layer_counts(d: dict[str, Any], kw: dict[str, Any]) -> None:
    """Counts of some kind of layer among the decoder layers (Gemma 3n's
    ``num_kv_shared_layers``: 15 of 35) keep their share of the shrunk layer count, at least
    one and fewer than all: the default count would exceed the shrunk total, leaving none
    of the other kind (and transformers' reference refuses such a config)."""
    old_n, new_n = d.get("num_hidden_layers"), kw.get("num_hidden_layers")
    if not (isinstance(old_n, int) and isinstance(new_n, int) and new_n < old_n):
        return
    for k, v in d.items():
        if (
            _LAYER_COUNT.match(k)
            and k not in kw
            and k != "num_hidden_layers"
            and isinstance(v, int)
            and not isinstance(v, bool)
            and 0 < v < old_n
        ):
            kw[k] = min(max(1, round(v * new_n / old_n)), new_n - 1)


def _like(default: Any, value: Any) -> Any:
    """``value`` in the shape of the default: a size some configs type as one entry per
    group (Ernie 4.5 VL's ``moe_intermediate_size = [text, vision]``, a strict dataclass
    field) stays a list, each entry shrunk."""
    if not isinstance(default, (list, tuple)) or isinstance(value, (list, tuple)):
        return value
    if default and all(isinstance(x, int) and not isinstance(x, bool) for x in default):
        return [value] * len(default)
    return value


def _fill_sub_configs(default: Any, d: dict[str, Any], kw: dict[str, Any], n: int) -> None:
    """A composite config whose default leaves a tower out (``vision_config=None``: a
    text-only checkpoint) gets that tower's own config class, default-constructed and
    shrunk: real multimodal checkpoints carry it, and its layers get built and checked.
    ``_variants`` keeps the config without it as a fallback."""
    for k, sub_cls in (getattr(type(default), "sub_configs", None) or {}).items():
        if k in kw or k not in d or d[k] is not None or not isinstance(sub_cls, type):
            continue
        try:
            sub = sub_cls()
            kw[k] = {**sub.to_dict(), **shrink_kwargs(sub, n)}
        except Exception:
            continue  # AutoConfig and classes that need arguments: left out


def _layer_index(key: Any) -> int | None:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)  # JSON keys ("05"): ``to_dict`` writes layer indices as text
    return None


def layer_keyed(value: Any, n: int) -> bool:
    """A dict keyed by layer indices below ``n`` whose entries are per-layer overrides
    (``per_layer_config = {5: {"head_dim": 512}}``; not ``id2label = {0: "LABEL_0"}``)."""
    if not isinstance(value, dict) or not value:
        return False
    if not all(isinstance(v, dict) for v in value.values()):
        return False
    indices = [_layer_index(k) for k in value]
    return all(i is not None and 0 <= i < n for i in indices)


def remap_layer_keyed(
    value: dict, d: dict[str, Any], kw: dict[str, Any], new_n: int
) -> dict[int, Any]:
    """Per-layer overrides for the trimmed layers: new layer ``j`` takes the entry of the
    first old layer of the same kind (the per-layer lists that were trimmed say the kind);
    with no such list, the indices that still exist keep theirs."""
    by_index = {_layer_index(k): v for k, v in value.items()}
    kinds = [k for k, v in kw.items() if isinstance(v, list) and isinstance(d.get(k), list)]
    kinds = [k for k in kinds if len(d[k]) > max(by_index) and len(kw[k]) >= new_n]
    if not kinds:
        return {i: v for i, v in by_index.items() if i < new_n}

    def kind(lists: list[list], i: int) -> tuple:
        return tuple(repr(values[i]) for values in lists)

    old = [d[k] for k in kinds]
    new = [kw[k] for k in kinds]
    out: dict[int, Any] = {}
    for j in range(new_n):
        for i in sorted(by_index):
            if kind(old, i) == kind(new, j):
                out[j] = by_index[i]
                break
    return out


def drop_layer_keyed(default: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
    """``kw`` without its per-layer override dicts, at the top and in nested configs:
    configs that derive them from the trimmed ``layer_types`` (Gemma 4's
    ``per_layer_config`` for its full-attention layers) then stay self-consistent.
    None when ``kw`` has none."""
    d = default.to_dict()
    out: dict[str, Any] = {}
    dropped = False
    for k, v in kw.items():
        n = v.get("num_hidden_layers") if isinstance(v, dict) else None
        sub = d.get(k)
        if isinstance(v, dict) and isinstance(n, int) and isinstance(sub, dict):
            old_n = sub.get("num_hidden_layers")
            keys = [x for x, y in v.items() if isinstance(old_n, int) and layer_keyed(y, old_n)]
            v = {x: y for x, y in v.items() if x not in keys}
            dropped = dropped or bool(keys)
        elif isinstance(d.get("num_hidden_layers"), int) and layer_keyed(
            d.get(k), d["num_hidden_layers"]
        ):
            dropped = True
            continue
        out[k] = v
    return out if dropped else None


_TOKEN_KEY = re.compile(r"(_token_id|_token_ids|_token_index|_tokens|_token)$")


def _clamp_token_ids(d: dict[str, Any], kw: dict[str, Any]) -> None:
    """Token ids (``pad_token_id``, ``image_token_index``, ``suppress_tokens``) of the full
    vocabulary fall outside the shrunk one (an embedding's ``padding_idx`` must be below
    its size): each is taken modulo the new size, so distinct ids mostly stay distinct.
    A composite config's ids index its text model's vocabulary."""
    vocab = kw.get("vocab_size")
    text = kw.get("text_config")
    if not isinstance(vocab, int) and isinstance(text, dict):
        vocab = text.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= 0:
        return

    def fit(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v >= vocab:
            return v % vocab
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            return list(dict.fromkeys(fit(x) for x in v))
        return v

    for k, v in d.items():
        if _TOKEN_KEY.search(k) and k not in kw and fit(v) != v:
            kw[k] = fit(v)


def index_list_keys(default, kw: dict[str, Any]) -> list[str]:
    """Keys of ``kw`` that hold layer indices (``mlp_only_layers``, ``hybrid_layer_ids``)."""
    d = default.to_dict()
    n = d.get("num_hidden_layers")
    return [
        k
        for k, v in kw.items()
        if isinstance(v, list)
        and "layer" in k
        and isinstance(d.get(k), list)
        and isinstance(n, int)
        and len(d[k]) != n
        and all(isinstance(x, int) for x in d[k])
    ]
