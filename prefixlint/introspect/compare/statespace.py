"""State-space layers for the comparison: vLLM's Mamba mixers run a reference recurrence
in torch over one sequence from a zero state, instead of their kernels.

vLLM's ``MambaMixer`` and ``MambaMixer2`` compute their causal convolution and selective
scan in kernels (``causal_conv1d_fn``, ``selective_scan_fn``, ``mamba_chunk_scan_combined``)
that read an engine's state cache and metadata. Only that part is replaced: the layer's
own projections, norms and gating run as vLLM wrote them, and the reference reads the
layer's own parameters as vLLM holds them (``A`` already ``-exp(A_log)``, ``D``,
``dt_bias``, ``conv1d``). What the model author passes to the layer (sizes, groups, heads,
the norm's eps, ``use_rms_norm``, the activation) changes the output here as in the engine.
The math is the papers' recurrence, as transformers' torch paths spell it
(``transformers/models/mamba``, ``mamba2``); at 9 tokens a loop costs nothing
(docs/compare.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from prefixlint.introspect import vllm_api


def causal_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: Any
) -> torch.Tensor:
    """Depthwise causal convolution of ``x`` [tokens, channels] with ``weight``
    [channels, width] from a zero state, then the activation (``silu``/``swish`` or none)."""
    tokens, channels = x.shape
    width = weight.shape[-1]
    padded = F.conv1d(
        x.t().float()[None], weight.float()[:, None, :], bias, padding=width - 1, groups=channels
    )
    out = padded[0, :, :tokens].t().contiguous()  # CPU linears read rows (x_proj)
    if activation not in (None, "silu", "swish"):  # vLLM's kernels take no other
        raise ValueError(f"causal_conv1d: activation {activation!r}")
    return out if activation is None else F.silu(out)


def selective_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    d: torch.Tensor | None,
) -> torch.Tensor:
    """The selective-scan recurrence from a zero state. ``x`` [tokens, heads, head_dim];
    ``dt`` [tokens, heads] (after softplus); ``a`` [heads, state] (Mamba 1) or [heads, 1]
    (Mamba 2: one decay per head); ``b``, ``c`` [tokens, heads, state]; ``d`` [heads].
    ``h = exp(dt a) h + dt x b``, ``y = h c + d x``."""
    tokens, heads, head_dim = x.shape
    state = x.new_zeros(heads, head_dim, b.shape[-1], dtype=torch.float32)
    out = []
    for t in range(tokens):
        decay = torch.exp(dt[t, :, None] * a)[:, None, :]
        state = state * decay + (dt[t, :, None, None] * x[t, :, :, None]) * b[t, :, None, :]
        out.append((state * c[t, :, None, :]).sum(-1))
    y = torch.stack(out)
    return y if d is None else y + d.float()[None, :, None] * x


def mamba1_forward(layer: Any, hidden_states: torch.Tensor, output: torch.Tensor) -> None:
    """``MambaMixer.forward_impl`` (vLLM 0.32) for one prefill from a zero state:
    ``in_proj``, the convolution, the layer's own ``_ssm_transform`` (``x_proj``, its
    optional norms, ``dt_proj`` without bias), the scan with ``dt_proj``'s bias under
    softplus, the gate, ``out_proj``."""
    x, gate = layer.in_proj(hidden_states)[0].chunk(2, dim=-1)
    weight = layer.conv1d.weight.view(layer.conv1d.weight.size(0), -1)
    x = causal_conv(x, weight, layer.conv1d.bias, layer.activation)
    dt, b, c = layer._ssm_transform(x)
    dt = dt.transpose(-2, -1).float()  # the layer hands it channels first, as the kernel reads
    bias = layer._time_proj_bias()
    dt = F.softplus(dt if bias is None else dt + bias)
    tokens, channels = x.shape
    y = selective_scan(
        x.float()[:, :, None],
        dt,
        layer.A.float(),
        b.float()[:, None, :].expand(tokens, channels, -1),
        c.float()[:, None, :].expand(tokens, channels, -1),
        layer.D,
    )[:, :, 0]
    y = y * F.silu(gate.float())
    output[:tokens] = layer.out_proj(y.to(hidden_states.dtype))[0]


def mamba2_conv_ssm(layer: Any, projected_states: torch.Tensor, output: torch.Tensor) -> None:
    """``MambaMixer2.conv_ssm_forward`` (vLLM 0.32) for one prefill from a zero state: the
    convolution of ``(x, B, C)`` with the layer's ``conv_weights``, then the scan with
    ``dt + dt_bias`` under softplus (``dt_limit`` (0, inf)) and one decay ``A`` per head,
    B and C shared by the heads of a group; written into ``output`` as the kernel does."""
    xbc, dt = torch.split(
        projected_states[..., layer.tped_intermediate_size :],
        [layer.tped_conv_size, layer.tped_dt_size],
        dim=-1,
    )
    xbc = causal_conv(xbc, layer.conv_weights, layer.conv1d.bias, layer.activation)
    x, b, c = layer.split_hidden_states_B_C_fn(xbc)
    tokens = x.shape[0]
    heads = layer.num_heads // layer.tp_size
    groups = layer.n_groups // layer.tp_size
    b = b.float().view(tokens, groups, -1).repeat_interleave(heads // groups, dim=1)
    c = c.float().view(tokens, groups, -1).repeat_interleave(heads // groups, dim=1)
    dt = F.softplus(dt.float() + layer.dt_bias.float())
    x = x.float().view(tokens, heads, layer.head_dim)
    y = selective_scan(x, dt, layer.A.float()[:, None], b, c, layer.D)
    output[:tokens] = y.reshape(tokens, -1).to(output.dtype)


def short_conv_forward(layer: Any, hidden_states: torch.Tensor, output: torch.Tensor) -> None:
    """``ShortConv.forward_native`` / ``forward_cuda`` (vLLM 0.32) for one prefill from a
    zero state: ``B, C, x = in_proj``, the convolution of ``B * x`` without activation,
    gated by ``C``, then ``out_proj``."""
    b, c, x = layer.in_proj(hidden_states)[0].chunk(3, dim=-1)
    weight = layer.conv.weight.view(layer.conv.weight.size(0), -1)
    conv = causal_conv((b * x).float(), weight, layer.conv.bias, None)
    out = layer.out_proj((c.float() * conv).to(hidden_states.dtype))[0]
    output[: hidden_states.shape[0]] = out


def gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """The gated delta rule from a zero state, with the kernels' L2 norm of q and k and
    the ``1/sqrt(d_k)`` scale of q. ``q``, ``k`` [tokens, heads, d_k] (heads as many as
    ``v``'s), ``v`` [tokens, heads, d_v], ``g`` (log decay) and ``beta`` [tokens, heads].
    ``S = exp(g) S``, ``S += k (beta (v - k S))``, ``o = q S``."""
    q = _l2norm(q.float()) * q.shape[-1] ** -0.5
    k = _l2norm(k.float())
    v = v.float()
    state = q.new_zeros(q.shape[1], q.shape[2], v.shape[2])
    out = []
    for t in range(q.shape[0]):
        state = state * torch.exp(g[t].float())[:, None, None]
        recalled = torch.einsum("hk,hkv->hv", k[t], state)
        delta = (v[t] - recalled) * beta[t].float()[:, None]
        state = state + k[t][:, :, None] * delta[:, None, :]
        out.append(torch.einsum("hk,hkv->hv", q[t], state))
    return torch.stack(out)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """As FLA's kernels (and transformers' ``l2norm``): ``x / sqrt(sum x^2 + 1e-6)``."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def _gdn_core(layer: Any, mixed_qkv: torch.Tensor, beta: torch.Tensor, a: torch.Tensor) -> Any:
    """The convolution of ``(q, k, v)``, the layer's own split into heads (its
    ``rearrange_mixed_qkv``), query/key heads repeated for the value heads, the decay
    ``-exp(A_log) softplus(a + dt_bias)``, the delta rule."""
    weight = layer.conv1d.weight.view(layer.conv1d.weight.size(0), -1)
    conv = causal_conv(mixed_qkv.float(), weight, layer.conv1d.bias, layer.activation)
    q, k, v = (t[0] for t in layer.rearrange_mixed_qkv(conv.to(mixed_qkv.dtype)))
    ratio = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(ratio, dim=1), k.repeat_interleave(ratio, dim=1)
    g = -torch.exp(layer.A_log.float()) * F.softplus(a.float() + layer.dt_bias.float())
    return gated_delta_rule(q, k, v, g, beta)


