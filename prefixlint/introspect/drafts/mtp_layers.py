"""MTP layers in a config: how many there are, and the per-layer lists a checkpoint with
MTP layers writes beside its main stack's. A leaf module (no project imports): the
config synthesis, the MTP drafts and the Transformers-backend drafts all read it."""

from __future__ import annotations

import contextlib
from typing import Any

# the config keys a checkpoint states its MTP layer count under
MTP_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


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
    values = getattr(config, "__dict__", {})
    count = next((values[k] for k in MTP_COUNT_KEYS if isinstance(values.get(k), int)), 0)
    return max(count, 0)
