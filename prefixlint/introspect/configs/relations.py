"""Config values that must agree, read from the message that says they do not.

vLLM's layers and config classes check relations between sizes and say which, with both
values: ``num_heads (2) is not divisible by num_kv_heads (8)``, ``num_attention_heads
(16) must be the same as num_key_value_heads (8)``. With a synthesised config such a
failure is the synthesis's: it shrank one value while the config derived the other from
a default, or a guessed value disagrees with a shrunk one. The message names what must
hold, so one of the two values is changed until it does.

Light on purpose (no torch import): the names in the message are a layer's parameters
(``num_kv_heads``) as often as the config's own keys (``num_key_value_heads``), so a
config attribute is matched by its value and a shared word of its name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# ``name (16)`` or ``name=16``: a count the message names.
_NAMED_COUNT = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\(\s*(-?\d+)\s*\)|=\s*(-?\d+)\b)")
_DIVISIBLE = re.compile(r"divisible by|multiple of")
_EQUAL = re.compile(
    r"same as|must (?:be )?equal|must match|should (?:be )?equal|does not (?:match|equal)|!=|=="
)


@dataclass(frozen=True)
class Change:
    """Set the value named ``name`` (now ``old``) to ``new``."""

    name: str
    old: int
    new: int


def named_counts(text: str) -> list[tuple[str, int]]:
    """The ``name (value)`` / ``name=value`` pairs of ``text``, in order."""
    out = []
    for m in _NAMED_COUNT.finditer(text):
        value = m.group(2) if m.group(2) is not None else m.group(3)
        out.append((m.group(1), int(value)))
    return out


def proposals(text: str) -> list[Change]:
    """Changes that would make the relation ``text`` states hold, best first.

    Divisibility ``A (a) ... divisible by B (b)``: ``a`` up to the next multiple of ``b``
    (head counts stay large enough to divide every tensor-parallel size), else ``b`` down
    to ``gcd(a, b)``. Equality ``A (a) ... same as B (b)``: ``b`` to ``a``, else ``a`` to
    ``b`` (the subject of the sentence is the value the config was built around)."""
    for line in text.splitlines():
        found = _line_proposals(line)
        if found:
            return found
    return []


_BARE = re.compile(r"(?<![\w.=(-])(\d+)\b(?![.\w])")


def _line_proposals(text: str) -> list[Change]:
    counts = named_counts(text)
    if len(counts) == 1 and _EQUAL.search(text):
        # ``output_dim=6144 does not match pixel-shuffle output 512``: one named value and
        # the number it must equal (derived by the model, so the named one gives way)
        name, a = counts[0]
        rest = text.split(f"{a}", 1)[1] if f"{a}" in text else ""
        bare = [int(x) for x in _BARE.findall(rest)]
        return [Change(name, a, bare[0])] if bare and bare[0] > 0 and bare[0] != a else []
    if len(counts) < 2:
        return []
    (name_a, a), (name_b, b) = counts[0], counts[1]
    if a <= 0 or b <= 0 or name_a == name_b:
        return []
    if _DIVISIBLE.search(text):
        if a % b == 0:
            return []
        return [Change(name_a, a, b * math.ceil(a / b)), Change(name_b, b, math.gcd(a, b))]
    if _EQUAL.search(text) and a != b:
        return [Change(name_b, b, a), Change(name_a, a, b)]
    return []


def _words(name: str) -> set[str]:
    """Words of a name, singular, without the filler every count name has."""
    words = {w.removesuffix("s") for w in name.lower().split("_") if w}
    return words - {"num", "n", "total", "number", "of", "config"}


def _candidates(change: Change, config: Any, keep: dict[str, Any]) -> list[str]:
    """Attributes of ``config`` that hold the value ``change`` names: the same name
    first, then one sharing a word with it (``n_head`` for ``num_heads``). An attribute
    already at its value in ``keep`` (the consistent shrunk sizes) is not touched."""
    try:
        items = [(k, v) for k, v in vars(config).items() if not k.startswith("_")]
    except TypeError:
        return []
    wanted = _words(change.name)
    exact, related = [], []
    for key, value in items:
        if isinstance(value, bool) or value != change.old:
            continue
        if key == change.name:
            exact.append(key)
        elif wanted & _words(key) and keep.get(key) != value:
            related.append(key)
    return exact + related


def make_consistent(text: str, configs: Iterable[Any], keep: dict[str, Any]) -> str | None:
    """Apply the first change of ``proposals(text)`` that some config attribute can
    take; the attribute's name, or None when the message names no relation or no
    attribute holds the values it names."""
    configs = list(configs)
    for change in proposals(text):
        for config in configs:
            for key in _candidates(change, config, keep):
                try:
                    setattr(config, key, change.new)
                except Exception:
                    continue
                return key
    return None


def fix_overrides(text: str, kw: dict[str, Any]) -> dict[str, Any] | None:
    """For a config class that refused the overrides ``kw`` with a message naming two
    of its keys: overrides that satisfy the relation, or None. ``A (a) must be the same
    as B (b)``: B takes ``a`` in every dict of ``kw`` that holds A (its own, a
    sub-config's: the validator may be either's), whether or not B was overridden (a
    value the class derived from its defaults). Else the first of ``proposals`` that a
    key of ``kw`` holds."""
    equal = stated_equality(text)
    if equal is not None:
        fixed = _copied_where(kw, *equal)
        if fixed is not None:
            return fixed
    for change in proposals(text):
        fixed = _override(kw, change)
        if fixed is not None:
            return fixed
    return None


def stated_equality(text: str) -> tuple[str, int, str] | None:
    """``A (a) must be the same as B (b)``, a != b: ``(A, a, B)``; None for another
    relation (a divisibility) or none."""
    for line in text.splitlines():
        counts = named_counts(line)
        if len(counts) < 2 or _DIVISIBLE.search(line) or not _EQUAL.search(line):
            continue
        (name_a, a), (name_b, b) = counts[0], counts[1]
        if a > 0 and b > 0 and a != b and name_a != name_b:
            return name_a, a, name_b
    return None


def _copied_where(kw: dict[str, Any], first: str, value: int, second: str) -> dict | None:
    """``kw`` with ``second = value`` in each of its dicts that holds ``first``; None
    when none changes."""
    changed = False
    out: dict[str, Any] = {}
    for key, item in kw.items():
        if isinstance(item, dict):
            nested = _copied_where(item, first, value, second)
            changed = changed or nested is not None
            item = nested if nested is not None else item
        out[key] = item
    if first in kw and kw.get(second) != value:
        out[second] = value
        changed = True
    return out if changed else None


def _override(kw: dict[str, Any], change: Change) -> dict[str, Any] | None:
    """``kw`` with ``change`` applied, here or in a nested config's overrides
    (``text_config``), or None when neither holds the value it names."""
    if kw.get(change.name) == change.old:
        return {**kw, change.name: change.new}
    for key, value in kw.items():
        if isinstance(value, dict):
            nested = _override(value, change)
            if nested is not None:
                return {**kw, key: nested}
    return None
