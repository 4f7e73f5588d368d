"""Streaming a checkpoint through the model's own ``load_weights``: every reference
tensor, as a tagged meta tensor (``tagged.py``), recording which parameter regions each
reached; a name that raises is recorded and the rest fed again without that kind."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.dryrun.layouts import normal, quiet
from prefixlint.introspect.dryrun.tagged import Tagged, WriteRecorder, make, recording, tags_of
from prefixlint.introspect.finding import describe_error

MAX_RETRIES = 8  # load_weights raising on distinct kinds of names


_META_LIMITS = (
    "meta tensor",
    "on meta",
    "'Meta' backend",
    "Meta backend",
    "data-dependent",
    "data dependent",
    "Cannot access data pointer",
    "cannot be called on meta",
    "Could not run",
    "item()",
)


# what a loader raises on a name it cannot place, or its own code raises (a wrong call:
# ``AutoWeightsLoader(skip_prefixes=...)`` where vLLM's takes no such argument)
_FINDING_ERRORS = (KeyError, ValueError, AssertionError, IndexError, TypeError)


@dataclass
class Stream:
    recorder: WriteRecorder
    raised: list[tuple[str, BaseException]] = field(default_factory=list)
    complete: bool = False
    limit: str = ""  # why the stream could not run (a meta limitation)
    limit_error: BaseException | None = None


def _targets(model: nn.Module) -> dict[str, tuple[torch.Tensor, bool]]:
    out: dict[str, tuple[torch.Tensor, bool]] = {}
    for name, p in model.named_parameters():
        out[name] = (p, True)
    for name, b in model.named_buffers():
        out.setdefault(name, (b, False))
    return out


def _failing_name(error: BaseException, names: list[str], last: str | None) -> str | None:
    """The checkpoint tensor being loaded when ``error`` was raised: the first its message
    quotes, else the tagged tensor of the innermost frame that holds one (a loader's
    frame may still hold the tensor before the one it refuses)."""
    text = str(error)
    quoted = {at: n for n in names for q in "'`\"" if (at := text.find(f"{q}{n}{q}")) >= 0}
    # a module above the name just fed, quoted first (AutoWeightsLoader's "There is no
    # module 'a.mlp.gate_proj' ... are: {'a.mlp.down_proj.weight', ...}"): that name
    fed = last or ""
    for p in _parents(fed):
        quoted.update({at: fed for q in "'`\"" if (at := text.find(f"{q}{p}{q}")) >= 0})
    if quoted:
        return quoted[min(quoted)]
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        for value in frame.f_locals.values():
            if isinstance(value, Tagged):
                tags = sorted(tags_of(value))
                if tags:
                    return tags[0]
    hits = [n for n in names if n in text or n.rsplit(".", 1)[0] in text]
    if hits:
        return max(hits, key=len)
    return last


def _parents(name: str) -> list[str]:
    """The dotted module paths above ``name`` with at least two parts (``a.b`` of
    ``a.b.c.weight``): a one-word quote (``'model'``) says nothing about which tensor."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def _is_meta_limit(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, NotImplementedError) or any(w in text for w in _META_LIMITS)


def stream(
    model: nn.Module,
    reference: dict[str, Any],
    context: Any,
    finding_errors: tuple[type[BaseException], ...] = (),
) -> Stream:
    """Feed every reference tensor to ``model.load_weights``; on a name that raises, record
    it and feed again without that kind of name (a few times at most). ``finding_errors``:
    more errors that the real load would raise too (a real checkpoint's names)."""
    names = sorted(reference)
    excluded: set[str] = set()
    out = Stream(WriteRecorder({}))
    for _ in range(MAX_RETRIES + 1):
        recorder = WriteRecorder(_targets(model))
        last: list[str | None] = [None]

        def weights(recorder=recorder, last=last) -> Any:
            for name in names:
                if normal(name) in excluded:
                    continue
                last[0] = name
                shape, dtype = reference[name]
                yield name, make(name, shape, dtype)

        out.recorder = recorder
        try:
            with context(), recording(recorder), quiet():
                model.load_weights(weights())
        except Exception as e:
            if _is_meta_limit(e) or not (_is_finding_error(e) or isinstance(e, finding_errors)):
                out.limit, out.limit_error = describe_error(e), e
                return out
            name = _failing_name(e, names, last[0]) or "?"
            out.raised.append((name, e))
            if name == "?" or normal(name) in excluded:
                return out
            excluded.add(normal(name))
            continue
        out.complete = True
        return out
    return out


def _is_finding_error(error: BaseException) -> bool:
    if isinstance(error, _FINDING_ERRORS):
        return True
    return isinstance(error, RuntimeError) and ("shape" in str(error) or "size" in str(error))


# -- where to report ---------------------------------------------------------------------------
