"""A value read from a config attribute that holds None is used as a number.

Failure: a ``TypeError`` on None (``unsupported operand type(s) for ** or pow():
'NoneType' and 'float'``, ``empty(): argument 'size' ... NoneType``) where a failing
frame (the innermost one that has such a read: torch raises for
``nn.Linear(h, self.classify_num)``) uses a local or ``self`` attribute assigned from the
config: vLLM 0.32's ``models/hunyuan_v1.py``
``self.head_dim = getattr(config, "head_dim", self.hidden_size // self.total_num_heads)``
with ``head_dim = None`` in the config, then ``self.head_dim**-0.5``.

Change: the attribute gets the fallback the code itself spells (evaluated in the frame
when it is plain arithmetic on names), else a guess, else 16 where the message says an
int or a size is wanted.

Limits: only reads assigned in the failing function (``x = getattr(config, "x", ...)``,
``x = config.x``); no value found: nothing given.
"""

from __future__ import annotations

import ast
import contextlib
import re
import textwrap
import traceback
from typing import Any

from prefixlint.introspect.configs.demands import config_attr, function_source, statement
from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    read = none_source(failure.error)
    if read is None:
        return None
    attr, value = read
    for config in failure.nested:
        if attr in vars(config) and vars(config)[attr] is None:
            value = guess_attribute(attr, config, failure.texts) if value is None else value
            if value is None and re.search(r"\bints?\b|integer|size", str(failure.error)):
                value = 16  # used as a size: small, divides by 1, 2, 4 and 8
            if value is None:
                return None
            setattr(config, attr, value)
            return attr
    return None


_SAFE_NODES = (
    ast.Expression, ast.Attribute, ast.Name, ast.Load, ast.BinOp, ast.Constant,
    ast.FloorDiv, ast.Div, ast.Mult, ast.Add, ast.Sub, ast.Mod, ast.Pow,
)  # fmt: skip


def none_source(error: BaseException) -> tuple[str, Any] | None:
    """The config attribute (holding None) a failing line used a read of, and the
    fallback the code spells (None when it spells none it can evaluate); None when no
    frame uses such a read."""
    if not isinstance(error, TypeError) or "NoneType" not in str(error):
        return None
    frames = list(traceback.walk_tb(error.__traceback__))
    for frame, line in reversed(frames[-6:]):
        found = _none_read(frame.f_code.co_filename, line, frame)
        if found is not None:
            return found
    return None


def _none_read(filename: str, line: int, frame: Any) -> tuple[str, Any] | None:
    try:
        tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
    except SyntaxError:
        return None
    reads = {}  # target source ("self.head_dim") -> (attribute, fallback expression)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = node.value
            call = value if isinstance(value, ast.Call) else None
            if call is not None and getattr(call.func, "id", "") == "getattr":
                args = call.args
                if len(args) >= 2 and isinstance(args[1], ast.Constant):
                    fallback = args[2] if len(args) > 2 else None
                    reads[ast.unparse(node.targets[0])] = (str(args[1].value), fallback)
            elif config_attr(value):
                reads[ast.unparse(node.targets[0])] = (config_attr(value), None)
    stmt = statement(filename, line, frame)
    used = {ast.unparse(n) for n in ast.walk(stmt)} if stmt is not None else set()
    for target, (attr, fallback) in reads.items():
        if target not in used or not _is_none(target, frame):
            continue
        value = None
        if fallback is not None and all(
            isinstance(n, _SAFE_NODES) for n in ast.walk(ast.Expression(fallback))
        ):
            with contextlib.suppress(Exception):
                code = compile(ast.Expression(fallback), "<fallback>", "eval")
                value = eval(code, dict(frame.f_globals), dict(frame.f_locals))
        return attr, value
    return None


_MISSING_VALUE = object()


def _is_none(target: str, frame: Any) -> bool:
    """``self.x`` / ``x`` holds None in the frame."""
    head, _, rest = target.partition(".")
    if head not in frame.f_locals:
        return False
    value = frame.f_locals[head]
    for part in rest.split(".") if rest else []:
        value = getattr(value, part, _MISSING_VALUE)
    return value is None
