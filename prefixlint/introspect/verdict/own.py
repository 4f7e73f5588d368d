"""Failures of the model's own code, told apart from gaps of a synthesised config by
evidence read from the traceback and the model's source.

- ``fixed_head_count``: a head count the model's code fixes with a literal (``num_heads=6``)
  that differs from the config's, on the way to a failure about heads (PFX603).
- ``stage_placeholder``: the model's code used a layer its pipeline stage does not own
  (vLLM's ``PPMissingLayer``) as if it were built: no config of any size changes that.
- ``only_pipeline_stages``: the same config built every unsplit layout and only pipeline
  stages failed, in the model's own frames: the config is not what fails.
- ``equal_class_builds``: vLLM's own class of the architecture an out-of-tree file
  registers builds with the config the file's class failed with, at a frame of the file.
- ``config_reads``: the config attributes the conditions of a ``raise``/``assert`` in the
  model's file read, with the integers they are compared with; ``raised_whatever_config``
  says whether the same raise recurs with each of those values changed (PFX604).

Light (no torch import): the source is read with ``ast``; builds are made by the caller.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import linecache
import os
import traceback
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

Frames = list[tuple[FrameType, int]]


def frames(tb: Any, external: Callable[[str], bool], innermost: bool = False) -> Frames:
    """The traceback's frames in the model's own files (``external``, less vLLM's code
    outside its model files: its loader calls the model), innermost first; with
    ``innermost``, only those from the raising frame up to the first that is not."""
    out: Frames = []
    for frame, line in reversed(list(traceback.walk_tb(tb))):
        file = frame.f_code.co_filename
        if external(file) and not _vllm_outside_models(file):
            out.append((frame, line))
        elif innermost:
            break
    return out


@functools.lru_cache(maxsize=1)
def vllm_root() -> str:
    spec = importlib.util.find_spec("vllm")
    origin = spec.origin if spec is not None else None
    return os.path.dirname(origin) + os.sep if origin else ""


def _vllm_outside_models(file: str) -> bool:
    root = vllm_root()
    return (
        bool(root)
        and file.startswith(root)
        and not file.startswith(os.path.join(root, "model_executor", "models") + os.sep)
    )


@functools.lru_cache(maxsize=64)
def parsed(file: str) -> ast.Module | None:
    try:
        return ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return None


def _function(frame: FrameType) -> ast.AST | None:
    """The ``def`` a frame runs (the module for module-level code)."""
    tree = parsed(frame.f_code.co_filename)
    if tree is None or frame.f_code.co_name == "<module>":
        return tree
    first = frame.f_code.co_firstlineno
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if start == first and node.name == frame.f_code.co_name:
                return node
    return None


def _parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    return {c: p for p in ast.walk(root) for c in ast.iter_child_nodes(p)}


def _statement(root: ast.AST, line: int) -> ast.stmt | None:
    """The innermost statement of ``root`` that spans ``line``."""
    spanning = [
        node
        for node in ast.walk(root)
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(spanning, key=lambda n: (n.lineno, -(n.end_lineno or 0)), default=None)


# --- a head count fixed in the model's code (PFX603) ---


def fixed_head_count(
    tb: Any, error: BaseException, external: Callable[[str], bool], counts: tuple[Any, Any]
) -> tuple[str, int, str, int] | None:
    """(file, line, name, value) of an integer literal the model's code gives a head count
    (``num_heads=6`` in the call being run, or ``self.num_heads = 6`` before it) when the
    failure is about heads and the literal is not the config's count (``counts``: query,
    KV); None otherwise."""
    model = frames(tb, external)
    if not model or not _about_heads(tb, error):
        return None
    heads, kv_heads = counts
    for frame, line in model:
        root = _function(frame)
        if root is None:
            continue
        for name, value, at in _head_literals(root, line):
            config = kv_heads if "kv" in name.lower() else heads
            if value != config:
                return frame.f_code.co_filename, at, name, value
    return None


def _about_heads(tb: Any, error: BaseException) -> bool:
    """The failure says heads or divisibility, or its raising line names heads."""
    text = str(error).lower()
    last = traceback.extract_tb(tb)[-1:] if tb is not None else []
    line = (last[0].line or "").lower() if last else ""
    return "head" in text or "divisible" in text or ("head" in line and "%" in line)


def _head_literals(root: ast.AST, line: int) -> Iterator[tuple[str, int, int]]:
    """(name, value, line) of head counts given as literals: keywords of the call at
    ``line``, then assignments above it in the same function."""
    for node in ast.walk(root):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or line):
            for kw in node.keywords:
                value = _int(kw.value)
                if kw.arg and "head" in kw.arg and value is not None:
                    yield kw.arg, value, kw.value.lineno
    for node in ast.walk(root):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno < line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = _int(node.value) if node.value is not None else None
            for target in targets:
                name = _last_name(target)
                if value is not None and name and "head" in name and "dim" not in name:
                    yield name, value, node.lineno


def _int(node: ast.AST) -> int | None:
    ok = isinstance(node, ast.Constant) and type(node.value) is int
    return node.value if ok else None  # type: ignore[union-attr]


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


# --- a raise every config reaches (PFX604) ---


def raising_statement(tb: Any, external: Callable[[str], bool]) -> tuple[str, int] | None:
    """Where the model's own ``raise`` or ``assert`` raised: the innermost frame of the
    traceback is in the model's file and runs such a statement; None otherwise (an error
    raised inside vLLM, torch, or by an operation rather than a statement)."""
    model = frames(tb, external, innermost=True)
    every = list(traceback.walk_tb(tb))
    if not model or not every or model[0][0] is not every[-1][0]:
        return None
    frame, line = model[0]
    root = _function(frame)
    stmt = _statement(root, line) if root is not None else None
    if not isinstance(stmt, (ast.Raise, ast.Assert)):
        return None
    return frame.f_code.co_filename, line


def config_reads(tb: Any, external: Callable[[str], bool]) -> dict[str, set[int]] | None:
    """The config attributes read by the conditions under which the model's frames reached
    the raise (the ``assert``'s test, the ``if``/``while`` tests enclosing each frame's line
    in its function), each with the integers those conditions compare with: ``{}`` when
    there is no condition at all. None when the conditions cannot be told apart from the
    config: a frame's source unread, a raise under an ``except``, a loop, a ``match`` or a
    comprehension, or a test that reads anything but config attributes directly (a
    parameter, a local or ``self`` attribute may hold a config value: ``head_dim``)."""
    out: dict[str, set[int]] = {}
    for frame, line in frames(tb, external, innermost=True):
        root = _function(frame)
        stmt = _statement(root, line) if root is not None else None
        if root is None or stmt is None:
            return None
        parents = _parents(root)
        tests = [stmt.test] if isinstance(stmt, ast.Assert) else []
        node: ast.AST = stmt
        while node in parents and node is not root:
            node = parents[node]
            if isinstance(node, _UNTOLD):
                return None
            if isinstance(node, (ast.If, ast.While)):
                tests.append(node.test)
        for test in tests:
            attrs = _direct_reads(test)
            if not attrs:  # None (reads something else) or a test of constants alone
                return None
            literals = {v for n in ast.walk(test) if (v := _int(n)) is not None}
            for attr in attrs:
                out.setdefault(attr, set()).update(literals)
    return out


# Statements under which a raise depends on what happened (an exception caught, an
# element iterated, a pattern matched), not on a test we can vary.
_UNTOLD = (ast.ExceptHandler, ast.For, ast.AsyncFor, ast.match_case, ast.comprehension)
_BUILTINS = frozenset({"getattr", "hasattr", "isinstance", "len", "int", "float", "bool", "str"})


def _direct_reads(test: ast.AST) -> set[str] | None:
    """Config attributes ``test`` reads directly (``<...config...>.x``, ``getattr(<...
    config...>, "x")``); None when it reads any other name."""
    attrs: set[str] = set()
    roots: set[int] = set()  # the names config chains start from
    for n in ast.walk(test):
        if isinstance(n, ast.Attribute) and _is_config(n.value) and "config" not in n.attr:
            attrs.add(n.attr)
            roots.add(id(_root(n)))
        elif _getattr_of_config(n):
            attrs.add(str(n.args[1].value))  # type: ignore[attr-defined]
            roots.add(id(_root(n.args[0])))  # type: ignore[attr-defined]
    for n in ast.walk(test):
        if isinstance(n, ast.Name) and id(n) not in roots and n.id not in _BUILTINS:
            return None
    return attrs


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _getattr_of_config(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and _is_config(node.args[0])
        and isinstance(node.args[1], ast.Constant)
    )


def _is_config(node: ast.AST) -> bool:
    """A chain through the model's config (``config``, ``self.config``, ``vllm_config.
    model_config.hf_config``), not vLLM's engine configs (``quant_config``, ...)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return any("config" in n for n in names) and not any(n in _ENGINE_CONFIGS for n in names)


