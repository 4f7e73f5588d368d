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

from prefixlint.introspect.backend_drafts import mtp_layer_count
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
    none_reads,
    none_source,
)
from prefixlint.introspect.guards import give_guard_demands
from prefixlint.introspect.rescale import rescaled
from prefixlint.introspect.subconfigs import is_sub_config, is_text_config, sub_config

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
# value keeps the shrunk sizes consistent (8 KV heads divide 16 query heads).
FILL_NONE: dict[str, Any] = {"num_key_value_heads": 8}


def vllm_config_registry() -> Any:
    """vLLM's model type -> config class table (private: ``_CONFIG_REGISTRY`` in vLLM 0.32's
    ``transformers_utils.config``); empty where a release moved it, so synthesis falls
    back on transformers' classes alone."""
    from prefixlint.introspect.vllm_api import config_registry

    return config_registry()


def vllm_architecture_types() -> dict[str, str]:
    """vLLM's architecture -> model type table (private: ``_ARCHITECTURE_TO_MODEL_TYPE``);
    empty where a release moved it (transformers' mappings still answer)."""
    from prefixlint.introspect.vllm_api import architecture_model_types

    return architecture_model_types()


_ARCH_SUFFIX = re.compile(
    r"(For[A-Z]\w*|Model|LMHeadModel|MTP\w*|Chat\w*Model)$",
)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _known_model_types() -> dict[str, str]:
    """normalised model type -> model type, for every config class vLLM or transformers
    can load without remote code."""
    from transformers import CONFIG_MAPPING

    config_registry = vllm_config_registry()

    out: dict[str, str] = {}
    for mt in [*config_registry, *CONFIG_MAPPING.keys()]:
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

    arch_types = vllm_architecture_types()

    out: list[str] = []
    if arch in arch_types:
        out.append(arch_types[arch])
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
        config_registry = vllm_config_registry()

        stem = _norm(_ARCH_SUFFIX.sub("", arch))
        known = _known_model_types()
        if stem in known and (arch.endswith("ForCausalLM") or known[stem] in config_registry):
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

    config_registry = vllm_config_registry()

    if model_type in config_registry:
        return config_registry[model_type]
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
            if k not in kw and _layer_keyed(v, old_n):
                kw[k] = _remap_layer_keyed(v, d, kw, new_n)
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


def _layer_keyed(value: Any, n: int) -> bool:
    """A dict keyed by layer indices below ``n`` whose entries are per-layer overrides
    (``per_layer_config = {5: {"head_dim": 512}}``; not ``id2label = {0: "LABEL_0"}``)."""
    if not isinstance(value, dict) or not value:
        return False
    if not all(isinstance(v, dict) for v in value.values()):
        return False
    indices = [_layer_index(k) for k in value]
    return all(i is not None and 0 <= i < n for i in indices)


