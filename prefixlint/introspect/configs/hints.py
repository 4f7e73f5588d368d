"""Guessed values: what a synthesised config lacks and a checkpoint's config.json
carries, guessed from how the model's code uses the attribute (a literal default, a
per-layer list, a step, a flag, a value it is compared with) and then from its name.
Every repair that has to make a value up asks ``guess_attribute``."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.finding import in_models_folder

LITERAL = r"""("[^"\n]*"|'[^'\n]*'|-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False)"""


# Reads of the model's (HF) config, not of vLLM's cache/quant/parallel configs.
CONFIG_READ = re.compile(
    r"(?<![\w.])(?:self\.)?(?:config|hf_config|text_config|hf_text_config)\.(\w+)\b"
)


# A value compared with a per-layer entry, and the other kinds seen beside it in families
# that mix layer kinds: a synthesised per-layer list covers both, so both code paths build.
_COMPLEMENT = {
    "sparse": "dense",
    "dense": "sparse",
    "moe": "dense",
    "full_attention": "sliding_attention",
    "sliding_attention": "full_attention",
    "linear_attention": "full_attention",
    "attention": "mamba",
    "mamba": "attention",
}


@dataclass
class CodeHints:
    """What the model's code says about one config attribute."""

    default: Any = None  # a literal ``getattr(config, name, default)`` (not None)
    compared: list[Any] = field(default_factory=list)  # literals it is compared with
    per_layer: bool = False  # indexed by a layer index
    iterated: bool = False  # set(...)/len(...)/for ... in: a list
    modulo: bool = False  # ``x % config.name``: a positive step
    truth: bool = False  # ``if config.name:`` / ``not config.name``: a flag
    layer_bound: bool = False  # ``layer_idx < config.name``: the first layers differ
    width: bool = False  # passed as a layer's ``dim=``/``hidden_size=``: the model's width


def code_hints(name: str, texts: list[str]) -> CodeHints:
    """Read how ``name`` is used in source ``texts`` (the model's own files first)."""
    import ast

    hints = CodeHints()
    attr = re.escape(name)
    ref = rf"(?<![\w\"'])(?:[\w.]+\.)?{attr}\b"
    for text in texts:
        if name not in text:
            continue
        if hints.default is None:
            m = re.search(
                rf"getattr\(\s*[\w.\[\]]+\s*,\s*[\"']{attr}[\"']\s*,\s*{LITERAL}\s*\)", text
            )
            if m:
                hints.default = ast.literal_eval(m.group(1))
        if hints.default is None:
            hints.default = _field_default(name, text)
        for m in re.finditer(rf"{ref}(?:\[[^\]\n]*\])?\s*(?:==|!=)\s*{LITERAL}", text):
            value = ast.literal_eval(m.group(1))
            if value not in hints.compared:
                hints.compared.append(value)
        for m in re.finditer(rf"{LITERAL}\s*(?:==|!=|in)\s*{ref}", text):
            value = ast.literal_eval(m.group(1))
            if value not in hints.compared:
                hints.compared.append(value)
        for value in _match_cases(ref, text):  # ``match kind: case "rope": ...``
            if value not in hints.compared:
                hints.compared.append(value)
        if re.search(rf"{ref}\s*\[\s*[\w.]*(?:layer|idx|index|\bi\b)[\w.]*\s*\]", text):
            hints.per_layer = True
        if re.search(
            rf"(?:set|list|sorted|len|enumerate|min|max|tuple)\(\s*{ref}\s*\)|\bin\s+{ref}\s*:",
            text,
        ):
            hints.iterated = True
        if re.search(rf"%\s*{ref}", text):
            hints.modulo = True
        if re.search(rf"\w*(?:layer|idx)\w*\s*(?:<|>=)\s*{ref}", text):
            hints.layer_bound = True
        if re.search(
            rf"(?:\bnot\s+|\bif\s+){ref}\s*(?::|\)|,|$|\band\b|\bor\b|\belse\b)", text, re.M
        ):
            hints.truth = True
        if re.search(rf"\b(?:dim|hidden_size|embed_dim|d_model)\s*=\s*{ref}\s*[,)]", text):
            hints.width = True
    return hints


