"""A check's message names a config attribute that is None.

Failure: an ``AssertionError`` or ``ValueError`` whose message says ``name=None``:
vLLM 0.32's ``layers/mamba/gdn/qwen_gdn_linear_attn.py`` reads
``output_gate_type = getattr(config, "output_gate_type", "silu")`` and asserts
``output_gate_type in ["silu", "swish", "sigmoid"], f"unsupported {output_gate_type=}"``:
"unsupported output_gate_type=None" where the config holds None.

Change: the config attribute of that name that holds None gets a guess, read first
from the file that raised (often vLLM's layer, not the model file: its
``getattr(config, "output_gate_type", "silu")`` says how it is used), then the model's.

Limits: the name in the message must be the config attribute's own.
"""

from __future__ import annotations

import re

from prefixlint.introspect.configs.repairs.reading import Failure, give_guess, raising_file_text

_NAMED_NONE = re.compile(r"\b(\w+)\s*=\s*None\b")


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, (AssertionError, ValueError)):
        return None
    for name in _NAMED_NONE.findall(str(failure.error)):
        found = give_guess(
            failure.configs,
            name,
            [*raising_file_text(failure.error), *failure.texts],
            lambda c, n=name: n in vars(c) and getattr(c, n) is None,
        )
        if found is not None:
            return found
    return None