def qwen_gdn_core(
    mixed_qkv: torch.Tensor,
    b: torch.Tensor,
    a: torch.Tensor,
    core_attn_out: torch.Tensor,
    layer_name: Any,
) -> None:
    """vLLM's CPU op ``cpu_gdn_attention_core`` (0.32, called by
    ``QwenGatedDeltaNetAttention.forward_cpu``) for one prefill from a zero state:
    ``beta = sigmoid(b)``."""
    layer = vllm_api.forward_context_layer(layer_name)
    out = _gdn_core(layer, mixed_qkv, torch.sigmoid(b.float()), a)
    core_attn_out[: out.shape[0]] = out.to(core_attn_out.dtype)


def olmo_gdn_core(
    layer: Any, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: Any
) -> None:
    """``OlmoHybridGatedDeltaNetAttention._forward_core`` (0.32) for one prefill from a
    zero state: ``beta = sigmoid(b)``, doubled with ``allow_neg_eigval``
    (``fused_olmo_hybrid_gdn_gating``)."""
    beta = torch.sigmoid(b.float()) * (2.0 if layer.allow_neg_eigval else 1.0)
    out = _gdn_core(layer, mixed_qkv, beta, a)
    core_attn_out[: out.shape[0]] = out.to(core_attn_out.dtype)


