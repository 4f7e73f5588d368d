"""What a phase-2 check reports: one finding at a line of the model's own code.

Light (stdlib only): the checks (``checks/``) make findings; the later stages (the
dry-runs, coverage, the builds' gaps) return typed facts instead, among them ``Unverified``
(what could not be checked, and why), which the PFX600 unit alone words. Which files are
the model's own code is read here too (``model_code``), for them and for the crash sites,
the plugins' error sites and the recorder.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import inspect
import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass
class Finding:
    code: str
    severity: Literal["error", "warning", "note"]
    message: str
    file: str
    line: int
    layouts: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # where the same site's finding repeats
    variants: list[str] = field(default_factory=list)  # config variants it appeared in
    group: str = ""  # findings of one code, site and group are one
    # what was found, for the code that merges, confirms or softens it: the message is
    # for people and never read (issue 37); e.g. {"kind": "loader-raises", "tensor": ...}
    facts: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[str, str, int, str]:
        return (self.code, self.file, self.line, self.group)


@dataclass(frozen=True)
class Unverified:
    """What phase 2 could not check at ``site`` of the model, and why: a fact the stages
    return (dry-runs, coverage, builds) and the PFX600 unit alone words
    (``checks/pfx600_not_verified.py``). ``kind`` says which of its sentences: "stage" (a
    stage ``what`` did not run, or ran in part: ``cause``), "build" (building the
    architecture ``what`` failed at ``layouts`` for the gap ``category`` of a config that
    was or was not ``synthesised``), "site" (a construction site, calling ``what``, that no
    build executed: ``cause`` says why, after ``tried`` config variants). ``advice``: what
    would verify it."""

    what: str
    cause: str
    site: tuple[str, int]
    kind: str = "stage"
    advice: str = ""
    layouts: tuple[str, ...] = ()
    category: str = ""
    synthesised: bool = False
    tried: int = 0


# An error's first line is kept whole up to this; beyond it (a list of every parameter) it
# is cut after a whole word, never inside a name.
_ERROR_CHARS = 1000


def error_line(error: BaseException | None) -> str:
    """The first line of ``error``'s text, whole: vLLM's errors end with the name they are
    about (``... model.layers.0.mlp.experts.w13_weight``), which a cut mid-name hides."""
    text = str(error).strip() if error is not None else ""
    line = text.splitlines()[0] if text else ""
    if len(line) <= _ERROR_CHARS:
        return line
    cut = max(line.rfind(c, 0, _ERROR_CHARS) for c in " ,;")
    return line[: cut if cut > 0 else _ERROR_CHARS].rstrip(" ,;") + " ..."


def describe_error(error: BaseException | None) -> str:
    """``Type: first line`` of ``error``, the line whole (``error_line``)."""
    return f"{type(error).__name__}: {error_line(error)}"


def class_site(cls: type | None) -> tuple[str, int]:
    """Where a class is defined: its file and the line ``inspect.getsourcelines`` gives
    (its first decorator's, else its ``class`` statement's; ``("", 0)`` for None or a
    class without source). Python 3.13 records that line on the class; before it,
    ``inspect`` parses the whole file for each class, so the file's classes are read
    here once per file version."""
    try:
        file = inspect.getsourcefile(cls) or ""  # type: ignore[arg-type]
    except TypeError:
        return "", 0
    line = getattr(cls, "__firstlineno__", None)
    if not isinstance(line, int) and file:
        with contextlib.suppress(OSError):
            stat = os.stat(file)
            line = _class_lines(file, stat.st_mtime_ns, stat.st_size).get(cls.__qualname__)
    if isinstance(line, int):
        return file, line
    try:  # not found by its qualified name (a class made by ``type()``): as inspect finds it
        return file, inspect.getsourcelines(cls)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return "", 0


@functools.lru_cache(maxsize=256)
def _class_lines(file: str, mtime_ns: int, size: int) -> dict[str, int]:
    """Qualified class name -> the line ``inspect`` gives it, for one version of ``file``
    (as Python 3.11's ``inspect._ClassFinder`` finds it: the first class of that name)."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    lines: dict[str, int] = {}

    def visit(node: ast.AST, stack: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [*stack, child.name, "<locals>"])
            elif isinstance(child, ast.ClassDef):
                inner = [*stack, child.name]
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                lines.setdefault(".".join(inner), first)
                visit(child, inner)
            else:
                visit(child, stack)

    visit(tree, [])
    return lines


_VLLM_MODELS = re.compile(r"/vllm/(model_executor/)?models/")
# vLLM's shared model helpers, in its models folder but no model's code
_VLLM_MODEL_HELPERS = ("/models/utils.py", "/models/interfaces.py", "/registry.py")


def _package_root(name: str) -> Path | None:
    """An installed package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@functools.cache  # the installed packages do not move while a process runs
def library_roots() -> tuple[str, ...]:
    """Folders of code that is never the model's: the standard library, torch,
    transformers, prefixlint, and vLLM (its model folders aside: ``model_code``)."""
    roots = [_package_root(name) for name in ("torch", "transformers", "prefixlint", "vllm")]
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        roots.append(Path(stdlib).resolve())
    return tuple(str(r) + os.sep for r in roots if r is not None)


@functools.cache
def layer_library_roots() -> tuple[str, ...]:
    """The narrower library of the construction recorder (``builds/recorder.py``): the code
    that builds layers for the model. A construction's site is the first frame outside it,
    so vLLM's model helpers (``make_layers``), the rest of vLLM and the standard library
    count as the model's side there, as they always have: findings keep their lines."""
    vllm = _package_root("vllm")
    # vLLM's layers; its compilation, whose @support_torch_compile wraps __init__; utils
    in_vllm = ("model_executor/layers", "compilation", "utils")
    folders = [
        _package_root("transformers"),  # the Transformers backend builds from its code
        _package_root("torch"),
        *((vllm / sub for sub in in_vllm) if vllm else ()),
        _package_root("prefixlint"),
    ]
    return tuple(str(f) + os.sep for f in folders if f is not None)


def in_models_folder(file: str) -> bool:
    """``file`` is in a ``models/`` folder: the files the config repairs read for what a
    model reads of its config (``builds/pipeline.py``, ``configs/``). vLLM's model helpers
    and transformers' model files are in; a plugin's file outside such a folder is not
    (tests keep their toy models in one). Not ``model_code``: kept as it has always read."""
    return "/models/" in file


def in_vllm_models(file: str) -> bool:
    """``file`` is in vLLM's model folders (``vllm/model_executor/models/``)."""
    return bool(_VLLM_MODELS.search(file.replace("\\", "/")))


def model_code(file: str, vllm_models: bool = True) -> bool:
    """``file`` is a model's: not generated (``<string>``), outside the standard library,
    torch, transformers, prefixlint and vLLM; a user's file or an installed plugin's is.
    ``vllm_models``: vLLM's own model files (not its shared helpers there) count too. They
    are the model under test for a build or a crash; a plugin's registration error is
    placed at the plugin's own line, never in the vLLM model it builds on (False)."""
    if file.startswith("<"):
        return False
    if in_vllm_models(file):
        return vllm_models and not file.replace("\\", "/").endswith(_VLLM_MODEL_HELPERS)
    try:
        resolved = str(Path(file).resolve())
    except OSError:
        resolved = file
    return not resolved.startswith(library_roots())
