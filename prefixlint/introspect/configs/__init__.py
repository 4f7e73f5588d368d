"""Phase 2's configs: where an architecture's config comes from, and how a synthesised
one is made to build.

- ``sources.py``: ``--config``, then pyproject's ``[tool.prefixlint.configs]``, then
  synthesis, and a Llama-shaped config for a remote-code architecture.
- ``model_types.py``: architecture -> model type -> config class (vLLM's tables first,
  then transformers').
- ``shrink.py``: the default config shrunk to a few layers of tiny consistent sizes.
- ``synthesis.py``: constructing the shrunk config, its validators satisfied.
- ``subconfigs.py``: stand-in sub-configs for towers no config class describes.
- ``hints.py``: values guessed from how the model's code uses an attribute, then its name.
- ``demands.py``, ``relations.py``: what a failing check states (a value, two counts
  that must agree), read from its line or message.
- ``repairs/``: one repair per failure a probe build raises, in one ordered table.
- ``seed.py``, ``tokenizer.py``: the repair loop's last resort, a tokenizer for models
  that read one at construction.

No network: nothing is fetched from the hub.
"""

from __future__ import annotations

from prefixlint.introspect.configs.hints import (
    CodeHints,
    code_hints,
    field_default_none,
    frame_files,
    guess_attribute,
    guess_from_code,
)
from prefixlint.introspect.configs.model_types import (
    arch_to_model_types,
    causal_lm_named,
    config_class,
    vllm_architecture_types,
    vllm_config_registry,
)
from prefixlint.introspect.configs.repairs import REPAIRS, repair
from prefixlint.introspect.configs.seed import seed_from_code
from prefixlint.introspect.configs.shrink import (
    FILL_NONE,
    SHRINK,
    layer_keyed,
    remap_layer_keyed,
    shrink_kwargs,
)
from prefixlint.introspect.configs.sources import ConfigSource, llama_shaped, resolve_config
from prefixlint.introspect.configs.synthesis import ConfigGap, construct, synth_config
from prefixlint.introspect.configs.tokenizer import write_tokenizer

__all__ = [
    "FILL_NONE",
    "REPAIRS",
    "SHRINK",
    "CodeHints",
    "ConfigGap",
    "ConfigSource",
    "arch_to_model_types",
    "causal_lm_named",
    "code_hints",
    "config_class",
    "construct",
    "field_default_none",
    "frame_files",
    "guess_attribute",
    "guess_from_code",
    "layer_keyed",
    "llama_shaped",
    "remap_layer_keyed",
    "repair",
    "resolve_config",
    "seed_from_code",
    "shrink_kwargs",
    "synth_config",
    "vllm_architecture_types",
    "vllm_config_registry",
    "write_tokenizer",
]
