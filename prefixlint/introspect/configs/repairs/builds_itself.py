"""A flat config makes the model build itself again, without end.

Failure: ``RecursionError`` with ``init_vllm_registered_model`` more than twice in the
traceback: a composite model builds its language model from
``hf_config=config.get_text_config()`` (vLLM 0.32's ``models/ovis.py``
``vllm_config.with_hf_config(config.get_text_config())``), and on a flat synthesised
config ``get_text_config()`` returns the config itself, so the architecture it names is
built again.

Change: the top-level config gets a ``text_config`` (a stand-in copy of its own text
sizes naming vLLM's causal LM of its model type), as a composite checkpoint has.

Limits: only when the config has no ``text_config`` yet.
"""

from __future__ import annotations

import traceback

from prefixlint.introspect.configs.repairs.reading import Failure
from prefixlint.introspect.configs.subconfigs import sub_config


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not isinstance(error, RecursionError) or not _builds_itself(error):
        return None
    top = failure.configs[0] if failure.configs else None
    if top is not None and "text_config" not in vars(top):
        top.text_config = sub_config("text_config", top)
        return "text_config"
    return None


def _builds_itself(error: BaseException) -> bool:
    names = [f.f_code.co_name for f, _ in traceback.walk_tb(error.__traceback__)]
    return names.count("init_vllm_registered_model") > 2
