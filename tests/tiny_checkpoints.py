"""Tiny real checkpoints written at test time: a 2-layer Llama (hidden size 64) saved with
``safetensors`` as checkpoints of each kind store it (a few hundred kilobytes).

- ``plain``: bfloat16 tensors, as ``save_pretrained`` writes them.
- ``fp8``: vLLM's ``fp8`` format (AutoFP8 and ``llm-compressor``'s fp8 export): each
  quantized linear layer's ``weight`` in float8_e4m3fn with scalar float32
  ``weight_scale`` and ``input_scale`` (static activation scheme); ``ignored_layers`` names
  the head and every ``mlp.down_proj``, which stay bfloat16.
- ``compressed``: ``compressed-tensors`` ``float-quantized`` (FP8 per-tensor weights and
  static input scales of shape [1]), ``ignore`` naming the head and every
  ``mlp.down_proj``.
- ``awq``: AutoAWQ's GEMM format (4-bit, group 32: int32 ``qweight``/``qzeros``, float16
  ``scales``), ``modules_to_not_convert`` the down projections.
- ``w4a16``: ``compressed-tensors`` ``pack-quantized`` (int32 ``weight_packed``,
  ``weight_scale`` per group of 32, ``weight_shape``), ``ignore`` the head.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LAYERS = 2


def llama_config(**overrides: Any) -> Any:
    from transformers import LlamaConfig

    sizes = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "tie_word_embeddings": False,
    }
    config = LlamaConfig(**{**sizes, **overrides})
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "bfloat16"
    return config


IGNORED = ["lm_head", *(f"model.layers.{i}.mlp.down_proj" for i in range(LAYERS))]


def quantized_layer(name: str, ignored: list[str]) -> bool:
    layer = name.removesuffix(".weight")
    return name.endswith("_proj.weight") and layer not in ignored


def write(
    folder: Path,
    kind: str = "plain",
    *,
    tie: bool = False,
    ignored: list[str] | None = None,
    quantize_head: bool = False,
    kv_scales: tuple[int, ...] = (),
    shards: int = 1,
    quantization: dict[str, Any] | None = None,
    stored_as: dict[str, str] | None = None,
) -> Path:
    """A checkpoint folder of ``kind``; ``kv_scales``: the layers that also store FP8
    KV-cache scales (``self_attn.k_scale``/``v_scale``); ``shards`` > 1: sharded behind
    ``model.safetensors.index.json``; ``quantization``: another quantization config;
    ``stored_as``: tensors (by the end of their name) stored in another torch dtype."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    config = llama_config(tie_word_embeddings=tie)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    names = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if tie:
        names.pop("lm_head.weight")
    ignored = list(IGNORED if ignored is None else ignored)
    if quantize_head:
        ignored = [i for i in ignored if i != "lm_head"]
    if kind in PACKED:
        return _write_packed(folder, kind, config, names, save_file)
    tensors: dict[str, torch.Tensor] = {}
    scalar = () if kind == "fp8" else (1,)  # how each format stores a per-tensor scale
    for name, shape in sorted(names.items()):
        quantized = kind != "plain" and (
            quantized_layer(name, ignored) or (quantize_head and name == "lm_head.weight")
        )
        if not quantized:
            tensors[name] = torch.zeros(shape, dtype=torch.bfloat16)
            continue
        layer = name.removesuffix(".weight")
        tensors[name] = torch.zeros(shape, dtype=torch.float8_e4m3fn)
        tensors[f"{layer}.weight_scale"] = torch.ones(scalar, dtype=torch.float32)
        tensors[f"{layer}.input_scale"] = torch.ones(scalar, dtype=torch.float32)
    for end, dtype in (stored_as or {}).items():
        for name in [n for n in tensors if n.endswith(end)]:
            tensors[name] = torch.zeros(tensors[name].shape, dtype=getattr(torch, dtype))
    for i in kv_scales:
        for which in ("k_scale", "v_scale"):
            tensors[f"model.layers.{i}.self_attn.{which}"] = torch.ones((), dtype=torch.float32)
    if quantization is not None:
        config.quantization_config = quantization
    elif kind == "fp8":
        config.quantization_config = {
            "quant_method": "fp8",
            "activation_scheme": "static",
            "ignored_layers": ignored,
        }
    elif kind == "compressed":
        scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
        config.quantization_config = {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {**scheme, "dynamic": False},
                    "input_activations": {**scheme, "dynamic": False},
                }
            },
            "ignore": ignored,
        }
    config.save_pretrained(folder)
    _save(folder, tensors, shards, save_file)
    return folder


GROUP = 32
PACKED = {
    "awq": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": GROUP,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": ["down_proj"],
    },
    "w4a16": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": GROUP,
                    "symmetric": True,
                    "dynamic": False,
                },
            }
        },
        "ignore": ["lm_head"],
    },
}


