"""The config lacks an attribute the model reads.

Failure: ``AttributeError: '<Config>' object has no attribute '<name>'`` on a config
object (vLLM 0.32's ``models/qwen3_omni_moe_thinker.py``
``self.n_window_infer = config.n_window_infer`` on a stand-in audio config;
``models/step_vl.py`` ``ls_init_value=config.ls_init_value``).

Change: the config of that class that lacked it (the very object, where the error says)
gets, first found: the default of the config class the raising function annotates its
parameter with (``config: Qwen3OmniMoeAudioEncoderConfig``); the default of the
parameter of the model's own callee it is passed to (``ls_init_value: float | None =
None``); the default in the config class vLLM registers for the model type when that is
another class; a dict of the keys the code reads from it (``config.img_processor["x"]``);
else a value guessed from its use and name (``hints.guess_attribute``).

Limits: claims every missing attribute of a config (the sub-config and required-empty
cases ran before); no guess: nothing given.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import textwrap
from typing import Any

from prefixlint.introspect.configs.demands import (
    callee,
    config_attr,
    config_reader_frame,
    function_source,
    statement,
)
from prefixlint.introspect.configs.hints import LITERAL, guess_attribute
from prefixlint.introspect.configs.model_types import vllm_config_registry
from prefixlint.introspect.configs.repairs.reading import (
    Failure,
    give_guess,
    missing_on_config,
)
from prefixlint.introspect.configs.shrink import shrink_kwargs


def claims(failure: Failure) -> bool:
    return missing_on_config(failure.error) is not None


def repair(failure: Failure) -> str | None:
    found = missing_on_config(failure.error)
    if found is None:
        return None
    cls_name, attr = found
    error, texts = failure.error, failure.texts
    configs = failure.nested  # a thinker's audio config sits two levels down
    lacking = [c for c in configs if type(c).__name__ == cls_name and not hasattr(c, attr)]
    # the very object that lacked it (vision and audio stand-ins share a class name)
    owner = getattr(error, "obj", None)
    if any(owner is c for c in lacking):
        lacking.remove(owner)
        lacking.insert(0, owner)
        configs = [owner] + [c for c in configs if c is not owner]
    known, value = annotated_default(error, attr)
    if not known:
        known, value = callee_default(error, attr)
    if not known and lacking:
        known, value = _registered_default(lacking[0], attr)
    if not known and lacking:
        value = _dict_from_code(attr, lacking[0], texts)
        known = value is not None
    if known and lacking:
        setattr(lacking[0], attr, value)
        return attr
    return give_guess(
        configs, attr, texts, lambda c: type(c).__name__ == cls_name and not hasattr(c, attr)
    )


def annotated_default(error: BaseException, attr: str) -> tuple[bool, Any]:
    """``def __init__(self, config: Qwen3OmniMoeAudioEncoderConfig)`` reading
    ``config.n_window_infer`` from a stand-in sub-config: the code names the config class
    it expects, so the attribute takes that class's default (shrunk like the rest where
    it is a size). ``(False, None)`` when the raising function annotates no such class."""
    where = config_reader_frame(error)
    if where is None:
        return False, None
    filename, _, frame = where
    try:
        tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
    except SyntaxError:
        return False, None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False, None
    for arg in [*func.args.args, *func.args.kwonlyargs]:
        holder = frame.f_locals.get(arg.arg)
        if arg.annotation is None or holder is None or hasattr(holder, attr):
            continue
        cls = _resolve(arg.annotation, frame.f_globals)
        if cls is None:
            continue
        try:
            default = cls()
            value = getattr(default, attr)
        except Exception:
            continue
        with contextlib.suppress(Exception):
            value = shrink_kwargs(default).get(attr, value)
        return True, value
    return False, None


def _resolve(annotation: ast.AST, namespace: dict[str, Any]) -> type | None:
    """The config class an annotation names (``X``, ``mod.X``, ``X | None``)."""
    if isinstance(annotation, ast.BinOp):
        return _resolve(annotation.left, namespace) or _resolve(annotation.right, namespace)
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        with contextlib.suppress(SyntaxError):
            return _resolve(ast.parse(annotation.value, mode="eval").body, namespace)
        return None
    parts: list[str] = []
    node = annotation
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    found: Any = namespace.get(node.id)
    for part in parts:
        found = getattr(found, part, None)
    if isinstance(found, type) and found.__name__.endswith("Config") and hasattr(found, "to_dict"):
        return found
    return None


def callee_default(error: BaseException, attr: str) -> tuple[bool, Any]:
    """``Encoder(ls_init_value=config.ls_init_value)``: the attribute is passed straight
    to a parameter with a default (``ls_init_value: float | None = None``) of a callee
    the model's own module defines; a checkpoint that omits it means that default.
    ``(False, None)`` when the line is no such call."""
    where = config_reader_frame(error)
    if where is None:
        return False, None
    stmt = statement(where[0], where[1], where[2])
    for node in ast.walk(stmt) if stmt is not None else ():
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg is None or config_attr(kw.value) != attr:
                continue
            found = callee(node.func, where[2])
            if getattr(found, "__module__", None) != where[2].f_globals.get("__name__"):
                # only the model's own declaration says what an omitted value means
                # (a shared layer's ``bias=True`` default says nothing of the config)
                continue
            try:
                param = inspect.signature(found).parameters.get(kw.arg)
            except (TypeError, ValueError):
                continue
            if param is not None and param.default is not inspect.Parameter.empty:
                return True, param.default
    return False, None


def _registered_default(config: Any, attr: str) -> tuple[bool, Any]:
    """The default of ``attr`` in the config class vLLM registers for ``config``'s model
    type, when that is another class (transformers' ``Step3p7TextConfig`` and vLLM's
    ``Step3p5Config`` share ``step3p5``; vLLM's model reads vLLM's)."""
    config_registry = vllm_config_registry()

    model_type = getattr(config, "model_type", "") or ""
    try:
        # a lazy registry: ``[]`` loads the class, ``.get`` may not
        cls = config_registry[model_type] if model_type in config_registry else None  # noqa: SIM401
    except Exception:
        return False, None
    if not isinstance(cls, type) or isinstance(config, cls):
        return False, None
    try:
        default = cls()
        value = getattr(default, attr)
    except Exception:
        return False, None
    with contextlib.suppress(Exception):
        value = shrink_kwargs(default).get(attr, value)
    return True, value


def _dict_from_code(attr: str, config: Any, texts: list[str]) -> dict[str, Any] | None:
    """``config.img_processor["image_dim_out"]``, ``config.img_processor.get("layer_idx",
    -2)``: a dict-valued attribute (checkpoints write it as a JSON object); its keys are
    those the code reads, with the code's defaults, else guessed by name (a size when
    nothing names them)."""
    name = re.escape(attr)
    out: dict[str, Any] = {}
    for text in texts:
        if attr not in text:
            continue
        for m in re.finditer(rf"\.{name}\.get\(\s*[\"'](\w+)[\"']\s*,\s*{LITERAL}\s*\)", text):
            out.setdefault(m.group(1), ast.literal_eval(m.group(2)))
        for m in re.finditer(rf"\.{name}\[\s*[\"'](\w+)[\"']\s*\]", text):
            if m.group(1) not in out:
                guess = guess_attribute(m.group(1), config)
                out[m.group(1)] = 16 if guess is None else guess
    return out or None