def _match_cases(ref: str, text: str) -> list[Any]:
    """The literal ``case`` patterns of ``match`` statements on a value read as ``ref``
    (directly, or through a local it is assigned to, indexed or not): the values the
    code dispatches on (DomynEdge's ``position_layers[i]``: "rope" or "nope")."""
    import ast

    subjects = [ref]
    for m in re.finditer(rf"^\s*(\w+)\s*=\s*{ref}(?:\[[^\]\n]*\])?\s*$", text, re.M):
        subjects.append(re.escape(m.group(1)))
    out: list[Any] = []
    for subject in subjects:
        for m in re.finditer(rf"^([ \t]*)match\s+{subject}(?:\[[^\]\n]*\])?\s*:", text, re.M):
            for line in text[m.end() :].splitlines()[1:40]:
                if line.strip() and len(line) - len(line.lstrip()) <= len(m.group(1)):
                    break  # the match statement ended
                case = re.match(rf"\s*case\s+{LITERAL}\s*(?:\|[^:]*)?:", line)
                if case is not None:
                    value = ast.literal_eval(case.group(1))
                    if value not in out:
                        out.append(value)
    return out


def _field_default(name: str, text: str) -> Any:
    """The default of a dataclass field ``name: T = <literal>`` in the model's own code
    (Molmo 2's ``vit_layers: tuple[int, int] = (-3, -9)``): what the model takes when a
    checkpoint says nothing; None when there is no literal one."""
    import ast

    m = re.search(rf"^[ \t]+{re.escape(name)}\s*:[^=\n]+=\s*(.+?)\s*(?:#.*)?$", text, re.M)
    if m is None or m.group(1).endswith(","):
        return None  # a function's parameter (``embed_dim: int = 1280,``), not a field
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return list(value) if isinstance(value, tuple) else value


def field_default_none(name: str, texts: Any) -> bool:
    """The model's own dataclass declares ``name: T | None = None``: it copies every
    field from the config (``getattr(hf_config, field.name)``), and None is its value
    when a checkpoint leaves the field out."""
    pattern = re.compile(rf"^[ \t]+{re.escape(name)}\s*:[^=\n]+=\s*None\s*(?:#.*)?$", re.M)
    return any(pattern.search(t) for t in texts or [])


_VLLM_TEXTS: list[str] | None = None


def _vllm_texts() -> list[str]:
    """vLLM's layer and model sources, read once: where a value's meaning is spelled out
    (``zero_expert_type == "identity"`` is in the fused-MoE layer, not the model)."""
    global _VLLM_TEXTS
    if _VLLM_TEXTS is None:
        try:
            import vllm

            root = Path(vllm.__file__).parent
            files = [*root.glob("model_executor/**/*.py"), *root.glob("models/**/*.py")]
            _VLLM_TEXTS = [f.read_text(encoding="utf-8", errors="replace") for f in files]
        except Exception:
            _VLLM_TEXTS = []
    return _VLLM_TEXTS


def num_layers_of(config: Any) -> int:
    n = getattr(config, "num_hidden_layers", None)
    return n if isinstance(n, int) and n > 0 else 4


def _per_layer(values: list[Any], n: int) -> list[Any]:
    """n entries alternating over ``values`` (every kind appears when n >= len)."""
    return [values[i % len(values)] for i in range(n)]


