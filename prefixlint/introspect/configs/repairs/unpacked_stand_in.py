"""A callee refused the keys of a stand-in sub-config the model unpacks into it.

Failure: ``TypeError: ConformerEncoder.__init__() got an unexpected keyword argument
'hidden_act'`` (or ``missing 3 required positional arguments``) on a call that unpacks a
stand-in sub-config: vLLM 0.32's ``models/fireredasr2.py``
``ConformerEncoder(**vllm_config.model_config.hf_config.audio_encoder_conf)``, or a local
holding one, ``models/clef_omni.py`` ``JointSchemaHead(**head_config)``. A checkpoint's
dict holds exactly the callee's keys; the stand-in holds an encoder's usual ones.

Change: the stand-in unpacks into the callee's named parameters only (its ``keys()``;
nothing is deleted, so other readers keep their values), and each required parameter it
lacks gets a value guessed by name, else by its annotation (a layer count 2, another int
128, a flag False). Returns the sub-config's attribute name.

Limits: only prefixlint's stand-ins (``subconfigs.is_stand_in``), never a checkpoint's
config; the callee must resolve from the failing frame (a name, ``mod.Class``, or the
class the message names); a callee taking ``**kwargs`` keeps every key.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

from prefixlint.introspect.configs.demands import callee, config_reader_frame, statement
from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import Failure
from prefixlint.introspect.configs.subconfigs import fit_to_callee, is_stand_in

_BINDING = re.compile(r"unexpected keyword argument|missing \d+ required")
_CALLED = re.compile(r"(\w+)\.__init__\(\)")


def repair(failure: Failure) -> str | None:
    error = failure.error
    where = config_reader_frame(error)
    if not isinstance(error, TypeError) or where is None or not _BINDING.search(str(error)):
        return None
    frame = where[2]
    stmt = statement(*where)
    for node in ast.walk(stmt) if stmt is not None else ():
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            sub = _value(kw.value, frame) if kw.arg is None else None
            if not is_stand_in(sub):
                continue
            params = _parameters(callee(node.func, frame), error, frame)
            if params is not None and fit_to_callee(sub, params, _guess(sub)):
                return _name_of(sub, kw.value, failure.nested)
    return None


def _value(node: ast.AST, frame: Any) -> Any:
    """What ``**<node>`` unpacks: a local, or an attribute chain from one."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in frame.f_locals:
        return None
    found = frame.f_locals[node.id]
    for part in parts:
        found = getattr(found, part, None)
    return found


def _parameters(target: Any, error: BaseException, frame: Any) -> dict[str, Any] | None:
    """The callee's parameters (a class's ``__init__``'s, without ``self``); the class
    the message names where the call's target does not resolve."""
    if target is None:
        m = _CALLED.search(str(error))
        target = frame.f_globals.get(m.group(1)) if m else None
    if target is None:
        return None
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None


def _guess(sub: Any) -> Any:
    def guess(name: str, annotation: Any) -> Any:
        found = guess_attribute(name, sub)
        if found is None and annotation in (int, "int"):
            found = 2 if "layer" in name.lower() else 128  # a width every head count divides
        elif found is None and annotation in (bool, "bool"):
            found = False
        elif found is None and annotation in (float, "float"):
            found = 0.0
        return found

    return guess


def _name_of(sub: Any, node: ast.AST, configs: list[Any]) -> str:
    """The config attribute holding ``sub`` (``joint_head_config``), else the name the
    code unpacks."""
    for config in configs:
        for attr, value in vars(config).items():
            if value is sub:
                return attr
    return ast.unparse(node).rsplit(".", 1)[-1]