def _write_packed(folder: Path, kind: str, config: Any, names: dict, save_file: Any) -> Path:
    """4-bit checkpoints: eight values packed in each int32."""
    import torch

    half = torch.float16 if kind == "awq" else torch.bfloat16
    tensors = {}
    for name, shape in sorted(names.items()):
        layer = name.removesuffix(".weight")
        skipped = kind == "awq" and layer.endswith("down_proj")
        if not name.endswith("_proj.weight") or skipped:
            tensors[name] = torch.zeros(shape, dtype=half)
            continue
        out, inp = shape
        if kind == "awq":  # (in, out / 8) and per input group
            tensors[f"{layer}.qweight"] = torch.zeros((inp, out // 8), dtype=torch.int32)
            tensors[f"{layer}.qzeros"] = torch.zeros((inp // GROUP, out // 8), dtype=torch.int32)
            tensors[f"{layer}.scales"] = torch.zeros((inp // GROUP, out), dtype=half)
        else:  # (out, in / 8) and per output row
            tensors[f"{layer}.weight_packed"] = torch.zeros((out, inp // 8), dtype=torch.int32)
            tensors[f"{layer}.weight_scale"] = torch.ones((out, inp // GROUP), dtype=half)
            tensors[f"{layer}.weight_shape"] = torch.tensor([out, inp], dtype=torch.int64)
    config.quantization_config = PACKED[kind]
    config.dtype = "float16" if kind == "awq" else "bfloat16"
    config.save_pretrained(folder)
    _save(folder, tensors, 1, save_file)
    return folder


def _save(folder: Path, tensors: dict[str, Any], shards: int, save_file: Any) -> None:
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    weight_map = {}
    for part in range(shards):
        file = f"model-{part + 1:05d}-of-{shards:05d}.safetensors"
        chunk = {n: tensors[n] for n in names[part::shards]}
        save_file(chunk, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(chunk, file))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


# -- a tiny Qwen2-MoE FP8 checkpoint ------------------------------------------------------------

MOE = {"hidden": 64, "moe": 32, "shared": 64, "experts": 4, "kv": 32, "vocab": 256}


def write_moe(
    folder: Path, experts: str = "fused", *, ignore_experts: bool = True, fp8_experts: bool = False
) -> Path:
    """A 2-layer ``Qwen2MoeForCausalLM`` FP8 checkpoint (attention and shared expert in
    float8_e4m3fn with scalar scales; router, shared-expert gate and head bfloat16 and
    in ``ignored_layers``). ``experts``: how the routed experts are stored, unquantized:
    ``fused`` as transformers 5 saves them (``mlp.experts.gate_up_proj`` and
    ``mlp.experts.down_proj``, one 3-d bfloat16 tensor each, no ``.weight``), ``split``
    one ``experts.N.gate_proj.weight`` per expert; ``ignore_experts``: whether
    ``ignored_layers`` lists them (the fused layer by name, or each expert's
    projections); ``fp8_experts``: one FP8 ``weight`` with scales per expert's projection
    instead (``split``, not ignored)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2MoeConfig

    h, m, s, n, kv, v = (MOE[k] for k in ("hidden", "moe", "shared", "experts", "kv", "vocab"))
    config = Qwen2MoeConfig(
        hidden_size=h,
        intermediate_size=128,
        moe_intermediate_size=m,
        shared_expert_intermediate_size=s,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=v,
        num_experts=n,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2MoeForCausalLM"]
    config.dtype = "bfloat16"
    tensors: dict[str, Any] = {}
    ignored = ["lm_head"]

    def plain(name: str, shape: tuple[int, ...]) -> None:
        tensors[name] = torch.zeros(shape, dtype=torch.bfloat16)

    def fp8(layer: str, shape: tuple[int, ...]) -> None:
        tensors[f"{layer}.weight"] = torch.zeros(shape, dtype=torch.float8_e4m3fn)
        for scale in ("weight_scale", "input_scale"):
            tensors[f"{layer}.{scale}"] = torch.ones((), dtype=torch.float32)

    plain("model.embed_tokens.weight", (v, h))
    plain("model.norm.weight", (h,))
    plain("lm_head.weight", (v, h))
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        for proj, rows in (("q_proj", h), ("k_proj", kv), ("v_proj", kv)):
            fp8(f"{p}.self_attn.{proj}", (rows, h))
            plain(f"{p}.self_attn.{proj}.bias", (rows,))
        fp8(f"{p}.self_attn.o_proj", (h, h))
        plain(f"{p}.input_layernorm.weight", (h,))
        plain(f"{p}.post_attention_layernorm.weight", (h,))
        for gate, rows in (("gate", n), ("shared_expert_gate", 1)):
            plain(f"{p}.mlp.{gate}.weight", (rows, h))
            ignored.append(f"{p}.mlp.{gate}")
        for proj, shape in (("gate_proj", (s, h)), ("up_proj", (s, h)), ("down_proj", (h, s))):
            fp8(f"{p}.mlp.shared_expert.{proj}", shape)
        if experts == "fused":
            plain(f"{p}.mlp.experts.gate_up_proj", (n, 2 * m, h))
            plain(f"{p}.mlp.experts.down_proj", (n, h, m))
            ignored += [f"{p}.mlp.experts"] if ignore_experts else []
            continue
        for e in range(n):
            for proj, shape in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
                if fp8_experts:
                    fp8(f"{p}.mlp.experts.{e}.{proj}", shape)
                    continue
                plain(f"{p}.mlp.experts.{e}.{proj}.weight", shape)
                ignored += [f"{p}.mlp.experts.{e}.{proj}"] if ignore_experts else []
    config.quantization_config = {
        "quant_method": "fp8",
        "activation_scheme": "static",
        "ignored_layers": ignored,
    }
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    _save(folder, tensors, 1, save_file)
    return folder
