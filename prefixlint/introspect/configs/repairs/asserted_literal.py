"""An ``assert`` compares a config attribute with a literal.

Failure: an ``AssertionError`` on a line such as vLLM 0.32's ``models/molmo.py``
``assert config.layer_norm_type == "rms"`` (also ``"rms" == config.x`` and
``config.x in ("a", "b")``), read from the line's text.

Change: the first config holding the attribute with another value gets the literal (the
first one of an ``in``); real checkpoints of the model have it.

Limits: the attribute must be read from a name ending in ``config``/``cfg`` on the
failing line itself; an assert on a local read from the config is
``asserted_demand``'s, a parameter passed from the config ``asserted_argument``'s.
"""

from __future__ import annotations

import ast
import re

from prefixlint.introspect.configs.hints import LITERAL
from prefixlint.introspect.configs.repairs.reading import Failure, failing_line

_COMPARED_LITERAL = re.compile(
    rf"(?:config|cfg)\w*(?:\.\w+)*\.(?P<attr>\w+)\s*(?:==|\bin\b)\s*\(?\s*(?P<value>{LITERAL})"
)
_LITERAL_COMPARED = re.compile(
    rf"(?P<value>{LITERAL})\s*==\s*(?:self\.)?(?:config|cfg)\w*(?:\.\w+)*\.(?P<attr>\w+)"
)


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, AssertionError):
        return None
    line = failing_line(failure.error)
    if "assert" not in line:
        return None
    pairs = [(m.group("attr"), m.group("value")) for m in _COMPARED_LITERAL.finditer(line)]
    pairs += [(m.group("attr"), m.group("value")) for m in _LITERAL_COMPARED.finditer(line)]
    for attr, literal in pairs:
        value = ast.literal_eval(literal)
        for config in failure.configs:
            if attr in vars(config) and getattr(config, attr) != value:
                setattr(config, attr, value)
                return attr
    return None
