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
    fused: dict[str, tuple[str, Any]] | None = None,
) -> tuple[Shaped, dict[str, str], list[str]]:
    """``layout`` with each name the loader took only in another form renamed so:
    (the renamed layout, derived name -> name taken, what was tried that it took).
    ``first``: the names the loader took as derived; ``fused``: a part split from a
    fused parameter -> (that parameter's checkpoint name, its shape and dtype), tried
    whole first (a checkpoint that holds ``qkv_proj`` fused, as the loader reads it)."""
    left = set(layout) - first
    renamed: dict[str, str] = {}
    values: dict[str, Any] = {}
    said: list[str] = []
    tries: list[Renaming] = []
    if fused:
        tries.append(("fused parameters read whole", lambda n: fused[n][0] if n in fused else None))
    for label, rename in tries + renamings(left, cls):
        if not left or out_of_time():
            break
        trial: dict[str, list[str]] = {}
        shaped: Shaped = {}
        for name in sorted(left):
            short = rename(name)
            whole = bool(fused) and name in fused and fused[name][0] == short
            if not short or (short in layout and not whole):
                continue
            if short in trial and not whole:
                continue  # two names renamed alike: the first keeps it
            trial.setdefault(short, []).append(name)
            shaped[short] = fused[name][1] if whole and fused else layout[name]
        if not trial:
            continue
        s = stream(shaped)
        if s.limit:
            continue
        ok = taken(s, shaped)
        for short in ok:
            values[short] = shaped[short]
            for name in trial[short]:
                renamed[name] = short
                left.discard(name)
        if ok:
            said.append(f"{label} ({sum(len(trial[short]) for short in ok)} names)")
    out: Shaped = {}
    for name, value in layout.items():
        short = renamed.get(name)
        out[short or name] = values[short] if short else value
    return out, renamed, said
