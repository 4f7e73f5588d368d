"""PFX101 init-signature."""

from __future__ import annotations

import dataclasses

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.model_classes import (
    POSONLY,
    VARKW,
    anchors_to,
    is_method_of,
    is_model_architecture,
    named_params,
    param_kinds,
)
from prefixlint.static.rule import CONTRACT, FileContext, Invalid, LintRule, Where, example

# -- PFX101 --------------------------------------------------------------------------------


class InitSignature(LintRule):
    """
    ## What it does
    Checks the constructor of a model class: an architecture class (named in the model
    registry, or named and shaped like one), or any `nn.Module` whose `__init__` takes
    `vllm_config`. Such an `__init__` must accept `vllm_config` and `prefix` as keywords
    (keyword-only, after `*`, is the documented form; positional-or-keyword works too and
    is not reported: vLLM's loader, `initialize_model` in `model_loader/utils.py`, calls
    `model_class(vllm_config=vllm_config, prefix=prefix)` by keyword, and its own
    `VllmModel` protocol declares `__init__(self, vllm_config, prefix="")`; positional-only
    is an error), and an architecture's `prefix` must have a default (`""`, a warning)
    and every other parameter of an architecture must have a default.

    A `prefix` default other than `""` is not reported: the loader always passes `prefix`
    explicitly, and several in-tree models (Qwen3-VL, Qwen3.5) use `"model"`.

    An architecture without `vllm_config` whose required parameters are all among those
    vLLM's loader passes to such an "old-style" class (`config`, `quant_config`, ..., read
    from its `initialize_model`) is built that way, with a deprecation warning: a warning.

    An inner class (not an architecture) that takes `vllm_config` is only required to take
    a `prefix` when its `__init__` builds a layer that takes one; its other parameters and
    `prefix`'s default are up to its caller.

    ## Why is this bad?
    vLLM's loader calls every architecture as `model_class(vllm_config=..., prefix=...)`,
    after checking by name that `__init__` has both parameters. Without them the class is
    treated as an "old-style" model: a `DeprecationWarning`, then a guess of the arguments
    that fails or builds the model without its configuration. A required extra parameter
    makes the call fail, and so does a positional-only `vllm_config` or `prefix`. The
    root's prefix is `""` (`VllmModel.__init__(self, vllm_config, prefix="")`), and an
    inner class with no `prefix` cannot name its layers, so quantization and LoRA look
    them up under the wrong name.

    ## Example
    ```python
    class MyModelForCausalLM(nn.Module):
        def __init__(self, config, quant_config=None):
            ...
    ```

    Use instead:
    ```python
    class MyModelForCausalLM(nn.Module):
        def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
            ...
    ```
    """

    code = "PFX101"
    applies_to = CONTRACT

    VALID = [
        example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(8, 8, prefix=maybe_prefix(prefix, "lm_head"))

    def load_weights(self, weights):
        return set()
"""
        ),
        example(
            """
class MyModel(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str, layer_idx: int):
        super().__init__()
        self.proj = RowParallelLinear(8, 8, prefix=f"{prefix}.proj")
"""
        ),
        example(
            """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", **kwargs):
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
"""
        ),
        # positional-or-keyword: the loader passes both by keyword
        example(
            """
class MyForCausalLM(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.lm_head = ParallelLMHead(8, 8, prefix=maybe_prefix(prefix, "lm_head"))

    def load_weights(self, weights):
        return set()
"""
        ),
        example(
            """
class Pooler(nn.Module):  # not a model: takes no vllm_config, builds no prefixed layer
    def __init__(self, vllm_config: VllmConfig):
        super().__init__()
        self.dim = vllm_config.model_config.get_hidden_size()
"""
        ),
    ]
    INVALID = [
        # positional-only: the loader's keywords cannot reach it
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, vllm_config: VllmConfig, /, prefix: str = ""):
        super().__init__()

    def load_weights(self, weights):
        return set()
"""
            ),
            line=3,
            contains="positional-only",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()

    def load_weights(self, weights):
        return set()
"""
            ),
            line=3,
            contains="old-style path",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, config, tokenizer):
        super().__init__()

    def load_weights(self, weights):
        return set()
"""
            ),
            line=3,
            contains="does not take `vllm_config` and `prefix`; make it",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
