"""The repair loop's last resort, for a failure that names no attribute (a MoE model
whose Llama-shaped config has no expert count builds no MoE layer and then finds none):
every attribute the model's files read and the config lacks, guessed at once."""

from __future__ import annotations

import re
from typing import Any

from prefixlint.introspect.configs.hints import CONFIG_READ, guess_attribute, source_texts


def seed_from_code(configs: list[Any], files: list[str]) -> list[str]:
    """Give the config every attribute the model's files read as ``config.name`` that it
    lacks: for a failure that names no attribute (a MoE model whose llama-shaped config
    has no expert count builds no MoE layer and then finds none)."""
    texts = source_texts(None, files)
    if not configs:
        return []
    config = configs[0]
    seeded: list[str] = []
    for text in texts:
        for attr in dict.fromkeys(CONFIG_READ.findall(text)):
            if attr.startswith("_") or any(hasattr(c, attr) for c in configs):
                continue
            if re.search(rf"\bconfig\.{attr}\s*=[^=]", text):
                continue  # the model sets it itself
            value = guess_attribute(attr, config, texts)
            if value is not None:
                setattr(config, attr, value)
                seeded.append(attr)
    return seeded
