"""What every repair reads: the failure (an error a probe build raised, the config objects
it read, the model's own files) and the lines and frames of its traceback.

Nothing here changes a config but ``give_guess`` and ``give_value``, the two ways a
repair sets a value it made up.
"""

from __future__ import annotations

import functools
import linecache
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.configs.hints import (
    CONFIG_READ,
    field_default_none,
    guess_attribute,
    source_texts,
)
from prefixlint.introspect.finding import in_models_folder


@dataclass
class Failure:
    """One failed probe build: ``error``, the config objects the model read (the
    top-level config first, then its text config and sub-configs), and the files of the
    model class and its bases (``extra_files``)."""

    error: BaseException
    configs: list[Any]
    extra_files: list[str] = field(default_factory=list)

    @functools.cached_property
    def texts(self) -> list[str]:
        """The model's own source texts: its traceback's model files, then its class's."""
        return source_texts(self.error, self.extra_files)

    @functools.cached_property
    def nested(self) -> list[Any]:
        """``configs`` and the configs nested in them (``thinker_config.audio_config``)."""
        return with_nested(self.configs)

    @property
    def message(self) -> str:
        return str(self.error)


# ``'LlamaConfig' object has no attribute 'vision_config'``
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def missing(error: BaseException) -> tuple[str, str] | None:
    """``(class name, attribute)`` of an AttributeError on an object that lacks it."""
    m = _MISSING.search(str(error)) if isinstance(error, AttributeError) else None
    return (m.group(1), m.group(2)) if m is not None else None


def missing_on_config(error: BaseException) -> tuple[str, str] | None:
    """``missing(error)`` on an object that is no None, list or tuple (a config, a copy
    of one): the kind of failure the missing-attribute repairs take."""
    found = missing(error)
    if found is None or found[0] in ("NoneType", "list", "tuple"):
        return None
    return found


def failing_frames(error: BaseException, depth: int = 4) -> list[Any]:
    """The innermost ``depth`` frames of ``error`` (innermost first)."""
    return [f for f, _ in traceback.walk_tb(error.__traceback__)][-depth:][::-1]


def raising_frame(error: BaseException) -> tuple[Any, int] | None:
    """The innermost frame of ``error`` and the line it raised at, None without one."""
    frames = list(traceback.walk_tb(error.__traceback__))
    return frames[-1] if frames else None


def failing_line(error: BaseException, after: int = 0) -> str:
    """The line that raised ``error``, with ``after`` more (a call spread over lines)."""
    raised = raising_frame(error)
    if raised is None:
        return ""
    frame, line = raised
    return "".join(
        linecache.getline(frame.f_code.co_filename, n) for n in range(line, line + after + 1)
    )


def _config_reads(text: str) -> list[str]:
    """Config attributes ``text`` reads: ``config.x`` and ``getattr(config, "x", ...)``."""
    return CONFIG_READ.findall(text) + re.findall(
        r"getattr\(\s*(?:self\.)?\w*config\s*,\s*[\"'](\w+)[\"']", text
    )


def line_attributes(error: BaseException) -> list[str]:
    """Config attributes read on the line that raised ``error``, or, for a local read
    from the config just before (``x = getattr(config, "x", None)``), on the two lines
    above it."""
    raised = raising_frame(error)
    if raised is None:
        return []
    frame, line = raised
    names: list[str] = []
    for n in (line, line - 1, line - 2):
        found = _config_reads(linecache.getline(frame.f_code.co_filename, n))
        names.extend(name for name in found if name not in names)
        if n == line and names:
            break  # the failing line reads the config itself
    return names


def asserted_locals(error: BaseException) -> list[str]:
    """Config attributes behind the locals the failing line names, each read into its
    local earlier in the function (``mla_use_nope = config.mla_use_nope`` five lines
    above ``assert mla_use_nope, ...``); the nearest assignment of each local counts."""
    raised = raising_frame(error)
    if raised is None:
        return []
    frame, line = raised
    path, first = frame.f_code.co_filename, frame.f_code.co_firstlineno
    names = set(re.findall(r"\b([A-Za-z_]\w*)\b", linecache.getline(path, line)))
    found: list[str] = []
    for n in range(line - 1, first - 1, -1):
        text = linecache.getline(path, n)
        m = re.match(r"\s*(\w+)\s*=\s*(.+)", text)
        if m is None or m.group(1) not in names:
            continue
        names.discard(m.group(1))  # the nearest assignment is the one in effect
        found.extend(r for r in _config_reads(m.group(2)) if r not in found)
    return found


def function_reads(error: BaseException) -> list[str]:
    """Attribute names read (``x.name``, ``getattr(x, "name")``) in the failing function
    up to the failing line, nearest first: a section read into a local first
    (``draft_config = config.dflash_config``) and indexed lines later."""
    raised = raising_frame(error)
    if raised is None:
        return []
    frame, line = raised
    path, first = frame.f_code.co_filename, frame.f_code.co_firstlineno
    text = "".join(linecache.getline(path, n) for n in range(first, line + 1))
    found = re.findall(r"\.(\w+)\b", text) + re.findall(r"getattr\(\s*\w+\s*,\s*[\"'](\w+)", text)
    return list(dict.fromkeys(reversed(found)))


def model_lines(error: BaseException, before: int = 2) -> str:
    """The line of the innermost model-code frame (``/models/``) of ``error``, with the
    ``before`` lines above it (a sub-config read into a local first)."""
    for frame, line in reversed(list(traceback.walk_tb(error.__traceback__))):
        f = frame.f_code.co_filename
        if in_models_folder(f) and "/transformers/" not in f:
            return "".join(linecache.getline(f, n) for n in range(max(1, line - before), line + 1))
    return ""


def raising_file_text(error: BaseException) -> list[str]:
    """The text of the file that raised ``error`` (often vLLM's layer, not the model's
    file): where the value was read, and how it is used there."""
    raised = raising_frame(error)
    if raised is None:
        return []
    try:
        return [Path(raised[0].f_code.co_filename).read_text(encoding="utf-8")]
    except OSError:
        return []


def with_nested(configs: list[Any], depth: int = 3) -> list[Any]:
    """``configs`` and the configs nested in them (``thinker_config.audio_config``)."""
    out = list(configs)
    frontier = list(configs)
    for _ in range(depth):
        found = []
        for config in frontier:
            try:
                values = list(vars(config).values())
            except TypeError:
                continue
            for value in values:
                nested = hasattr(value, "to_dict") and hasattr(value, "model_type")
                if nested and all(value is not c for c in out):
                    out.append(value)
                    found.append(value)
        frontier = found
    return out


def give_guess(
    configs: list[Any], attr: str, texts: Any, wanted: Callable[[Any], bool]
) -> str | None:
    """Set a guessed ``attr`` on the first config ``wanted`` accepts; its name, or None
    when no config is wanted or no value can be guessed (None itself is given where the
    model's own dataclass declares it the default: ``field_default_none``)."""
    for config in configs:
        if wanted(config):
            value = guess_attribute(attr, config, texts)
            if value is None and not field_default_none(attr, texts):
                return None
            setattr(config, attr, value)
            return attr
    return None


def give_value(configs: list[Any], attr: str, cls_name: str, value: Any) -> str | None:
    """Set ``attr = value`` on the first config of class ``cls_name`` that lacks it."""
    for config in configs:
        if type(config).__name__ == cls_name and not hasattr(config, attr):
            setattr(config, attr, value)
            return attr
    return None
