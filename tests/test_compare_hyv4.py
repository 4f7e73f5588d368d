"""HY V4 (``vllm/models/hy_v4/nvidia/``) in the comparison: its learnable attention sink,
which vLLM's CPU build leaves disabled, is made and applied as a GPU applies it
(``compare/mla.py``); the names transformers' reverted conversion misplaces (``hc_pre``)
are placed where the model's loader takes them (``compare/renames.py``). Fast: both
against their definitions. Slow, on the real vLLM: HY V4 differs from transformers at
its attention by its rotary layout alone (judged in docs/precision.md): a copy of its
files rotating halves, as transformers does, compares equal, and a one-token bug planted
in that copy is PFX609 at the line that built the module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import VLLM, requires_vllm
from tests.test_compare import _introspect, _line

pytestmark = requires_vllm


def _sink_attention(dtype: torch.dtype) -> nn.Module:
    """HY V4's attention as far as the sink goes: the flag, the parameter, an MLA layer."""
    attention = nn.Module()
    attention.learnable_sink = True
    attention.learnable_sink_param = nn.Parameter(torch.full((2,), 0.5, dtype=dtype))
    attention.mla_attn = nn.Module()
    return attention


def test_a_sink_vllm_built_disabled_is_made_as_a_gpu_makes_it(monkeypatch) -> None:
    """vLLM's CPU build keeps the sink in bfloat16 and never hands it to the attention; the
    comparison makes it float32 before the load (the dtype a GPU's kernels take) and the
    reference MLA applies it. A sink with no MLA layer the reference runs stays a gap."""
    from prefixlint.introspect.compare import mla

    model = nn.ModuleDict({"on": _sink_attention(torch.bfloat16)})
    model["off"] = nn.Module()
    model["off"].learnable_sink = True
    model["off"].learnable_sink_param = nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    monkeypatch.setattr(mla, "runs", lambda layer: layer is model["on"].mla_attn)
    assert mla.enable_sinks(model) == ["off"]
    assert model["on"].learnable_sink_param.dtype == torch.float32
    found = mla.learnable_sinks(model)
    assert list(found) == [id(model["on"].mla_attn)]
    assert found[id(model["on"].mla_attn)] is model["on"].learnable_sink_param


def test_the_reference_mla_applies_a_sink_as_the_gpu_backend_does() -> None:
    """vLLM's sink-capable MLA backend rescales each head's output by
    ``exp(lse) / (exp(lse) + exp(sink))`` (``lse``: the log-sum-exp of its scores); the
    reference's softmax over the scores and the sink's logit is that, exactly."""
    from prefixlint.introspect.compare.mla import mla_forward
    from tests.test_compare_mla import _mla_layer

    layer = _mla_layer(0.5)
    n, sinks = 3, torch.tensor([0.7, -1.3])
    q, kv_c, k_pe = torch.randn(n, 2, 6), torch.randn(n, 5), torch.randn(n, 1, 2)
    plain = mla_forward(layer, q, kv_c, k_pe).view(n, 2, 3)
    sunk = mla_forward(layer, q, kv_c, k_pe, sinks=sinks).view(n, 2, 3)
    kv = layer.kv_b_proj(kv_c)[0].view(n, 2, 7)
    k = torch.cat([kv[..., :4], k_pe.expand(n, 2, 2)], -1)
    scores = torch.einsum("ihd,jhd->ihj", q, k) * 0.5
    scores = scores.masked_fill(torch.ones(n, n).triu(1).bool()[:, None], float("-inf"))
    lse = scores.logsumexp(-1)  # [tokens, heads]
    expected = plain * (lse.exp() / (lse.exp() + sinks.exp()))[..., None]
    torch.testing.assert_close(sunk, expected)
    assert (sunk - plain).abs().max() > 1e-2  # the sink is applied


def _tiny_hyv4() -> nn.Module:
    from transformers.models.hy_v4 import HYV4Config, HYV4ForCausalLM

    sizes = dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2)
    sizes.update(num_attention_heads=2, n_routed_experts=4, num_experts_per_tok=2)
    mla = dict(q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4)
    index = dict(index_head_dim=8, index_n_heads=2, index_topk=4, moe_intermediate_size=8)
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return HYV4ForCausalLM(HYV4Config(**sizes, **mla, **index, **ids, v_head_dim=4))


def test_names_transformers_reads_as_the_same_tensor_are_hy_v4_s_checkpoint_names() -> None:
    """transformers' HY V4 conversion drops ``hc_pre``; reverted, it goes back at the first
    ``.hc_``. The names one segment away that transformers reads as the same tensor hold
    the checkpoints' (``hc_attn_layer.hc_pre.hc_fn``, ``hc_head.hc_head_fn``); a name the
    conversion leaves alone has none, and one it renames without a dropped segment none."""
    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare.renames import equivalents

    renaming = vllm_api.checkpoint_renaming(_tiny_hyv4())
    assert renaming is not None
    layer = equivalents("model.layers.0.hc_pre.hc_attn_layer.hc_fn", renaming)
    assert "model.layers.0.hc_attn_layer.hc_pre.hc_fn" in layer
    assert "model.hc_head.hc_head_fn" in equivalents("model.hc_pre.hc_head.hc_head_fn", renaming)
    assert equivalents("model.layers.0.mlp.gate_proj.weight", renaming) == []
    assert equivalents("model.layers.0.self_attn.linear_gate.weight", renaming) == []


