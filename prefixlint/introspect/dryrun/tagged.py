"""Meta tensors that remember which checkpoint tensors they came from.

A weight loader transposes, narrows, concatenates and splits what it is given before it
writes into a parameter. Each checkpoint tensor is fed as a ``Tagged`` meta tensor whose
tags (checkpoint names) flow through every torch operation into its results. A write
(``copy_``, ``__setitem__``, any in-place op) whose destination shares storage with a
vLLM parameter is recorded, with the region it covers, and not executed: on meta it
would do nothing but check shapes, which the recorder checks itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

_ACTIVE: list[WriteRecorder] = []


@dataclass
class Target:
    """A parameter or buffer a loader may write into."""

    name: str
    tensor: torch.Tensor
    is_param: bool
    tracked: bool  # small enough for an element-wise coverage (``WriteRecorder.covered``)
    sources: set[str] = field(default_factory=set)
    writes: list[tuple[int, int, frozenset[str]]] = field(default_factory=list)
    # each write's region of the storage (shape, stride, offset): a coverage mask is made
    # from them when asked, one parameter at a time. A mask per parameter kept for the
    # whole stream held a byte per element of the full-size model: 8 GB for Molmo (issue 30).
    regions: list[tuple[tuple[int, ...], tuple[int, ...], int]] = field(default_factory=list)
    written: bool = False


_MAX_TRACKED = 64_000_000  # elements; a larger parameter is tracked as written or not


def _numel(t: torch.Tensor) -> int:
    """The elements of ``t``'s whole storage (a view's parent included)."""
    return t.untyped_storage().nbytes() // max(t.element_size(), 1)


def _storage_key(t: torch.Tensor) -> int:
    with torch._C.DisableTorchFunctionSubclass():
        return t.untyped_storage()._cdata


class WriteRecorder:
    def __init__(self, targets: dict[str, tuple[torch.Tensor, bool]]) -> None:
        self.by_storage: dict[int, Target] = {}
        self.consumed: set[str] = set()
        # The checkpoint tensors made while recording (storage -> name, the tensor kept
        # alive so its storage is not reused), and the flat element ranges of each that
        # writes read: a view of the tensor itself (narrowed, sliced) tells how much of
        # it was loaded; data computed from it (a cast, a concatenation) does not, and
        # its names are ``untracked``.
        self.origins: dict[int, tuple[str, torch.Tensor]] = {}
        self.reads: dict[str, list[tuple[int, int, int]]] = {}
        self.untracked: set[str] = set()
        for name, (tensor, is_param) in targets.items():
            key = _storage_key(tensor)
            if key in self.by_storage:
                continue  # a tied alias: the first name owns the storage
            self.by_storage[key] = Target(name, tensor, is_param, _numel(tensor) <= _MAX_TRACKED)

    def owner(self, t: torch.Tensor) -> Target | None:
        try:
            return self.by_storage.get(_storage_key(t))
        except (RuntimeError, NotImplementedError):
            return None

    def mark(self, target: Target, region: torch.Tensor, tags: frozenset[str]) -> None:
        target.written = True
        target.sources |= tags
        self.consumed |= tags
        lo = region.storage_offset()
        hi = lo + sum((s - 1) * st for s, st in zip(region.shape, region.stride(), strict=True))
        if region.numel() == 0:
            return
        target.writes.append((lo, hi + 1, tags))
        if target.tracked:
            target.regions.append((tuple(region.shape), tuple(region.stride()), lo))

    def read(self, src: torch.Tensor, tags: frozenset[str]) -> None:
        """Record which elements of a checkpoint tensor a write took from it."""
        try:
            origin = self.origins.get(_storage_key(src))
        except (RuntimeError, NotImplementedError):
            origin = None
        if origin is None or origin[0] not in tags or src.numel() == 0:
            self.untracked |= tags
            return
        lo = src.storage_offset()
        hi = lo + sum((s - 1) * st for s, st in zip(src.shape, src.stride(), strict=True)) + 1
        self.reads.setdefault(origin[0], []).append((lo, hi, src.numel()))

    def partly_read(self) -> dict[str, tuple[int, int]]:
        """Checkpoint tensors that writes took from only in part, as views of the tensor
        itself: name -> (elements read at most, elements held). Both bounds are sound:
        the union of each view's span (first to last element) and the sum of the views'
        sizes each hold every element read."""
        out = {}
        for _, (name, tensor) in self.origins.items():
            ranges = self.reads.get(name)
            if not ranges or name in self.untracked:
                continue
            spanned, end = 0, 0
            for lo, hi, _ in sorted(ranges):
                lo = max(lo, end)
                if hi > lo:
                    spanned, end = spanned + hi - lo, hi
            most = min(spanned, sum(n for _, _, n in ranges))
            if most < tensor.numel():
                out[name] = (most, tensor.numel())
        return out

    def covered(self, target: Target) -> torch.Tensor | None:
        """The coverage of the target's own elements, shaped like it (True: written);
        None when too big to track. Made anew at each call from the writes' regions."""
        if not target.tracked:
            return None
        coverage = torch.zeros(_numel(target.tensor), dtype=torch.bool)
        for shape, stride, offset in target.regions:
            coverage.as_strided(shape, stride, offset).fill_(True)
        t = target.tensor
        return coverage.as_strided(tuple(t.shape), t.stride(), t.storage_offset())


