"""Repairs: a probe build of a synthesised config failed; the error says what a real
checkpoint's config would have held, and a repair gives it.

Each repair is one module here: its docstring names the failure it reads (the
exception, the vLLM or transformers code that raises it, a real message), what it
changes, and its limits; its ``repair(failure)`` returns the names it changed, or None.
A repair that ``claims`` a failure (a module-level ``claims(failure)``) is the only one
for it: when it gives nothing, no later repair is tried.

``REPAIRS`` is the one order they are tried in, with the reason for each place (as
``prefixlint/codes.py`` is for the rules). The build's repair loop (``build.py``) calls
``repair`` once per failed probe, at most 40 times a target.

To add a repair: one module here (the docstring, ``repair``, and ``claims`` if it
owns its kind of failure), one line in ``REPAIRS`` with its reason, one test in
``tests/test_introspect_repairs.py`` on a hand-written model file in
``tests/fixtures/models/repairs/`` that raises exactly that failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prefixlint.introspect.configs.repairs import (
    asserted_argument,
    asserted_demand,
    asserted_flag,
    asserted_literal,
    asserted_read,
    builds_itself,
    checked_class,
    copied_mapping,
    dispatched_model_type,
    dispatched_value,
    empty_per_layer_spec,
    guarded_raise,
    integral_sizes,
    mismatched_value,
    missing_attribute,
    missing_key,
    missing_sub_config,
    named_none,
    none_fallback,
    none_read,
    none_used,
    relation,
    required_empty,
    scalar_as_pair,
    sequence_as_text,
    short_list,
    stated_value,
    sub_model_architecture,
    unpacked_config,
    unpacked_stand_in,
    zero_refused,
)
from prefixlint.introspect.configs.repairs.reading import Failure


@dataclass(frozen=True)
class Repair:
    module: ModuleType
    why: str  # why it is tried where it is

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    @property
    def apply(self) -> Callable[[Failure], str | None]:
        return self.module.repair

    def claims(self, failure: Failure) -> bool:
        claims = getattr(self.module, "claims", None)
        return bool(claims and claims(failure))


REPAIRS: tuple[Repair, ...] = (
    Repair(stated_value, "first: the model names the exact value; nothing guessed beats it"),
    Repair(missing_key, "claims every KeyError: only it reads a missing key"),
    Repair(
        checked_class,
        "before the value repairs: a refused stand-in is the wrong object, and an "
        "`assert isinstance(...)` would otherwise read as a literal or flag to give",
    ),
    Repair(asserted_literal, "an assert on config.x == literal names its value"),
    Repair(asserted_argument, "the same, on a parameter the caller passed from the config"),
    Repair(dispatched_value, "the dispatch lists the values it takes; one is given"),
    Repair(
        zero_refused,
        "before every repair that guesses from the model's code: the refused 0 is the "
        "code's own getattr default, which a code-based guess gives again; this one "
        "guesses by name (test_dispatch_on_a_config_value_and_a_refused_zero pins it)",
    ),
    Repair(sub_model_architecture, "a message only vLLM's registry raises"),
    Repair(
        empty_per_layer_spec,
        "an IndexError only transformers' per-layer view raises: before the repairs that "
        "read an index error as a list too short",
    ),
    Repair(
        short_list,
        "an IndexError on a config list the failing line subscripts: only a longer list "
        "answers it, so before the repairs that guess values",
    ),
    Repair(scalar_as_pair, "a message only an int read as a pair gives"),
    Repair(
        unpacked_stand_in,
        "a binding TypeError of a call unpacking a stand-in: before the missing-attribute "
        "repairs, which would add keys the callee does not take",
    ),
    Repair(unpacked_config, "a message only `**` of a non-mapping gives"),
    Repair(
        copied_mapping,
        "before the missing-attribute repairs: the object that lacks it is a copy made "
        "at each build, so the attribute must go on the sub-config it copies",
    ),
    Repair(missing_sub_config, "claims a missing *_config: only a sub-config fits the name"),
    Repair(required_empty, "claims a missing attribute the line wants empty: None or []"),
    Repair(
        missing_attribute,
        "claims every other missing attribute of a config: declared defaults, then a guess",
    ),
    Repair(builds_itself, "only a RecursionError through the registry"),
    Repair(dispatched_model_type, "a dispatch on model_type: a type, not a value, is given"),
    Repair(integral_sizes, "a float where torch wants an int size"),
    Repair(
        mismatched_value,
        "a named value and the number it should be; before relation, which matches the "
        "name loosely",
    ),
    Repair(
        none_fallback,
        "a None used as a number, with the code's own fallback: before the guesses below",
    ),
    Repair(sequence_as_text, "claims a list parsed as text: only its text form fits"),
    Repair(named_none, "the message names the None attribute exactly"),
    Repair(relation, "two named counts: after the repairs that name one value exactly"),
    Repair(
        asserted_demand,
        "an assert's literals, read with ast: after the line-based reads above",
    ),
    Repair(
        asserted_read,
        "an assert on a local the config gave None: after asserted_demand (a literal it "
        "compares with is better than a guess), before asserted_flag (which sets True)",
    ),
    Repair(asserted_flag, "last for asserts: turns on what is off, not what the assert names"),
    Repair(
        guarded_raise,
        "a guarded raise's test or message names a value: late, since its reading of any "
        "`if` over the config would take failures the specific repairs above explain",
    ),
    Repair(none_used, "the broadest reading of a None config read on the line"),
    Repair(none_read, "last: a None default of a local, the config lacking every name read"),
)


def apply(failure: Failure) -> tuple[Repair, str] | None:
    """The first repair of ``REPAIRS`` that gives something, and the names it changed;
    None when none does (or a repair that claims the failure gave nothing)."""
    for entry in REPAIRS:
        changed = entry.apply(failure)
        if changed:
            return entry, changed
        if entry.claims(failure):
            return None
    return None


def repair(
    error: BaseException, configs: list[Any], extra_files: list[str] | None = None
) -> str | None:
    """Give the configs what ``error`` says they lack; the names changed, or None."""
    answered = apply(Failure(error, configs, extra_files or []))
    return answered[1] if answered else None
