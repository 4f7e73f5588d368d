"""PFX302 prefix-attribute-mismatch."""

from __future__ import annotations

import re

from prefixlint.static.prefix_fixes import mismatch_fix
from prefixlint.static.prefix_sites import (
    Site,
    builds_module,
    has_variable,
    is_known,
    render,
)
from prefixlint.static.rule import PREFIX_CALLS, Invalid, LintRule, example


class PrefixAttributeMismatch(LintRule):
    """
    ## What it does
    Checks that the prefix given to a module equals the attribute path it is stored at:
    `self.self_attn.qkv_proj = QKVParallelLinear(prefix=f"{prefix}.self_attn.qkv_proj")`,
    `self.layers = nn.ModuleList([... prefix=f"{prefix}.layers.{i}" ...])`, and, inside
    `make_layers`' layer function, exactly the prefix that function receives.

    ## Why is this bad?
    `named_modules()` reports the attribute path; the quantization config, the KV cache
    and the weight loader see the prefix. When they differ, a layer silently gets another
    layer's treatment (FP8 although the checkpoint lists it as unquantized), or none.

    ## Example
    ```python
    self.short_conv = ShortConv(config, prefix=f"{prefix}.conv")
    ```

    Use instead:
    ```python
    self.short_conv = ShortConv(config, prefix=f"{prefix}.short_conv")
    ```
    """

    code = "PFX302"
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(8, 2, 4, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(8, 8, prefix=maybe_prefix(prefix, "o_proj"))
        self.attn = Attention(4, 2, 1.0, prefix=prefix + ".attn")
"""
        ),
        example(
            """
class Model(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: Attn(prefix=prefix), prefix=f"{prefix}.layers"
        )
        self.heads = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"{prefix}.heads.{i}") for i in range(4)]
        )
"""
        ),
        example(
            """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.prefix = prefix
        self.proj = (
            RowParallelLinear(8, 8, prefix="{}.proj".format(self.prefix))
            if True
            else None
        )
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Block(nn.Module):
    def __init__(self, config, prefix: str = ""):
        super().__init__()
        self.short_conv = RowParallelLinear(8, 8, prefix=f"{prefix}.conv")
"""
            ),
            line=5,
            contains="short_conv",
        ),
        Invalid(
            example(
                """
class Layer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = QKVParallelLinear(
            8, 2, 4, prefix=maybe_prefix(prefix, "qkv_proj"))
"""
            ),
            line=7,
        ),
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: Attn(prefix=f"{prefix}.layers"), prefix=f"{prefix}.layers"
        )

class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
"""
            ),
            line=6,
            contains="make_layers",
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            self._check(site)

    def _check(self, site: Site) -> None:
        exp, value = site.expected, site.value
        if exp is None or value is None or not is_known(value) or not value:
            return
        if value[0][0] != "root" or value[0][1] != "prefix":
            return  # not relative to this scope's own prefix: PFX303's business
        if not exp.whole and not builds_module(site):
            return  # a helper that takes a prefix but returns a flag or a config
        if len(value) == 1 and not exp.whole:
            # ``self.inner = Inner(prefix=prefix)``: a transparent wrapper hands its own name
            # down on purpose (vLLM's MLA and MTP wrappers); phase 2 checks the result.
            return
        got = render(value)
        if exp.whole:
            if got != "{prefix}":
                root = value[0][1]
                self.report(
                    site.prefix_arg or site.call,
                    f"inside `make_layers`' layer function `{root}` is already the layer's "
                    f"full path (`...layers.N`); pass it as is, not `{got}`",
                    site=site,
                    fix=lambda: mismatch_fix(site),
                )
            return
        if exp.indexed and exp.index is None:
            if not has_variable(value):
                return  # a loop without index: PFX304
            want_head = "{prefix}." + exp.path + "."
            if got.startswith(want_head) and _single_trailing_variable(value):
                return
            want = exp.render()
        else:
            if has_variable(value):
                return
            want = exp.render()
            if got == want:
                return
            if _named_after_checkpoint(self.ctx.source_text, got, exp.path):
                return
        target = "self." + exp.path
        self.report(
            site.prefix_arg or site.call,
            f"prefix `{got}` does not match the attribute path: the module is stored at "
            f"`{target}`, so its prefix must be `{want}`",
            site=site,
            fix=lambda: mismatch_fix(site),
        )


_STRING = re.compile(r"(?P<q>[\"'])(?P<body>[^\"'\n]*)(?P=q)")


def _named_after_checkpoint(text: str, got: str, path: str) -> bool:
    """The prefix names the checkpoint's module, and the file maps that name elsewhere
    (a ``WeightsMapper`` or a rename in ``load_weights``): a deliberate divergence."""
    suffix = got.removeprefix("{prefix}.")
    if suffix == got or not suffix:
        return False
    word = re.compile(rf"(^|\.){re.escape(suffix)}(\.|$)")
    for line in text.splitlines():
        if "prefix" in line:
            continue
        for m in _STRING.finditer(line):
            if word.search(m.group("body")):
                return True
    return False


def _single_trailing_variable(value: tuple) -> bool:
    return value[-1][0] in ("var", "unk") and sum(k in ("var", "unk") for k, _ in value) == 1
