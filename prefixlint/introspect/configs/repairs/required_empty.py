"""The failing line requires an attribute the config lacks to be empty.

Failure: ``AttributeError: '...Config' object has no attribute 'yoco_layer'`` raised by
a line that asserts its absence as a checkpoint without the feature writes it:
``assert config.yoco_layer is None``, ``assert len(config.moe_layers) == 0`` (the read
may sit a few frames up, inside transformers' ``__getattribute__``).

Change: the attribute gets that empty value (None, or ``[]``), on the config of the
class that lacked it.

Limits: only those two forms; claims the failure when it has one.
"""

from __future__ import annotations

import linecache
import re
import traceback
from typing import Any

from prefixlint.introspect.configs.repairs.reading import Failure, give_value, missing_on_config

_NOTHING = object()


def claims(failure: Failure) -> bool:
    found = missing_on_config(failure.error)
    return found is not None and _required_empty(failure.error, found[1]) is not _NOTHING


def repair(failure: Failure) -> str | None:
    found = missing_on_config(failure.error)
    if found is None:
        return None
    cls_name, attr = found
    required = _required_empty(failure.error, attr)
    if required is _NOTHING:
        return None
    return give_value(failure.configs, attr, cls_name, required)


def _required_empty(error: BaseException, attr: str) -> Any:
    """None for ``... .attr is None``, [] for ``len(... .attr) == 0``; else _NOTHING."""
    name = re.escape(attr)
    for frame, line in list(traceback.walk_tb(error.__traceback__))[-3:]:
        text = linecache.getline(frame.f_code.co_filename, line)
        if re.search(rf"\.{name}\s+is\s+None\b", text):
            return None
        if re.search(rf"len\(\s*[\w.]*\.{name}\s*\)\s*==\s*0\b", text):
            return []
    return _NOTHING
