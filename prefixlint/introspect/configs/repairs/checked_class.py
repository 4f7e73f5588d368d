"""The model refused prefixlint's stand-in sub-config by its class.

Failure: the code checks the sub-config's class and raises for others, naming the
class it takes in an ``isinstance`` check of the failing function: vLLM 0.32's
``models/llava.py`` raises ``NotImplementedError("Unsupported vision config: <class
'prefixlint...SubConfig'>")`` after ``isinstance(vision_config, CLIPVisionConfig)``
tests; ``models/mistral3.py`` has ``assert isinstance(hf_config.vision_config,
PixtralVisionConfig)``.

Change: the stand-in (``subconfigs.sub_config``) is replaced by the first config class
the ``isinstance`` names that can be default-constructed, shrunk like the rest.

Limits: only a stand-in is replaced (a checkpoint's own class is never swapped); the
check must be in one of the four innermost frames' functions, naming a class in the
function's module globals.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from prefixlint.introspect.configs.repairs.reading import Failure, failing_frames
from prefixlint.introspect.configs.shrink import shrink_kwargs
from prefixlint.introspect.configs.subconfigs import is_stand_in
from prefixlint.introspect.configs.synthesis import construct

_ISINSTANCE = re.compile(r"isinstance\(\s*([\w.]+)\s*,\s*\(?\s*([\w.,\s]+?)\s*\)?\s*\)")


def repair(failure: Failure) -> str | None:
    error = failure.error
    if "SubConfig" not in str(error) and not isinstance(error, AssertionError):
        return None
    for frame in failing_frames(error):
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            continue
        for held, names in _ISINSTANCE.findall(source):
            attr = held.rsplit(".", 1)[-1]
            for owner in failure.configs:
                current = vars(owner).get(attr)
                if not is_stand_in(current):
                    continue
                for name in (n.strip() for n in names.split(",")):
                    value = _shrunk_instance(frame.f_globals.get(name))
                    if value is not None:
                        setattr(owner, attr, value)
                        return attr
    return None


def _shrunk_instance(cls: Any) -> Any:
    """A default instance of the config class ``cls``, shrunk; None if it is none."""
    from transformers import PretrainedConfig

    if not (isinstance(cls, type) and issubclass(cls, PretrainedConfig)):
        return None
    try:
        default = cls()
        return construct(cls, shrink_kwargs(default, 2))
    except Exception:
        return None