@contextlib.contextmanager
def recording(recorder: WriteRecorder) -> Iterator[WriteRecorder]:
    _ACTIVE.append(recorder)
    try:
        with _LoaderMadeWrites():
            yield recorder
    finally:
        _ACTIVE.pop()


# Writes that set values (not in-place arithmetic on what is already there).
_SETTING_WRITES = frozenset({"copy_", "__setitem__", "fill_", "zero_"})


class _LoaderMadeWrites(torch.overrides.TorchFunctionMode):
    """Writes of data the loader made itself (no checkpoint tag): vLLM's Whisper-style
    loaders feed a zero ``k_proj`` bias that no checkpoint holds. The region is written
    (not left random), from no checkpoint tensor. Tagged data goes its own way."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _SETTING_WRITES and not any(
            tags_of(v) for v in (*args, *kwargs.values())
        ):
            handled, result = _intercept(func, args, kwargs, frozenset())
            if handled:
                return result
        return func(*args, **kwargs)


def tags_of(value: Any) -> frozenset[str]:
    if isinstance(value, Tagged):
        return value.__dict__.get("_pl_src", frozenset())
    if isinstance(value, (list, tuple)):
        out: frozenset[str] = frozenset()
        for v in value:
            if isinstance(v, Tagged):
                out |= v.__dict__.get("_pl_src", frozenset())
        return out
    return frozenset()


def make(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tagged:
    t = torch.empty(shape, dtype=dtype, device="meta").as_subclass(Tagged)
    t._pl_src = frozenset({name})
    if _ACTIVE:
        _ACTIVE[-1].origins[_storage_key(t)] = (name, t)
    return t


def _tag(out: Any, tags: frozenset[str], args: tuple) -> Any:
    if isinstance(out, torch.Tensor):
        if any(out is a for a in args) or isinstance(out, torch.nn.Parameter):
            return out
        with torch._C.DisableTorchFunctionSubclass():
            tagged = out if isinstance(out, Tagged) else out.as_subclass(Tagged)
        tagged._pl_src = tags
        return tagged
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return type(out)(_tag(o, tags, args) for o in out)
    return out


def _is_write(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    return name == "__setitem__" or (name.endswith("_") and not name.startswith("_"))


def _intercept(func: Any, args: tuple, kwargs: dict, tags: frozenset[str]) -> tuple[bool, Any]:
    """A write of tagged data into a parameter's storage: record it, check the shapes."""
    if not _ACTIVE or not args or not isinstance(args[0], torch.Tensor):
        return False, None
    dst = args[0]
    if isinstance(dst, Tagged) or not _is_write(func):
        return False, None
    recorder = _ACTIVE[-1]
    target = recorder.owner(dst)
    if target is None:
        return False, None
    name = func.__name__
    with torch._C.DisableTorchFunctionSubclass():
        region = dst[args[1]] if name == "__setitem__" else dst
        src = args[2] if name == "__setitem__" else (args[1] if len(args) > 1 else None)
        if isinstance(src, torch.Tensor) and name in ("copy_", "__setitem__"):
            try:
                fits = torch.broadcast_shapes(tuple(src.shape), tuple(region.shape))
            except RuntimeError:
                fits = None
            if fits != tuple(region.shape):
                raise RuntimeError(
                    f"shape mismatch: a tensor of shape {tuple(src.shape)} is written into "
                    f"`{target.name}` region of shape {tuple(region.shape)}"
                )
            if isinstance(src, Tagged):
                recorder.read(src, tags)
    recorder.mark(target, region, tags)
    return True, (None if name == "__setitem__" else dst)


class Tagged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        tags: frozenset[str] = frozenset()
        for value in (*args, *kwargs.values()):
            tags |= tags_of(value)
        if tags:
            handled, result = _intercept(func, args, kwargs, tags)
            if handled:
                return result
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return _tag(out, tags, args) if tags else out
