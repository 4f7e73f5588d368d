"""Which prefix each module received, which line of the model built it, and which lines of
the model's own files ran (construction coverage).

``sys.settrace`` sees every Python ``__init__`` call. The first ``__init__`` call for a
module object is its most-derived one (a subclass's body runs before ``super().__init__``),
so its locals are the arguments as the model passed them. The construction site is the
first frame outside torch, vLLM's layer library and prefixlint: the model file's line.
Frames of those model files (and only those) are traced line by line: which lines ran says
which construction sites a build executed, and library frames stay untraced (cheap).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from torch import nn

from prefixlint.introspect.finding import layer_library_roots

_VARARGS, _VARKEYWORDS = 0x04, 0x08


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
        self.lines: dict[str, set[int]] = {}  # model file -> lines that ran
        self.built_classes: dict[str, set[str]] | None = None  # set by coverage.py
        self._library = layer_library_roots()

    def external(self, filename: str) -> bool:
        """``filename`` is model code (not torch, vLLM's layers, prefixlint or generated):
        the recorder's reading of ``finding.model_code``, narrower and cheap (a prefix
        test on every call the trace sees), see ``layer_library_roots``."""
        return not (
            filename.startswith(self._library)
            or filename.startswith("<")
            or filename == contextlib.__file__
        )

    def _site(self, frame: FrameType | None) -> tuple[str, int]:
        while frame is not None and not self.external(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return "", 0
        return frame.f_code.co_filename, frame.f_lineno

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        code = frame.f_code
        if code.co_name == "__init__" and code.co_argcount:
            self._record(frame)
        filename = code.co_filename
        if self.external(filename):
            self.lines.setdefault(filename, set()).add(frame.f_lineno)
            return self._line
        return None

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return self._line

    def _record(self, frame: FrameType) -> None:
        code = frame.f_code
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
            by_library=caller is not None and not self.external(caller.f_code.co_filename),
            order=len(self.records),
        )

    @contextlib.contextmanager
    def active(self) -> Iterator[PrefixRecorder]:
        previous = sys.gettrace()
        sys.settrace(self._trace)
        try:
            yield self
        finally:
            sys.settrace(previous)
            for record in self.records.values():
                for attr in ("prefix", "layer_name"):
                    value = record.module.__dict__.get(attr)
                    if isinstance(value, str):
                        record.attributes[attr] = value


def named_sites(model: nn.Module, recorder: PrefixRecorder) -> dict[str, list[Any]]:
    """Each module of ``model`` the recorder saw built with a prefix or that holds an
    attention layer name: path -> [the prefix it received (or None), the ``layer_name``
    it registers (or None), the model's file and line that built it]. What a review
    compares between a pull request's base and head (``basediff_builds``)."""
    out: dict[str, list[Any]] = {}
    for path, module in model.named_modules():
        record = recorder.records.get(id(module))
        if record is None or record.module is not module or not record.site_file:
            continue
        name = record.attributes.get("layer_name")
        if record.prefix is None and name is None:
            continue
        out[path] = [record.prefix, name, record.site_file, record.site_line]
    return out
