"""Sub-configs (``vision_config``, ``audio_config``, ``vit_config``, ...) for synthesised
configs of multimodal models that transformers and vLLM have no config class for.

A remote-code vision-language model reads ``config.vision_config.hidden_size`` and the
like; its llama-shaped synthesised config has no such attribute. Here it gets a small
``PretrainedConfig`` shrunk like the text one (a few layers, 16 heads, 14-pixel patches on
a 56-pixel image), and the repair loop then fills, one probe at a time, whatever else the
model reads from it. Processors are never loaded: a meta build does not run them.
"""

from __future__ import annotations

import re
from typing import Any

from prefixlint.introspect.configs.model_types import causal_lm_named

# What vision and audio encoders read most; sizes divide by tp 1, 2, 4 and 8.
ENCODER_DEFAULTS: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_heads": 16,
    "head_dim": 8,
    "num_hidden_layers": 2,
    "depth": 2,
    "num_layers": 2,
    "layers": 2,
    "image_size": 56,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_channels": 3,
    "in_channels": 3,
    "in_chans": 3,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "qkv_bias": True,
    "norm_type": "layer_norm",
    "num_mel_bins": 80,
    "max_source_positions": 64,
    "d_model": 128,
    "heads": 16,
    "merge_size": 2,
    "window_size": 56,
    "fullatt_block_indexes": [0],  # layer 0 full attention, the rest windowed
    "sampling_rate": 16000,
    "n_window": 8,
    "rope_theta": 10000.0,
    "image_token_id": 10,  # below every shrunk vocabulary
    "encoder_layers": 2,
    "encoder_attention_heads": 16,
    "encoder_ffn_dim": 256,
}
# Attribute names that hold a nested config (``vision_config``, ``vit_config``,
# ``audio_encoder_conf``, ``thinker_config``), not a value.
_SUB_CONFIG = re.compile(r"(_config|_conf|_cfg)$")
_TEXT = re.compile(r"^(text|llm|language|thinker|decoder)")
_AUDIO = re.compile(r"audio|speech|sound|whisper|acoustic")


_ONLY_KEYS = "_prefixlint_only_keys"


def is_sub_config(name: str) -> bool:
    return bool(_SUB_CONFIG.search(name))


# A config object's name where the model reads it (``config``, ``hf_config``,
# ``self.config``, ``vllm_config.model_config.hf_config``, ``text_cfg``).
_CONFIG_NAME = re.compile(r"\w*(?:config|cfg|conf)$")
_FIELD = r"\.([A-Za-z_]\w*)\b(?!\s*\()"  # a field, not a method call


def read_as_sub_config(name: str, texts: list[str]) -> bool:
    """The model's code reads a field (not a method) of ``config.<name>``
    (``config.encoder.hidden_size``, or ``enc = config.encoder`` then ``enc.num_layers``):
    a nested sub-model config a checkpoint holds, whatever its name."""
    attr = re.escape(name)
    alias = re.compile(rf"^[ \t]*(\w+)[ \t]*(?::[^=\n]*)?=[ \t]*([\w.]+)\.{attr}[ \t]*$", re.M)
    for text in texts:
        if f".{name}" not in text:
            continue
        for m in re.finditer(rf"(?<!\w)(\w+)\.{attr}{_FIELD}", text):
            if _CONFIG_NAME.search(m.group(1)):
                return True
        for m in alias.finditer(text):
            if _CONFIG_NAME.search(m.group(2)) and re.search(
                rf"(?<![\w.]){m.group(1)}{_FIELD}", text
            ):
                return True
    return False


def is_text_config(name: str) -> bool:
    """A sub-config of the language model (``text_config``, ``llm_config``, ...)."""
    return bool(_TEXT.search(name))


def sub_config(name: str, parent: Any) -> Any:
    """A small config for ``parent.<name>``: a copy of the parent's text sizes for a
    language-model sub-config, an encoder-shaped one otherwise."""
    from transformers import PretrainedConfig

    if _TEXT.search(name):
        values = {
            k: v
            for k, v in parent.to_dict().items()
            if not isinstance(v, dict) and k not in ("architectures", "auto_map")
        }
        arch = _causal_lm(getattr(parent, "model_type", ""))
        if arch is not None:
            # vLLM builds the language model by this name; the parent's would be the
            # multimodal model itself again
            values["architectures"] = [arch]
    else:
        values = dict(ENCODER_DEFAULTS)
        if _AUDIO.search(name):
            # an audio encoder's window is its STFT window (25 ms at 16 kHz): enough
            # frequency bins for its mel filters, unlike a vision tower's window
            values.update(window_size=400, hop_length=160)
        out_size = getattr(parent, "hidden_size", None)
        if isinstance(out_size, int):
            values["out_hidden_size"] = out_size  # projector output: the text width
    return _mapping_config(PretrainedConfig)(**values)


def _mapping_config(base: type) -> type:
    """A config that is also a mapping: some models unpack their sub-config
    (``Encoder(**config.audio_encoder_conf)``), checkpoints storing it as a dict."""

    common = set(base().to_dict())  # what every config carries (transformers_version)

    class SubConfig(base):  # type: ignore[misc, valid-type]
        def keys(self) -> Any:
            only = self.__dict__.get(_ONLY_KEYS)
            if only is not None:  # what the callee that unpacks it takes (fit_to_callee)
                return [k for k in only if k in self.__dict__]
            return [
                k
                for k in self.to_dict()
                if (k not in common or k in ENCODER_DEFAULTS) and not k.startswith("_")
            ]

        def __getitem__(self, key: str) -> Any:
            return self.to_dict()[key]

    return SubConfig


def is_stand_in(value: Any) -> bool:
    """A sub-config made here (not a checkpoint's class)."""
    return type(value).__name__ == "SubConfig" and hasattr(value, "keys")


def fit_to_callee(sub: Any, params: dict[str, Any], guess: Any) -> bool:
    """Make the stand-in ``sub`` unpack (``Encoder(**sub)``) into exactly the callee's
    keyword parameters ``params`` (name -> ``inspect.Parameter``): keys the callee does not
    take are left out, required ones it lacks get ``guess(name, annotation)``. A callee
    that takes ``**kwargs`` keeps every key. False when nothing changes or a required
    value cannot be guessed."""
    import inspect

    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    names: list[str] = []
    added = False
    for name, p in params.items():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if name not in sub.__dict__:
            if p.default is not inspect.Parameter.empty:
                continue
            value = guess(name, p.annotation)
            if value is None:
                return False
            setattr(sub, name, value)
            added = True
        names.append(name)
    if takes_any:
        return added
    if sub.__dict__.get(_ONLY_KEYS) == names:
        return False
    sub.__dict__[_ONLY_KEYS] = names
    return True


def as_mapping(config: Any) -> Any:
    """A copy of ``config`` (same class, same values) that also unpacks as a mapping."""
    return _mapping_config(type(config))(**config.to_dict())


def _causal_lm(model_type: str) -> str | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    return found if isinstance(found, str) else causal_lm_named(model_type)
