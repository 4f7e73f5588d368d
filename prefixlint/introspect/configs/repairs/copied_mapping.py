"""A copy the model made of an unpacked sub-config lacks an attribute.

Failure: ``AttributeError: 'Namespace' object has no attribute 'num_positions'`` (or on
a ``from_dict`` copy) where the model copies a sub-config it unpacks: vLLM 0.32's
``models/glm4v.py`` ``vision_config = Namespace(**config.vision_config)`` then reads
``vision_config.num_positions``. The copy is made again at each build, so giving the
copy the attribute would not last.

Change: the attribute goes on the sub-config the copy was made from (one the model's
files unpack with ``**`` or ``from_dict``): a stand-in sub-config for a sub-config
name, else a guessed value.

Limits: the object that lacks it must be of no config class the build knows (else it
is the missing-attribute repairs'); no guess: nothing given.
"""

from __future__ import annotations

import re

from prefixlint.introspect.configs.hints import guess_attribute
from prefixlint.introspect.configs.repairs.reading import Failure, missing
from prefixlint.introspect.configs.subconfigs import is_sub_config, sub_config

_UNPACKED = re.compile(r"(?:\*\*\s*|from_dict\(\s*)[\w.]*?(\w+)\s*[,)]")


def repair(failure: Failure) -> str | None:
    found = missing(failure.error)
    if found is None or any(type(c).__name__ == found[0] for c in failure.configs):
        return None
    attr = found[1]
    unpacked = {name for text in failure.texts for name in _UNPACKED.findall(text)}
    for holder in failure.configs:
        for name, value in list(vars(holder).items()):
            if name not in unpacked or not hasattr(value, "keys") or hasattr(value, attr):
                continue
            if not hasattr(value, "to_dict"):
                continue
            guess = (
                sub_config(attr, value)
                if is_sub_config(attr)
                else guess_attribute(attr, value, failure.texts)
            )
            if guess is None:
                return None
            setattr(value, attr, guess)
            return attr
    return None
