"""PFX301-PFX304: every module gets a prefix, and the prefix is its attribute path."""

from __future__ import annotations

import re

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.rules.base import Invalid, LintRule
from prefixlint.rules.prefixes import (
    Site,
    has_root,
    has_variable,
    is_known,
    render,
)
from prefixlint.rules.walk import walk

_HEADER = """
from torch import nn
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.utils import make_layers, maybe_prefix
"""


def _example(body: str) -> str:
    return _HEADER + body


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
    `quant_config` is passed to the same call (the name is then certainly consulted), and a
    warning otherwise.

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
    name = "missing-prefix"
    severity = Severity.WARNING
    summary = "A prefix-taking layer is constructed without `prefix`"

    VALID = [
        _example(
            """
class Head(nn.Module):
    def __init__(self, vocab, hidden, quant_config, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(vocab, hidden, quant_config=quant_config,
                                      prefix=maybe_prefix(prefix, "lm_head"))
"""
        ),
        _example(
            """
class Wrapper(nn.Module):
    def __init__(self, prefix: str = "", **kwargs):
        super().__init__()
        self.proj = RowParallelLinear(**kwargs)  # may carry prefix
"""
        ),
        _example(
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
            _example(
                """
class Head(nn.Module):
    def __init__(self, vocab, hidden, quant_config, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(vocab, hidden, quant_config=quant_config)
"""
            ),
            line=11,
            contains="ParallelLMHead",
        ),
        Invalid(
            _example(
                """
class MLP(nn.Module):
    def __init__(self, hidden, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(hidden, hidden, bias=False)
"""
            ),
            line=11,
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            if site.prefix_arg is not None or site.has_splat:
                continue
            severity = Severity.ERROR if site.passes_quant_config else Severity.WARNING
            why = " while `quant_config` is passed" if site.passes_quant_config else ""
            self.report(
                site.call,
                f"`{site.callee}` is constructed without `prefix`{why}; "
                "quantization, LoRA and the weight loader find layers by that name",
                severity=severity,
                site=site,
            )


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
    name = "prefix-attribute-mismatch"
    severity = Severity.ERROR
    summary = "The prefix names another attribute than the one the module is stored at"

    VALID = [
        _example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(8, 2, 4, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(8, 8, prefix=maybe_prefix(prefix, "o_proj"))
        self.attn = Attention(4, 2, 1.0, prefix=prefix + ".attn")
"""
        ),
        _example(
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
        _example(
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
            _example(
                """
class Block(nn.Module):
    def __init__(self, config, prefix: str = ""):
        super().__init__()
        self.short_conv = RowParallelLinear(8, 8, prefix=f"{prefix}.conv")
"""
            ),
            line=11,
            contains="short_conv",
        ),
        Invalid(
            _example(
                """
class Layer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = QKVParallelLinear(
            8, 2, 4, prefix=maybe_prefix(prefix, "qkv_proj"))
"""
            ),
            line=13,
        ),
        Invalid(
            _example(
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
            line=12,
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
        if not exp.whole and not _builds_module(site):
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
        )


_MODULE_FACTORY = re.compile(r"(^|_)(init|build|make|create|get)_|model|layer|Model|Layer")


def _builds_module(site: Site) -> bool:
    """Classes build modules; functions only when their name says they build one."""
    short = site.callee.rsplit(".", 1)[-1]
    if short[:1].isupper():
        return True
    return bool(_MODULE_FACTORY.search(short)) and not short.startswith(("is_", "resolve_"))


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


def _passes_any(site: Site, names: list[str]) -> bool:
    wanted = set(names)
    for arg in site.call.args:
        if arg is site.prefix_arg:
            continue
        for node in walk(arg.value):
            if isinstance(node, cst.Name) and node.value in wanted:
                return True
    return False


def _single_trailing_variable(value: tuple) -> bool:
    return value[-1][0] in ("var", "unk") and sum(k in ("var", "unk") for k, _ in value) == 1


class PrefixNotDerived(LintRule):
    """
    ## What it does
    Checks that a prefix is built from the enclosing `prefix` parameter rather than written
    as a literal (`prefix="lm_head"`, `prefix="attn"`, `prefix=f"model.layers.{i}"`).

    ## Why is this bad?
    A literal is right only while the class is the root of the model. As soon as it is
    nested (a language model inside a multimodal one, a draft model, a pooling adapter), the
    name loses its parents: two layers collide on `attn` ("Duplicate layer name"), and the
    quantization config compares the wrong name.

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
    name = "prefix-not-derived"
    severity = Severity.ERROR
    summary = "A prefix is a literal instead of being built from the enclosing `prefix`"

    VALID = [
        _example(
            """
class Attn(nn.Module):
    def __init__(self, layer_prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{layer_prefix}.attn")
"""
        ),
        _example(
            """
def build(name: str):
    return RowParallelLinear(8, 8, prefix=name)
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix="attn")
"""
            ),
            line=11,
            contains="attn",
        ),
        Invalid(
            _example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"model.layers.{i}") for i in range(2)]
        )
"""
            ),
            line=12,
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            value = site.value
            if value is None or has_root(value) or not is_known(value):
                continue
            if value and value[0][0] != "lit":
                continue  # starts from a name we cannot follow
            shown = render(value) if value else ""
            hint = ""
            if site.scope.roots:
                root = sorted(site.scope.roots)[0]
                hint = f"; build it from `{root}` (e.g. `maybe_prefix({root}, ...)`)"
            else:
                hint = "; take a `prefix` parameter and build it from that"
            self.report(
                site.prefix_arg or site.call,
                f"prefix `{shown}` is a literal, not derived from the enclosing prefix: "
                f"it breaks as soon as this module is nested{hint}",
                site=site,
            )


class LoopPrefixWithoutIndex(LintRule):
    """
    ## What it does
    Checks that a prefix-taking module built in a loop or a comprehension puts the loop
    variable (the layer or expert index) into its prefix.

    ## Why is this bad?
    Every iteration gets the same name. Attention layers then fail at start-up with
    "Duplicate layer name"; linear layers all share one quantization lookup, and
    `extract_layer_index()` cannot find the layer number.

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
    name = "loop-prefix-without-index"
    severity = Severity.ERROR
    summary = "A module built in a loop has a prefix without the loop index"

    VALID = [
        _example(
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
            _example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.experts = nn.ModuleList(
            [RowParallelLinear(8, 8, prefix=f"{prefix}.experts") for _ in range(4)]
        )
"""
            ),
            line=12,
            contains="loop",
        ),
        Invalid(
            _example(
                """
class Model(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList()
        for idx in range(4):
            self.layers.append(Attention(4, 2, 1.0, prefix=maybe_prefix(prefix, "attn")))
"""
            ),
            line=13,
        ),
    ]

    def leave_Module(self) -> None:
        for site in self.ctx.prefixes.sites:
            value = site.value
            if not site.in_loop or value is None or not is_known(value) or has_variable(value):
                continue
            loop_vars = sorted(set().union(*site.loop_vars) - {"<while>", "_"})
            if _passes_any(site, loop_vars):
                continue  # ``Layer(layer_idx=i, prefix=prefix)`` builds its name from the index
            var = f"`{loop_vars[0]}`" if loop_vars else "the loop index"
            self.report(
                site.prefix_arg or site.call,
                f"`{site.callee}` is built in a loop with the same prefix `{render(value)}` "
                f"every time; put {var} in it, or the names collide",
                site=site,
            )
