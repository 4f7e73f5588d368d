"""The model uses as a list or an object a config attribute that is None.

Failure: a ``TypeError`` or ``AttributeError`` on None ("'NoneType' object is not
subscriptable", "... is not iterable", "... has no attribute 'x'", "object of type
'NoneType' has no len()") on a line, in one of the three innermost frames, that reads
``config.<attr>`` holding None: ``len(config.deepstack_layer_map)`` on a default that
leaves the map out.

Change: that attribute gets a guess from its use and name (a per-layer list, a layer
index list, a value).

Limits: the read must be ``config.x`` (or ``hf_config``/``text_config``) on the line
itself; a local read earlier is ``none_fallback``'s.
"""

from __future__ import annotations

import linecache
import re
import traceback
from typing import Any

from prefixlint.introspect.configs.hints import CONFIG_READ
from prefixlint.introspect.configs.repairs.reading import Failure, give_guess

_NONE_USE = re.compile(
    r"'NoneType' object (is not (subscriptable|iterable)|has no attribute)"
    r"|object of type 'NoneType' has no len\(\)|not 'NoneType'"
)


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not (isinstance(error, (TypeError, AttributeError)) and _NONE_USE.search(str(error))):
        return None
    attr = _none_attribute(error, failure.configs)
    if attr is None:
        return None
    return give_guess(
        failure.configs,
        attr,
        failure.texts,
        lambda c: attr in vars(c) and getattr(c, attr) is None,
    )


def _none_attribute(error: BaseException, configs: list[Any]) -> str | None:
    frames = list(traceback.walk_tb(error.__traceback__))
    for frame, line in reversed(frames[-3:]):
        text = linecache.getline(frame.f_code.co_filename, line)
        for attr in CONFIG_READ.findall(text):
            for config in configs:
                try:
                    if attr in vars(config) and getattr(config, attr) is None:
                        return attr
                except Exception:
                    continue
    return None