"""
            ),
            line=3,
            contains="no default",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig):
        super().__init__(vllm_config=vllm_config)
"""
            ),
            line=3,
            contains="prefix",
        ),
        Invalid(
            example(
                """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(8, 8)
"""
            ),
            line=3,
            contains="VocabParallelEmbedding",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", draft_config):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""
            ),
            line=3,
            contains="draft_config",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # inner classes' __init__ without ``prefix``: decided once their sites are known
        self._pending: list[tuple[cst.ClassDef, cst.FunctionDef]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "__init__" or not is_method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        params = param_kinds(node)
        by_name = {p.name.value: (p, k) for p, k in params}
        cls = class_node.name.value
        at = self.here(node)
        if is_model_architecture(self.ctx, class_node):
            self._check_architecture(node, cls, params, by_name, at)
        elif "vllm_config" in by_name and self.ctx.is_module_class(class_node):
            self._check_keyword(by_name["vllm_config"], cls, at)
            if "prefix" in by_name:
                self._check_keyword(by_name["prefix"], cls, at)
            elif not any(k == VARKW for _, k in params):
                self._pending.append((class_node, node))

    def _check_architecture(
        self,
        node: cst.FunctionDef,
        cls: str,
        params: list[tuple[cst.Param, str]],
        by_name: dict[str, tuple[cst.Param, str]],
        at: Where,
    ) -> None:
        wanted = 'def __init__(self, *, vllm_config: VllmConfig, prefix: str = "")'
        missing = [n for n in ("vllm_config", "prefix") if n not in by_name]
        if missing:
            what = " and ".join(f"`{n}`" for n in missing)
            old_style = self._old_style_builds(params)
            self.report(
                node.name,
                f"architecture `{cls}` is built as `{cls}(vllm_config=..., prefix=...)`, but "
                f"its `__init__` does not take {what}; make it `{wanted}`"
                + (
                    f" (a warning: vLLM's loader builds it by its old-style path, passing "
                    f"{old_style} by name, with a deprecation warning)"
                    if old_style
                    else ""
                ),
                severity=Severity.WARNING if old_style else None,
                site=at,
            )
            return  # the whole signature is to be rewritten: no detail on the rest
        for name in ("vllm_config", "prefix"):
            if self._check_keyword(by_name[name], cls, at):
                break  # one finding per signature: `*,` before the first fixes both
        param, kind = by_name["prefix"]
        if kind != POSONLY and param.default is None:
            self.report(
                param,
                f'`prefix` of architecture `{cls}` has no default; give it `""` (the '
                'root module\'s name, as in `VllmModel.__init__`): `prefix: str = ""`',
                severity=Severity.WARNING,
                site=at,
            )
        for param, _ in named_params(params):
            name = param.name.value
            if name in ("vllm_config", "prefix") or param.default is not None:
                continue
            self.report(
                param,
                f"`{name}` has no default, but vLLM builds architecture `{cls}` with only "
                f"`vllm_config` and `prefix`; give `{name}` a default or read it from "
                "`vllm_config`",
                site=at,
            )

    def _old_style_builds(self, params: list[tuple[cst.Param, str]]) -> str | None:
        """The arguments vLLM's loader passes to a constructor without ``vllm_config``
        (read from its ``initialize_model``), when they are all the class requires."""
        source = self.ctx.resolver.loader.vllm
        supplied = source.old_style_arguments() if source is not None else None
        if not supplied:
            return None
        required = [
            p.name.value
            for p, kind in named_params(params)
            if p.default is None and kind not in (VARKW,)
        ]
        if any(name not in supplied for name in required):
            return None
        shown = sorted(set(required) | ({"prefix"} & supplied))
        return ", ".join(f"`{n}`" for n in shown) if shown else "no argument"

    def _check_keyword(self, entry: tuple[cst.Param, str], cls: str, at: Where) -> bool:
        """Report a parameter vLLM cannot pass by keyword (positional-only); True when one
        was reported. Positional-or-keyword is not: the loader passes both by keyword
        (``model_class(vllm_config=vllm_config, prefix=prefix)``) and vLLM's own
        ``VllmModel.__init__(self, vllm_config, prefix="")`` declares them so."""
        param, kind = entry
        name = param.name.value
        if kind == POSONLY:
            self.report(
                param,
                f"`{name}` of `{cls}.__init__` is positional-only, but vLLM passes it by "
                f"keyword; move it after `/` and `*` (`*, {name}`)",
                site=at,
            )
            return True
        return False

    def leave_Module(self) -> None:
        for class_node, init in self._pending:
            sites = [s for s in self.ctx.prefixes.sites if any(a is init for a in s.anchors)]
            if not sites:
                continue
            site = sites[0]
            cls = class_node.name.value
            self.report(
                init.name,
                f"`{cls}.__init__` takes `vllm_config` but no `prefix`, yet builds "
                f'`{site.callee}`, which needs one; add `prefix: str = ""` after `*` and '
                "build the layers' prefixes from it",
                site=dataclasses.replace(site, anchors=anchors_to(site.anchors, init)),
            )
