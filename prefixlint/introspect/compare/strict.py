"""Values a strict transformers config class accepts, for the reference's copy of a config.

transformers 5's config classes are strict dataclasses (huggingface_hub's ``@strict``):
each declared field runs a type check (and any validator the class adds) when it is set,
and refuses a value of another type even where it means the same. A synthesised config
holds what synthesis guessed for what vLLM's model reads: DeepSeek V4's
``norm_topk_prob: 2``, a number where transformers' ``DeepseekV4Config`` declares a bool
(``configuration_deepseek_v4.py:138``). vLLM's model reads it as a truth value
(``renormalize=config.norm_topk_prob``); transformers' class refuses it, and the
reference is never built.

So the reference's copy spells each refused value as a type the field accepts, where the
spelling keeps what the value means: an integral float as an int, an int as a float, a
number or None as its truth value for a flag (what ``if config.x:`` reads), a
``head_dim`` of None as the head size vLLM derives for it. A value no
such spelling makes acceptable (None for a field declared ``int``: DeepSeek V3.2's
``q_lora_rank``, whose transformers port always builds the query LoRA) is refused with
the field's declared type named: that config is none transformers' class can hold. Only
the copy the reference is built from changes, never the config the model is built with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


class Refused(ValueError):
    """A value no spelling of the same meaning makes acceptable to the config class."""


def accepted(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a config's ``to_dict``) with each value ``config_cls`` refuses spelled
    as one it accepts (``spellings``); a copy. Raises ``Refused`` naming the field and its
    declared type where no spelling is accepted."""
    checks = field_checks(config_cls)
    out = dict(values)
    for name, value in values.items():
        check = checks.get(name)
        if check is None or check(value):
            continue
        options = [*_none_means(name, values), *spellings(value)] if value is None else None
        spelled = next((s for s in options or spellings(value) if check(s)), _NONE)
        if spelled is _NONE:
            declared = _declared_type(config_cls, name)
            raise Refused(
                f"transformers' {config_cls.__name__} declares `{name}: {declared}`; the "
                f"config holds {value!r}, which no value of that type means"
            )
        out[name] = spelled
    return out


_NONE = object()


def spellings(value: Any) -> list[Any]:
    """The same value as other types, in order of preference: the number as the other
    numeric type where no digit is lost, then its truth value (a flag read as
    ``if config.x:``). Strings, containers and flags have none."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [float(value), bool(value)]
    if isinstance(value, float):
        return ([int(value)] if value.is_integer() else []) + [bool(value)]
    if value is None:
        return [False]
    return []


def _none_means(name: str, values: dict[str, Any]) -> list[Any]:
    """What None means for ``head_dim`` in vLLM: the head size its config convertor
    derives where the config has none, ``hidden_size // num_attention_heads``
    (``ModelArchConfigConvertorBase.get_head_size``, 0.32 and 0.33; Beam's model reads it
    so, ``config.head_dim or hidden_size // num_heads``). Nothing for another field."""
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    if name != "head_dim" or not (type(hidden) is type(heads) is int) or not heads:
        return []
    return [hidden // heads] if hidden % heads == 0 else []


def field_checks(config_cls: type) -> dict[str, Callable[[Any], bool]]:
    """Field name -> whether the class accepts a value for it: the validators
    huggingface_hub's ``@strict`` runs when the field is set (its type check from the
    annotation, then the class's own). Empty for a class that is not strict."""
    table = getattr(config_cls, "__validators__", None)
    if not isinstance(table, dict):
        return {}
    return {name: _accepts(list(validators)) for name, validators in table.items()}


def _accepts(validators: list[Callable[[Any], None]]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        try:
            for validator in validators:
                validator(value)
        except (TypeError, ValueError):  # what ``@strict`` turns into its refusal
            return False
        return True

    return check


def _declared_type(config_cls: type, name: str) -> str:
    found = next((f for f in dataclasses.fields(config_cls) if f.name == name), None)
    if found is None:
        return "?"
    kind = found.type
    return kind.__name__ if isinstance(kind, type) else str(kind)
