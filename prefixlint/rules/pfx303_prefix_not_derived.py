"""PFX303 prefix-not-derived."""

from __future__ import annotations

from prefixlint.diagnostic import Severity
from prefixlint.static.model_classes import in_draft_file
from prefixlint.static.prefix_sites import (
    has_root,
    is_known,
    is_layer_site,
    render,
)
from prefixlint.static.rule import PREFIX_CALLS, Invalid, LintRule, example

_NO_CONSUMER = (
    " (a note: no `quant_config` reaches it and it owns no engine cache, so nothing looks "
    "the name up yet)"
)

# Root names a draft model shares with its target on purpose.
_TARGET_NAMES = frozenset({"lm_head"})


class PrefixNotDerived(LintRule):
    """
    ## What it does
    Checks that a prefix is built from the enclosing `prefix` parameter rather than written
    as a literal (`prefix="lm_head"`, `prefix="attn"`, `prefix=f"model.layers.{i}"`).

    ## Why is this bad?
    A literal is right only while the class is the root of the model. As soon as it is
    nested (a language model inside a multimodal one, a draft model, a pooling adapter), the
    name loses its parents: two layers collide on `attn` ("Duplicate layer name"), and the
    quantization config compares the wrong name. It is an error when someone looks the
    name up (a `quant_config` reaches the module, or it is an attention layer, whose KV
    cache is registered by name), a note otherwise; a note too in a class that takes no
    prefix and that only another loader builds (its names are relative to it, as that
    loader expects).

    A draft model (MTP, EAGLE) that names its head `lm_head` literally is not reported: it
    shares the target's name on purpose, so that the quantization config's exclusions
    (`exclude_modules: ["lm_head"]`) apply to both.

    ## Example
    ```python
    self.attn = Attention(num_heads, head_dim, scale, prefix="attn")
    ```

    Use instead:
    ```python
    self.attn = Attention(num_heads, head_dim, scale, prefix=f"{prefix}.attn")
    ```
    """

    code = "PFX303"
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, layer_prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{layer_prefix}.attn")
"""
        ),
        example(
            """
def build(name: str):
    return RowParallelLinear(8, 8, prefix=name)
"""
        ),
        example(
            """
class SharedHead(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.head = ParallelLMHead(8, 8, quant_config=quant_config, prefix="lm_head")


class MyMTP(nn.Module):
    pass
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix="attn")
"""
            ),
            line=5,
            contains="attn",
        ),
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"model.layers.{i}") for i in range(2)]
        )
"""
            ),
            line=6,
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            value = site.value
            if value is None or has_root(value) or not is_known(value):
                continue
            if not is_layer_site(site):
                continue  # ``_iter_tensors_in_value("impl", ...)`` walks names, builds nothing
            if value and value[0][0] != "lit":
                continue  # starts from a name we cannot follow
            shown = render(value) if value else ""
            if shown in _TARGET_NAMES and in_draft_file(self.ctx):
                # A draft's head named as the target's, on purpose: the quantization
                # config's exclusion lists (``lm_head``) then apply to both.
                continue
            hint = ""
            if site.scope.roots:
                root = sorted(site.scope.roots)[0]
                hint = f"; build it from `{root}` (e.g. `maybe_prefix({root}, ...)`)"
            else:
                hint = "; take a `prefix` parameter and build it from that"
            consumer = self.ctx.name_has_consumer(site)
            message = (
                f"prefix `{shown}` is a literal, not derived from the enclosing prefix: "
                f"it breaks as soon as this module is nested{hint}"
            )
            severity = None if consumer else Severity.NOTE
            owner = site.scope.class_node
            foreign = self.ctx.outside_contract(owner.name.value) if owner else None
            if foreign is not None and not site.scope.roots:
                # Names relative to a class that takes no prefix are right when it is the
                # root of the loader that builds it, and that loader is not vLLM's.
                message += (
                    f"; `{owner.name.value}` takes no prefix, so its names are relative to "
                    f"it, as the loader that builds it as a root expects ({foreign})"
                )
                severity = Severity.NOTE
            elif not consumer:
                message += _NO_CONSUMER
            self.report(site.prefix_arg or site.call, message, severity=severity, site=site)
