"""The model parses as text a list that checkpoints write as a comma-separated string.

Failure: ``AttributeError: 'list' object has no attribute 'strip'`` (or ``'split'``, on a
list or tuple) on a line such as vLLM 0.32's ``models/step3_text.py``
``moe_layers_idx = [int(i) for i in moe_layers_enum.strip().split(",")]``: the
synthesised config holds the list, the checkpoint the text.

Change: the list attribute read on the failing line (or read into a local just above
it) becomes ``",".join(...)`` of its items.

Limits: claims every such AttributeError; only attributes of the top-level configs.
"""

from __future__ import annotations

import re

from prefixlint.introspect.configs.repairs.reading import Failure, line_attributes

_SEQUENCE_AS_TEXT = re.compile(r"'(list|tuple)' object has no attribute '(strip|split)'")


def claims(failure: Failure) -> bool:
    error = failure.error
    return isinstance(error, AttributeError) and bool(_SEQUENCE_AS_TEXT.search(str(error)))


def repair(failure: Failure) -> str | None:
    if not claims(failure):
        return None
    for attr in line_attributes(failure.error):
        for config in failure.configs:
            value = vars(config).get(attr)
            if isinstance(value, (list, tuple)):
                setattr(config, attr, ",".join(map(str, value)))
                return attr
    return None
