"""Guessed values transformers never reads: a synthesised config's guess is not the model's
bug.

Synthesis gives a config what the model reads and the config class lacks, by guessing
(``configs/hints.py``: AFMoE's ``score_func`` becomes "softmax", ``route_norm`` False).
Real checkpoints carry these values in config.json. Where transformers' class neither
declares nor reads the attribute, it computes one fixed way (AFMoE's router is always a
sigmoid with renormalised weights), while vLLM's model follows the guess. A difference
then comes from the guess, not from the model.

So when a comparison on a synthesised config differs, the values the model's code tells
apart for such attributes (a flag's two values, the strings it compares with) are tried
in turn. The first that compares equal is the value transformers' class hard-codes: the
comparison holds for it, and a note says the other values are not verified. When none
does, the one that agrees furthest into the model is kept: a difference no value of a
guess removes is the model's, and stays a PFX609.

An attribute the model reads with a ``getattr`` default, which the synthesised config
lacks altogether (nothing failed, so synthesis guessed nothing), is such a guess too: the
default. DeepSeek-V3's checkpoints say ``"topk_method": "noaux_tc"`` and ``"scoring_func":
"sigmoid"``; transformers' class declares neither and always routes so, while vLLM's
``getattr(config, "scoring_func", "softmax")`` builds a softmax router without the
correction bias, and the load refuses the checkpoint's bias. Its values to try are the
strings the code compares it with and, for a routing default, the other scoring functions
the reference routing computes (``routing.SCORING``). A load that fails on the guesses is
settled the same way (``compare``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import re
from collections.abc import Callable
from typing import Any

from prefixlint.introspect.compare.facts import Comparison, Status
from prefixlint.introspect.compare.routing import SCORING

MAX_TRIES = 7  # combinations tried besides the guess itself (three flags)


class _Absent:
    """The value of an attribute the config lacks: the model's ``getattr`` default."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


def unread_guesses(model_config: Any, ref_cls: type, files: list[str]) -> dict[str, list[Any]]:
    """Attribute -> the values to try (the guess first), for each attribute the model's
    files read, the config holds, and transformers' class neither declares nor reads: on a
    synthesised config only a guess puts such an attribute there."""
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    config = config_objects(model_config)[0]
    facts = [file_facts(f) for f in files]
    read = set().union(*(f.reads for f in facts)) if facts else set()
    source = _source(ref_cls)
    out: dict[str, list[Any]] = {}
    for attr in sorted(read):
        if attr.startswith("$") or attr not in vars(config) or attr in declared(type(config)):
            continue
        if re.search(rf"\b{re.escape(attr)}\b", source):  # transformers reads it by name
            continue
        value = vars(config)[attr]
        compared = [v for f in facts if attr in f.uses for v in f.uses[attr].compared]
        if value in SCORING:  # handed to the router (MiniMax M2's): the scorings it computes
            compared += list(SCORING)
        values = _values(value, compared)
        if len(values) > 1:
            out[attr] = values
    return out


def absent_guesses(model_config: Any, ref_cls: type, files: list[str]) -> dict[str, list[Any]]:
    """Attribute -> the values to try (``ABSENT`` first), for each attribute the model's
    files read with a flag, a string or None as ``getattr`` default, that the config
    neither holds nor declares and that transformers' class never names: only the default
    stands there for a checkpoint's value."""
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    configs = config_objects(model_config)
    source = _source(ref_cls)
    out: dict[str, list[Any]] = {}
    for facts in (file_facts(f) for f in files):
        for attr, use in facts.uses.items():
            default = use.default
            if attr in out or not isinstance(default, (bool, str, type(None))) or use.indexed:
                continue  # no default, a number's, or a list whose elements are compared
            if any(attr in vars(c) or attr in declared(type(c)) for c in configs):
                continue
            if re.search(rf"\b{re.escape(attr)}\b", source):  # transformers reads it
                continue
            if isinstance(default, bool):  # a flag: its other value (HYV3's `qk_norm`)
                out[attr] = [ABSENT, not default]
                continue
            strings = [v for v in use.compared if isinstance(v, str)]
            if default in SCORING:  # handed to the router: the scorings it computes
                strings += list(SCORING)
            values = [v for v in dict.fromkeys(strings) if v != default]
            if values:
                out[attr] = [ABSENT, *values]
    return out


def _values(value: Any, compared: list[Any]) -> list[Any]:
    """The guess, then the other values the code tells apart: a flag's other value, the
    strings it is compared with. Numbers are left alone (no finite set)."""
    if isinstance(value, bool):
        return [value, not value]
    if isinstance(value, str):
        return [value, *dict.fromkeys(v for v in compared if isinstance(v, str) and v != value)]
    return [value]


