"""Where the model's loader refuses transformers' checkpoint of the comparison's config.

A loader that raises on the whole stream says what failed (a size, a name), rarely which
module of the model is built otherwise than transformers' for this config. Each
checkpoint tensor is given to ``load_weights`` alone, in the checkpoint's order, and the
first one it raises on names the module: its checkpoint name, mapped by the class's
``hf_to_vllm_mapper``, or the nearest module above that name the model has (a dense
MLP's ``down_proj`` that an MoE block built in its place lacks). Asked only after the
whole stream failed, so it costs nothing on a load that works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefixlint.introspect.compare.facts import Refusal


def said(error: BaseException | None) -> str:
    """What the loader (or any stage) raised, in words: its type and first line."""
    if error is None:
        return ""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}"


def located(
    model: Any,
    state: dict[str, Any],
    context: Callable[[], Any],
    owner: Any,
    records: Any,
) -> Refusal | None:
    """``owner``: what holds the ``hf_to_vllm_mapper`` (the class, or the model); ``records``:
    the build recorder's records (module -> its construction line). None when every
    tensor loads alone (a loader that needs the whole stream)."""
    from prefixlint.introspect.dryrun.divergence import vllm_name

    for name, tensor in state.items():
        try:
            with context():
                model.load_weights(iter([(name, tensor)]))
        except Exception as e:
            module = _module(model, vllm_name(owner, name))
            return Refusal(name, module, _site(model, module, records), said(e))
    return None


def _module(model: Any, name: str) -> str:
    """The model's deepest module whose path ``name`` (a parameter's) starts with; ""
    for the model itself."""
    present = {path for path, _ in model.named_modules()}
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        path = ".".join(parts[:i])
        if path in present:
            return path
    return ""


def _site(model: Any, path: str, records: Any) -> tuple[str, int]:
    """The line that built ``path``'s module, or the nearest module above it the recorder
    saw; ("", 0) when none."""
    by_module = {id(r.module): (r.site_file, r.site_line) for r in records.values() if r.site_file}
    parts = path.split(".") if path else []
    for i in range(len(parts), 0, -1):
        try:
            module = model.get_submodule(".".join(parts[:i]))
        except AttributeError:
            continue
        if id(module) in by_module:
            return by_module[id(module)]
    return ("", 0)
