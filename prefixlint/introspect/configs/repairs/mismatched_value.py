"""A check names a config attribute's value and the one number it should be.

Failure: a ``ValueError`` whose message names an attribute with its current value and
one other number, the value the model derived from the rest of the config, in words of
a mismatch ("match", "must be", "expected", "inconsistent"): "vision output_dim=6144
does not match pixel-shuffle output 512".

Change: the attribute (on the first config, nested ones included, that holds it with
the named value) takes the other number.

Limits: exactly one other number in the message; the attribute must hold the named
value. (Two named counts that must agree are ``relation``'s.)
"""

from __future__ import annotations

import re
from typing import Any

from prefixlint.introspect.configs.repairs.reading import Failure

_STATED = re.compile(r"\b([a-z]\w*)\s*[=(]\s*(-?\d+)\b")
_NUMBER = re.compile(r"(?<![\w.=(])(-?\d+)(?![\w.])")


def repair(failure: Failure) -> str | None:
    for attr, value in mismatch_demands(failure.error, failure.nested).items():
        for config in failure.nested:
            if vars(config).get(attr) is not None and vars(config)[attr] != value:
                setattr(config, attr, value)
                return attr
    return None


def mismatch_demands(error: BaseException, configs: list[Any]) -> dict[str, Any]:
    """``{attribute: number}`` of such a message, or {}."""
    if not isinstance(error, ValueError):
        return {}
    message = str(error)
    if not re.search(r"match|must (?:be|equal)|expected|inconsistent", message):
        return {}
    for name, stated in _STATED.findall(message):
        others = {int(n) for n in _NUMBER.findall(message)} - {int(stated)}
        if len(others) != 1:
            continue
        for config in configs:
            current = vars(config).get(name)
            if isinstance(current, int) and current == int(stated):
                return {name: others.pop()}
    return {}
