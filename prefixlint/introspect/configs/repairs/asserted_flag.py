"""An ``assert`` needs a part the default config leaves off.

Failure: an ``AssertionError`` on a line that reads config attributes that are off
(0, None, False): vLLM 0.32's ``models/inkling/nvidia/moe.py``
``assert config.n_shared_experts > 0 and config.shared_expert_sink``; or that names a
local read from one earlier in the function: ``models/kimi_k3/nvidia/model.py``
``mla_use_nope = config.mla_use_nope`` ... ``assert mla_use_nope, "Kimi-K3 MLA
(MultiHeadLatentAttention) is NoPE-only"``.

Change: the first such attribute gets a guess by its use and name, and a flag (a
boolean now, or a guess that is one, or a None) becomes True.

Limits: the assert's test is not parsed: the attribute that is off and can be turned
on first is changed, which may be the wrong one of several (the repair loop tries again).
"""

from __future__ import annotations

from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import (
    Failure,
    asserted_locals,
    line_attributes,
)


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, AssertionError):
        return None
    attrs = line_attributes(failure.error)
    attrs += [a for a in asserted_locals(failure.error) if a not in attrs]
    for attr in attrs:
        for config in failure.configs:
            if attr not in vars(config) or getattr(config, attr):
                continue
            current = getattr(config, attr)
            value = guess_attribute(attr, config, failure.texts)
            if isinstance(current, bool) or isinstance(value, bool) or value is None:
                value = True if isinstance(current, bool) or current is None else None
            if value is not None and value != current:
                setattr(config, attr, value)
                return attr
    return None