def guess_from_code(name: str, config: Any, texts: list[str]) -> Any:
    """A value consistent with how the model's code uses ``name``. Shapes first (a
    literal getattr default, a per-layer list, a step, a layer bound), then the name
    table, then a literal the code compares the value with (here, then elsewhere in
    vLLM), then a flag for a value only tested for truth."""
    hints = code_hints(name, texts)
    n = num_layers_of(config)
    if hints.default is not None:
        return hints.default
    if hints.modulo or hints.layer_bound:
        return 1  # a step of 1; or layer 0 on one side of the bound, the rest on the other
    if hints.width and isinstance(getattr(config, "hidden_size", None), int):
        # the width a layer reads the hidden states with (Lfm2's ``dim=config.block_dim``;
        # transformers 5 dropped the attribute, checkpoints set it to ``hidden_size``)
        return config.hidden_size
    index_list = re.search(r"(indexes|indices|_ids|_idx)$", name.lower()) is not None
    if hints.per_layer or (hints.iterated and ("layer" in name.lower() or index_list)):
        if hints.compared:
            kinds = list(hints.compared)
            if len(kinds) == 1:
                v = kinds[0]
                other = _COMPLEMENT.get(v) if isinstance(v, str) else None
                if isinstance(v, bool):
                    other = not v
                elif isinstance(v, int):
                    other = 0 if v else 1
                if other is not None:
                    kinds = [other, v]
            return _per_layer(kinds, n)
        if not hints.per_layer and any(
            w in name.lower() for w in ("ids", "idx", "indices", "index")
        ):
            return list(range(0, n, 2))  # every other layer: both kinds get built
        element = guess_attribute(re.sub(r"^(interleaved|per_layer)_|_list$|s$", "", name), config)
        if element is not None and not isinstance(element, list):
            # a value per layer: MTP layers are indexed on from the main stack, and
            # checkpoints pad these lists for them (see backend_drafts.py)
            from prefixlint.introspect.drafts.mtp_layers import mtp_layer_count

            return [element] * (n + mtp_layer_count(config))
        if hints.iterated and not hints.per_layer and re.search(r"_(map|list|set)$", name):
            # a collection of layers (``deepstack_layer_map``): layer indices, every other
            return list(range(0, n, 2))
        return None
    by_name = guess_attribute(name, config)
    if by_name is not None:
        return by_name
    if hints.compared and isinstance(hints.compared[0], str):
        return hints.compared[0]
    elsewhere = _compared_elsewhere(name)
    if elsewhere is not None:
        return elsewhere
    if hints.truth:
        return False
    return None


_COMPARED_CACHE: dict[str, str | None] = {}


def _compared_elsewhere(name: str) -> str | None:
    """A string literal vLLM's layers compare ``name`` with (``zero_expert_type ==
    "identity"`` is in the fused-MoE layer, not the model). Elsewhere only this counts:
    the same name in unrelated code says nothing about this config's shape."""
    import ast

    if name not in _COMPARED_CACHE:
        pattern = re.compile(rf"(?<![\w\"']){re.escape(name)}\b\s*==\s*(\"[^\"\n]*\"|'[^'\n]*')")
        found = None
        for text in _vllm_texts():
            if name in text:
                m = pattern.search(text)
                if m:
                    found = ast.literal_eval(m.group(1))
                    break
        _COMPARED_CACHE[name] = found
    return _COMPARED_CACHE[name]


