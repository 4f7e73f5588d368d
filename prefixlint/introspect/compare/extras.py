"""Whether the model's loader takes the names real checkpoints carry and transformers drops
(``reference._extras``: a tied head's duplicate ``lm_head.weight``, per attention layer
``rotary_emb.inv_freq``).

Each kind is streamed WITH the rest of the checkpoint, the way a real checkpoint holds it:
streamed alone, a tied head's name reaches vLLM's ``AutoWeightsLoader`` with no embedding
beside it, which it refuses ("'lm_head.weight' was skipped because it is tied to
'model.embed_tokens.weight' ..., but 'model.embed_tokens.weight' was not found"): a
refusal of the probe, not of the model. A kind is refused only where the same stream
without it loads. The tied head is probed only where the model holds an ``lm_head``: a
model that has none (Gemma 2) has no duplicate to skip, and its family's checkpoints carry
none (docs/compare.md).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from prefixlint.introspect.compare.facts import Refusal
from prefixlint.introspect.compare.refusal import said

HEAD = "lm_head.weight"


def site_of(error: BaseException | None) -> tuple[str, int]:
    """The innermost traceback frame of ``error`` in the model's own code (not vLLM's
    layers or shared loader helpers, torch or prefixlint): the model's line that raised."""
    from prefixlint.introspect.finding import model_code

    best = ("", 0)
    if error is None:
        return best
    for frame, line in traceback.walk_tb(error.__traceback__):
        if model_code(frame.f_code.co_filename):
            best = (frame.f_code.co_filename, line)
    return best


def refusals(
    model: Any,
    state: dict[str, Any],
    extras: list[str],
    stream: Callable[[list[tuple[str, Any]]], BaseException | None],
) -> list[Refusal]:
    """The kinds of ``extras`` (names of ``state``) the loader refuses: ``stream(items)``
    loads the items through the model's ``load_weights`` and returns what it raised.
    ``state`` holds the checkpoint as the comparison loaded it, extras included."""
    plain = [(k, v) for k, v in state.items() if k not in extras]
    kinds = [
        [k for k in extras if k.endswith(HEAD)] if _holds_head(model) else [],
        [k for k in extras if not k.endswith(HEAD)],
    ]
    out: list[Refusal] = []
    baseline: list[BaseException | None] = []
    for names in kinds:
        if not names:
            continue
        error = stream(plain + [(k, state[k]) for k in names])
        if error is None:
            continue
        if not baseline:
            baseline.append(stream(plain))
        if baseline[0] is not None:  # the stream itself fails here: nothing to tell
            return out
        out.append(Refusal(names[0], "", site_of(error), said(error)))
    return out


def _holds_head(model: Any) -> bool:
    return getattr(model, "lm_head", None) is not None


def half_converted(model_names: list[str], checkpoint: dict[str, Any], refused: str) -> str:
    """A module of the reference (``model_names``: its state dict's names) some of whose
    tensors transformers' conversion reverted to another name and others it left under the
    model's name: HRM-Text's conversion fuses ``gate_proj``/``q_proj``/``k_proj``/
    ``v_proj`` weights into ``attn.gqkv_proj.weight`` and has no rule for their biases
    (transformers' ``conversion_mapping.py``), so with ``attention_bias`` on the reverted
    checkpoint holds fused weights beside unfused biases, a layout no real checkpoint has
    and no loader of the fused format takes. Only the module of the tensor the loader
    refuses (``refused``, a checkpoint name) counts, by its last two parts
    (``self_attn.gate_proj``: the model's prefix may differ): another module's mixture
    says nothing of this failure. That module, or ""."""
    kept: dict[str, list[bool]] = {}
    for name in model_names:
        module, _, _ = name.rpartition(".")
        kept.setdefault(module, []).append(name in checkpoint)
    wanted = _tail(refused.rpartition(".")[0])
    for module, held in kept.items():
        if any(held) and not all(held) and _tail(module) == wanted:
            return module
    return ""


def _tail(module: str) -> str:
    return ".".join(module.split(".")[-2:])
