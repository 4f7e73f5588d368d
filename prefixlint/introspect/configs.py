"""Where an architecture's config comes from: a given file, pyproject, or synthesis.

Synthesis: architecture -> model type (vLLM's own table first, then transformers' auto
mappings) -> config class (vLLM's ``transformers_utils.configs`` first, then transformers'
``CONFIG_MAPPING``); default-construct it, shrink sizes consistently (head counts keep
dividing 1, 2, 4 and 8), trim per-layer lists such as ``layer_types`` to the new layer
count, and construct again with the overrides so that the config's own validation sees
consistent values. No network: nothing is fetched from the hub.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# name -> tiny value; only applied where the default config has the attribute
SHRINK: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,  # divisible by tp 1/2/4/8
    "num_key_value_heads": 8,  # some models do kv_heads // tp with no max(1, .)
    "head_dim": 16,
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
}
LAYER_COUNT_KEYS = ("num_hidden_layers",)


def arch_to_model_types(arch: str) -> list[str]:
    from transformers.models.auto import modeling_auto
    from vllm.transformers_utils.config import _ARCHITECTURE_TO_MODEL_TYPE

    out: list[str] = []
    if arch in _ARCHITECTURE_TO_MODEL_TYPE:
        out.append(_ARCHITECTURE_TO_MODEL_TYPE[arch])
    for name in dir(modeling_auto):
        if not name.endswith("_MAPPING_NAMES"):
            continue
        for mt, cls in getattr(modeling_auto, name).items():
            matches = arch == cls or (isinstance(cls, (tuple, list)) and arch in cls)
            if matches and mt not in out:
                out.append(mt)
    return out


def config_class(model_type: str):
    from transformers import CONFIG_MAPPING
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    if model_type in _CONFIG_REGISTRY:
        return _CONFIG_REGISTRY[model_type]
    return CONFIG_MAPPING[model_type]


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
        if k in d and d[k] is not None and not isinstance(d[k], bool):
            kw[k] = v
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
                and isinstance(v, list)
                and v
                and all(isinstance(x, int) for x in v)
                and max(v) < old_n
                and len(v) != old_n
            ):
                kw[k] = [x for x in v if x < new_n]
        kw["num_hidden_layers"] = new_n
    # nested sub-configs (text_config, vision_config, ...)
    for k, v in d.items():
        sub = getattr(default, k, None)
        if isinstance(v, dict) and hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
            kw[k] = {**v, **shrink_kwargs(sub, num_layers)}
    # consistency: num_key_value_heads must divide num_attention_heads
    return kw


class ConfigGap(LookupError):
    """No config could be found or synthesised for an architecture."""


def synth_config(arch: str, num_layers: int = 4):
    errors = []
    for mt in arch_to_model_types(arch) or []:
        try:
            cls = config_class(mt)
            default = cls()
            kw = shrink_kwargs(default, num_layers)
            cfg = cls(**kw)
            cfg.architectures = [arch]
            return cfg
        except Exception as e:
            errors.append(f"{mt}: {type(e).__name__}: {e}")
    if not errors:
        raise ConfigGap(f"no model type is known for {arch} (remote code?)")
    raise ConfigGap(f"cannot synthesise a config for {arch}: {'; '.join(errors)[:300]}")


@dataclass
class ConfigSource:
    folder: str  # holds config.json
    source: str  # "file <path>", "pyproject <path>", "synthesised (<model type>)"


def resolve_config(
    arch: str,
    explicit: str | None = None,
    table: dict[str, str] | None = None,
    table_base: Path | None = None,
    architecture_name: str | None = None,
    num_layers: int = 4,
) -> ConfigSource:
    """``--config`` first, then ``[tool.prefixlint.configs]``, then synthesis. The
    config's ``architectures`` is set to ``architecture_name`` (the registered name)."""
    import json

    name = architecture_name or arch
    path: Path | None = None
    origin = ""
    if explicit:
        path, origin = Path(explicit), f"file {explicit}"
    elif table and arch in table:
        path = Path(table[arch])
        if table_base is not None and not path.is_absolute():
            path = table_base / path
        origin = f"pyproject {path}"
    folder = tempfile.mkdtemp(prefix="prefixlint-config-")
    if path is not None:
        config_file = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigGap(f"cannot read config {config_file}: {e}") from None
        data["architectures"] = [name]
        Path(folder, "config.json").write_text(json.dumps(data), encoding="utf-8")
        return ConfigSource(folder, origin)
    try:
        cfg = synth_config(arch, num_layers=num_layers)
        origin = f"synthesised ({cfg.model_type})"
    except ConfigGap as gap:
        if "no model type" not in str(gap):
            raise
        # A remote-code architecture (no config class in transformers or vLLM): most read
        # Llama's attribute names, so a small Llama config is the best guess.
        cfg = llama_shaped(num_layers)
        origin = "synthesised (llama-shaped: remote-code architecture)"
    cfg.architectures = [name]
    cfg.save_pretrained(folder)
    return ConfigSource(folder, origin)


def llama_shaped(num_layers: int = 4):
    from transformers import LlamaConfig

    default = LlamaConfig()
    return LlamaConfig(**shrink_kwargs(default, num_layers))


_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def guess_attribute(name: str, config: Any) -> Any:
    """A plausible value for an attribute a model reads but the synthesised config lacks
    (real checkpoints' config.json carry it). None: no guess."""
    n = name.lower()
    hidden = getattr(config, "hidden_size", 128) or 128
    if n == "layer_types":
        return ["full_attention"] * int(getattr(config, "num_hidden_layers", 4) or 4)
    table: list[tuple[tuple[str, ...], Any]] = [
        (("dropout",), 0.0),
        (("padded_vocab_size",), getattr(config, "vocab_size", 512)),
        (("num_experts_per_tok", "top_k", "topk", "moe_k"), 2),
        (("experts",), 4),
        (("first_k_dense", "n_group", "topk_group", "group"), 1),
        (("rope_theta", "rope_base"), 10000.0),
        (("max_position_embedding",), 256),
        (("intermediate",), 256),
        (("head_dim", "rotary_dim", "block_dim", "rank", "_dim"), 16),
        (("dim_model_base", "hidden"), hidden),
        (("scale", "scalar", "multiplier", "factor", "logit"), 1.0),
        (("activation", "hidden_act", "act_fn"), "silu"),
        (("score_func", "scoring_func"), "softmax"),
        (("use_", "is_", "_bias", "enable", "norm_topk"), False),
        (("num_",), 2),
        (("eps",), 1e-6),
    ]
    for words, value in table:
        if any(w in n for w in words):
            return value
    return None


def repair(error: BaseException, configs: list[Any]) -> str | None:
    """Give the config the attribute ``error`` says it lacks; returns its name."""
    if not isinstance(error, AttributeError):
        return None
    m = _MISSING.search(str(error))
    if m is None:
        return None
    cls_name, attr = m.groups()
    for config in configs:
        if type(config).__name__ == cls_name and not hasattr(config, attr):
            value = guess_attribute(attr, config)
            if value is None:
                return None
            setattr(config, attr, value)
            return attr
    return None
