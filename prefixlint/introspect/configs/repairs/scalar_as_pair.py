"""The model reads as a pair (or a list) what the config holds as one number.

Failure: ``TypeError: 'int' object is not subscriptable`` (or ``is not iterable``) on a
line such as vLLM 0.32's ``models/interns1.py``
``image_size = config.vision_config.image_size[0]``; checkpoints write ``[h, w]``.

Change: the int attribute read on the failing line (or read into a local just above it
in the innermost model frame) becomes ``[value, value]``.

Limits: a pair, never a longer list; the first such attribute on the line wins.
"""

from __future__ import annotations

import re

from prefixlint.introspect.configs.repairs.reading import Failure, failing_line, model_lines

_SCALAR_USE = re.compile(r"'int' object is not (iterable|subscriptable)")


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not (isinstance(error, TypeError) and _SCALAR_USE.search(str(error))):
        return None
    line = failing_line(error)
    # ``config.x[0]`` on the line; else a local read from the config just above it
    names = re.findall(r"\.(\w+)", line) + [
        attr
        for local, attr in re.findall(
            r"(\w+)\s*=\s*(?:self\.)?\w*config\.(\w+)", model_lines(error)
        )
        if re.search(rf"\b{local}\b", line)
    ]
    for attr in names:
        for config in failure.configs:
            value = vars(config).get(attr)
            if _is_int(value):
                setattr(config, attr, [value, value])
                return attr
            # ``config.window_sizes[layer_idx][0]``: a per-layer list of pairs
            indexed_twice = re.search(rf"\.{attr}\[[^\]]+\]\[", line)
            ints = isinstance(value, list) and value and all(_is_int(v) for v in value)
            if indexed_twice and ints:
                setattr(config, attr, [[v, v] for v in value])
                return attr
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
