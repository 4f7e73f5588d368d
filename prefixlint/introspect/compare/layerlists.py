"""Per-layer lists of a synthesised config that only transformers reads, as transformers'
own config class derives them for the config's layer count, for the comparison alone.

Synthesis shrinks a long per-layer list to the config's few layers (``configs/shrink.py``
picks one layer of each kind, then repeats from the start). GLM-4-MoE-Lite's default
``mlp_layer_types`` (``["dense"] + ["sparse"] * 46``) becomes ``["dense", "sparse",
"dense", "sparse"]`` for 4 layers. transformers' model builds its MLPs from that list;
vLLM's ``glm4_moe_lite.py`` never reads it and builds them from
``first_k_dense_replace``. The two then disagree on layer 2 and the reference checkpoint
does not load: a gap of the shrink, not of the model. A checkpoint of 4 layers holds
the list its config class derives for 4 layers (``["dense", "sparse", "sparse",
"sparse"]``): the comparison runs with that one, set only while it runs
(``coverage.variants.applied``), and says so (``Comparison.derived``). A list the model
reads too is left alone: both sides see the same one.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from prefixlint.introspect.compare.guesses import _source


def derived(model_config: Any, ref_cls: type, files: list[str]) -> dict[str, list]:
    """Attribute -> the list transformers' config class derives for this config without
    it, for each list attribute of the text config that differs from that derivation,
    that transformers' modeling module names and the model's files never read."""
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    own = getattr(ref_cls, "config_class", None)
    config = config_objects(model_config)[0]
    if not isinstance(own, type) or not hasattr(config, "to_dict"):
        return {}
    read = set().union(*(file_facts(f).reads for f in files)) if files else set()
    source = _source(ref_cls)
    out: dict[str, list] = {}
    for attr, value in vars(config).items():
        if not isinstance(value, list) or attr in read or not attr.endswith("layer_types"):
            continue
        if not re.search(rf"\b{re.escape(attr)}\b", source):
            continue
        fresh = _without(own, config, attr)
        if isinstance(fresh, list) and len(fresh) == len(value) and fresh != value:
            out[attr] = fresh
    return out


def _without(own: type, config: Any, attr: str) -> Any:
    """``attr`` as ``own`` derives it from the config's other values (None when it
    cannot be built)."""
    values = {k: v for k, v in config.to_dict().items() if k != attr}
    with contextlib.suppress(Exception):
        return getattr(own.from_dict(values), attr, None)
    return None
