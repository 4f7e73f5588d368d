"""A per-layer view indexed past its layers, on a config that declares no per-layer value.

Failure: ``IndexError: list index out of range`` raised by transformers' per-layer view
(``integrations/heterogeneity/configuration_utils.py``, ``per_layer_config[i]``, whose
length is ``num_hidden_layers``) on a config whose heterogeneity spec holds no override:
vLLM 0.33's ``models/step3p5.py`` ``_get_num_attention_heads`` reads
``config.per_layer_config[layer_idx]`` when ``config.is_heterogeneous``, and its MTP
draft builds layer ``num_hidden_layers + k``. transformers 5.20's ``Step3p7TextConfig``
is heterogeneous by default with an empty spec, so every synthesised Step3.5 config is.

Change: the empty spec is dropped (``per_layer_config = None``): the config is
homogeneous, as its spec already said, and the read falls to the global value.

Limits: a spec with overrides is the checkpoint's own statement and is never dropped;
only the config objects of the build (the config and its sub-configs).
"""

from __future__ import annotations

from prefixlint.introspect.configs.repairs.reading import Failure, failing_frames

_VIEW_FILE = "heterogeneity/configuration_utils.py"


def _raised_by_the_view(error: BaseException) -> bool:
    frames = failing_frames(error, depth=1)
    return bool(frames) and frames[0].f_code.co_filename.replace("\\", "/").endswith(_VIEW_FILE)


def repair(failure: Failure) -> str | None:
    if not isinstance(failure.error, IndexError) or not _raised_by_the_view(failure.error):
        return None
    for config in failure.nested:
        spec = getattr(config, "_heterogeneity_spec", None)
        if spec is not None and not getattr(spec, "per_layer_overrides", True):
            config.per_layer_config = None
            return "per_layer_config"
    return None