def _name_table(config: Any, hidden: int, heads: int) -> list[tuple[tuple[str, ...], Any]]:
    """Words of an attribute's name -> a value, first match wins (``guess_attribute``)."""
    return [
        (("_eps", "epsilon"), 1e-6),  # not "deepstack"
        (("dropout",), 0.0),
        (("padded_vocab_size",), getattr(config, "vocab_size", 512)),
        (("vocab_size",), 512),
        (("num_experts_per_tok", "top_k", "topk", "moe_k"), 2),
        (("experts",), 4),
        (("first_k_dense", "n_group", "topk_group", "group"), 1),
        (("rope_theta", "rope_base"), 10000.0),
        (("max_position_embedding",), 256),
        (("select_layer", "feature_layer"), -1),  # the last layer of the vision tower
        (("swiglu_limit", "clamp_limit"), 7.0),
        (("alpha", "beta"), 1.0),  # a coefficient (SwiGLU's alpha/beta): 1 is neutral
        (("iters", "iterations"), 1),  # an iteration count (Sinkhorn): one pass
        (("block_indexes", "layer_indexes"), [0]),
        (("sampling_rate",), 16000),
        (("embedding_size", "embed_dim"), hidden),
        (("fp32_",), False),
        (("query_num", "num_queries"), 16),
        (("image_size",), 56),
        (("patch_size",), 14),
        (("num_channels", "in_chans"), 3),
        (("pad_token_id",), 0),
        (("_token_id", "_token_index", "patch_id"), 10),  # below every shrunk vocabulary
        (("depth",), 2),
        (("channels",), 16),
        (("window",), 64),
        (("intermediate",), 256),
        (("kv_channels",), getattr(config, "head_dim", None) or hidden // heads),
        (("head_dim", "rotary_dim", "block_dim", "rank", "_dim"), 16),
        (("scale", "scalar", "multiplier", "factor", "logit"), 1.0),
        (("mult",), 1),
        (("gate_func", "act_func"), "silu"),
        (("activation", "hidden_act", "act_fn"), "silu"),
        # before "hidden": a layer count is not a width (128 MoE layers exhaust memory)
        (("num_hidden_layers", "num_layers", "n_layers"), num_layers_of(config)),
        # after the activations: ``projector_hidden_act`` names a function, not a width
        (("dim_model_base", "hidden"), hidden),
        (("ratio", "rate"), 1),
        (("score_func", "scoring_func"), "softmax"),
        (
            ("use_", "is_", "_bias", "enable", "norm_topk", "_norm", "norm_", "interleaved"),
            False,
        ),
        # a head count before any other count: 2 heads would not divide tp 4 and 8
        (("heads", "n_head"), heads),
        (("num_",), 2),
        (("width",), hidden),
        (("_size",), 16),  # a size no other entry names: small, divides by 1, 2, 4, 8
    ]


def guess_attribute(name: str, config: Any, texts: list[str] | None = None) -> Any:
    """A plausible value for an attribute a model reads but the synthesised config lacks
    (real checkpoints' config.json carry it). With the model's source ``texts``, how the
    code uses the attribute decides first. None: no guess."""
    if name.endswith("config"):
        return None  # a nested config: no single value stands in for one
    if texts is not None:
        value = guess_from_code(name, config, texts)
        if value is not None:
            return value
    n = name.lower()
    hidden = getattr(config, "hidden_size", 128) or 128
    heads = getattr(config, "num_attention_heads", 16) or 16
    stft = _stft_size(n, config)
    if stft is not None:
        return stft
    if n == "eps":
        return 1e-6
    if n == "n_embed":  # a width; only the whole name ("position_embedding_type" holds it)
        return hidden
    if n == "layers":
        return num_layers_of(config)  # a layer count (``config.layers`` of a vision tower)
    if n == "layer_types":
        return ["full_attention"] * num_layers_of(config)
    if n == "rope_parameters":  # transformers' form of rope_theta / rope_scaling
        theta = getattr(config, "rope_theta", None) or 10000.0
        return {"rope_type": "default", "rope_theta": theta}
    table = _name_table(config, hidden, heads)
    # A name the table spells out wins over a word inside it (``hidden_act`` is an
    # activation, not a size because it holds "hidden"); then the first word found.
    for words, value in table:
        if n in words:
            return value
    for words, value in table:
        if any(w in n for w in words):
            return value
    return None


def _stft_size(name: str, config: Any) -> int | None:
    """An audio encoder's (``num_mel_bins`` beside it) window and hop are STFT sizes in
    samples, not token windows: 25 ms and 10 ms of its sampling rate, as speech models
    use. Mel filters need that many frequency bins (a 64-sample window leaves 33 bins,
    too few for 128 mel filters)."""
    try:
        mel = getattr(config, "num_mel_bins", None)
    except Exception:
        return None
    if not isinstance(mel, int):
        return None
    rate = getattr(config, "sampling_rate", None)
    rate = rate if isinstance(rate, int) and rate > 0 else 16000
    if name in ("window_size", "n_fft", "win_length", "fft_size"):
        return rate * 25 // 1000
    if name in ("hop_length", "hop_size"):
        return rate // 100
    return None


def frame_files(error: BaseException | None) -> list[str]:
    """The files in a ``models/`` folder that ``error``'s traceback ran through,
    innermost first."""
    import traceback

    files: list[str] = []
    if error is not None:
        for frame, _ in traceback.walk_tb(error.__traceback__):
            f = frame.f_code.co_filename
            if in_models_folder(f) and f not in files:
                files.insert(0, f)
    return files


def source_texts(error: BaseException | None, extra: list[str] | None = None) -> list[str]:
    """The model's own files: its traceback frames outside torch, prefixlint and vLLM's
    shared layers (innermost first), then ``extra`` (the model class's file)."""
    files = frame_files(error)
    for f in extra or []:
        if f and f not in files:
            files.append(f)
    texts = []
    for f in files:
        with contextlib.suppress(OSError):
            texts.append(Path(f).read_text(encoding="utf-8", errors="replace"))
    return texts
