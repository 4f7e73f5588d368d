"""KV heads apart from the query heads on the comparison's own config.

Synthesis shrinks ``num_key_value_heads`` to 8 of 16 query heads, so a model that reads
the KV head count from the wrong attribute (the query heads) builds other attention than
transformers'. A family that names its KV head count otherwise keeps it equal to the
query heads: Falcon's ``num_kv_heads`` is None in its class and derived as the query
heads, so a Falcon-40B-style model (``new_decoder_architecture``, GQA) that took the
query heads for its KV heads (vllm#1164) computed the same as transformers. Here such a
count, equal to the query heads on a synthesised config and read by transformers'
class, is set to half of them while the comparison runs (base and variants alike);
``compare`` runs again without it where transformers' class or the model cannot be
built or run so (Falcon's old architecture without multi-query attention reads one
count for both).
"""

from __future__ import annotations

import re
from typing import Any

# a KV head count under any family's name (``num_kv_heads``, ``n_head_kv``,
# ``num_key_value_heads``, ChatGLM's ``multi_query_group_num``)
_KV_HEADS = re.compile(r"(kv_heads?|key_value_heads?|head_kv|query_group)")
# synthesis sets this one apart already; where it is left equal, vLLM's own build says
# whether the model reads it (``reference.kv_heads_as_built``, Zamba2)
_STANDARD = "num_key_value_heads"


def grouped(model_config: Any, ref_cls: type) -> dict[str, int]:
    """The KV head counts to set apart: attribute -> half the query heads; {} where none
    is equal to them."""
    from prefixlint.introspect.compare.guesses import transformers_reads
    from prefixlint.introspect.coverage.variants import config_objects

    config = config_objects(model_config)[0]
    heads = getattr(config, "num_attention_heads", None)
    if type(heads) is not int or heads < 2 or heads % 2:
        return {}
    aliases = set(getattr(type(config), "attribute_map", None) or {})
    out = {}
    for name, value in vars(config).items():
        if name in aliases or name == _STANDARD or not _KV_HEADS.search(name):
            continue
        if type(value) is not int:
            continue
        if value == heads and transformers_reads(ref_cls, name):
            out[name] = heads // 2
    return out
