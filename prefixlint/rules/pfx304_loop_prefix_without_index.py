"""PFX304 loop-prefix-without-index."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.prefix_sites import (
    Site,
    has_variable,
    is_known,
    is_layer_site,
    render,
)
from prefixlint.static.resolve import DECODER_ATTENTION_LAYERS
from prefixlint.static.rule import PREFIX_CALLS, Invalid, LintRule, example
from prefixlint.static.walk import walk


def _passes_any(site: Site, names: list[str]) -> bool:
    wanted = set(names)
    for arg in site.call.args:
        if arg is site.prefix_arg:
            continue
        for node in walk(arg.value):
            if isinstance(node, cst.Name) and node.value in wanted:
                return True
    return False


def _attention_advice(callee: str, rendered: str, loop_vars: list[str]) -> str:
    """For an attention layer, a name vLLM accepts: binding the KV cache,
    ``extract_layer_index`` wants exactly one integer in it, its decoder layer's index."""
    if callee.rsplit(".", 1)[-1] not in DECODER_ATTENTION_LAYERS:
        return ""
    index = loop_vars[0] if loop_vars else "i"
    return (
        f": where the loop builds the decoder layers, as their index; inside a decoder layer, "
        f"as part of a name, each layer stored under it (`{rendered}_{{{index}}}` at "
        f"`self.<name>_{{{index}}}`), not as a list index (`{rendered}s.{{{index}}}`): vLLM's "
        "`extract_layer_index` accepts one integer in an attention layer's name, its decoder "
        "layer's index, and refuses two at start-up"
    )


class LoopPrefixWithoutIndex(LintRule):
    """
    ## What it does
    Checks that a prefix-taking module built in a loop or a comprehension puts the loop
    variable (the layer or expert index) into its prefix.

    ## Why is this bad?
    Every iteration gets the same name. Attention layers then fail at start-up with
    "Duplicate layer name"; linear layers all share one quantization lookup, and
    `extract_layer_index()` cannot find the layer number. It is an error when someone looks
    the name up (a `quant_config` reaches the module, or it is an attention layer), a
    warning otherwise.

    ## Example
    ```python
    self.experts = nn.ModuleList(
        [MLP(config, prefix=f"{prefix}.experts") for _ in range(n)]
    )
    ```

    Use instead:
    ```python
    self.experts = nn.ModuleList(
        [MLP(config, prefix=f"{prefix}.experts.{i}") for i in range(n)]
    )
    ```
    """

    code = "PFX304"
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList()
        for idx in range(4):
            self.layers.append(RowParallelLinear(8, 8, prefix=f"{prefix}.layers.{idx}"))
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.experts = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"{prefix}.experts") for _ in range(4)]
        )
"""
            ),
            line=6,
            contains="loop",
        ),
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList()
        for idx in range(4):
            self.layers.append(Attention(4, 2, 1.0, prefix=maybe_prefix(prefix, "attn")))
"""
            ),
            line=7,
            contains="attn_{idx}",
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            value = site.value
            if not site.in_loop or value is None or not is_known(value) or has_variable(value):
                continue
            if not is_layer_site(site):
                continue
            loop_vars = sorted(set().union(*site.loop_vars) - {"<while>", "_"})
            if _passes_any(site, loop_vars):
                continue  # ``Layer(layer_idx=i, prefix=prefix)`` builds its name from the index
            var = f"`{loop_vars[0]}`" if loop_vars else "the loop index"
            consumer = self.ctx.name_has_consumer(site)
            self.report(
                site.prefix_arg or site.call,
                f"`{site.callee}` is built in a loop with the same prefix `{render(value)}` "
                f"every time; put {var} in it, or the names collide"
                + _attention_advice(site.callee, render(value), loop_vars)
                + (
                    ""
                    if consumer
                    else " (a note: no `quant_config` reaches it and it owns no engine cache, "
                    "so nothing looks the name up yet)"
                ),
                severity=None if consumer else Severity.NOTE,
                site=site,
            )