# (layer class name, a method whose kernels the reference replaces, the reference)
_REFERENCES = (
    ("MambaMixer", "forward_impl", mamba1_forward),
    ("MambaMixer2", "conv_ssm_forward", mamba2_conv_ssm),
    ("ShortConv", "forward_native", short_conv_forward),  # vLLM's custom op on the CPU
    ("ShortConv", "forward_cuda", short_conv_forward),  # and elsewhere
    ("OlmoHybridGatedDeltaNetAttention", "_forward_core", olmo_gdn_core),
)
# (layer class name, its method that calls the op, vLLM's custom op, the reference): the
# method is bound at construction (``_forward_method``), so the op it calls is replaced
_OPS = (("QwenGatedDeltaNetAttention", "forward_cpu", "cpu_gdn_attention_core", qwen_gdn_core),)


def runs(module: torch.nn.Module) -> bool:
    """Whether a reference above stands in for ``module``'s kernels: it is one of the
    layers, its class has not replaced a method the references replace, and a layer that
    dispatches through ``_forward_method`` dispatches to the method that calls the op."""
    found = False
    for name, method, *_ in (*_REFERENCES, *_OPS):
        cls = vllm_api.statespace_layer(name)
        if cls is None or not isinstance(module, cls):
            continue
        if getattr(type(module), method, None) is not getattr(cls, method, None):
            return False
        found = True
    for name, method, *_ in _OPS:
        cls = vllm_api.statespace_layer(name)
        if cls is not None and isinstance(module, cls):
            bound = getattr(module, "_forward_method", None)
            found = found and getattr(bound, "__func__", None) is getattr(cls, method)
    return found


@contextlib.contextmanager
def reference_statespace() -> Iterator[None]:
    """The layers' kernel-backed methods (the class attribute: vLLM's custom ops look the
    method up on the layer) and ops are the references above while the comparison runs."""
    patched: list[tuple[type, str, Any]] = []
    with contextlib.ExitStack() as stack:
        for _, _, op, reference in _OPS:
            stack.enter_context(vllm_api.custom_op_replaced(op, reference))
        try:
            for name, method, reference in _REFERENCES:
                cls = vllm_api.statespace_layer(name)
                if cls is None or not hasattr(cls, method):
                    continue
                patched.append((cls, method, cls.__dict__.get(method)))
                setattr(cls, method, reference)
            yield
        finally:
            for cls, method, original in reversed(patched):
                if original is None:  # inherited: the base's comes back
                    delattr(cls, method)
                else:
                    setattr(cls, method, original)


