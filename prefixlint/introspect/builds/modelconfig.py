"""vLLM's ``ModelConfig`` for a config folder, and the repairs its validation needs.

A synthesised folder holds config.json only: vLLM's validators and the model's
multimodal processing info read what a checkpoint's config holds (Ovis's
``vit_config``, a ``pooling`` field a validator lists the values of), and say so in what
they raise. What they ask is given through vLLM's own ``hf_overrides`` and the
ModelConfig is made again. (The build's own failures are repaired by
``configs/repairs/``.)"""

from __future__ import annotations

import contextlib
from typing import Any

from prefixlint.introspect.configs import guess_attribute
from prefixlint.introspect.configs.demands import (
    alias_value,
    apply_demands,
    asserted_reads,
    assertion_demands,
    choice_demands,
    raising_function_source,
    validation_cause,
)
from prefixlint.introspect.configs.repairs.reading import missing
from prefixlint.introspect.configs.subconfigs import is_sub_config, sub_config


def load_model_config(
    folder: str, dtype: str = "float32", overrides: Any = None, tokenizer: str | None = None
) -> Any:
    try:
        return _plain_model_config(folder, dtype, overrides, tokenizer)
    except Exception as e:
        if not any(w in str(e) for w in MISSING_FILES_WORDS):
            raise
        # A synthesised folder has no processor files, and ModelConfig loads the
        # processor only to ask which modalities it takes: a meta build runs no
        # processor, so the model is taken as multimodal (its towers get built).
        with _no_processor_probe():
            return _plain_model_config(folder, dtype, overrides, tokenizer)


@contextlib.contextmanager
def _no_processor_probe() -> Any:
    from vllm.config import ModelConfig

    from prefixlint.introspect.vllm_api import MULTIMODAL_PROBE

    name = MULTIMODAL_PROBE  # absent: nothing to skip
    original = ModelConfig.__dict__.get(name)
    if original is None:
        yield
        return
    setattr(ModelConfig, name, lambda self: bool(self.is_multimodal_model))
    try:
        yield
    finally:
        setattr(ModelConfig, name, original)


def _plain_model_config(
    folder: str, dtype: str = "float32", overrides: Any = None, tokenizer: str | None = None
) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(
        hf_overrides=overrides or {},
        model=folder,
        tokenizer=tokenizer,
        skip_tokenizer_init=tokenizer is None,
        dtype=dtype,
        enforce_eager=True,
        trust_remote_code=False,
        max_model_len=128,
    )


# A synthesised config folder holds config.json only: no processor or feature-extractor
# files, which multimodal models load at start-up.
MISSING_FILES_WORDS = ("image processor", "feature extractor", "load the processor")


def model_config_repaired(folder: str, attempts: int = 16) -> tuple[Any, list[str]]:
    """vLLM's ModelConfig asks the model's multimodal processing info about the config
    (``_supports_multimodal_inputs``): a synthesised config that lacks what it reads
    (Ovis's ``vit_config``) gets it, as vLLM's own ``hf_overrides`` callable applies it
    after loading (a sub-config as an object, not a dict), and the ModelConfig is made
    again."""
    extra: dict[str, Any] = {}
    guessed: list[str] = []

    def override(hf_config: Any) -> Any:
        apply_demands(hf_config, extra)
        return hf_config

    for _ in range(attempts):
        try:
            config = load_model_config(folder, overrides=override if extra else None)
            return config, list(extra) + guessed
        except AttributeError as e:
            found = missing(e)
            if found is None or found[1] in extra or found[0] in ("dict", "NoneType", "list"):
                raise
            owner, attr = found
            parent = _plain_model_config_hf(folder)
            value = sub_config(attr, parent) if is_sub_config(attr) else None
            if value is None:
                # how the validator uses it first (``== "rotary"``), then the name
                value = guess_attribute(attr, parent, raising_function_source(e))
            if value is None:
                value = alias_value(e, attr, parent)
            if value is None:
                raise
            # an attribute of a sub-config given before: set on it, else on the config
            nested = [v for v in extra.values() if type(v).__name__ == owner]
            if nested:
                setattr(nested[0], attr, value)
                guessed.append(attr)
            else:
                extra[attr] = value
        except Exception as e:
            if not _validator_demands(e, extra, folder):
                raise
    return load_model_config(folder, overrides=override), list(extra) + guessed


def _validator_demands(error: BaseException, extra: dict[str, Any], folder: str) -> bool:
    """vLLM's config validators state what a checkpoint's config holds (an ``assert``
    on a value or on the config class's name, a ``ValueError`` listing the accepted
    values of a field it found missing): add what they ask to ``extra``. An ``assert``
    on a value read from the config without saying which gets a guess from how the
    validator reads it (``getattr(..., "pooling", "avg")``)."""
    cause = validation_cause(error)
    from prefixlint.introspect.configs.guards import guard_demands

    demands = {**assertion_demands(cause), **choice_demands(cause), **guard_demands(cause)}
    texts = raising_function_source(cause)
    for name in asserted_reads(cause):
        if name not in demands and name not in extra:
            value = guess_attribute(name, _plain_model_config_hf(folder), texts)
            if value is not None:
                demands[name] = value
    # a guess made before (``activation_function="silu"``) yields to what is asked
    new = {k: v for k, v in demands.items() if k not in extra or extra[k] != v}
    extra.update(new)
    return bool(new)


def _plain_model_config_hf(folder: str) -> Any:
    from transformers import PretrainedConfig

    return PretrainedConfig.from_pretrained(folder)