class _Loader(nn.Module):
    """A model whose loader takes its own parameter names only, and says which it took."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Module()
        self.a.hc_pre = nn.Module()
        self.a.hc_pre.w = nn.Parameter(torch.zeros(2))
        self.b = nn.Parameter(torch.zeros(2))

    def load_weights(self, weights) -> set[str]:
        params, took = dict(self.named_parameters()), set()
        for name, tensor in weights:
            if name in params:
                params[name].data.copy_(tensor)
                took.add(name)
        return took


def test_a_misplaced_name_is_replaced_by_the_equivalent_the_loader_takes(monkeypatch) -> None:
    """Only where the load left parameters unset: the name moves to the equivalent that
    fills one, and its tensor is loaded; a load that set everything is left as it is."""
    from prefixlint.introspect.compare import renames

    def renaming(key: str) -> str:  # drops ``hc_pre``, as HY V4's conversion does
        return re.sub(r"\.?hc_pre\.", ".", key).lstrip(".")

    monkeypatch.setattr(renames.vllm_api, "checkpoint_renaming", lambda _: renaming)
    model = _Loader()
    state = {"hc_pre.a.w": torch.ones(2), "b": torch.full((2,), 2.0)}
    loaded = model.load_weights(iter(state.items()))
    assert loaded == {"b"}
    out, took = renames.placed(model, nn.Module(), state, loaded)
    assert out.keys() == {"a.hc_pre.w", "b"} and took == {"a.hc_pre.w", "b"}
    assert torch.equal(model.a.hc_pre.w.data, torch.ones(2))
    assert renames.placed(model, nn.Module(), out, took) == (out, took)  # nothing unset


# -- the real HY V4 ---------------------------------------------------------------------------


def _hyv4_copy(folder: Path, edits: list[tuple[str, str, str]]) -> tuple[Path, str]:
    """HY V4's ``attention.py`` and ``model.py`` as one out-of-tree file (relative imports
    made absolute), with each (anchor, old, new) edit applied at the first ``old`` after
    ``anchor``."""
    assert VLLM is not None
    nvidia = VLLM / "models" / "hy_v4" / "nvidia"
    own = r"from vllm.models.hy_v4.nvidia.\2 import"
    absolute = re.compile(r"^(\s*)from \.(\w+) import", re.M)
    imported = re.compile(r"^from \.attention import \([^)]*\)\n", re.M)
    model = imported.sub("", (nvidia / "model.py").read_text())
    text = absolute.sub(r"\1" + own, (nvidia / "attention.py").read_text() + "\n\n" + model)
    for anchor, old, new in edits:
        at = text.index(old, text.index(anchor))
        text = text[:at] + new + text[at + len(old) :]
    path = folder / f"hyv4_{abs(hash(text)) % 10**8}.py"
    path.write_text(text)
    return path, text


def _pfx609(report) -> list[tuple[str, int]]:
    return [
        (Path(d.filename).name, d.location.row) for d in report.diagnostics if d.code == "PFX609"
    ]


ROTARY = ("self.rotary_emb = get_rope(", "is_neox_style=False", "is_neox_style=True")
ATTENTION = ("HYV4DecoderLayer", "self.self_attn = HYV4MLAAttention(")


@pytest.mark.slow
def test_hy_v4_differs_from_transformers_by_its_rotary_layout_only(worker, tmp_path) -> None:
    """As installed, HY V4's attention rotates interleaved pairs and transformers' halves
    (docs/precision.md): one PFX609, at the line that built the attention. Rotating halves
    in a copy, it compares equal; a softmax scale of the wrong head size planted in that
    copy is PFX609 at the same line."""
    assert VLLM is not None
    report = _introspect(worker, "HYV4ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "differs", result["compare"]
    assert result["compare"]["first"] == "model.layers.0.self_attn"
    text = (VLLM / "models" / "hy_v4" / "nvidia" / "model.py").read_text()
    assert _pfx609(report) == [("model.py", _line(text, *ATTENTION))]

    halves, text = _hyv4_copy(tmp_path, [ROTARY])
    report = _introspect(worker, f"{halves}:HYV4ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert _pfx609(report) == []

    scale = ("self.scaling = self.qk_head_dim**-0.5", "qk_head_dim", "v_head_dim")
    broken, text = _hyv4_copy(tmp_path, [ROTARY, scale])
    assert _pfx609(_introspect(worker, f"{broken}:HYV4ForCausalLM")) == [
        (broken.name, _line(text, *ATTENTION))
    ]


def test_no_renaming_where_transformers_has_no_conversion_mapping(monkeypatch) -> None:
    """A transformers without the conversion machinery (older layouts) renames nothing the
    comparison could place: no renaming, and ``placed`` leaves the load as it was."""
    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare import renames

    monkeypatch.setattr(vllm_api, "_module", lambda _name: None)
    assert vllm_api.checkpoint_renaming(nn.Module()) is None
    model = _Loader()
    state = {"hc_pre.a.w": torch.ones(2)}
    loaded = model.load_weights(iter(state.items()))
    assert renames.placed(model, nn.Module(), state, loaded) == (state, loaded)