@functools.lru_cache(maxsize=64)
def declared(config_type: type) -> frozenset[str]:
    """What the config class declares: class attributes and annotations, and what its
    default instance holds."""
    out: set[str] = set()
    for klass in config_type.__mro__:
        out |= set(vars(klass)) | set(getattr(klass, "__annotations__", {}))
    with contextlib.suppress(Exception):  # without defaults: its annotations said it all
        out |= set(vars(config_type()))
    return frozenset(out)


@functools.lru_cache(maxsize=64)
def _source(ref_cls: type) -> str:
    """The text of the reference class's modeling module and of its config's module."""
    texts = []
    for obj in (inspect.getmodule(ref_cls), getattr(ref_cls, "config_class", None)):
        try:
            texts.append(inspect.getsource(inspect.getmodule(obj) or obj))
        except (OSError, TypeError):
            continue
    return "\n".join(texts)


def transformers_reads(ref_cls: type, attr: str) -> bool:
    """Whether transformers' class computes with ``attr``: its modeling module names it,
    or its config class derives another value from it (a mention other than the
    attribute's own declaration and its docstring entry). A flag the reference never
    reads (DeepSeek-V2's ``norm_topk_prob`` in transformers' port) has no reference value
    to compare a variant with. A copy into the module that nothing reads (Zamba2's mixer
    stores ``self.use_conv_bias`` and builds its convolution with ``bias=True``) is no
    computation."""
    word = re.compile(rf"\b{re.escape(attr)}\b")
    if any(word.search(line) for line in _computing_lines(ref_cls, attr)):
        return True
    own = re.compile(rf"(self\.)?{re.escape(attr)}\s*(:[^=]*)?(=|$)|{re.escape(attr)}\s*\(")
    config_module = inspect.getmodule(getattr(ref_cls, "config_class", None))
    for line in module_source(config_module).splitlines():
        text = line.strip()
        if word.search(text) and not own.match(text):
            return True
    return False


def _computing_lines(ref_cls: type, attr: str) -> list[str]:
    """The modeling module's lines, but for ``self.attr = config.attr`` where no other
    line reads ``self.attr``."""
    lines = module_source(inspect.getmodule(ref_cls)).splitlines()
    copy = re.compile(rf"\s*self\.{re.escape(attr)}\s*=\s*(self\.)?config\.{re.escape(attr)}\s*$")
    own = re.compile(rf"\bself\.{re.escape(attr)}\b")
    copies = [line for line in lines if copy.match(line)]
    used = any(own.search(line) for line in lines if not copy.match(line))
    return lines if used or not copies else [line for line in lines if not copy.match(line)]


@functools.lru_cache(maxsize=64)
def module_source(module: Any) -> str:
    try:
        return inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return ""


def settle(
    first: Comparison,
    choices: dict[str, list[Any]],
    run: Callable[[dict[str, Any]], Comparison],
) -> Comparison:
    """``first`` (run on the guesses) when nothing is to be tried; else the comparison on
    the first combination of values that compares equal, or the one that agrees furthest
    (``first`` on a tie). ``run`` compares with the values given set on the config. The
    result carries the values it ran with (``assumed``)."""
    if not choices:
        return first
    names = list(choices)
    guess = {n: choices[n][0] for n in names}
    order = [b.path for b in first.boundaries]
    best, best_values = first, guess
    combos = itertools.product(*(choices[n] for n in names))
    tried = 0
    for combo in combos:
        values = dict(zip(names, combo, strict=True))
        if values == guess:
            continue
        if tried >= MAX_TRIES:
            break
        tried += 1
        result = run(values)
        if result.status is Status.EQUAL:
            best, best_values = result, values
            break
        order = order or [b.path for b in result.boundaries]  # the base did not run
        if result.status is Status.DIFFERS and _reach(result, order) > _reach(best, order):
            best, best_values = result, values
    if best.status is not Status.NOT_RUN:  # no value ran: it assumed nothing
        best.assumed = {n: v for n, v in best_values.items() if v is not ABSENT}
    best.seconds = first.seconds
    return best


def _reach(result: Comparison, order: list[str]) -> int:
    """How far into the model a differing comparison agrees: the position of its first
    divergent module in the base run's completion order (the logits last); one that did
    not run (a load the guesses failed) least."""
    if result.status is Status.NOT_RUN:
        return -2
    if result.first is None:
        return len(order)
    path = result.first.path
    return order.index(path) if path in order else -1