def _remap_layer_keyed(
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


def _drop_layer_keyed(default: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
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
            keys = [x for x, y in v.items() if isinstance(old_n, int) and _layer_keyed(y, old_n)]
            v = {x: y for x, y in v.items() if x not in keys}
            dropped = dropped or bool(keys)
        elif isinstance(d.get("num_hidden_layers"), int) and _layer_keyed(
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
    derived = _drop_layer_keyed(default, kw)
    if derived is not None:
        out.append(derived)
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
    d = default.to_dict()
    filled = [k for k, v in kw.items() if isinstance(v, dict) and k in d and d[k] is None]
    if filled:
        out += [{k: v for k, v in x.items() if k not in filled} for x in list(out)]
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


def _first_consistent(cls, default, kw: dict[str, Any]) -> tuple[Any, Exception | None]:
    """The first of ``_variants`` the class accepts with consistent layer indices, and
    the first error a variant raised."""
    last: Exception | None = None
    for variant in _variants(cls, default, kw):
        try:
            candidate = _construct(cls, variant)
        except Exception as e:
            last = last or e
            continue
        _rebuild_nested(candidate, default)
        if _consistent(candidate, default, kw):
            return candidate, None
    return None, last


def _agreeing(error: Exception, kw: dict[str, Any]) -> dict[str, Any] | None:
    """Overrides ``kw`` changed so that the relation ``error`` states holds (see
    ``relations.py``); None when it names none among the overridden keys."""
    from prefixlint.introspect.relations import fix_overrides

    return fix_overrides(str(error), kw)


# "num_attention_heads (16) must be the same as num_key_value_heads (8)": a config's own
# validator names two sizes it wants equal.
_EQUAL = re.compile(r"(\w+) \(\d+\) must (?:be the same as|be equal to|equal) (\w+) \(\d+\)")


def _construct(cls: type, kw: dict[str, Any], attempts: int = 4) -> Any:
    """``cls(**kw)``; when the config's validator says two shrunk sizes must be equal,
    the second takes the first's value (in ``kw`` and its nested dicts) and it is tried
    again: the shrink table knows no such family-specific constraint."""
    kw = dict(kw)
    for _ in range(attempts):
        try:
            return cls(**kw)
        except Exception as e:
            m = _EQUAL.search(str(e))
            if m is None or not _equalise(kw, m.group(1), m.group(2)):
                raise
    return cls(**kw)


def _equalise(kw: dict[str, Any], first: str, second: str) -> bool:
    changed = False
    for scope in [kw, *(v for v in kw.values() if isinstance(v, dict))]:
        if first in scope and second in scope and scope[first] != scope[second]:
            scope[second] = scope[first]
            changed = True
    return changed


def _rebuild_nested(cfg: Any, default: Any) -> None:
    """A composite config whose constructor takes a sub-config under another name
    (DeepseekVLV2's ``language_config`` for ``text_config``) keeps the shrunk one passed
    under the attribute's name as a plain dict: it becomes its default's class again."""
    for k, sub in vars(default).items():
        value = vars(cfg).get(k)
        if isinstance(value, dict) and hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
            with contextlib.suppress(Exception):
                setattr(cfg, k, type(sub)(**value))


def synth_config(arch: str, num_layers: int = 4, model_cls: type | None = None):
    errors = []
    for mt in arch_to_model_types(arch, model_cls) or []:
        try:
            cls = config_class(mt)
            default = cls()
            kw = shrink_kwargs(default, num_layers)
            cfg, last = _first_consistent(cls, default, kw)
            for _ in range(3):
                # The class names two of its values that must agree (``num_attention_heads
                # (16) must be the same as num_key_value_heads (8)``): make them agree.
                fixed = None if cfg is not None or last is None else _agreeing(last, kw)
                if fixed is None and cfg is None and last is not None:
                    fixed = rescaled(last, kw, default)  # a value tied to a shrunk size
                if fixed is None:
                    break
                kw = fixed
                cfg, last = _first_consistent(cls, default, kw)
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
        mapped = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or causal_lm_named(model_type)
        if isinstance(declared, (list, tuple)) and declared:
            sub.architectures = list(declared)
        elif isinstance(mapped, str):
            sub.architectures = [mapped]


def causal_lm_named(model_type: str) -> str | None:
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
    _rename_sub_config_keys(type(cfg), Path(folder, "config.json"))
    return ConfigSource(folder, origin)


_POPPED_INTO = re.compile(r"self\.(\w+)\s*=\s*\w+\(\s*\*\*\s*kwargs\.pop\(\s*[\"'](\w+)[\"']")


def _rename_sub_config_keys(cls: type, path: Path) -> None:
    """``self.text_config = TextConfig(**kwargs.pop("language_config", {}))``: the config
    saves the attribute's name but loads another; the saved file is given the name its
    constructor reads, so the reloaded config has the shrunk sub-config."""
    import inspect
    import json

    try:
        source = inspect.getsource(cls.__init__)
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, TypeError, ValueError):
        return
    renamed = False
    for attr, key in _POPPED_INTO.findall(source):
        if attr != key and attr in data and key not in data:
            data[key] = data.pop(attr)
            renamed = True
    if renamed:
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _exactly_mapped(arch: str) -> bool:
    """vLLM or transformers map ``arch`` to a model type (not a guess from its name)."""
    from transformers.models.auto import modeling_auto

    arch_types = vllm_architecture_types()

    if arch in arch_types:
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
_NONE_USE = re.compile(
    r"'NoneType' object (is not (subscriptable|iterable)|has no attribute)"
    r"|object of type 'NoneType' has no len\(\)|not 'NoneType'"
)
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
                rf"getattr\(\s*[\w.\[\]]+\s*,\s*[\"']{attr}[\"']\s*,\s*{_LITERAL}\s*\)", text
            )
            if m:
                hints.default = ast.literal_eval(m.group(1))
        if hints.default is None:
            hints.default = _field_default(name, text)
        for m in re.finditer(rf"{ref}(?:\[[^\]\n]*\])?\s*(?:==|!=)\s*{_LITERAL}", text):
            value = ast.literal_eval(m.group(1))
            if value not in hints.compared:
                hints.compared.append(value)
        for m in re.finditer(rf"{_LITERAL}\s*(?:==|!=|in)\s*{ref}", text):
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
                case = re.match(rf"\s*case\s+{_LITERAL}\s*(?:\|[^:]*)?:", line)
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
        (("num_hidden_layers", "num_layers", "n_layers"), _num_layers(config)),
        # after the activations: ``projector_hidden_act`` names a function, not a width
        (("dim_model_base", "hidden"), hidden),
        (("ratio", "rate"), 1),
        (("score_func", "scoring_func"), "softmax"),
        (("use_", "is_", "_bias", "enable", "norm_topk", "_norm", "norm_", "interleaved"), False),
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
        return _num_layers(config)  # a layer count (``config.layers`` of a vision tower)
    if n == "layer_types":
        return ["full_attention"] * _num_layers(config)
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


def _function_reads(error: BaseException) -> list[str]:
    """Attribute names read (``x.name``, ``getattr(x, "name")``) in the failing function
    up to the failing line: a section read into a local first (``draft_config =
    config.dflash_config``) and indexed lines later."""
    import linecache
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return []
    frame, line = frames[-1]
    path, first = frame.f_code.co_filename, frame.f_code.co_firstlineno
    text = "".join(linecache.getline(path, n) for n in range(first, line + 1))
    found = re.findall(r"\.(\w+)\b", text) + re.findall(r"getattr\(\s*\w+\s*,\s*[\"'](\w+)", text)
    return list(dict.fromkeys(reversed(found)))  # nearest read first


_NOTHING = object()


def _required_empty(error: BaseException, attr: str) -> Any:
    """The value the failing line requires ``attr`` to have when the feature is absent:
    None for ``assert config.yoco_layer is None``, [] for ``assert
    len(config.moe_layers) == 0`` (a checkpoint without it has that); else _NOTHING."""
    import linecache
    import traceback

    name = re.escape(attr)
    # the read may sit a few frames up (inside transformers' __getattribute__)
    for frame, line in list(traceback.walk_tb(error.__traceback__))[-3:]:
        text = linecache.getline(frame.f_code.co_filename, line)
        if re.search(rf"\.{name}\s+is\s+None\b", text):
            return None
        if re.search(rf"len\(\s*[\w.]*\.{name}\s*\)\s*==\s*0\b", text):
            return []
    return _NOTHING


def _give_value(configs: list[Any], attr: str, cls_name: str, value: Any) -> str | None:
    for config in configs:
        if type(config).__name__ == cls_name and not hasattr(config, attr):
            setattr(config, attr, value)
            return attr
    return None


def _missing_key(error: KeyError, configs: list[Any], texts: list[str]) -> str | None:
    """``config.dflash_config["conv_kernel_size"]``: a dict the config holds (a section
    of a checkpoint's config.json) lacks a key the failing line reads; it gets a value
    guessed as for an attribute of that name. Returns ``section.key``."""
    key = error.args[0] if error.args else None
    if not isinstance(key, str):
        return None
    for attr in _line_attributes(error) + _function_reads(error):
        for config in configs:
            section = vars(config).get(attr)
            if isinstance(section, dict) and key not in section:
                value = guess_attribute(key, config, texts)
                if value is None:
                    return None
                section[key] = value
                return f"{attr}.{key}"
    return None


def repair(
    error: BaseException, configs: list[Any], extra_files: list[str] | None = None
) -> str | None:
    """Give the config the attribute ``error`` says it lacks (an AttributeError), or the
    one the failing line used while it was None; returns its name."""
    demanded = _demanded_value(error, configs) or give_guard_demands(error, configs)
    if demanded is not None:
        return demanded
    if isinstance(error, KeyError):
        return _missing_key(error, configs, _source_texts(error, extra_files))
    for mechanism in (
        _checked_class,
        _asserted_literal,
        _asserted_argument,
        _dispatched_value,
        _zero_refused,
        _sub_model_architecture,
        _scalar_as_pair,
        _unpacked_stand_in,
        _unpacked_config,
    ):
        fixed = mechanism(error, configs)
        if fixed is not None:
            return fixed
    m = _MISSING.search(str(error)) if isinstance(error, AttributeError) else None
    texts = _source_texts(error, extra_files)
    copied = _copied_mapping(error, configs, texts)
    if copied is not None:
        return copied
    if m is not None and m.group(1) not in ("NoneType", "list", "tuple"):
        cls_name, attr = m.groups()
        if is_sub_config(attr):
            for config in configs:
                if type(config).__name__ == cls_name and not hasattr(config, attr):
                    setattr(config, attr, sub_config(attr, config))
                    return attr
            return None
        required = _required_empty(error, attr)
        if required is not _NOTHING:
            return _give_value(configs, attr, cls_name, required)
        return _repair_missing(error, configs, cls_name, attr, texts)
    stated = _repair_stated(error, configs, texts)
    if stated:  # "" (its kind, nothing given): the mechanisms below may still give it
        return stated
    if isinstance(error, AttributeError) and _SEQUENCE_AS_TEXT.search(str(error)):
        # ``config.x.strip().split(",")``: the checkpoint writes the list as text
        for attr in _line_attributes(error):
            for config in configs:
                value = vars(config).get(attr)
                if isinstance(value, (list, tuple)):
                    setattr(config, attr, ",".join(map(str, value)))
                    return attr
        return None
    stated = _repair_checked(error, configs, texts)
    if stated is not None:
        return stated
    if isinstance(error, AssertionError):
        return _repair_asserted(error, configs, texts)
    if isinstance(error, (TypeError, AttributeError)) and _NONE_USE.search(str(error)):
        attr = _none_attribute(error, configs)
        if attr is not None:
            return _give_guess(
                configs, attr, texts, lambda c: attr in vars(c) and getattr(c, attr) is None
            )
    # a local the config gave None as a default (``getattr_iter(config, names, None)``)
    return _give_absent(configs, none_reads(error), texts)


def _repair_asserted(error: BaseException, configs: list[Any], texts: list[str]) -> str | None:
    """An ``assert`` no stated-value repair answered: a literal it demands, a flag or size
    the default leaves off, or a name read with ``getattr_iter`` that the config lacks."""
    # ``assert x in ["silu", "sigmoid"]`` on a value read from the config: the first
    for attr, value in assertion_demands(error).items():
        for config in _with_nested(configs):
            if value is True and not isinstance(vars(config).get(attr), (bool, type(None))):
                continue  # a truth test of a size or a text: not a flag to turn on
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
    return _give_absent(configs, asserted_reads(error), texts)


def _give_absent(configs: list[Any], names: list[str], texts: list[str]) -> str | None:
    """The first of ``names`` no config has, given a guessed value on the config."""
    for attr in names:
        if configs and not any(hasattr(c, attr) for c in configs):
            value = guess_attribute(attr, configs[0], texts)
            if value is not None:
                setattr(configs[0], attr, value)
                return attr
    return None


_NAMED_NONE = re.compile(r"\b(\w+)\s*=\s*None\b")


def _repair_checked(error: BaseException, configs: list[Any], texts: list[str]) -> str | None:
    """Repairs a check's own words or line decide: an ``assert`` comparing a config
    attribute with a literal (the model supports only that value), a message naming a
    config attribute that is None (``unsupported output_gate_type=None``), and two counts
    that must agree (``num_heads (2) is not divisible by num_kv_heads (8)``)."""
    from prefixlint.introspect.relations import make_consistent

    if not isinstance(error, (AssertionError, ValueError)):
        return None
    if isinstance(error, AssertionError):
        # (a literal the assert compares with: ``_asserted_literal``, run before this)
        attr = _asserted_present(error, configs, texts)
        if attr is not None:
            return attr
    for name in _NAMED_NONE.findall(str(error)):
        # The value was read where the check raised (often vLLM's layer, not the model
        # file): its file says how the value is used (``getattr(config, name, "silu")``).
        found = _give_guess(
            configs,
            name,
            [*_raising_file_text(error), *texts],
            lambda c, n=name: n in vars(c) and getattr(c, n) is None,
        )
        if found is not None:
            return found
    return make_consistent(str(error), configs, {**SHRINK, **FILL_NONE})


def _raising_file_text(error: BaseException) -> list[str]:
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return []
    with contextlib.suppress(OSError):
        return [Path(frames[-1][0].f_code.co_filename).read_text(encoding="utf-8")]
    return []


_NOT_NONE = re.compile(r"^\s*assert\s+(\w+)\s+is\s+not\s+None\b")


def _asserted_present(error: BaseException, configs: list[Any], texts: list[str]) -> str | None:
    """``rope = getattr(config, "rope_parameters", None)`` ... ``assert rope is not None``:
    the local came from the config earlier in the function (any number of lines above);
    give the config a guessed value where it has none."""
    import linecache
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return None
    frame, line = frames[-1]
    path = frame.f_code.co_filename
    m = _NOT_NONE.match(linecache.getline(path, line))
    if m is None:
        return None
    local = re.escape(m.group(1))
    source = re.compile(
        rf"\b{local}\s*=\s*(?:getattr\(\s*(?:self\.)?\w*config\s*,\s*[\"'](\w+)[\"']"
        rf"|(?:self\.)?\w*config\.(\w+)\s*$)"
    )
    for n in range(line - 1, max(frame.f_code.co_firstlineno, line - 60) - 1, -1):
        found = source.search(linecache.getline(path, n))
        if found is None:
            continue
        attr = found.group(1) or found.group(2)
        return _give_guess(
            configs,
            attr,
            [*_raising_file_text(error), *texts],
            lambda c, a=attr: getattr(c, a, None) is None,
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
    config_registry = vllm_config_registry()

    model_type = getattr(config, "model_type", "") or ""
    try:
        # a lazy registry: ``[]`` loads the class, ``.get`` may not
        cls = config_registry[model_type] if model_type in config_registry else None  # noqa: SIM401
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
            if value is None and not _field_default_none(attr, texts):
                return None
            setattr(config, attr, value)
            return attr
    return None


def _field_default_none(name: str, texts: Any) -> bool:
    """The model's own dataclass declares ``name: T | None = None``: it copies every
    field from the config (``getattr(hf_config, field.name)``), and None is its value
    when a checkpoint leaves the field out."""
    pattern = re.compile(rf"^[ \t]+{re.escape(name)}\s*:[^=\n]+=\s*None\s*(?:#.*)?$", re.M)
    return any(pattern.search(t) for t in texts or [])


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


def _failing_frames(error: BaseException, depth: int = 4) -> list[Any]:
    """The innermost ``depth`` frames of ``error`` (innermost first)."""
    import traceback

    return [f for f, _ in traceback.walk_tb(error.__traceback__)][-depth:][::-1]


def _failing_line(error: BaseException, after: int = 0) -> str:
    """The line that raised ``error``, with ``after`` more (a call spread over lines)."""
    import linecache
    import traceback

    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return ""
    frame, line = frames[-1]
    return "".join(
        linecache.getline(frame.f_code.co_filename, n) for n in range(line, line + after + 1)
    )


_ISINSTANCE = re.compile(r"isinstance\(\s*([\w.]+)\s*,\s*\(?\s*([\w.,\s]+?)\s*\)?\s*\)")


def _checked_class(error: BaseException, configs: list[Any]) -> str | None:
    """The model refused prefixlint's stand-in sub-config (``Unsupported vision config:
    SubConfig``, ``assert isinstance(config.vision_config, PixtralVisionConfig)``): the
    code that refused it names, in an ``isinstance`` check, the config classes it takes.
    The stand-in is replaced by the first of them, default-constructed and shrunk."""
    import inspect

    from prefixlint.introspect.subconfigs import is_stand_in

    if "SubConfig" not in str(error) and not isinstance(error, AssertionError):
        return None
    for frame in _failing_frames(error):
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            continue
        for held, names in _ISINSTANCE.findall(source):
            attr = held.rsplit(".", 1)[-1]
            for owner in configs:
                current = vars(owner).get(attr)
                if not is_stand_in(current):
                    continue
                for name in (n.strip() for n in names.split(",")):
                    value = _shrunk_instance(frame.f_globals.get(name))
                    if value is not None:
                        setattr(owner, attr, value)
                        return attr
    return None


def _shrunk_instance(cls: Any) -> Any:
    """A default instance of the config class ``cls``, shrunk; None if it is none."""
    from transformers import PretrainedConfig

    if not (isinstance(cls, type) and issubclass(cls, PretrainedConfig)):
        return None
    try:
        default = cls()
        return _construct(cls, shrink_kwargs(default, 2))
    except Exception:
        return None


_COMPARED_LITERAL = re.compile(
    rf"(?:config|cfg)\w*(?:\.\w+)*\.(?P<attr>\w+)\s*(?:==|\bin\b)\s*\(?\s*(?P<value>{_LITERAL})"
)


_LITERAL_COMPARED = re.compile(
    rf"(?P<value>{_LITERAL})\s*==\s*(?:self\.)?(?:config|cfg)\w*(?:\.\w+)*\.(?P<attr>\w+)"
)


def _asserted_literal(error: BaseException, configs: list[Any]) -> str | None:
    """``assert config.layer_norm_type == "rms"`` (or ``"rms" == config.x``, or ``in``):
    the model accepts one value of the attribute, and says which (real checkpoints of it
    have that value)."""
    import ast

    if not isinstance(error, AssertionError):
        return None
    line = _failing_line(error)
    if "assert" not in line:
        return None
    pairs = [(m.group("attr"), m.group("value")) for m in _COMPARED_LITERAL.finditer(line)]
    pairs += [(m.group("attr"), m.group("value")) for m in _LITERAL_COMPARED.finditer(line)]
    for attr, literal in pairs:
        value = ast.literal_eval(literal)
        for config in configs:
            if attr in vars(config) and getattr(config, attr) != value:
                setattr(config, attr, value)
                return attr
    return None


_SCALAR_USE = re.compile(r"'int' object is not (iterable|subscriptable)")


def _scalar_as_pair(error: BaseException, configs: list[Any]) -> str | None:
    """``config.image_size[0]``, ``tuple(config.input_size)``: the model reads as a pair
    what the synthesised config holds as one number (checkpoints write ``[h, w]``)."""
    if not (isinstance(error, TypeError) and _SCALAR_USE.search(str(error))):
        return None
    line = _failing_line(error)
    # ``config.x[0]`` on the line; else a local read from the config just above it
    names = re.findall(r"\.(\w+)", line) + [
        attr
        for local, attr in re.findall(
            r"(\w+)\s*=\s*(?:self\.)?\w*config\.(\w+)", _model_lines(error)
        )
        if re.search(rf"\b{local}\b", line)
    ]
    for attr in names:
        for config in configs:
            value = vars(config).get(attr)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(config, attr, [value, value])
                return attr
            # ``config.window_sizes[layer_idx][0]``: a per-layer list of pairs
            indexed_twice = re.search(rf"\.{attr}\[[^\]]+\]\[", line)
            ints = isinstance(value, list) and value and all(_is_int(v) for v in value)
            if indexed_twice and ints:
                setattr(config, attr, [[v, v] for v in value])
                return attr
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_UNEXPECTED_KW = re.compile(r"(\w+)\.__init__\(\) (got an unexpected keyword|missing \d+ required)")


def _unpacked_stand_in(error: BaseException, configs: list[Any]) -> str | None:
    """``Encoder(**config.audio_encoder_conf)`` refused a key of prefixlint's stand-in
    mapping, or missed one: the callee's signature says which keys it takes."""
    import inspect

    from prefixlint.introspect.subconfigs import fit_to_callee, is_stand_in

    m = _UNEXPECTED_KW.search(str(error)) if isinstance(error, TypeError) else None
    if m is None:
        return None
    line = _failing_line(error, after=3)
    frames = _failing_frames(error, 1)
    callee = frames[0].f_globals.get(m.group(1)) if frames else None
    if not isinstance(callee, type):
        return None
    try:
        params = dict(inspect.signature(callee.__init__).parameters)
    except (TypeError, ValueError):
        return None
    params.pop("self", None)
    for config in configs:
        for attr, value in vars(config).items():
            if is_stand_in(value) and "**" in line and attr in line:

                def guess(name: str, annotation: Any, sub: Any = value) -> Any:
                    found = guess_attribute(name, sub)
                    if found is None and annotation in (int, "int"):
                        found = 16  # a size: small, divides by 1, 2, 4, 8
                    return found

                if fit_to_callee(value, params, guess):
                    return attr
    return None


def _model_lines(error: BaseException, before: int = 2) -> str:
    """The line of the innermost model-code frame (``/models/``) of ``error``, with the
    ``before`` lines above it (a sub-config read into a local first)."""
    import linecache
    import traceback

    for frame, line in reversed(list(traceback.walk_tb(error.__traceback__))):
        f = frame.f_code.co_filename
        if "/models/" in f and "/transformers/" not in f:
            return "".join(linecache.getline(f, n) for n in range(max(1, line - before), line + 1))
    return ""


_NOT_MAPPING = re.compile(r"argument after \*\* must be a mapping, not (\w+)")


def _unpacked_config(error: BaseException, configs: list[Any]) -> str | None:
    """``Namespace(**config.vision_config)``, ``from_dict(config.vision_config)``: the model
    unpacks a sub-config that checkpoints store as a dict. A config object there becomes a
    config that is also a mapping (same values); a None one, a stand-in sub-config."""
    from prefixlint.introspect.subconfigs import as_mapping, is_sub_config, sub_config

    m = _NOT_MAPPING.search(str(error)) if isinstance(error, TypeError) else None
    if m is None:
        return None
    for attr in re.findall(r"\.(\w+)", _model_lines(error)):
        if not is_sub_config(attr):
            continue
        for config in configs:
            value = vars(config).get(attr, False)
            if value is None:
                setattr(config, attr, sub_config(attr, config))
                return attr
            if hasattr(value, "to_dict") and not hasattr(value, "keys"):
                setattr(config, attr, as_mapping(value))
                return attr
    return None


_UNPACKED = re.compile(r"(?:\*\*\s*|from_dict\(\s*)[\w.]*?(\w+)\s*[,)]")


def _copied_mapping(error: BaseException, configs: list[Any], texts: list[str]) -> str | None:
    """``Namespace(**config.vision_config).num_positions``,
    ``PreTrainedConfig.from_dict(vision_config).x``: the object that lacks the attribute
    is a copy the model made of a sub-config it unpacked, made again at each build. The
    attribute goes on the sub-config it was copied from."""
    from prefixlint.introspect.subconfigs import is_sub_config, sub_config

    m = _MISSING.search(str(error)) if isinstance(error, AttributeError) else None
    if m is None or any(type(c).__name__ == m.group(1) for c in configs):
        return None
    attr = m.group(2)
    unpacked = {name for text in texts for name in _UNPACKED.findall(text)}
    for holder in configs:
        for name, value in list(vars(holder).items()):
            if name not in unpacked or not hasattr(value, "keys") or hasattr(value, attr):
                continue
            if not hasattr(value, "to_dict"):
                continue
            guess = (
                sub_config(attr, value)
                if is_sub_config(attr)
                else guess_attribute(attr, value, texts)
            )
            if guess is None:
                return None
            setattr(value, attr, guess)
            return attr
    return None


_ASSERT_LOCAL = re.compile(rf"assert\s+(\w+)\s*(?:==|\bin\b)\s*\(?\s*(?P<value>{_LITERAL})")


def _asserted_argument(error: BaseException, configs: list[Any]) -> str | None:
    """``assert hidden_act == "silu"`` on a parameter the caller passed as
    ``hidden_act=adapter_config.hidden_act``: that config attribute gets the value."""
    import ast
    import linecache
    import traceback

    if not isinstance(error, AssertionError):
        return None
    m = _ASSERT_LOCAL.search(_failing_line(error))
    frames = list(traceback.walk_tb(error.__traceback__))
    if m is None or len(frames) < 2:
        return None
    name, value = m.group(1), ast.literal_eval(m.group("value"))
    caller, line = frames[-2]
    call = "".join(linecache.getline(caller.f_code.co_filename, n) for n in range(line, line + 12))
    passed = re.search(rf"\b{name}\s*=\s*([\w.]+)\.(\w+)\s*[,)]", call)
    if passed is None:
        return None
    path, attr = passed.group(1).split("."), passed.group(2)
    holder = caller.f_locals.get(path[0])
    for part in path[1:]:
        holder = getattr(holder, part, None)
    if not any(holder is c for c in configs):
        # a copy the model made (a dataclass built from the sub-config of that name)
        held = [vars(c).get(path[-1]) for c in configs]
        holder = next((h for h in held if h is not None and hasattr(h, "to_dict")), None)
    if holder is None or getattr(holder, attr, None) == value:
        return None
    setattr(holder, attr, value)
    return attr


def _dispatched_value(error: BaseException, configs: list[Any]) -> str | None:
    """``if config.model_type == "qwen3_5_text": ... else: raise ValueError("Invalid
    model_type llama")``, ``if self.tile_tag == "2D": ... else: raise ValueError("Only 2D
    tile_tag is supported, got: tile_tag")``: the failing function dispatches on a config
    value, names the ones it takes, and the message quotes the value it got. The config
    takes the first value named (what the family's checkpoints hold)."""
    import inspect

    message = str(error)
    if not isinstance(error, (ValueError, NotImplementedError, AssertionError)):
        return None
    for frame in _failing_frames(error, 2):
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            continue
        named: dict[str, list[str]] = {}
        for attr, value in re.findall(r"\.(\w+)\s*==\s*[\"']([^\"'\n]+)[\"']", source):
            named.setdefault(attr, []).append(value)
        local = frame.f_locals.get("config")
        for attr, values in named.items():
            for config in [c for c in configs if c is local] + configs:
                try:
                    current = getattr(config, attr)
                except Exception:
                    continue
                if isinstance(current, str) and current in message and current not in values:
                    with contextlib.suppress(Exception):
                        setattr(config, attr, values[0])
                        return attr
        # ``if self.head_dim == 512: ... elif self.head_dim == 128: ... else: raise
        # ValueError(f"Unsupported head_dim ...: {self.head_dim}")``: a shrunk size the
        # code does not take; the smallest it names (nearest the shrunk one)
        sizes: dict[str, list[int]] = {}
        for attr, value in re.findall(r"\.(\w+)\s*==\s*(\d+)\b", source):
            sizes.setdefault(attr, []).append(int(value))
        for attr, values in sizes.items():
            if attr not in message:
                continue
            for config in configs:
                current = vars(config).get(attr)
                if (
                    isinstance(current, int)
                    and not isinstance(current, bool)
                    and current not in values
                    and re.search(rf"\b{current}\b", message)
                ):
                    with contextlib.suppress(Exception):
                        setattr(config, attr, min(values))
                        return attr
    return None


def _zero_refused(error: BaseException, configs: list[Any]) -> str | None:
    """``if self.tp_size > config.num_experts: raise ValueError(...)`` with a 0 the
    synthesis took from a ``getattr(config, "num_experts", 0)`` elsewhere: the model
    refuses the 0 on the line that raised (or the test just above), so the attribute
    gets the value its name suggests."""
    if not isinstance(error, (ValueError, AssertionError)):
        return None
    for attr in _line_attributes(error):
        for config in configs:
            value = vars(config).get(attr)
            if value == 0 and isinstance(value, int) and not isinstance(value, bool):
                guess = guess_attribute(attr, config)
                if isinstance(guess, int) and guess:
                    setattr(config, attr, guess)
                    return attr
    return None


_SPECIAL_TOKEN = re.compile(r"[\"'](<[^\"'\s<>]{1,40}>)[\"']")


def write_tokenizer(folder: str, files: list[str]) -> None:
    """A word-level tokenizer in ``folder``: unknown, padding, begin and end tokens and
    the special tokens (``"<image>"``, ``"<|vision_pad|>"``) the model's ``files`` name,
    all inside the shrunk vocabulary. Enough for a model that looks a token id up at
    construction; a meta build tokenizes nothing."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials: list[str] = []
    for text in _source_texts(None, files):
        specials += [t for t in _SPECIAL_TOKEN.findall(text) if t not in specials]
    words = ["<unk>", "<pad>", "<s>", "</s>", *specials][:256]
    vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    fast.save_pretrained(folder)


def _sub_model_architecture(error: BaseException, configs: list[Any]) -> str | None:
    """``init_vllm_registered_model(hf_config=self.text_config)`` raised "No model
    architectures are specified": a checkpoint's language sub-config names its own
    architecture; the synthesised one gets vLLM's causal LM of its model type."""
    import traceback

    if "No model architectures are specified" not in str(error):
        return None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_name != "init_vllm_registered_model":
            continue
        hf = frame.f_locals.get("hf_config")
        # its own model type, else a base config class's (a family's text config)
        types = [getattr(k, "model_type", None) for k in type(hf).__mro__]
        arch = next((a for a in map(_causal_lm_of, types) if a), None)
        if hf is None or getattr(hf, "architectures", None) or arch is None:
            return None
        hf.architectures = [arch]
        return "architectures"
    return None


def _causal_lm_of(model_type: str | None) -> str | None:
    """vLLM's registered causal LM architecture for ``model_type``, or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from vllm import ModelRegistry

    arch_types = vllm_architecture_types()

    if not model_type:
        return None
    supported = set(ModelRegistry.get_supported_archs())
    names = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)]
    names += [a for a, mt in arch_types.items() if mt == model_type]
    for name in names:
        if isinstance(name, str) and name in supported and name.endswith("ForCausalLM"):
            return name
    return None
