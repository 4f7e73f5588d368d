"""Where an engine failure happened in the model's own code.

vLLM's engine processes log the traceback of what stopped them (the child's own exception
only says "see root cause above"). A traceback that passes through the model's files is
the model's defect: the innermost such frame is where a finding goes. Frames in vLLM,
torch or prefixlint are never blamed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# vLLM's log prefix on each line an engine process writes:
# "(Worker pid=23861) ERROR 12-01 20:49:54 [multiproc_executor.py:953] ".
_LOG_PREFIX = re.compile(
    r"^\([^()]*pid=\d+\)\s+(?:[A-Z]+\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)?"
)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_START = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Blame:
    file: str
    line: int
    function: str
    exception: str  # "TypeError: ..." as the traceback ends


def tracebacks(text: str) -> list[tuple[list[tuple[str, int, str]], str]]:
    """Every traceback in ``text``: its frames (file, line, function), outermost first,
    and the exception line that ends it."""
    out: list[tuple[list[tuple[str, int, str]], str]] = []
    frames: list[tuple[str, int, str]] | None = None
    for raw in text.splitlines():
        line = _LOG_PREFIX.sub("", raw)
        if line.strip() == _START:
            frames = []
            continue
        if frames is None:
            continue
        frame = _FRAME.match(line)
        if frame:
            frames.append((frame["file"], int(frame["line"]), frame["function"].strip()))
        elif line and not line[0].isspace():
            out.append((frames, line.strip()))
            frames = None
    return out


def model_files(class_file: str, vllm_root: str | None) -> Callable[[str], bool]:
    """Which files are the model's: its class's file, and, for a model outside vLLM (a
    plugin), the files beside it and below."""
    own = os.path.realpath(class_file)
    folder = os.path.dirname(own)
    inside_vllm = vllm_root is not None and own.startswith(os.path.realpath(vllm_root) + os.sep)

    def is_model(path: str) -> bool:
        real = os.path.realpath(path)
        return real == own or (not inside_vllm and real.startswith(folder + os.sep))

    return is_model


def blame(texts: Iterable[str], is_model: Callable[[str], bool]) -> Blame | None:
    """The first traceback (the root cause comes first in vLLM's logs) that passes
    through the model's files: its innermost frame there."""
    for text in texts:
        for frames, exception in tracebacks(text):
            mine = [f for f in frames if is_model(f[0])]
            if mine:
                file, line, function = mine[-1]
                return Blame(file, line, function, exception)
    return None
