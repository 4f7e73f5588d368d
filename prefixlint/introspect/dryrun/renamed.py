"""Names a loader renames in code, found by asking the loader itself.

A layout derived from the model names each tensor as the model's own tables say. Many
loaders read a checkpoint whose names differ by one segment and put it back in code:
EAGLE and DFlash drafts prepend ``model.`` to every name but the head's
(``qwen3_dflash.py``: ``name = "model." + name``), DeepSeek-style MTP layers insert
``mtp_block.`` (``_rewrite_spec_layer_name``), embedding models map ``""`` to ``model.``
(``roberta.py``). Such a loader takes few of the derived names, and the dry-run could
judge nothing. Here each segment the refused names share is left out in turn, and the
loader says which of the shortened names it takes; the layout then holds, for each
tensor, the name the loader took. The renamings the loader's own code makes with
constants (``name.replace("mtp.", "model.")``: Qwen3.5's MTP) are undone first. A name
the loader takes in no form stays as derived, and is judged as before.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections import Counter
from collections.abc import Callable
from typing import Any

# segments tried per model (the most common among the refused names first)
MAX_PROBES = 6

Shaped = dict[str, Any]


def taken(s: Any, layout: Shaped) -> set[str]:
    """The names of ``layout`` the stream ``s`` wrote into the model."""
    raised = {name for name, _ in s.raised}
    return (set(layout) - raised) & s.recorder.consumed


def without(name: str, segment: str) -> str | None:
    """``name`` with its first ``segment`` left out (never its last part)."""
    parts = name.split(".")
    if segment not in parts[:-1]:
        return None
    i = parts.index(segment)
    return ".".join(parts[:i] + parts[i + 1 :])


def code_renamings(cls: type | None) -> list[tuple[str, str]]:
    """``(checkpoint, model)`` pairs of the constant renamings the class's own
    ``load_weights`` makes (``name.replace("mtp.", "model.")``, in the method or in a
    function it defines): the layout undoes them, the model's part back to the
    checkpoint's. Read from the source with ``ast``; none where it cannot be read."""
    method = getattr(cls, "load_weights", None)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return []
    out: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "replace"
            and len(node.args) == 2
        ):
            continue
        old, new = node.args
        if (
            isinstance(old, ast.Constant)
            and isinstance(new, ast.Constant)
            and isinstance(old.value, str)
            and isinstance(new.value, str)
            and old.value
            and new.value
            and (old.value, new.value) not in out
        ):
            out.append((old.value, new.value))
    return out


Renaming = tuple[str, Callable[[str], str | None]]


def renamings(names: set[str], cls: type | None = None) -> list[Renaming]:
    """What to try on the names the loader refused, in order: its own code's renamings
    undone, then each segment the names share left out (the most common first)."""
    out: list[Renaming] = []
    for ckpt, model in code_renamings(cls):
        out.append(
            (
                f"`{model}` read as `{ckpt}`",
                lambda n, c=ckpt, m=model: n.replace(m, c, 1) if m in n else None,
            )
        )
    counts = Counter(
        segment for name in names for segment in set(name.split(".")[:-1]) if not segment.isdigit()
    )
    for segment, _ in counts.most_common(MAX_PROBES):
        out.append((f"`{segment}.` left out", lambda n, s=segment: without(n, s)))
    return out


def probe(
    layout: Shaped,
    first: set[str],
    stream: Callable[[Shaped], Any],
    out_of_time: Callable[[], bool] = lambda: False,
    cls: type | None = None,
) -> tuple[Shaped, dict[str, str], list[str]]:
    """``layout`` with each name the loader took only in another form renamed so:
    (the renamed layout, derived name -> name taken, what was tried that it took).
    ``first``: the names the loader took as derived."""
    left = set(layout) - first
    renamed: dict[str, str] = {}
    said: list[str] = []
    for label, rename in renamings(left, cls):
        if not left or out_of_time():
            break
        trial: dict[str, str] = {}
        for name in sorted(left):
            short = rename(name)
            if short and short not in layout and short not in trial:
                trial[short] = name
        if not trial:
            continue
        s = stream({short: layout[name] for short, name in trial.items()})
        if s.limit:
            continue
        ok = taken(s, trial)
        for short in ok:
            renamed[trial[short]] = short
            left.discard(trial[short])
        if ok:
            said.append(f"{label} ({len(ok)} names)")
    out = {renamed.get(name, name): value for name, value in layout.items()}
    return out, renamed, said
