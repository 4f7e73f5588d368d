"""The rule catalog. Codes are a public contract: never renumber, only deprecate."""

from __future__ import annotations

from prefixlint.rules.base import LintRule
from prefixlint.rules.contract import (
    ForwardSignature,
    HFForwardLeftover,
    InitSignature,
    MissingEmbedInputIds,
    PrefixUnused,
)
from prefixlint.rules.interfaces import (
    MultiModalInterfaceIncomplete,
    PluginRegistration,
    PPInterfaceIncomplete,
    PPUndeclared,
)
from prefixlint.rules.leftovers import (
    DirectCollective,
    GenerationLeftover,
    NonParallelLayer,
    OwnAttention,
)
from prefixlint.rules.prefix import (
    LoopPrefixWithoutIndex,
    MissingPrefix,
    PrefixAttributeMismatch,
    PrefixNotDerived,
)
from prefixlint.rules.syntax import SyntaxErrorRule

ALL_RULES: list[type[LintRule]] = sorted(
    [
        SyntaxErrorRule,
        InitSignature,
        PrefixUnused,
        ForwardSignature,
        HFForwardLeftover,
        MissingEmbedInputIds,
        MissingPrefix,
        PrefixAttributeMismatch,
        PrefixNotDerived,
        LoopPrefixWithoutIndex,
        DirectCollective,
        NonParallelLayer,
        OwnAttention,
        GenerationLeftover,
        PPInterfaceIncomplete,
        PPUndeclared,
        MultiModalInterfaceIncomplete,
        PluginRegistration,
    ],
    key=lambda r: r.code,
)

RULES_BY_CODE: dict[str, type[LintRule]] = {r.code: r for r in ALL_RULES}
