"""The config lacks a sub-config the model reads.

Failure: ``AttributeError: 'LlamaConfig' object has no attribute 'vision_config'`` (any
name ending in ``_config``, ``_conf``, ``_cfg``): a remote-code multimodal model read on
a Llama-shaped synthesised config; or ``... no attribute 'encoder'`` where the model's
code reads attributes of it (``config.encoder.hidden_size``): a nested sub-model config
under any name (issue 29).

Change: the config of that class gets a stand-in sub-config (``subconfigs.sub_config``:
the parent's text sizes for a language sub-config, an encoder's otherwise); later probes
fill what else the model reads from it.

Limits: claims every missing attribute named like a sub-config, or read as one, given or
not (no value but a sub-config fits such a name or use). A sub-model the code builds from
it by its model type or class gets no class here: later probes fill what it reads.
"""

from __future__ import annotations

from prefixlint.introspect.configs.repairs.reading import Failure, missing_on_config
from prefixlint.introspect.configs.subconfigs import (
    is_sub_config,
    read_as_sub_config,
    sub_config,
)


def claims(failure: Failure) -> bool:
    found = missing_on_config(failure.error)
    return found is not None and (
        is_sub_config(found[1]) or read_as_sub_config(found[1], failure.texts)
    )


def repair(failure: Failure) -> str | None:
    if not claims(failure):
        return None
    cls_name, attr = missing_on_config(failure.error)  # type: ignore[misc]
    for config in failure.configs:
        if type(config).__name__ == cls_name and not hasattr(config, attr):
            setattr(config, attr, sub_config(attr, config))
            return attr
    return None
