"""Where an architecture's config comes from: a given file, pyproject, or synthesis.

Synthesis: architecture -> model type (vLLM's own table first, then transformers' auto
mappings) -> config class (vLLM's ``transformers_utils.configs`` first, then transformers'
``CONFIG_MAPPING``); default-construct it, shrink sizes consistently (head counts keep
dividing 1, 2, 4 and 8), trim per-layer lists such as ``layer_types`` to the new layer
count, and construct again with the overrides so that the config's own validation sees
consistent values. No network: nothing is fetched from the hub.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.demands import (
    annotated_default,
    asserted_reads,
    assertion_demands,
    callee_default,
    compared_model_type,
    fit_unpacked,
    integral_sizes,
    mismatch_demands,
    must_be,
    none_source,
)
from prefixlint.introspect.subconfigs import is_sub_config, sub_config

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
}
# Defaults that are None where the model needs a number (a checkpoint always says): the
# value keeps the shrunk sizes consistent (8 KV heads divide 16 query heads).
FILL_NONE: dict[str, Any] = {"num_key_value_heads": 8}


_ARCH_SUFFIX = re.compile(
    r"(For[A-Z]\w*|Model|LMHeadModel|MTP\w*|Chat\w*Model)$",
)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _known_model_types() -> dict[str, str]:
    """normalised model type -> model type, for every config class vLLM or transformers
    can load without remote code."""
    from transformers import CONFIG_MAPPING
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    out: dict[str, str] = {}
    for mt in [*_CONFIG_REGISTRY, *CONFIG_MAPPING.keys()]:
        out.setdefault(_norm(mt), mt)
    return out


def _module_config_types(model_cls: type | None) -> list[str]:
    """Model types of the config classes the model's own module imports or defines, whose
    name (less ``Config``) starts the architecture's class name: the model's code says
    which config it reads (``ChatGLMConfig`` for ``ChatGLMModel``, ``NemotronHConfig`` for
    ``NemotronHPuzzleForCausalLM``)."""
    import sys

    if model_cls is None:
        return []
    module = sys.modules.get(model_cls.__module__)
    if module is None:
        return []
    known = _known_model_types()
    out = []
    for value in vars(module).values():
        name = getattr(value, "__name__", "")
        if not (isinstance(value, type) and name.endswith("Config") and len(name) > 7):
            continue
        mt = getattr(value, "model_type", None)
        stem = _norm(name[: -len("Config")])
        if (
            isinstance(mt, str)
            and _norm(mt) in known
            and _norm(model_cls.__name__).startswith(stem)
            and mt not in out
        ):
            out.append(mt)
    return out


def _text_only(model_type: str) -> bool:
    try:
        cls = config_class(model_type)
    except Exception:
        return True
    return not getattr(cls, "sub_configs", None)


def arch_to_model_types(arch: str, model_cls: type | None = None) -> list[str]:
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
    if arch.endswith("ForCausalLM") and len(out) > 1:
        # A causal LM of a family that also has a composite (vision + text) config reads
        # the text config's attributes at the top level (Llama4ForCausalLM).
        out.sort(key=lambda mt: not _text_only(mt))
    if not out:
        # Architectures no mapping lists: a config class vLLM or transformers knows under
        # the architecture's own name (Step3p5ForCausalLM -> step3p5), then the one the
        # model's module imports.
        # transformers' names follow ``<Type>ForCausalLM``; its other classes of the same
        # stem are other families (``ernie`` is BERT-like, ErnieMTPModel is not).
        from vllm.transformers_utils.config import _CONFIG_REGISTRY

        stem = _norm(_ARCH_SUFFIX.sub("", arch))
        known = _known_model_types()
        if stem in known and (arch.endswith("ForCausalLM") or known[stem] in _CONFIG_REGISTRY):
            out.append(known[stem])
        for mt in _module_config_types(model_cls):
            if mt not in out:
                out.append(mt)
    if not out and not arch.endswith("ForCausalLM"):
        # (a causal LM that reuses another family's class, DeepseekForCausalLM over
        # DeepSeek-V2's, reads its own checkpoint format: the llama-shaped guess and
        # the repair loop fit it better than the base family's defaults)
        out.extend(_base_model_types(model_cls))
    return out


def _base_model_types(model_cls: type | None) -> list[str]:
    """A model class that extends another architecture's class (a retrieval head over
    a vision-language model, a ColBERT head over an encoder) reads that class's config:
    the model types of its nearest base that has one."""
    for base in getattr(model_cls, "__mro__", ())[1:]:
        if "model_executor.models" not in getattr(base, "__module__", ""):
            continue
        found = arch_to_model_types(base.__name__, base)
        if found:
            return found
    backbones = _backbones(model_cls)
    if len(backbones) == 1:  # several (an audio tower beside a language model): ambiguous
        return arch_to_model_types(backbones[0].__name__, backbones[0])
    return []


def _backbones(model_cls: type | None) -> list[type]:
    """Model classes the model's ``__init__`` builds with its own ``vllm_config``
    (``self.model = Lfm2Model(vllm_config=vllm_config, ...)``): they read its config."""
    import ast
    import inspect
    import sys
    import textwrap

    init = getattr(model_cls, "__init__", None)
    module = sys.modules.get(getattr(model_cls, "__module__", ""))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return []
    out: list[type] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        passes_config = any(
            kw.arg == "vllm_config" and isinstance(kw.value, ast.Name) for kw in node.keywords
        )
        found = getattr(module, node.func.id, None)
        # a model (``Lfm2Model``), not a modality tower (``...WhisperEncoder``) that
        # reads its own sub-config out of the same vllm_config
        backbone = isinstance(found, type) and _ARCH_SUFFIX.search(found.__name__)
        if passes_config and backbone and found is not model_cls and found not in out:
            out.append(found)
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
    _clamp_token_ids(d, kw)
    return kw


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


class ConfigGap(LookupError):
    """No config could be found or synthesised for an architecture."""


def _index_list_keys(default, kw: dict[str, Any]) -> list[str]:
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


def _variants(cls, default, kw: dict[str, Any]) -> list[dict[str, Any]]:
    """Override sets to try, best first. Index lists some configs derive themselves from
    the per-layer lists (Zamba2's ``hybrid_layer_ids`` from ``layers_block_type``): a
    trimmed copy passed in would contradict them, so the config's own derivation goes
    first and is kept when its indices exist. Nested configs may refuse keys the parent's
    ``to_dict`` adds (``_name_or_path``): then only their non-default values are passed."""
    out = []
    index_keys = _index_list_keys(default, kw)
    if index_keys:
        out.append({k: v for k, v in kw.items() if k not in index_keys})
    out.append(kw)
    nested = {}
    for k, v in kw.items():
        sub = default.__dict__.get(k)
        if isinstance(v, dict) and hasattr(sub, "to_diff_dict"):
            diff = {
                key: val
                for key, val in sub.to_diff_dict().items()
                if not key.startswith("_") and key != "transformers_version"
            }
            nested[k] = {**diff, **{x: y for x, y in v.items() if x in diff or x in SHRINK}}
    if nested:
        out.append({**kw, **nested})
    return out


def _consistent(cfg, default, kw: dict[str, Any]) -> bool:
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int):
        return True
    for k in _index_list_keys(default, kw):
        try:
            value = getattr(cfg, k, None)
        except Exception:
            continue
        if isinstance(value, list) and any(isinstance(x, int) and x >= n for x in value):
            return False
    return True


def synth_config(arch: str, num_layers: int = 4, model_cls: type | None = None):
    errors = []
    for mt in arch_to_model_types(arch, model_cls) or []:
        try:
            cls = config_class(mt)
            default = cls()
            kw = shrink_kwargs(default, num_layers)
            cfg = None
            last: Exception | None = None
            for variant in _variants(cls, default, kw):
                try:
                    candidate = cls(**variant)
                except Exception as e:
                    last = last or e
                    continue
                if _consistent(candidate, default, kw):
                    cfg = candidate
                    break
            if cfg is None:
                raise last or ValueError("inconsistent layer indices")
            cfg.architectures = [arch]
            _name_text_architectures(cfg)
            return cfg
        except Exception as e:
            errors.append(f"{mt}: {type(e).__name__}: {e}")
    if not errors:
        raise ConfigGap(f"no model type is known for {arch} (remote code?)")
    raise ConfigGap(f"cannot synthesise a config for {arch}: {'; '.join(errors)[:300]}")


def _name_text_architectures(cfg: Any) -> None:
    """A composite config's language model is built by its ``architectures``
    (``init_vllm_registered_model(hf_config=config.text_config)``); a checkpoint names it,
    a default-constructed sub-config often does not. The sub-config class's own
    declaration first, then the causal LM transformers maps its model type to."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    for name, sub in list(vars(cfg).items()):
        if not (name.startswith(("text", "llm", "language")) and hasattr(sub, "to_dict")):
            continue
        if vars(sub).get("architectures"):
            continue
        declared = getattr(type(sub), "architectures", None)
        model_type = getattr(sub, "model_type", "")
        mapped = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or _causal_lm_named(model_type)
        if isinstance(declared, (list, tuple)) and declared:
            sub.architectures = list(declared)
        elif isinstance(mapped, str):
            sub.architectures = [mapped]


def _causal_lm_named(model_type: str) -> str | None:
    """vLLM's ``<Type>ForCausalLM`` for a model type (``step3p5`` -> Step3p5ForCausalLM)."""
    if not model_type:
        return None
    try:
        from vllm.model_executor.models.registry import ModelRegistry

        archs = ModelRegistry.get_supported_archs()
    except Exception:
        return None
    for arch in archs:
        if arch.endswith("ForCausalLM") and _norm(arch[: -len("ForCausalLM")]) == _norm(model_type):
            return arch
    return None


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
    model_cls: type | None = None,
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
        cfg = synth_config(arch, num_layers=num_layers, model_cls=model_cls)
        origin = f"synthesised ({cfg.model_type})"
    except ConfigGap as gap:
        if "no model type" not in str(gap) and _exactly_mapped(arch):
            raise
        # A remote-code architecture (no config class in transformers or vLLM): most read
        # Llama's attribute names, so a small Llama config is the best guess.
        cfg = llama_shaped(num_layers)
        origin = "synthesised (llama-shaped: remote-code architecture)"
    cfg.architectures = [name]
    cfg.save_pretrained(folder)
    return ConfigSource(folder, origin)


def _exactly_mapped(arch: str) -> bool:
    """vLLM or transformers map ``arch`` to a model type (not a guess from its name)."""
    from transformers.models.auto import modeling_auto
    from vllm.transformers_utils.config import _ARCHITECTURE_TO_MODEL_TYPE

    if arch in _ARCHITECTURE_TO_MODEL_TYPE:
        return True
    for name in dir(modeling_auto):
        if name.endswith("_MAPPING_NAMES"):
            for cls in getattr(modeling_auto, name).values():
                if arch == cls or (isinstance(cls, (tuple, list)) and arch in cls):
                    return True
    return False


def llama_shaped(num_layers: int = 4):
    from transformers import LlamaConfig

    default = LlamaConfig()
    return LlamaConfig(**shrink_kwargs(default, num_layers))


_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_NONE_USE = re.compile(r"'NoneType' object (is not (subscriptable|iterable)|has no attribute)")
_LITERAL = r"""("[^"\n]*"|'[^'\n]*'|-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False)"""
# Reads of the model's (HF) config, not of vLLM's cache/quant/parallel configs.
_CONFIG_READ = re.compile(
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
                rf"getattr\(\s*[\w.\[\]]+\s*,\s*[\"']{attr}[\"']\s*,\s*{_LITERAL}\s*\)", text
            )
            if m:
                hints.default = ast.literal_eval(m.group(1))
        for m in re.finditer(rf"{ref}(?:\[[^\]\n]*\])?\s*(?:==|!=)\s*{_LITERAL}", text):
            value = ast.literal_eval(m.group(1))
            if value not in hints.compared:
                hints.compared.append(value)
        for m in re.finditer(rf"{_LITERAL}\s*(?:==|!=|in)\s*{ref}", text):
            value = ast.literal_eval(m.group(1))
            if value not in hints.compared:
                hints.compared.append(value)
        if re.search(rf"{ref}\s*\[\s*[\w.]*(?:layer|idx|index|\bi\b)[\w.]*\s*\]", text):
            hints.per_layer = True
        if re.search(rf"(?:set|list|sorted|len|enumerate)\(\s*{ref}\s*\)|\bin\s+{ref}\s*:", text):
            hints.iterated = True
        if re.search(rf"%\s*{ref}", text):
            hints.modulo = True
        if re.search(rf"\w*(?:layer|idx)\w*\s*(?:<|>=)\s*{ref}", text):
            hints.layer_bound = True
        if re.search(rf"(?:\bnot\s+|\bif\s+){ref}\s*(?::|\)|$|\band\b|\bor\b)", text, re.M):
            hints.truth = True
    return hints


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


def _num_layers(config: Any) -> int:
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
    n = _num_layers(config)
    if hints.default is not None:
        return hints.default
    if hints.modulo or hints.layer_bound:
        return 1  # a step of 1; or layer 0 on one side of the bound, the rest on the other
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
            w in name.lower() for w in ("ids", "idx", "indices", "indexes")
        ):
            return list(range(0, n, 2))  # every other layer: both kinds get built
        element = guess_attribute(re.sub(r"^(interleaved|per_layer)_|_list$|s$", "", name), config)
        if element is not None and not isinstance(element, list):
            return [element] * n
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
    if n == "layers":
        return _num_layers(config)  # a layer count (``config.layers`` of a vision tower)
    if n == "layer_types":
        return ["full_attention"] * _num_layers(config)
    table: list[tuple[tuple[str, ...], Any]] = [
        (("_eps", "epsilon"), 1e-6),  # not "deepstack"
        (("dropout",), 0.0),
        (("padded_vocab_size",), getattr(config, "vocab_size", 512)),
        (("vocab_size",), 512),
        (("num_experts_per_tok", "top_k", "topk", "moe_k"), 2),
        (("experts",), 4),
        (("first_k_dense", "n_group", "topk_group", "group"), 1),
        # transformers 5's rope dict (configs of older shape lack it): a fresh one per call
        (("rope_parameters",), {"rope_type": "default", "rope_theta": 10000.0}),
        (("rope_theta", "rope_base"), 10000.0),
        (("max_position_embedding",), 256),
        (("select_layer", "feature_layer"), -1),  # the last layer of the vision tower
        (("swiglu_limit", "clamp_limit"), 7.0),
        (("block_indexes", "layer_indexes"), [0]),
        (("sampling_rate",), 16000),
        (("embedding_size", "embed_dim"), hidden),
        (("fp32_",), False),
        (("query_num", "num_queries"), 16),
        (("image_size",), 56),
        (("patch_size",), 14),
        (("num_channels", "in_chans"), 3),
        (("window",), 64),
        (("intermediate",), 256),
        (("kv_channels",), getattr(config, "head_dim", None) or hidden // heads),
        (("head_dim", "rotary_dim", "block_dim", "rank", "_dim"), 16),
        (("dim_model_base", "hidden"), hidden),
        (("scale", "scalar", "multiplier", "factor", "logit"), 1.0),
        (("mult",), 1),
        (("gate_func", "act_func"), "silu"),
        (("activation", "hidden_act", "act_fn"), "silu"),
        (("ratio",), 1),
        (("score_func", "scoring_func"), "softmax"),
        (("use_", "is_", "_bias", "enable", "norm_topk", "_norm", "norm_", "interleaved"), False),
        (("num_hidden_layers", "num_layers", "n_layers"), _num_layers(config)),
        (("num_",), 2),
        (("heads",), heads),
        (("width",), hidden),
        (("_size",), 16),  # a size no other entry names: small, divides by 1, 2, 4, 8
    ]
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


def _source_texts(error: BaseException | None, extra: list[str] | None = None) -> list[str]:
    """The model's own files: its traceback frames outside torch, prefixlint and vLLM's
    shared layers (innermost first), then ``extra`` (the model class's file)."""
    import traceback

    files: list[str] = []
    if error is not None:
        for frame, _ in traceback.walk_tb(error.__traceback__):
            f = frame.f_code.co_filename
            if "/models/" in f and f not in files:
                files.insert(0, f)
    for f in extra or []:
        if f and f not in files:
            files.append(f)
    texts = []
    for f in files:
        with contextlib.suppress(OSError):
            texts.append(Path(f).read_text(encoding="utf-8", errors="replace"))
    return texts


_SEQUENCE_AS_TEXT = re.compile(r"'(list|tuple)' object has no attribute '(strip|split)'")


def _line_attributes(error: BaseException) -> list[str]:
    """Config attributes read on the line that raised ``error``, or, for a local read
    from the config just before (``x = getattr(config, "x", None)``), on the two lines
    above it."""
    import linecache
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return []
    frame, line = frames[-1]
    names: list[str] = []
    for n in (line, line - 1, line - 2):
        text = linecache.getline(frame.f_code.co_filename, n)
        found = _CONFIG_READ.findall(text) + re.findall(
            r"getattr\(\s*(?:self\.)?\w*config\s*,\s*[\"'](\w+)[\"']", text
        )
        names.extend(name for name in found if name not in names)
        if n == line and names:
            break  # the failing line reads the config itself
    return names


def _none_attribute(error: BaseException, configs: list[Any]) -> str | None:
    """The config attribute that is None on the line ``error`` (a TypeError or an
    AttributeError on None) was raised: the model used it as a list or an object."""
    import linecache
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    for frame, line in reversed(frames[-3:]):
        text = linecache.getline(frame.f_code.co_filename, line)
        for attr in _CONFIG_READ.findall(text):
            for config in configs:
                try:
                    if attr in vars(config) and getattr(config, attr) is None:
                        return attr
                except Exception:
                    continue
    return None


_DEMAND = re.compile(r"requires? `?(\w+)`?\s*(?:=|==)\s*(True|False|-?\d+)\b")


def _demanded_value(error: BaseException, configs: list[Any]) -> str | None:
    """``... requires index_kpool_always_select_tail=True``: the model names the value a
    config attribute must have (real checkpoints have it); give it, once."""
    import ast

    m = _DEMAND.search(str(error))
    if m is None:
        return None
    attr, value = m.group(1), ast.literal_eval(m.group(2))
    for config in configs:
        if attr in vars(config) and getattr(config, attr) != value:
            setattr(config, attr, value)
            return attr
    return None


def repair(
    error: BaseException, configs: list[Any], extra_files: list[str] | None = None
) -> str | None:
    """Give the config the attribute ``error`` says it lacks (an AttributeError), or the
    one the failing line used while it was None; returns its name."""
    demanded = _demanded_value(error, configs)
    if demanded is not None:
        return demanded
    m = _MISSING.search(str(error)) if isinstance(error, AttributeError) else None
    texts = _source_texts(error, extra_files)
    if m is not None and m.group(1) not in ("NoneType", "list", "tuple"):
        cls_name, attr = m.groups()
        if is_sub_config(attr):
            for config in configs:
                if type(config).__name__ == cls_name and not hasattr(config, attr):
                    setattr(config, attr, sub_config(attr, config))
                    return attr
            return None
        return _repair_missing(error, configs, cls_name, attr, texts)
    stated = _repair_stated(error, configs, texts)
    if stated is not None:
        return stated or None
    if isinstance(error, AttributeError) and _SEQUENCE_AS_TEXT.search(str(error)):
        # ``config.x.strip().split(",")``: the checkpoint writes the list as text
        for attr in _line_attributes(error):
            for config in configs:
                value = vars(config).get(attr)
                if isinstance(value, (list, tuple)):
                    setattr(config, attr, ",".join(map(str, value)))
                    return attr
        return None
    if isinstance(error, AssertionError):
        # ``assert x in ["silu", "sigmoid"]`` on a value read from the config: the first
        for attr, value in assertion_demands(error).items():
            for config in _with_nested(configs):
                if attr in vars(config) and vars(config)[attr] != value:
                    setattr(config, attr, value)
                    return attr
        # ``assert config.n_shared_experts > 0 and config.shared_expert_sink``: the model
        # needs what the default leaves off (0, None, False)
        for attr in _line_attributes(error):
            for config in configs:
                if attr not in vars(config) or getattr(config, attr):
                    continue
                current = getattr(config, attr)
                value = guess_attribute(attr, config, texts)
                if isinstance(current, bool) or isinstance(value, bool) or value is None:
                    value = True if isinstance(current, bool) or current is None else None
                if value is not None and value != current:
                    setattr(config, attr, value)
                    return attr
        # ``top_k = getattr_iter(config, ["num_experts_per_tok", "top_k"], None)`` and
        # ``assert top_k is not None``: the config has none of these names
        for attr in asserted_reads(error):
            if configs and not any(hasattr(c, attr) for c in configs):
                value = guess_attribute(attr, configs[0], texts)
                if value is not None:
                    setattr(configs[0], attr, value)
                    return attr
        return None
    if isinstance(error, (TypeError, AttributeError)) and _NONE_USE.search(str(error)):
        attr = _none_attribute(error, configs)
        if attr is None:
            return None
        return _give_guess(
            configs, attr, texts, lambda c: attr in vars(c) and getattr(c, attr) is None
        )
    return None


def _repair_missing(
    error: BaseException, configs: list[Any], cls_name: str, attr: str, texts: list[str]
) -> str | None:
    """An attribute a config lacks: the default the code declares for it (the config
    class it annotates, the parameter it is passed to, vLLM's class for the model
    type), else a guess from its use and name."""
    configs = _with_nested(configs)  # a thinker's audio config sits two levels down
    lacking = [c for c in configs if type(c).__name__ == cls_name and not hasattr(c, attr)]
    # the very object that lacked it (vision and audio stand-ins share a class name)
    owner = getattr(error, "obj", None)
    if any(owner is c for c in lacking):
        lacking.remove(owner)
        lacking.insert(0, owner)
        configs = [owner] + [c for c in configs if c is not owner]
    known, value = annotated_default(error, attr)
    if not known:
        known, value = callee_default(error, attr)
    if not known and lacking:
        known, value = _registered_default(lacking[0], attr)
    if not known and lacking:
        value = _dict_from_code(attr, lacking[0], texts)
        known = value is not None
    if known and lacking:
        setattr(lacking[0], attr, value)
        return attr
    return _give_guess(
        configs, attr, texts, lambda c: type(c).__name__ == cls_name and not hasattr(c, attr)
    )


def _repair_stated(error: BaseException, configs: list[Any], texts: list[str]) -> str | None:
    """What the failing code states (see demands.py): the names changed; "" when the
    error is of such a kind but nothing could be given; None when it is of none."""
    nested = _with_nested(configs)
    if isinstance(error, RecursionError) and _builds_itself(error):
        # ``init_vllm_registered_model(hf_config=config.get_text_config())`` on a flat
        # config returns the config itself: the model builds itself again. A composite
        # checkpoint has a text sub-config naming the language model.
        top = configs[0] if configs else None
        if top is not None and "text_config" not in vars(top):
            top.text_config = sub_config("text_config", top)
            return "text_config"
        return ""
    dispatch = compared_model_type(error)
    if dispatch is not None and any(dispatch[0] is c for c in nested):
        return _become_model_type(*dispatch)
    fitted = fit_unpacked(error) or must_be(error, nested) or integral_sizes(error, nested)
    if fitted is not None:
        return fitted
    for attr, value in mismatch_demands(error, nested).items():
        for config in nested:
            if vars(config).get(attr) is not None and vars(config)[attr] != value:
                setattr(config, attr, value)
                return attr
    read = none_source(error)
    if read is not None:
        attr, value = read
        for config in nested:
            if attr in vars(config) and vars(config)[attr] is None:
                value = guess_attribute(attr, config, texts) if value is None else value
                if value is None and re.search(r"\bints?\b|integer|size", str(error)):
                    value = 16  # used as a size: small, divides by 1, 2, 4 and 8
                if value is None:
                    return ""
                setattr(config, attr, value)
                return attr
    return None


def _become_model_type(config: Any, model_type: str) -> str:
    """A stand-in sub-config the code dispatches on by model type takes the first type
    it names, and, where transformers or vLLM know that type, its config class's
    (shrunk) values for what the stand-in lacks."""
    config.model_type = model_type
    with contextlib.suppress(Exception):
        default = config_class(model_type)()
        values = {**default.to_dict(), **shrink_kwargs(default)}
        for key, value in values.items():
            if key not in vars(config) and not key.startswith("_"):
                setattr(config, key, value)
    return "model_type"


def _dict_from_code(attr: str, config: Any, texts: list[str]) -> dict[str, Any] | None:
    """``config.img_processor["image_dim_out"]``, ``config.img_processor.get("layer_idx",
    -2)``: a dict-valued attribute (checkpoints write it as a JSON object); its keys are
    those the code reads, with the code's defaults, else guessed by name (a size when
    nothing names them)."""
    import ast

    name = re.escape(attr)
    out: dict[str, Any] = {}
    for text in texts:
        if attr not in text:
            continue
        for m in re.finditer(rf"\.{name}\.get\(\s*[\"'](\w+)[\"']\s*,\s*{_LITERAL}\s*\)", text):
            out.setdefault(m.group(1), ast.literal_eval(m.group(2)))
        for m in re.finditer(rf"\.{name}\[\s*[\"'](\w+)[\"']\s*\]", text):
            if m.group(1) not in out:
                guess = guess_attribute(m.group(1), config)
                out[m.group(1)] = 16 if guess is None else guess
    return out or None


def _builds_itself(error: BaseException) -> bool:
    import traceback

    names = [f.f_code.co_name for f, _ in traceback.walk_tb(error.__traceback__)]
    return names.count("init_vllm_registered_model") > 2


def _registered_default(config: Any, attr: str) -> tuple[bool, Any]:
    """The default of ``attr`` in the config class vLLM registers for ``config``'s model
    type, when that is another class (transformers' ``Step3p7TextConfig`` and vLLM's
    ``Step3p5Config`` share ``step3p5``; vLLM's model reads vLLM's)."""
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    model_type = getattr(config, "model_type", "") or ""
    try:
        # a lazy registry: ``[]`` loads the class, ``.get`` may not
        cls = _CONFIG_REGISTRY[model_type] if model_type in _CONFIG_REGISTRY else None  # noqa: SIM401
    except Exception:
        return False, None
    if not isinstance(cls, type) or isinstance(config, cls):
        return False, None
    try:
        default = cls()
        value = getattr(default, attr)
    except Exception:
        return False, None
    with contextlib.suppress(Exception):
        value = shrink_kwargs(default).get(attr, value)
    return True, value


def _with_nested(configs: list[Any], depth: int = 3) -> list[Any]:
    """``configs`` and the configs nested in them (``thinker_config.audio_config``)."""
    out = list(configs)
    frontier = list(configs)
    for _ in range(depth):
        found = []
        for config in frontier:
            try:
                values = list(vars(config).values())
            except TypeError:
                continue
            for value in values:
                nested = hasattr(value, "to_dict") and hasattr(value, "model_type")
                if nested and all(value is not c for c in out):
                    out.append(value)
                    found.append(value)
        frontier = found
    return out


def _give_guess(configs: list[Any], attr: str, texts: Any, wanted: Any) -> str | None:
    """Set a guessed ``attr`` on the first config ``wanted`` accepts; its name, or None
    when no config is wanted or no value can be guessed."""
    for config in configs:
        if wanted(config):
            value = guess_attribute(attr, config, texts)
            if value is None:
                return None
            setattr(config, attr, value)
            return attr
    return None


def seed_from_code(configs: list[Any], files: list[str]) -> list[str]:
    """Give the config every attribute the model's files read as ``config.name`` that it
    lacks: for a failure that names no attribute (a MoE model whose llama-shaped config
    has no expert count builds no MoE layer and then finds none)."""
    texts = _source_texts(None, files)
    if not configs:
        return []
    config = configs[0]
    seeded: list[str] = []
    for text in texts:
        for attr in dict.fromkeys(_CONFIG_READ.findall(text)):
            if attr.startswith("_") or any(hasattr(c, attr) for c in configs):
                continue
            if re.search(rf"\bconfig\.{attr}\s*=[^=]", text):
                continue  # the model sets it itself
            value = guess_attribute(attr, config, texts)
            if value is not None:
                setattr(config, attr, value)
                seeded.append(attr)
    return seeded
