"""An ``assert`` on a local read from the config, which came back None.

Failure: an ``AssertionError`` on a statement that tests locals the failing function
assigned from the config (``demands.asserted_reads``): vLLM 0.32's
``models/transformers/moe.py``
``top_k = getattr_iter(config, ["num_experts_per_tok", "top_k"], None)`` ...
``assert top_k is not None``; ``rope = getattr(config, "rope_parameters", None)`` ...
``assert rope is not None``; a validator's ``assert isinstance(pooling, str)``.

Change: the first config where the attribute is None or absent gets a guess, read
first from the file that raised (its ``getattr`` default or use), then from the model's
files (the first name of a ``getattr_iter`` list).

Limits: only reads assigned in the failing function, and only locals that hold None
where the assert failed (``assert mla_use_nope`` on a False flag is not this failure);
a local whose value the assert compares with literals is ``asserted_demand``'s (it runs
first).
"""

from __future__ import annotations

from prefixlint.introspect.configs.demands import asserted_reads
from prefixlint.introspect.configs.repairs.reading import Failure, give_guess, raising_file_text


def repair(failure: Failure) -> str | None:
    reads = asserted_reads(failure.error, came_back_none=True)
    texts = [*raising_file_text(failure.error), *failure.texts] if reads else []
    for attr in reads:
        found = give_guess(
            failure.configs, attr, texts, lambda c, a=attr: getattr(c, a, None) is None
        )
        if found is not None:
            return found
    return None
