"""Synthesis: architecture -> model type -> config class (``model_types.py``);
default-construct it, shrink it (``shrink.py``), and construct again with the overrides
so that the config's own validation sees consistent values. A validator that says two
values must agree, or one must have a stated value, gets them (``construct``)."""

from __future__ import annotations

import contextlib
from typing import Any

from prefixlint.introspect.configs.demands import stated_value
from prefixlint.introspect.configs.model_types import (
    arch_to_model_types,
    causal_lm_named,
    config_class,
)
from prefixlint.introspect.configs.relations import fix_overrides
from prefixlint.introspect.configs.rescale import rescaled
from prefixlint.introspect.configs.shrink import (
    SHRINK,
    drop_layer_keyed,
    index_list_keys,
    shrink_kwargs,
)


class ConfigGap(LookupError):
    """No config could be found or synthesised for an architecture."""


def _variants(cls, default, kw: dict[str, Any]) -> list[dict[str, Any]]:
    """Override sets to try, best first. Index lists some configs derive themselves from
    the per-layer lists (Zamba2's ``hybrid_layer_ids`` from ``layers_block_type``): a
    trimmed copy passed in would contradict them, so the config's own derivation goes
    first and is kept when its indices exist. Nested configs may refuse keys the parent's
    ``to_dict`` adds (``_name_or_path``): then only their non-default values are passed."""
    out = []
    derived = drop_layer_keyed(default, kw)
    if derived is not None:
        out.append(derived)
    index_keys = index_list_keys(default, kw)
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
    for k in index_list_keys(default, kw):
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
            candidate = construct(cls, variant)
        except Exception as e:
            last = last or e
            continue
        _rebuild_nested(candidate, default)
        if _consistent(candidate, default, kw):
            return candidate, None
    return None, last


def construct(cls: type, kw: dict[str, Any], attempts: int = 8) -> Any:
    """``cls(**kw)``, the overrides fitted to what the class's validator says when it
    refuses them: two values that must agree (``num_attention_heads (16) must be the same
    as num_key_value_heads (8)``, ``... divisible by ...``: ``relations.py``), or one that
    must hold a stated value (``num_kv_shared_layers must be 0, got 2``). The shrink
    table knows no such family-specific constraint; a checkpoint meets it."""
    kw = dict(kw)
    for _ in range(attempts):
        try:
            return cls(**kw)
        except Exception as e:
            fixed = fix_overrides(str(e), kw) or _with_stated_value(e, kw)
            if fixed is None:
                raise
            kw = fixed
    return cls(**kw)


def _with_stated_value(error: BaseException, kw: dict[str, Any]) -> dict[str, Any] | None:
    """``kw`` with the value ``error`` states for an attribute, in each dict that holds
    it (its own, a sub-config's), else in every sub-config (the validator is a
    sub-config's and the value a default), else at the top; None when nothing changes."""
    stated = stated_value(error)
    if stated is None:
        return None
    attr, value = stated
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in kw.items()}
    dicts = [out, *(v for v in out.values() if isinstance(v, dict))]
    holders = [d for d in dicts if attr in d] or dicts[1:] or dicts[:1]
    changed = False
    for d in holders:
        if attr not in d or d[attr] != value:
            d[attr] = value
            changed = True
    return out if changed else None


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
    """A small config for ``arch``: the first of its model types whose config class
    takes the shrunk defaults (``construct``) with layer indices that still exist."""
    errors = []
    for mt in arch_to_model_types(arch, model_cls) or []:
        try:
            cls = config_class(mt)
            default = cls()
            kw = shrink_kwargs(default, num_layers)
            cfg, last = _first_consistent(cls, default, kw)
            for _ in range(3):
                # a value a validator ties to a shrunk size (``mrope_section``,
                # ``vision_feature_layer``): rescaled with it (rescale.py)
                fixed = None if cfg is not None or last is None else rescaled(last, kw, default)
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
