"""A size computed from a whole float where checkpoints write an int.

Failure: ``TypeError: empty(): argument 'size' (position 1) must be tuple of ints, but
found element of type float at pos 0`` (torch), or "'float' object cannot be
interpreted as an integer" (``range``), raised where a size is computed from a config
value that is a whole float (a guessed ``downsample_factor = 1.0``, as Voxtral's audio
config got in the zoo).

Change: every config attribute named on the failing frames' lines (the whole
multi-line statement in model files) that holds a whole positive float becomes an int.
Returns their names.

Limits: only whole floats; a fractional one is left as it is.
"""

from __future__ import annotations

import ast
import linecache
import re
import traceback

from prefixlint.introspect.configs.demands import statement
from prefixlint.introspect.configs.repairs.reading import Failure
from prefixlint.introspect.finding import in_models_folder

_FLOAT_SIZE = re.compile(r"float.*(?:int|size)|(?:int|size).*float", re.S)


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not isinstance(error, TypeError) or not _FLOAT_SIZE.search(str(error)):
        return None
    words: set[str] = set()
    for frame, line in traceback.walk_tb(error.__traceback__):
        filename = frame.f_code.co_filename
        words.update(re.findall(r"\w+", linecache.getline(filename, line)))
        if in_models_folder(filename):  # the whole call a multi-line statement makes
            stmt = statement(filename, line, frame)
            words.update(re.findall(r"\w+", ast.unparse(stmt) if stmt is not None else ""))
    changed = []
    for config in failure.nested:
        for name, value in list(vars(config).items()):
            if name in words and isinstance(value, float) and value.is_integer() and value > 0:
                setattr(config, name, int(value))
                changed.append(name)
    return ", ".join(changed) or None
