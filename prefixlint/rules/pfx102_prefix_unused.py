"""PFX102 prefix-unused."""

from __future__ import annotations

import dataclasses

import libcst as cst

from prefixlint.static.model_classes import anchors_to
from prefixlint.static.rule import CONTRACT, PREFIX_CALLS, Invalid, LintRule, example
from prefixlint.static.walk import children

# -- PFX102 --------------------------------------------------------------------------------


def _reads(node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` is read anywhere in ``node``: the prefix walk does not look at
    ``with`` items, ``match`` subjects or the defaults of nested functions and lambdas, so
    its ``referenced`` misses these reads. Keyword names and attribute names are not reads;
    a nested function or lambda whose own parameter is ``name`` shadows it."""
    if isinstance(node, cst.Name):
        return node.value == name
    if isinstance(node, cst.Arg):
        return _reads(node.value, name)
    if isinstance(node, cst.Attribute):
        return _reads(node.value, name)
    if isinstance(node, cst.Param):
        return node.default is not None and _reads(node.default, name)
    if isinstance(node, (cst.Lambda, cst.FunctionDef)):
        p = node.params
        params = [*p.posonly_params, *p.params, *p.kwonly_params]
        params += [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
        if any(_reads(x, name) for x in params):
            return True
        if isinstance(node, cst.FunctionDef) and any(
            _reads(d.decorator, name) for d in node.decorators
        ):
            return True
        if any(x.name.value == name for x in params):
            return False
        return _reads(node.body, name)
    return any(_reads(c, name) for c in children(node))


class PrefixUnused(LintRule):
    """
    ## What it does
    Checks that a function or constructor that takes `prefix` and builds at least one
    layer that takes a prefix actually uses its `prefix`.

    ## Why is this bad?
    The caller handed down the module's full name, and it is dropped: the layers are named
    from something else (a literal, `""`, another variable), so they lose their parents'
    path. Quantization configs and LoRA then look them up under the wrong name, and
    attention layers of different parents collide.

    ## Example
    ```python
    def __init__(self, config, prefix: str = ""):
        self.o_proj = RowParallelLinear(h, h, prefix="o_proj")
    ```

    Use instead:
    ```python
    def __init__(self, config, prefix: str = ""):
        self.o_proj = RowParallelLinear(h, h, prefix=f"{prefix}.o_proj")
    ```
    """

    code = "PFX102"
    applies_to = CONTRACT
    triggers = (PREFIX_CALLS,)

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
"""
        ),
        example(
            """
class Norm(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
"""
        ),
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.prefix = prefix
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{self.prefix}.o_proj")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(hidden, hidden, prefix="o_proj")
"""
            ),
            line=3,
            contains="`prefix` is never used",
        ),
        Invalid(
            example(
                """
def build_head(vocab: int, hidden: int, prefix: str = ""):
    return ParallelLMHead(vocab, hidden)
"""
            ),
            line=2,
            contains="ParallelLMHead",
        ),
    ]

    def leave_Module(self) -> None:
        for pp in self.ctx.prefixes.prefix_params:
            if pp.referenced or not pp.sites or _reads(pp.function.body, "prefix"):
                continue
            fn = pp.function.name.value
            where = f"`{pp.class_node.name.value}.{fn}`" if pp.class_node else f"`{fn}`"
            callees = sorted({f"`{s.callee}`" for s in pp.sites})
            built = ", ".join(callees[:3]) + (", ..." if len(callees) > 3 else "")
            site = pp.sites[0]
            self.report(
                pp.param,
                f"`prefix` is never used in {where}, which builds {built}; derive those "
                'layers\' prefixes from it (e.g. `prefix=maybe_prefix(prefix, "name")`)',
                site=dataclasses.replace(site, anchors=anchors_to(site.anchors, pp.function)),
            )
