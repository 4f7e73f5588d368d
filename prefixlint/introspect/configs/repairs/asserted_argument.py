"""An ``assert`` on a parameter that the caller passed from a config attribute.

Failure: an ``AssertionError`` on ``assert <param> == <literal>`` whose caller passed
``<param>=<holder>.<attr>``: vLLM 0.32's ``models/molmo2.py`` asserts
``hidden_act == "silu"`` in a projector built with
``hidden_act=adapter_config.hidden_act``.

Change: the config attribute the caller passed (on the caller's holder, or, where the
holder is a copy the model made, on the sub-config of that name) gets the literal.

Limits: the call must be within the 12 lines from the caller's line and pass the
parameter by keyword as ``name=a.b.attr``.
"""

from __future__ import annotations

import ast
import linecache
import re
import traceback

from prefixlint.introspect.configs.hints import LITERAL
from prefixlint.introspect.configs.repairs.reading import Failure, failing_line

_ASSERT_LOCAL = re.compile(rf"assert\s+(\w+)\s*(?:==|\bin\b)\s*\(?\s*(?P<value>{LITERAL})")


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not isinstance(error, AssertionError):
        return None
    m = _ASSERT_LOCAL.search(failing_line(error))
    frames = list(traceback.walk_tb(error.__traceback__))
    if m is None or len(frames) < 2:
        return None
    name, value = m.group(1), ast.literal_eval(m.group("value"))
    caller, line = frames[-2]
    call = "".join(linecache.getline(caller.f_code.co_filename, n) for n in range(line, line + 12))
    passed = re.search(rf"\b{name}\s*=\s*([\w.]+)\.(\w+)\s*[,)]", call)
    if passed is None:
        return None
    path, attr = passed.group(1).split("."), passed.group(2)
    holder = caller.f_locals.get(path[0])
    for part in path[1:]:
        holder = getattr(holder, part, None)
    if not any(holder is c for c in failure.configs):
        # a copy the model made (a dataclass built from the sub-config of that name)
        held = [vars(c).get(path[-1]) for c in failure.configs]
        holder = next((h for h in held if h is not None and hasattr(h, "to_dict")), None)
    if holder is None or getattr(holder, attr, None) == value:
        return None
    setattr(holder, attr, value)
    return attr
