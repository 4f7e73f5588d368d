"""A check names the value a config attribute must hold.

Failure: a ``ValueError``, ``AssertionError`` or ``NotImplementedError`` whose message
says ``x must be <value>`` or ``requires x=<value>`` (``True``, ``False``, ``None``, an
integer), read by ``demands.stated_value``. vLLM 0.32's ``models/step_vl.py`` raises
``ValueError("use_rope2d must be True")``; ``models/glm5next/common/model.py`` raises
"GLM-5.3 sparse indexer requires index_kpool_always_select_tail=True".

Change: the first config (nested ones included) that holds the attribute with another
value gets the stated one, once; real checkpoints of the model hold it. (Synthesis and
MTP targets read the same words from their config class's validator:
``synthesis.construct``.)

Limits: only literal values; "must be 6, 8 or 16" takes the first; an attribute the
config does not hold is left to the missing-attribute repairs.
"""

from __future__ import annotations

from prefixlint.introspect.configs.demands import stated_value
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    stated = stated_value(failure.error)
    if stated is None:
        return None
    attr, value = stated
    for config in failure.nested:
        if attr in vars(config) and vars(config)[attr] != value:
            setattr(config, attr, value)
            return attr
    return None