_ENGINE_CONFIGS = frozenset(
    {
        "quant_config",
        "lora_config",
        "cache_config",
        "parallel_config",
        "scheduler_config",
        "compilation_config",
        "speculative_config",
        "device_config",
        "load_config",
        "multimodal_config",
        "pooler_config",
        "observability_config",
        "kv_transfer_config",
    }
)


def variants(reads: dict[str, set[int]], current: Callable[[str], Any]) -> list[dict[str, Any]]:
    """Config values a checkpoint could hold for each attribute the conditions read: each
    integer compared with, and one past it (a size or count never below 1), or a flag
    flipped. Empty when an attribute has no such value (the raise cannot be told)."""
    out: list[dict[str, Any]] = []
    for attr, literals in sorted(reads.items()):
        value = current(attr)
        if isinstance(value, bool):
            tried = [not value]
        elif isinstance(value, int):
            tried = sorted({v for n in literals for v in (n, n + 1) if v >= 1} - {value})
        else:
            tried = []
        if not tried:
            return []
        out += [{attr: v} for v in tried]
    return out


def always_raised(
    failed: list[Any],
    builds: list[Any],
    rebuild: Callable[[dict[str, Any]], Any],
    current: Callable[[str], Any],
) -> bool:
    """Every build failed at one ``raise``/``assert`` of the model's file with one error
    type, and the conditions that led there read no config value, or the same raise
    recurs in a build with each value they read changed (``variants``; ``rebuild`` builds
    the first layout with the given overrides, None when the config refuses them)."""
    if not builds or len(failed) != len(builds):
        return False
    sites = {raising_statement(b.error_tb, b.recorder.external) for b in builds}
    if len(sites) != 1 or None in sites or len({type(b.error) for b in builds}) != 1:
        return False
    first = builds[0]
    reads = config_reads(first.error_tb, first.recorder.external)
    if reads is None:
        return False
    tries = variants(reads, current) if reads else []
    if reads and not tries:
        return False
    for overrides in tries:
        other = rebuild(overrides)
        if other is None or other.error is None or type(other.error) is not type(first.error):
            return False
        if raising_statement(other.error_tb, other.recorder.external) not in sites:
            return False
    return True


