"""An ``assert`` demands values of config attributes, directly or through locals.

Failure: an ``AssertionError`` whose statement (read with ``ast``) tests config values
against literals: ``a == lit``, ``a in [lits]``, ``a is None``, ``not a`` and
conjunctions, where ``a`` is ``config.x`` or a local the function read from the config
(``kind = getattr(config, "output_gate_type", "silu")`` ... ``assert kind in ["silu",
"sigmoid"]``): ``demands.assertion_demands``.

Change: the first config (nested ones included) holding such an attribute with another
value gets the demanded one (the first of an ``in``).

Limits: inequalities name no value and are left alone; an attribute the config lacks
is the missing-attribute repairs'.
"""

from __future__ import annotations

from prefixlint.introspect.configs.demands import assertion_demands
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    for attr, value in assertion_demands(failure.error).items():
        for config in failure.nested:
            if value is True and not isinstance(vars(config).get(attr), (bool, type(None))):
                continue  # a truth test of a size or a text: not a flag to turn on
            if attr in vars(config) and vars(config)[attr] != value:
                setattr(config, attr, value)
                return attr
    return None
