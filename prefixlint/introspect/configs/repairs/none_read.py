"""A local the config gave None as a default is used as a value.

Failure: a ``TypeError``/``AttributeError`` on None in a statement whose None locals
the function read from the config with a None default: vLLM 0.33's
``models/transformers/moe.py`` ``num_experts = getattr_iter(config,
CONFIG_FIELD_ALIASES["num_experts"], None)`` ... ``num_experts + 1`` ("unsupported
operand type(s) for +: 'NoneType' and 'int'"): ``demands.none_reads`` (the names a
``getattr_iter`` reads come from vLLM's alias table through the accessor).

Change: the first of those names that no config has gets a guessed value.

Limits: only reads assigned in the failing function; a config that has the attribute
(as None) is ``none_used``'s.
"""

from __future__ import annotations

from prefixlint.introspect.configs.demands import none_reads
from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    configs = failure.configs
    for attr in none_reads(failure.error):
        if configs and not any(hasattr(c, attr) for c in configs):
            value = guess_attribute(attr, configs[0], failure.texts)
            if value is not None:
                setattr(configs[0], attr, value)
                return attr
    return None