# --- a failure only pipeline stages reach (PFX604) ---


def stage_placeholder(error: BaseException | None) -> bool:
    """The error is an attribute read on vLLM's ``PPMissingLayer``, the placeholder of a
    layer another pipeline stage owns (``AttributeError.obj``): the model's code assumed
    every layer is built on every stage."""
    obj = getattr(error, "obj", None) if isinstance(error, AttributeError) else None
    return obj is not None and any(c.__name__ == "PPMissingLayer" for c in type(obj).__mro__)


def only_pipeline_stages(failed: list[Any], builds: list[Any]) -> bool:
    """Every failed build is a pipeline stage (pp > 1) of the base config, failed in a
    frame of the model's own files, and that config built every unsplit layout tried
    (at least one): the config is not what fails, the model's stage handling is."""
    base = [b for b in builds if not b.variant]
    unsplit = [b for b in base if b.layout.pp == 1]
    if not unsplit or any(b.error is not None for b in unsplit):
        return False
    return all(
        not b.variant and b.layout.pp > 1 and frames(b.error_tb, b.recorder.external)
        for b in failed
    )


def equal_class_builds(
    failed: list[Any], builds_as: Callable[[type], bool], cls: type | None, other: type | None
) -> bool:
    """``other``, vLLM's own class of the architecture an out-of-tree class registers (a
    copy or a rewrite of vLLM's model, for the same checkpoints), builds with the config
    ``failed`` were built with (``builds_as``), and each failed in a frame of the model's
    files, not reading an attribute the config lacks, nor at a ``raise``/``assert`` whose
    conditions read the config (a demand a checkpoint may meet): the config explains
    nothing. Not for vLLM's own classes, nor a config variant."""
    if cls is None or not failed or any(b.variant for b in failed):
        return False
    if any(not frames(b.error_tb, b.recorder.external) or _config_lacks(b.error) for b in failed):
        return False
    if any(_states_a_demand(b.error_tb, b.recorder.external) for b in failed):
        return False  # the model's own raise on a config value: ``always_raised`` judges it
    if other is None or other is cls or _in_vllm(cls) or not _in_vllm(other):
        return False
    return builds_as(other)


def _states_a_demand(tb: Any, external: Callable[[str], bool]) -> bool:
    """The model's own ``raise``/``assert`` under conditions that read the config (or
    that cannot be told from it): a demand a real checkpoint's config may meet."""
    return raising_statement(tb, external) is not None and config_reads(tb, external) != {}


def _config_lacks(error: BaseException | None) -> bool:
    """An attribute read on a config object (a field a plugin's checkpoint may add)."""
    obj = getattr(error, "obj", None) if isinstance(error, AttributeError) else None
    return obj is not None and any("Config" in c.__name__ for c in type(obj).__mro__)


def _in_vllm(cls: type) -> bool:
    """The class is defined in the installed vLLM's files (never imported here)."""
    import sys

    file = getattr(sys.modules.get(cls.__module__ or ""), "__file__", None) or ""
    return bool(vllm_root()) and file.startswith(vllm_root())
