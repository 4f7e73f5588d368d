"""Layer schedules transformers' model reads: config variants that change which layers are
dense and which MoE (or of which kind).

A model that ignores a layer schedule (Qwen2-MoE's ``mlp_only_layers`` not read,
vllm#4774) builds every layer alike; on a config whose schedule is the default it agrees
with transformers, and the model's own files, which no longer read it, propose no
variant of it. So the schedules come from transformers' side: the attributes its
modeling module compares with a layer index (``layer_idx not in config.mlp_only_layers``,
``(layer_idx + 1) % config.decoder_sparse_step``, ``layer_idx >= config.first_k_dense_replace``,
``layer_idx % config.moe_layer_freq``), read from its source (stdlib ``ast``), each
declared by the config class. A variant moves the schedule off the config's value: a
list of layer indices gains (or loses) layer 0, a step of 1 becomes 2 (else 1), a first
layer bound of 0 becomes 1 (else 0). A list the config class derives from the layer
count (Llama 4's ``moe_layers``) is left alone: checkpoints set what it derives it from.
A schedule is the served model's shape (released Qwen2-MoE and DeepSeek configs set
them), not a mode: a difference on it, or a checkpoint of it the model's loader refuses,
is an error.
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import Any

_LAYER_WORDS = ("layer", "idx", "index")
_SKIP = frozenset({"num_hidden_layers", "num_layers", "n_layer", "n_layers"})


@functools.lru_cache(maxsize=64)
def schedule_attributes(ref_cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, how) for each config attribute transformers' modeling module compares
    with a layer index: ``how`` is ``member`` (``i in x``), ``step`` (``i % x``) or
    ``bound`` (``i >= x``)."""
    from prefixlint.introspect.compare.guesses import module_source

    try:
        tree = ast.parse(module_source(inspect.getmodule(ref_cls)))
    except (SyntaxError, ValueError, TypeError):
        return ()
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if _indexed(node.left):
                for attr in _config_reads(node.right):
                    out.setdefault(attr, "step")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            sides, op = (node.left, node.comparators[0]), node.ops[0]
            how = "member" if isinstance(op, (ast.In, ast.NotIn)) else None
            if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                how = "bound"
            if how is None or not any(_indexed(s) and not _config_reads(s) for s in sides):
                continue
            for side in sides:
                for attr in _config_reads(side):
                    out.setdefault(attr, how)
    return tuple((a, h) for a, h in out.items() if a not in _SKIP)


def _indexed(node: ast.AST) -> bool:
    """A layer index: a name or ``self.x`` with a layer word (``layer_idx``, ``i`` too)."""
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else getattr(sub, "attr", None)
        if not isinstance(sub, (ast.Name, ast.Attribute)) or not isinstance(name, str):
            continue
        if (name == "i" or any(w in name.lower() for w in _LAYER_WORDS)) and "config" not in name:
            return True
    return False


def _config_reads(node: ast.AST) -> list[str]:
    """``config.x`` and ``self.config.x`` reads in ``node``."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            owner = sub.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name == "config":
                out.append(sub.attr)
    return out


def schedule_overrides(config: Any, own: frozenset[str], ref_cls: type) -> list[dict[str, Any]]:
    """One override per schedule attribute the config class declares and holds a value of
    the kind its use takes, moved off the config's value."""
    out = []
    for attr, how in schedule_attributes(ref_cls):
        if attr not in own or _derived(type(config), attr):
            continue
        value = _moved(getattr(config, attr, None), how)
        if value is not None:
            out.append({attr: value})
    return out


def _derived(kind: type, attr: str) -> bool:
    """Whether the config class derives ``attr`` from the layer count (Llama 4's
    ``moe_layers`` from ``interleave_moe_layer_step``): a config transformers writes
    holds it as derived from what checkpoints set, so moving it alone is no served
    config."""
    try:
        return getattr(kind(num_hidden_layers=3), attr) != getattr(kind(num_hidden_layers=5), attr)
    except Exception:  # a class that cannot be built so: nothing says it is derived
        return False


def _moved(value: Any, how: str) -> Any:
    if how == "member" and isinstance(value, list) and all(type(i) is int for i in value):
        return [i for i in value if i != 0] if 0 in value else sorted([0, *value])
    if type(value) is not int:
        return None
    if how == "step":
        return 2 if value == 1 else 1 if value > 1 else None
    if how == "bound":
        return 1 if value == 0 else 0 if value > 0 else None
    return None
