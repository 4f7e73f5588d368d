"""A check says two counts must agree, naming both.

Failure: an ``AssertionError`` or ``ValueError`` whose message names two counts and a
relation between them: vLLM 0.32's ``layers/attention/attention.py``
"num_heads (2) is not divisible by num_kv_heads (8)", a config's "num_attention_heads
(16) must be the same as num_key_value_heads (8)". With a synthesised config the
synthesis shrank one while the config derived the other, or a guess disagrees with a
shrunk size.

Change: one of the two values, matched on a config by its value and a word of its name
(the message names a layer's parameter as often as the config's key), changes until the
relation holds (``relations.make_consistent``): a count up to the next multiple, else
the divisor down; for equality the second takes the first's value. The consistent
shrunk sizes (``SHRINK``) are kept where another attribute can give way.

Limits: integer counts only; a relation in words ("twice as many") is not read. (The
same reader fits a config class's own overrides in synthesis: ``relations.fix_overrides``.)
"""

from __future__ import annotations

from prefixlint.introspect.configs.relations import make_consistent
from prefixlint.introspect.configs.repairs.reading import Failure
from prefixlint.introspect.configs.shrink import FILL_NONE, SHRINK


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, (AssertionError, ValueError)):
        return None
    return make_consistent(str(failure.error), failure.configs, {**SHRINK, **FILL_NONE})
