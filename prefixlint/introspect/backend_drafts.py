"""Targets for the drafts of vLLM's Transformers modeling backend (``TransformersForMTP``).

vLLM 0.33 serves the MTP layers of a model whose transformers config declares them
(``num_mtp_layers``) through the Transformers backend: ``SpeculativeConfig`` writes
``Transformers{MoE}ForMTP`` into the draft config when the target uses that backend and
its text config has a layer count. Such a draft is listed in the backend's registry table,
not the speculative-decoding one, and has no model type of its own. Its targets are
derived here: the non-draft architectures of the draft's own registry table (the
backend's classes, best named like the draft first), each over the model types whose
transformers config class declares an MTP layer count in its defaults.

Runs inside the worker (imports transformers).
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

from prefixlint.introspect import vllm_api

# The layer count the backend reads first, then the other names checkpoints use.
TRANSFORMERS_MTP_KEY = "num_mtp_layers"
_LIMIT = int(os.environ.get("PREFIXLINT_BACKEND_DRAFT_ATTEMPTS", "12"))


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def backend_table(arch: str, registry: Any) -> dict[str, Any]:
    """The registry table of ``arch``'s group (the one the zoo lists it under) when that
    is not the speculative one: a draft listed with the backend's other classes."""
    tables = vllm_api.registry_tables(registry)
    group = vllm_api.architecture_groups(registry, [arch]).get(arch)
    if group in (None, "other", vllm_api.SPECULATIVE_GROUP):
        return {}
    return tables.get(group, {})


@functools.lru_cache(maxsize=1)
def mtp_model_types() -> tuple[str, ...]:
    """Model types whose transformers config class has an MTP layer count among its
    defaults (``glm4_moe``, ``mellum``, ...): the Transformers backend can serve them
    as a draft. Those without per-layer lists (a uniform stack, which any MTP layer
    of the backend can take) first, then those with a count set by default."""
    from transformers import CONFIG_MAPPING

    found: list[tuple[bool, bool, str]] = []
    for model_type in list(CONFIG_MAPPING.keys()):
        with contextlib.suppress(Exception):
            default = CONFIG_MAPPING[model_type]()
            text = default.get_text_config()
            if default is text and hasattr(text, TRANSFORMERS_MTP_KEY):
                lists = any(k.endswith("layer_types") for k in vars(text))
                found.append((lists, not getattr(text, TRANSFORMERS_MTP_KEY), model_type))
    return tuple(mt for *_, mt in sorted(found))


def backend_targets(arch: str, registry: Any, is_draft: Any) -> list[tuple[str, str]]:
    """(target architecture, model type) pairs for a Transformers-backend draft, best
    first; [] for any other draft."""
    table = backend_table(arch, registry)
    if not table:
        return []
    targets = [a for a in table if a != arch and not is_draft(a, registry)]
    targets.sort(key=lambda a: (-_common_prefix(a, arch), len(a)))
    pairs = [(t, mt) for t in targets for mt in mtp_model_types()]
    return pairs[:_LIMIT]


def synth_target(model_type: str, target: str) -> str:
    """A small config of ``model_type`` for the backend architecture ``target``, with
    one MTP layer (a default config may say none)."""
    import json
    from pathlib import Path

    from prefixlint.introspect.mtp import synth_of_type

    folder = synth_of_type(model_type, target)
    path = Path(folder) / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if not data.get(TRANSFORMERS_MTP_KEY):
        data[TRANSFORMERS_MTP_KEY] = 1
    add_mtp_layer_lists(data, data[TRANSFORMERS_MTP_KEY])
    path.write_text(json.dumps(data), encoding="utf-8")
    return folder


def add_mtp_layer_lists(config: dict[str, Any], count: int) -> list[str]:
    """A checkpoint with MTP layers describes them beside each per-layer list of its main
    stack (``layer_types`` -> ``mtp_layer_types``): transformers' ``get_mtp_config``
    swaps them in, vLLM 0.33's Step3p5 reads ``[*layer_types, *mtp_layer_types]`` and its
    ``get_per_layer_hf_configs`` gives each MTP layer the config of the first main layer
    of the same type. A config given ``count`` MTP layers gets the lists it lacks, each
    entry a type of the main list (the first). Returns the keys added."""
    added = []
    for key, value in list(config.items()):
        if key.startswith("mtp_") or not key.endswith("layer_types"):
            continue
        if isinstance(value, list) and value and config.get(f"mtp_{key}") is None:
            config[f"mtp_{key}"] = [value[0]] * count
            added.append(f"mtp_{key}")
    return added


def complete_mtp_layers(configs: list[Any]) -> list[str]:
    """``add_mtp_layer_lists`` on config objects (a per-layer list guessed during the
    repairs, after the config was written): for each config that has MTP layers."""
    added = []
    for config in configs:
        values = getattr(config, "__dict__", {})
        count = mtp_layer_count(config)
        if count <= 0:
            continue
        lists = {k: v for k, v in values.items() if k.endswith("layer_types")}
        for key in add_mtp_layer_lists(lists, count):
            with contextlib.suppress(Exception):  # a read-only property
                setattr(config, key, lists[key])
                added.append(key)
    return added


def mtp_layer_count(config: Any) -> int:
    """How many MTP layers a config object says it has (0: none)."""
    from prefixlint.introspect.mtp import MTP_COUNT_KEYS

    values = getattr(config, "__dict__", {})
    count = next((values[k] for k in MTP_COUNT_KEYS if isinstance(values.get(k), int)), 0)
    return max(count, 0)
