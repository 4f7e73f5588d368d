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
from prefixlint.introspect.drafts.mtp_layers import add_mtp_layer_lists

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

    from prefixlint.introspect.drafts.mtp import synth_of_type

    folder = synth_of_type(model_type, target)
    path = Path(folder) / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if not data.get(TRANSFORMERS_MTP_KEY):
        data[TRANSFORMERS_MTP_KEY] = 1
    add_mtp_layer_lists(data, data[TRANSFORMERS_MTP_KEY])
    path.write_text(json.dumps(data), encoding="utf-8")
    return folder
