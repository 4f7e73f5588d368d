"""A guarded raise states what a checkpoint's config holds.

Failure: a ``ValueError``/``TypeError``/``NotImplementedError`` raised under an ``if``
whose test reads config values (vLLM 0.33's AliceAI ``if not
config.kda_allow_negative_eigenvalues: raise NotImplementedError(...)``), a message
that names a section a checkpoint has (Step5: "... requires a `sparse_config`
section"), or an integer an attribute must be: ``guards.guard_demands``.

Change: the first config that does not hold the value yet gets it (a section: an empty
dict, only where the config has none).

Limits: only the values the guard's own test or message names; a test the value cannot
pass by one assignment is left alone.
"""

from __future__ import annotations

from prefixlint.introspect.configs.guards import give_guard_demands
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    return give_guard_demands(failure.error, failure.configs)
