"""Code dispatches on a config value and raises for one it does not know, quoting it.

Failure: a ``ValueError``, ``NotImplementedError`` or ``AssertionError`` raised in a
function (one of the two innermost frames) that compares ``<x>.<attr> == "<value>"``,
whose message quotes the config's current value: vLLM 0.32's ``models/qwen3_5.py``
raises ``ValueError(f"Invalid model_type {config.model_type}")`` after testing
``"qwen3_5_text"`` and ``"qwen3_5_moe_text"``; ``models/deepseek_ocr.py`` raises "Only
2D tile_tag is supported currently, got: tile_tag".

Change: the attribute takes the first value the function compares it with (what the
family's checkpoints hold); the frame's own ``config`` first.

Limits: string values only, and the current value must appear in the message.
"""

from __future__ import annotations

import contextlib
import inspect
import re

from prefixlint.introspect.configs.repairs.reading import Failure, failing_frames


def repair(failure: Failure) -> str | None:
    error = failure.error
    message = str(error)
    if not isinstance(error, (ValueError, NotImplementedError, AssertionError)):
        return None
    for frame in failing_frames(error, 2):
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            continue
        named: dict[str, list[str]] = {}
        for attr, value in re.findall(r"\.(\w+)\s*==\s*[\"']([^\"'\n]+)[\"']", source):
            named.setdefault(attr, []).append(value)
        local = frame.f_locals.get("config")
        for attr, values in named.items():
            for config in [c for c in failure.configs if c is local] + failure.configs:
                try:
                    current = getattr(config, attr)
                except Exception:
                    continue
                if isinstance(current, str) and current in message and current not in values:
                    with contextlib.suppress(Exception):
                        setattr(config, attr, values[0])
                        return attr
        # ``if self.head_dim == 512: ... elif self.head_dim == 128: ... else: raise
        # ValueError(f"Unsupported head_dim ...: {self.head_dim}")``: a shrunk size the
        # code does not take; the smallest it names (nearest the shrunk one)
        sizes: dict[str, list[int]] = {}
        for attr, value in re.findall(r"\.(\w+)\s*==\s*(\d+)\b", source):
            sizes.setdefault(attr, []).append(int(value))
        for attr, values in sizes.items():
            if attr not in message:
                continue
            for config in failure.configs:
                current = vars(config).get(attr)
                if (
                    isinstance(current, int)
                    and not isinstance(current, bool)
                    and current not in values
                    and re.search(rf"\b{current}\b", message)
                ):
                    with contextlib.suppress(Exception):
                        setattr(config, attr, min(values))
                        return attr
    return None