def _grouped_gated_norm(norm: Any, groups: int) -> Any:
    """The gated RMSNorm of Mamba 2 as its authors wrote it (``mamba_ssm``'s
    ``RMSNormGated(group_size=d_ssm // ngroups)``, transformers' own fused path
    ``mamba_split_conv1d_scan_combined(ngroups=...)``): gate, then one RMS per group."""

    def forward(hidden_states: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        dtype = hidden_states.dtype
        x = hidden_states.float()
        if gate is not None:
            x = x * F.silu(gate.float())
        x = x.unflatten(-1, (groups, -1))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * x.flatten(-2).to(dtype)

    return forward


@contextlib.contextmanager
def reference_mixers(reference: torch.nn.Module, tokens: int) -> Iterator[None]:
    """transformers' Mamba 2 mixers as the comparison runs them, each change the same
    math (docs/compare.md):
    - one chunk of ``tokens`` for the chunked scan: its default chunk of 256 pads 9 tokens
      to 256 and costs 8 s on two cores (FalconH1); the chunking does not change the sum;
    - a gated norm that ignores ``n_groups`` (``MambaRMSNormGated`` of Mamba 2 and
      GraniteMoeHybrid in their torch path) normalises per group, as their CUDA path,
      ``mamba_ssm`` and vLLM's ``Mixer2RMSNormGated`` do (docs/precision.md);
    - a lower bound of ``dt`` that is the initialiser's ``time_step_min`` (Zamba2's mixer,
      whose config has no runtime bound) is lifted, as the authors' code and vLLM's
      ``MambaMixer2`` run it (``dt_limit`` (0, inf); docs/precision.md)."""
    saved: list[tuple[Any, str, Any]] = []  # (object, attribute, value before; None: none)
    for module in reference.modules():
        if _initialiser_bound(module):
            saved.append((module, "time_step_limit", module.time_step_limit))
            module.time_step_limit = (0.0, float("inf"))
        chunk = getattr(module, "chunk_size", None)
        if isinstance(chunk, int) and chunk > tokens and hasattr(module, "ssm_state_size"):
            saved.append((module, "chunk_size", chunk))
            module.chunk_size = tokens
        groups, norm = getattr(module, "n_groups", 1), getattr(module, "norm", None)
        if _ungrouped_gated_norm(norm) and isinstance(groups, int) and groups > 1:
            saved.append((norm, "forward", None))
            norm.forward = _grouped_gated_norm(norm, groups)
    try:
        yield
    finally:
        for owner, attribute, value in reversed(saved):
            if value is None:
                delattr(owner, attribute)  # the class's comes back
            else:
                setattr(owner, attribute, value)


def _initialiser_bound(mixer: Any) -> bool:
    """A mixer that clamps ``dt`` below at its config's ``time_step_min``, the range
    ``dt_bias`` is initialised from, while the config declares no ``time_step_limit``
    (transformers' Zamba2: ``time_step_limit = (config.time_step_min, inf)``). A bound a
    config states (Mamba 2's ``time_step_limit``) is the checkpoint's and stays."""
    limit, config = getattr(mixer, "time_step_limit", None), getattr(mixer, "config", None)
    if not isinstance(limit, tuple) or len(limit) != 2 or config is None:
        return False
    low = getattr(config, "time_step_min", None)
    stated = hasattr(config, "time_step_limit")
    return isinstance(low, float) and low > 0 and limit[0] == low and not stated


def _ungrouped_gated_norm(norm: Any) -> bool:
    """A gated RMSNorm that knows no groups (FalconH1's and Zamba2's group themselves)."""
    if norm is None or "Gated" not in type(norm).__name__:
        return False
    grouped = any(hasattr(norm, a) for a in ("n_groups", "group_size"))
    return hasattr(norm, "variance_epsilon") and not grouped
