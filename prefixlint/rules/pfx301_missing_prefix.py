"""PFX301 missing-prefix."""

from __future__ import annotations

from prefixlint.diagnostic import Severity
from prefixlint.static.prefix_fixes import missing_prefix_fix
from prefixlint.static.prefix_sites import is_layer_site, quant_reaches
from prefixlint.static.rule import PREFIX_CALLS, Invalid, LintRule, example


class MissingPrefix(LintRule):
    """
    ## What it does
    Checks that every call of a layer that takes a `prefix` (vLLM's parallel linear and
    embedding layers, `Attention`, `FusedMoE`, and any class or function whose signature has
    a `prefix` parameter) passes one.

    ## Why is this bad?
    The prefix defaults to `""`, so the model builds and runs. But quantization configs
    look layers up by that name: a layer listed in a checkpoint's `ignored_layers` gets
    quantized anyway, a per-layer scheme is missed, LoRA cannot find the layer. The bug
    ships silently and breaks the first quantized checkpoint. It is an error when
    `quant_config` is passed to the same call (the name is then certainly consulted) or the
    layer owns an engine cache (an attention layer registers its KV cache by name), a
    warning when a quantization config may reach it (through `vllm_config`), and a note
    otherwise: nothing looks the name up yet (it becomes an error the moment a
    `quant_config` is passed). A class another loader builds (a diffusion pipeline), with
    no prefix of its own, that builds one of its package's models (`self.transformer`)
    builds the root of a component, which that loader names from `""`: a note; a vLLM
    layer built there still needs a name.

    ## Example
    ```python
    self.lm_head = ParallelLMHead(vocab_size, hidden_size, quant_config=quant_config)
    ```

    Use instead:
    ```python
    self.lm_head = ParallelLMHead(
        vocab_size, hidden_size, quant_config=quant_config,
        prefix=maybe_prefix(prefix, "lm_head"),
    )
    ```
    """

    code = "PFX301"
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Head(nn.Module):
    def __init__(self, vocab, hidden, quant_config, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(vocab, hidden, quant_config=quant_config,
                                      prefix=maybe_prefix(prefix, "lm_head"))
"""
        ),
        example(
            """
class Wrapper(nn.Module):
    def __init__(self, prefix: str = "", **kwargs):
        super().__init__()
        self.proj = RowParallelLinear(**kwargs)  # may carry prefix
"""
        ),
        example(
            """
class Experts(nn.Module):
    def gate(self, x, prefix: str = ""):
        return x


class Shared(nn.Module):
    def __init__(self, gate: nn.Module, prefix: str = ""):
        super().__init__()
        self.gate = gate
        self.probe = self.gate(None)  # calls a module: another class's method is no match
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Head(nn.Module):
    def __init__(self, v, h, qc, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(v, h, quant_config=qc)
"""
            ),
            line=5,
            contains="ParallelLMHead",
            fixed="""
class Head(nn.Module):
    def __init__(self, v, h, qc, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(v, h, quant_config=qc, prefix=maybe_prefix(prefix, "lm_head"))
""",
        ),
        Invalid(
            example(
                """
class MLP(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(
            hidden,
            hidden,
            bias=False,
            quant_config=quant_config,
        )
"""
            ),
            line=5,
            fixed="""
class MLP(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(
            hidden,
            hidden,
            bias=False,
            quant_config=quant_config,
            prefix=maybe_prefix(prefix, "down_proj"),
        )
""",
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            if site.prefix_arg is not None or site.has_splat or not is_layer_site(site):
                continue
            component = self.ctx.component_root(site)
            if component is not None:
                severity = Severity.NOTE
                why = f" ({component})"
            elif site.passes_quant_config:
                severity = Severity.ERROR
                why = (
                    " while `quant_config` is passed: the quantization method is resolved "
                    'under the name `""`, so a checkpoint\'s ignore list or per-layer scheme '
                    "misses it"
                )
            elif self.ctx.owns_cache(site.callee):
                severity = Severity.ERROR
                why = (
                    ": its engine cache is registered under that name, so two such layers "
                    'collide on `""` ("Duplicate layer name")'
                )
            elif quant_reaches(site):
                severity = Severity.WARNING
                why = " (a quantization config may reach it through `vllm_config` or `**kwargs`)"
            else:
                severity = Severity.NOTE
                why = " (a note: no `quant_config` reaches it, so nothing looks the name up yet)"
            self.report(
                site.call,
                f"`{site.callee}` is constructed without `prefix`{why}; "
                "quantization, LoRA and the weight loader find layers by that name",
                severity=severity,
                site=site,
                fix=lambda site=site: missing_prefix_fix(site, self.ctx.uses_maybe_prefix),
            )
