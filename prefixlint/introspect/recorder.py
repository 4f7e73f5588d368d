"""Which prefix each module received, and which line of the model built it.

``sys.setprofile`` sees every Python ``__init__`` call. The first ``__init__`` call for a
module object is its most-derived one (a subclass's body runs before ``super().__init__``),
so its locals are the arguments as the model passed them. The construction site is the
first frame outside torch, vLLM's layer library and prefixlint: the model file's line.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

_VARARGS, _VARKEYWORDS = 0x04, 0x08


def _library_dirs() -> tuple[str, ...]:
    import vllm

    vllm_root = Path(vllm.__file__).resolve().parent
    return tuple(
        str(p) + os.sep
        for p in (
            Path(torch.__file__).resolve().parent,
            vllm_root / "model_executor" / "layers",
            vllm_root / "compilation",  # @support_torch_compile wraps __init__
            vllm_root / "utils",
            Path(__file__).resolve().parents[1],  # prefixlint itself
        )
    )


@dataclass
class Record:
    module: nn.Module
    cls: str
    prefix: str | None  # the ``prefix`` argument received; None when there is none
    defaulted: bool  # equal to the parameter's default: most likely not passed
    site_file: str  # the line of the model that built it
    site_line: int
    by_library: bool  # built inside vLLM's layer code (a layer's own sub-module)
    order: int
    attributes: dict[str, str] = field(default_factory=dict)


def _prefix_argument(frame: FrameType) -> tuple[bool, Any]:
    code = frame.f_code
    local = frame.f_locals
    count = code.co_argcount + code.co_kwonlyargcount
    names = code.co_varnames[:count]
    if "prefix" in names:
        return True, local.get("prefix")
    if code.co_flags & _VARKEYWORDS:
        kwargs = local.get(code.co_varnames[count + (1 if code.co_flags & _VARARGS else 0)])
        if isinstance(kwargs, dict) and "prefix" in kwargs:
            return True, kwargs["prefix"]
    return False, None


def _prefix_default(module: nn.Module, code: Any) -> Any:
    for klass in type(module).__mro__:
        init = klass.__dict__.get("__init__")
        if getattr(init, "__code__", None) is code:
            try:
                param = inspect.signature(init).parameters.get("prefix")
            except (TypeError, ValueError):
                return inspect.Parameter.empty
            return param.default if param is not None else inspect.Parameter.empty
    return inspect.Parameter.empty


class PrefixRecorder:
    def __init__(self) -> None:
        self.records: dict[int, Record] = {}
        self._library = _library_dirs()

    def _external(self, filename: str) -> bool:
        return not (
            filename.startswith(self._library)
            or filename.startswith("<")
            or filename == contextlib.__file__
        )

    def _site(self, frame: FrameType | None) -> tuple[str, int]:
        while frame is not None and not self._external(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return "", 0
        return frame.f_code.co_filename, frame.f_lineno

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name != "__init__" or code.co_argcount == 0:
            return
        module = frame.f_locals.get(code.co_varnames[0])
        if not isinstance(module, nn.Module):
            return
        known = self.records.get(id(module))
        if known is not None and known.module is module:
            if known.prefix is None:  # a renamed argument, passed on to super().__init__
                has, value = _prefix_argument(frame)
                if has and isinstance(value, str):
                    known.prefix = value
            return
        has, value = _prefix_argument(frame)
        caller = frame.f_back
        site_file, site_line = self._site(caller)
        default = _prefix_default(module, code) if has else inspect.Parameter.empty
        self.records[id(module)] = Record(
            module=module,
            cls=type(module).__qualname__,
            prefix=value if has and isinstance(value, str) else None,
            defaulted=has and isinstance(default, str) and default == value,
            site_file=site_file,
            site_line=site_line,
            by_library=caller is not None and not self._external(caller.f_code.co_filename),
            order=len(self.records),
        )

    @contextlib.contextmanager
    def active(self) -> Iterator[PrefixRecorder]:
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(previous)
            for record in self.records.values():
                for attr in ("prefix", "layer_name"):
                    value = record.module.__dict__.get(attr)
                    if isinstance(value, str):
                        record.attributes[attr] = value
