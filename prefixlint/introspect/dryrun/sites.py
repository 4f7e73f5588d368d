"""Where a dry-run finding is reported: lines of the model's own files (where a module
was built, its ``load_weights``, a mapping entry), never vLLM's or prefixlint's."""

from __future__ import annotations

import functools
import inspect
import re
import traceback
from typing import Any

from torch import nn

from prefixlint.introspect.finding import class_site, model_code


class Sites:
    """Lines of the model's own files: where a module was built, a ``load_weights``, a
    mapping entry."""

    def __init__(self, cls: type | None, model: nn.Module, recorder: Any) -> None:
        self.cls = cls
        self.model = model
        self.recorder = recorder
        self.class_site = source_site(cls)
        self.embedding = False  # served through vLLM's embedding adapter

    def model_file(self, filename: str) -> bool:
        if not filename or not self.recorder.external(filename):
            return False
        norm = filename.replace("\\", "/")
        if "/vllm/" in norm and not re.search(r"/vllm/(model_executor/)?models/", norm):
            return False  # vLLM's loader machinery (decorators, weight utils)
        return not filename.replace("\\", "/").endswith(
            ("/models/utils.py", "/models/interfaces.py", "/models/adapters.py")
        )

    def module(self, path: str) -> tuple[str, int]:
        try:
            module = self.model.get_submodule(path)
        except AttributeError:
            return self.class_site
        record = self.recorder.records.get(id(module))
        if record is not None and record.module is module and record.site_file:
            return record.site_file, record.site_line
        return source_site(type(module)) if path else self.class_site

    def prefix_root(self, path: str) -> tuple[str, int]:
        """Where the wrong name starts: the outermost module on ``path`` built with a
        prefix that is not its own path (what PFX601 reports)."""
        parts = path.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            try:
                module = self.model.get_submodule(sub)
            except AttributeError:
                break
            record = self.recorder.records.get(id(module))
            if (
                record is not None
                and record.module is module
                and isinstance(record.prefix, str)
                and record.prefix != sub
                and record.site_file
            ):
                return record.site_file, record.site_line
        return self.module(path)

    def loader(self, name: str) -> tuple[str, int]:
        """The ``load_weights`` of the deepest module on ``name``'s path that has its own:
        vLLM's loader hands a checkpoint name down to it."""
        best = self._loader_of(type(self.model))
        path = ""
        for part in name.split(".")[:-1]:
            path = f"{path}.{part}" if path else part
            try:
                module = self.model.get_submodule(path)
            except AttributeError:
                break
            best = self._loader_of(type(module)) or best
        return best or self.class_site

    def _loader_of(self, klass: type) -> tuple[str, int] | None:
        fn = getattr(klass, "load_weights", None)
        if not callable(fn):
            return None
        site = source_site(fn)
        return site if self.model_file(site[0]) else None

    def frame(self, error: BaseException) -> tuple[str, int] | None:
        best = None
        for frame, line in traceback.walk_tb(error.__traceback__):
            if self.model_file(frame.f_code.co_filename):
                best = (frame.f_code.co_filename, line)
        return best

    @functools.cached_property
    def files(self) -> list[str]:
        """The model's own source files (its classes and their bases), found once: a
        loader that raises on many names asks for each of them."""
        out = []
        for klass in {type(m) for m in self.model.modules()} | {self.cls}:
            for base in getattr(klass, "__mro__", ()):
                f = source_file(base)
                if self.model_file(f) and f not in out:
                    out.append(f)
        return out

    def mapping_line(self, *words: str) -> tuple[str, int] | None:
        """The first line of the model's files that quotes every word (a stacked-params
        or mapper entry such as ``(".qkv_proj", "v_proj", "v")``)."""
        patterns = [
            re.compile(rf"\b{w}\b" if w.isdigit() else rf"[\"']\.?{re.escape(w)}\.?[\"']")
            for w in words
        ]
        for f in self.files:
            try:
                with open(f, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for i, text in enumerate(lines, 1):
                if all(p.search(text) for p in patterns):
                    return f, i
        return None

    def packed_mapping(self) -> tuple[str, int]:
        """The model's own ``packed_modules_mapping`` line; the class's line when the
        mapping it has is a library's (vLLM's ``SupportsLoRA`` default, say)."""
        file, line = table_site(self.cls)
        return (file, line) if file else self.class_site


def table_site(cls: type | None) -> tuple[str, int]:
    """The line of the model's own ``packed_modules_mapping`` along ``cls``'s bases; ("",
    0) where only a library has one (vLLM's ``SupportsLoRA`` default is no table the
    model can edit)."""
    for klass in getattr(cls, "__mro__", ()):
        if "packed_modules_mapping" in vars(klass):
            file, start = source_site(klass)
            if not model_code(file):
                continue
            try:
                lines, _ = inspect.getsourcelines(klass)
            except (OSError, TypeError):
                return file, start
            for i, text in enumerate(lines):
                if "packed_modules_mapping" in text:
                    return file, start + i
            return file, start
    return "", 0


def source_file(obj: Any) -> str:
    try:
        return inspect.getsourcefile(obj) or ""
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=4096)
def source_site(obj: Any) -> tuple[str, int]:
    """File and first line of a class (``finding.class_site``) or function."""
    if isinstance(obj, type):
        return class_site(obj)
    try:
        return inspect.getsourcefile(obj) or "", inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return "", 0


# -- PFX701 findings ---------------------------------------------------------------------------
