"""The model refuses a 0 that synthesis left in a count.

Failure: a ``ValueError`` or ``AssertionError`` raised on (or just below) a line that
reads a config attribute holding 0: vLLM 0.32's ``models/qwen2_moe.py`` (and a dozen
MoE files) ``if self.tp_size > config.num_experts: raise ValueError(...)``, where the 0
came from a ``getattr(config, "num_experts", 0)`` elsewhere that the code hints took
as the default.

Change: the attribute gets the (non-zero int) value its name suggests
(``guess_attribute`` without the code hints).

Limits: only int 0s (a False flag is not a count); a 0 the model reads as "none" on
purpose and then refuses is a finding this repair may hide by making it a count.
"""

from __future__ import annotations

from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import Failure, line_attributes


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, (ValueError, AssertionError)):
        return None
    for attr in line_attributes(failure.error):
        for config in failure.configs:
            value = vars(config).get(attr)
            if value == 0 and isinstance(value, int) and not isinstance(value, bool):
                guess = guess_attribute(attr, config)
                if isinstance(guess, int) and guess:
                    setattr(config, attr, guess)
                    return attr
    return None
