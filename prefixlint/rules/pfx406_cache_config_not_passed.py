"""PFX406 cache-config-not-passed."""

from __future__ import annotations

from prefixlint.diagnostic import Severity
from prefixlint.static.layer_configs import (
    CACHE_CONFIG,
    Reach,
    builds_layer,
    callee_symbols,
    config_fix,
    cut_off,
    omitted,
)
from prefixlint.static.model_classes import other_vllm
from prefixlint.static.prefix_sites import Site, is_layer_site
from prefixlint.static.rule import CONTRACT, PREFIX_CALLS, Invalid, LintRule, example
from prefixlint.static.vllm_facts import owns_engine_cache

_EFFECT = (
    "the KV-cache dtype the user chose (`--kv-cache-dtype`) and the config's sliding "
    "window are ignored, so the cache is kept in the model's dtype"
)


class CacheConfigNotPassed(LintRule):
    """
    ## What it does
    Checks that a layer whose constructor takes `cache_config` (vLLM's `Attention` and the
    other layers that own an engine cache, and the model's own blocks that build them)
    gets it, where the constructing code has one in reach: a `cache_config` parameter or
    local, `self.cache_config`, or `vllm_config`.

    ## Why is this bad?
    `Attention` reads the KV-cache dtype and the model-wide sliding window from its
    `cache_config`. Built without it, the layer keeps its cache in the model's dtype
    whatever the user asked for (`--kv-cache-dtype fp8` is silently ignored: twice the
    memory, fewer requests in flight), skips the layers the user excluded from cache
    quantization, and loses the config's sliding window. Nothing fails: the model runs,
    slower and larger than configured. It is an error for a layer that owns an engine
    cache and for a block that builds one, a warning otherwise. Passing
    `cache_config=None` is a choice and is never reported.

    ## Example
    ```python
    self.attn = Attention(num_heads, head_dim, scale, num_kv_heads=num_kv_heads,
                          quant_config=quant_config, prefix=f"{prefix}.attn")
    ```

    Use instead:
    ```python
    self.attn = Attention(num_heads, head_dim, scale, num_kv_heads=num_kv_heads,
                          cache_config=cache_config, quant_config=quant_config,
                          prefix=f"{prefix}.attn")
    ```
    """

    code = "PFX406"
    triggers = (PREFIX_CALLS,)
    applies_to = CONTRACT

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, heads, head_dim, cache_config=None, prefix: str = ""):
        super().__init__()
        self.attn = Attention(heads, head_dim, 1.0, cache_config=cache_config,
                              prefix=f"{prefix}.attn")
"""
        ),
        example(
            """
class Attn(nn.Module):
    def __init__(self, heads, head_dim, prefix: str = ""):
        super().__init__()
        # no cache config in reach: nothing to pass
        self.attn = Attention(heads, head_dim, 1.0, prefix=f"{prefix}.attn")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, heads, head_dim, cache_config=None, prefix: str = ""):
        super().__init__()
        self.attn = Attention(
            heads, head_dim, 1.0, prefix=f"{prefix}.attn"
        )
"""
            ),
            line=5,
            contains="KV-cache dtype",
            fixed="""
class Attn(nn.Module):
    def __init__(self, heads, head_dim, cache_config=None, prefix: str = ""):
        super().__init__()
        self.attn = Attention(
            heads, head_dim, 1.0, prefix=f"{prefix}.attn", cache_config=cache_config
        )
""",
        ),
        Invalid(
            example(
                """
class Layer(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.attn = Attention(
            8,
            64,
            1.0,
            prefix=f"{prefix}.attn",
        )
"""
            ),
            line=5,
            contains="vllm_config.cache_config",
            fixed="""
class Layer(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.attn = Attention(
            8,
            64,
            1.0,
            prefix=f"{prefix}.attn",
            cache_config=vllm_config.cache_config,
        )
""",
        ),
    ]

    def leave_Module(self) -> None:
        reach = Reach()
        for site in self.ctx.prefixes.sites:
            if not is_layer_site(site):
                continue
            if not omitted(site, CACHE_CONFIG):
                self._cut_off(site, reach)
                continue
            expression = reach.expression(site, CACHE_CONFIG, self._attributes(site))
            if expression is None:
                continue
            severity, why = self._judge(site)
            self.report(
                site.call,
                f"`{site.callee}` is built without `cache_config` while `{expression}` is in "
                f"reach{why}",
                severity=severity,
                site=site,
                fix=lambda site=site, e=expression: config_fix(site, CACHE_CONFIG, e),
            )

    def _attributes(self, site: Site) -> set[str]:
        cls = site.scope.class_node
        summary = self.ctx.summary.classes.get(cls.name.value) if cls is not None else None
        return summary.attributes if summary is not None else set()

    def _cut_off(self, site: Site, reach: Reach) -> None:
        """A class of this file that takes no ``cache_config``, built where one is in
        reach: the attention layers it builds can never get it."""
        inner = [
            s
            for s in cut_off(self.ctx.prefixes.sites, site, CACHE_CONFIG)
            if reach.expression(s, CACHE_CONFIG, self._attributes(s)) is None
        ]
        expression = reach.expression(site, CACHE_CONFIG, self._attributes(site)) if inner else None
        if expression is None:
            return
        severity, why = self._judge(site)
        if any(self.ctx.owns_cache(s.callee) for s in inner):  # read with vLLM's fallbacks
            severity, why = Severity.ERROR, f": in the attention layers it builds, {_EFFECT}"
        layers = ", ".join(sorted({f"`{s.callee}`" for s in inner}))
        self.report(
            site.call,
            f"`{site.callee}` takes no `cache_config`, so the {layers} it builds never get one, "
            f"while `{expression}` is in reach here{why}; give `{site.callee}` a "
            f"`cache_config` parameter and pass it on{other_vllm(self.ctx)}",
            severity=severity,
            site=site,
        )

    def _judge(self, site: Site) -> tuple[Severity, str]:
        """An error where the callee owns an engine cache or builds one, else a warning."""
        resolver, summary = self.ctx.resolver, self.ctx.summary
        symbols = callee_symbols(resolver, summary, site)
        effect = _EFFECT
        if any(owns_engine_cache(resolver, s) for s in symbols):
            return Severity.ERROR, f": {effect}"
        if any(
            builds_layer(resolver, s, lambda s: owns_engine_cache(resolver, s)) for s in symbols
        ):
            return Severity.ERROR, f": in the attention layers it builds, {effect}"
        return Severity.WARNING, (
            " (a warning: it builds no layer known to own an engine cache, but takes the "
            "config to pass on)"
        )
