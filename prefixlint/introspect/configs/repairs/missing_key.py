"""A dict the config holds lacks a key the failing line reads.

Failure: a ``KeyError`` raised reading a section of the config that a checkpoint's
config.json writes as a JSON object, e.g. vLLM 0.32's ``models/laguna_dflash.py``:
``target_layer_ids = self.config.dflash_config["target_layer_ids"]`` raising
``KeyError: 'target_layer_ids'``.

Change: the section (an attribute read on the failing line, or earlier in the failing
function, that holds a dict without the key) gets the key, with a value guessed as for an
attribute of that name (``hints.guess_attribute``). Returns ``section.key``.

Limits: claims every ``KeyError``: no later repair runs for one, so a key missing from
a dict that is not the config's (a registry lookup) is left unrepaired. No guess for the
name: nothing is given.
"""

from __future__ import annotations

from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import (
    Failure,
    function_reads,
    line_attributes,
)


def claims(failure: Failure) -> bool:
    return isinstance(failure.error, KeyError)


def repair(failure: Failure) -> str | None:
    error = failure.error
    key = error.args[0] if isinstance(error, KeyError) and error.args else None
    if not isinstance(key, str):
        return None
    for attr in line_attributes(error) + function_reads(error):
        for config in failure.configs:
            section = vars(config).get(attr)
            if isinstance(section, dict) and key not in section:
                value = guess_attribute(key, config, failure.texts)
                if value is None:
                    return None
                section[key] = value
                return f"{attr}.{key}"
    return None
