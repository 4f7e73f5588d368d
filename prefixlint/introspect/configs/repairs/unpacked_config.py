"""The model unpacks a sub-config that checkpoints store as a dict.

Failure: ``TypeError: ... argument after ** must be a mapping, not GlmVisionConfig``
(or ``not NoneType``) on a model line such as vLLM 0.32's ``models/glm4v.py``
``vision_config = Namespace(**config.vision_config)``.

Change: a config object there becomes a copy that is also a mapping (same class, same
values: ``subconfigs.as_mapping``); a None there, a stand-in sub-config.

Limits: only attributes named like sub-configs (``_config``, ``_conf``, ``_cfg``) read
on the innermost model-code line or the two above it.
"""

from __future__ import annotations

import re

from prefixlint.introspect.configs.repairs.reading import Failure, model_lines
from prefixlint.introspect.configs.subconfigs import as_mapping, is_sub_config, sub_config

_NOT_MAPPING = re.compile(r"argument after \*\* must be a mapping, not (\w+)")


def repair(failure: Failure) -> str | None:
    error = failure.error
    m = _NOT_MAPPING.search(str(error)) if isinstance(error, TypeError) else None
    if m is None:
        return None
    for attr in re.findall(r"\.(\w+)", model_lines(error)):
        if not is_sub_config(attr):
            continue
        for config in failure.configs:
            value = vars(config).get(attr, False)
            if value is None:
                setattr(config, attr, sub_config(attr, config))
                return attr
            if hasattr(value, "to_dict") and not hasattr(value, "keys"):
                setattr(config, attr, as_mapping(value))
                return attr
    return None
