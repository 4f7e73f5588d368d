"""Quantized checkpoints through the dry-run, on copies of vLLM's files made at test time.

Issue 28: a linear layer of llama.py whose ``quant_config=quant_config`` line is removed is
found at its line statically (PFX405) and by phase 2 with an FP8 ``--checkpoint`` of a tiny
Llama (PFX702), where the checkpoint stores that layer quantized; a layer the checkpoint
leaves unquantized (its ``ignored_layers``) is fine without the config.
"""

from __future__ import annotations

import pytest

from prefixlint.introspect import introspect
from tests import tiny_checkpoints
from tests.conftest import requires_vllm
from tests.test_dryrun import (
    dry_run_diagnostics,
    filtering_llama_weights,
    findings,
    line_of,
    model_copy,
)
from tests.test_layer_configs import findings as static_findings

pytestmark = requires_vllm


def _dropped(tmp_path, cls: str, call: str, name: str):
    """llama.py without the ``quant_config=quant_config,`` line of ``call`` in ``cls``, and
    the line of the call."""
    path, text = model_copy(tmp_path, "llama", name, [])
    start = text.index(call, text.index(f"class {cls}("))
    cut = text.index("quant_config=quant_config,", start)
    text = text[:cut] + text[text.index("\n", cut) + 1 :]
    path.write_text(text)
    return path, text, line_of(text, cls, call)


def _fp8_run(worker, tmp_path, path, **checkpoint):
    folder = tiny_checkpoints.write(tmp_path / "ckpt_fp8", "fp8", **checkpoint)
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, checkpoint=str(folder)
    )
    assert report.error is None, report.error
    return report


@pytest.mark.parametrize(
    ("cls", "call", "module"),
    [
        ("LlamaAttention", "self.o_proj = RowParallelLinear(", "self_attn.o_proj"),
        ("LlamaAttention", "self.qkv_proj = QKVParallelLinear(", "self_attn.qkv_proj"),
    ],
)
def test_a_linear_layer_without_its_quant_config_is_found_with_an_fp8_checkpoint(
    worker, tmp_path, cls, call, module
) -> None:
    path, text, line = _dropped(tmp_path, cls, call, f"no_quant_{module.replace('.', '_')}")
    # statically: PFX405 at the call
    assert [(d.code, d.location.row) for d in static_findings(path, text)] == [("PFX405", line)]
    # phase 2 with the FP8 checkpoint, which stores the layer quantized: confirmed there
    report = _fp8_run(worker, tmp_path, path)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert f"`model.layers.0.{module}` is left unquantized" in diag.message, diag.message
    assert "float8_e4m3fn `weight` with `input_scale`, `weight_scale`" in diag.message
    assert "built without the `quant_config`" in diag.message
    assert diag.severity.name == "ERROR"


def test_a_layer_the_checkpoint_leaves_unquantized_needs_no_quant_config(worker, tmp_path) -> None:
    """The FP8 checkpoint's ``ignored_layers`` names every ``mlp.down_proj``: built without
    the config, it is what the checkpoint holds (the static rule still says it, for other
    checkpoints); quantizing it in the checkpoint makes it a finding."""
    call = "self.down_proj = RowParallelLinear("
    path, _, line = _dropped(tmp_path, "LlamaMLP", call, "no_quant_down")
    report = _fp8_run(worker, tmp_path / "ignored", path)
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]
    report = _fp8_run(worker, tmp_path / "quantized", path, ignored=["lm_head"])
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics


# Issue 29: quantized synthetic layouts. llama.py's `LlamaForCausalLM.load_weights` as vLLM
# wrote it before `AutoWeightsLoader` took the KV-cache scales over (and as out-of-tree
# copies still do): a hand-rolled loop with the FP8 KV-scale branch; the branch removed,
# `self_attn.k_scale` has no parameter.
KV_BRANCH = """            if "scale" in name:
                # Remapping the name of FP8 kv-scale.
                name = maybe_remap_kv_scale_name(name, params_dict)
                if name is None:
                    continue
"""
HAND_ROLLED = (
    """    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        from vllm.model_executor.model_loader.weight_utils import (
            default_weight_loader,
            maybe_remap_kv_scale_name,
        )

        stacked_params_mapping = [
            (".qkv_proj", ".q_proj", "q"),
            (".qkv_proj", ".k_proj", "k"),
            (".qkv_proj", ".v_proj", "v"),
            (".gate_up_proj", ".gate_proj", 0),
            (".gate_up_proj", ".up_proj", 1),
        ]
        params_dict = dict(self.named_parameters())
        loaded_params: set[str] = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
"""
    + KV_BRANCH
    + """            for param_name, weight_name, shard_id in stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                param = params_dict[name]
                param.weight_loader(param, loaded_weight, shard_id)
                break
            else:
                param = params_dict[name]
                weight_loader = getattr(param, "weight_loader", default_weight_loader)
                weight_loader(param, loaded_weight)
            loaded_params.add(name)
        return loaded_params
"""
)
AUTO_LOADED = (
    "    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:\n"
    """        loader = AutoWeightsLoader(self)
        return loader.load_weights(weights)
"""
)
# Mixtral's loader dropping the experts' FP8 scales (a filter meant for another format)
EXPERT_SCALES_DROPPED = (
    "MixtralModel",
    "        loader = AutoWeightsLoader(self)\n",
    "        loader = AutoWeightsLoader(self)\n"
    '        weights = ((n, w) for n, w in weights if not (".experts." in n and "_scale" in n))\n',
)


def _dry_run(worker, tmp_path, source: str, cls: str, name: str, edits=()):
    path, text = model_copy(tmp_path, source, name, list(edits))
    report = introspect(f"{path}:{cls}", tp=(1,), pp=(1,), worker=worker)
    assert report.error is None, report.error
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    return report, path, text


def test_a_hand_rolled_llama_loader_with_its_kv_scale_branch_is_clean(worker, tmp_path) -> None:
    edit = ("LlamaForCausalLM", AUTO_LOADED, HAND_ROLLED)
    report, _, _ = _dry_run(worker, tmp_path, "llama", "LlamaForCausalLM", "kv_kept", [edit])
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]


def test_a_llama_loader_without_its_kv_scale_branch_refuses_the_scales(worker, tmp_path) -> None:
    edit = ("LlamaForCausalLM", AUTO_LOADED, HAND_ROLLED.replace(KV_BRANCH, ""))
    report, path, text = _dry_run(worker, tmp_path, "llama", "LlamaForCausalLM", "kv_lost", [edit])
    # the non-stacked branch's `params_dict[name]` raises KeyError on `self_attn.k_scale`
    line = line_of(text, "LlamaForCausalLM", "weight_loader = getattr(param,") - 1
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "self_attn.k_scale" in diag.message and "FP8 checkpoint's layout" in diag.message


def test_clean_mixtral_loads_the_fp8_expert_scales(worker, tmp_path) -> None:
    report, _, _ = _dry_run(worker, tmp_path, "mixtral", "MixtralForCausalLM", "moe_clean")
    assert [d for d in dry_run_diagnostics(report) if d.code == "PFX701"] == []
    assert not any("quantized layouts" in d.message for d in report.diagnostics)


def test_a_mixtral_loader_dropping_expert_scales_is_found(worker, tmp_path) -> None:
    report, path, text = _dry_run(
        worker, tmp_path, "mixtral", "MixtralForCausalLM", "moe_drop", [EXPERT_SCALES_DROPPED]
    )
    line = line_of(text, "MixtralModel", "def load_weights(")  # the loader that drops them
    assert [f for f in findings(report) if f[0] == "PFX701"] == [("PFX701", path.name, line)]
    [diag] = [d for d in dry_run_diagnostics(report) if d.code == "PFX701"]
    assert "experts.N.w1.weight_scale" in diag.message, diag.message
    assert "w13_weight_scale" in diag.message and "w2_input_scale" in diag.message


def _toy_stream(plain):
    """An unquantized stream that wrote checkpoint layer ``0.up`` into ``plain.up.weight``."""
    from prefixlint.introspect.dryrun.streaming import Stream
    from prefixlint.introspect.dryrun.tagged import WriteRecorder

    recorder = WriteRecorder({n: (p, True) for n, p in plain.named_parameters()})
    [target] = [t for t in recorder.by_storage.values() if t.name == "up.weight"]
    recorder.mark(target, target.tensor, frozenset({"layers.0.up.weight"}))
    return Stream(recorder, complete=True)


@pytest.mark.parametrize(
    ("scale_shape", "named", "gap"),
    [
        ((), ["layers.0.up.weight_scale"], []),
        ((8,), [], ["`up.weight_scale` is not a per-tensor"]),
        ((3,), [], ["`up.weight_scale` has one scale per expert"]),
    ],
)
def test_scales_are_named_after_the_layers_written_or_said_not_made(
    scale_shape, named, gap
) -> None:
    """Synthesis reads the quantized build: a per-tensor scale is named after the checkpoint
    layer the unquantized stream wrote into the weight; a per-channel one is a gap (a
    note), never a made-up name, and so is a per-expert one where one checkpoint tensor
    holds every expert (said as such: it is per tensor, per expert)."""
    import torch
    from torch import nn

    from prefixlint.introspect.dryrun.quantlayouts import synthesise

    plain, quantized = nn.Module(), nn.Module()
    plain.up = nn.Linear(4, 8, bias=False)
    quantized.up = nn.Linear(4, 8, bias=False)
    if scale_shape == (3,):  # three experts stacked in one checkpoint tensor (GraniteMoe)
        for m in (plain.up, quantized.up):
            m.weight = nn.Parameter(torch.empty(3, 8, 4), requires_grad=False)
    quantized.up.weight_scale = nn.Parameter(torch.ones(scale_shape), requires_grad=False)
    made = synthesise(plain, quantized, _toy_stream(plain))
    assert sorted(made.tensors) == named
    assert [g for g in made.gaps if any(g.startswith(x) for x in gap)] == made.gaps
    assert len(made.gaps) == len(gap)


def test_a_loader_raising_on_every_scale_is_found_by_its_raise_alone(worker, tmp_path) -> None:
    """A loader that raises on each kind of scale stops the load after a few kinds (vLLM's
    own, as on EmbeddingGemma2's unmapped `gate_proj.input_scale`): the raise is the
    finding; the scales never fed are not said to be dropped, and the note says why."""
    edit = filtering_llama_weights('((n, w) for n, w in weights if "_scale" not in n or {}[n])')
    report, path, text = _dry_run(worker, tmp_path, "llama", "LlamaForCausalLM", "raising", [edit])
    line = line_of(text, "LlamaForCausalLM", "weights = ((n, w)")
    assert findings(report, ("PFX701",)) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = [d for d in dry_run_diagnostics(report) if d.code == "PFX701"]
    assert "raises on checkpoint tensor" in diag.message and "_scale" in diag.message
    assert not any("silently" in d.message for d in report.diagnostics)
    assert any("the load stopped" in d.message for d in report.diagnostics)


def test_a_missing_module_is_blamed_on_the_name_just_fed() -> None:
    """AutoWeightsLoader's "There is no module ... 'a.mlp.gate_proj'" is raised on the
    name just fed below that module, though a loader's frame may still hold the tensor
    before it (EmbeddingGemma2: `down_proj.weight_scale` was blamed for `gate_proj`)."""
    import torch

    from prefixlint.introspect.dryrun.streaming import _failing_name
    from prefixlint.introspect.dryrun.tagged import make

    names = ["a.mlp.down_proj.weight_scale", "a.mlp.gate_proj.input_scale"]

    def loader(held):  # a frame holding the previous tensor, as groupby's does
        raise ValueError(
            "There is no module or parameter named 'a.mlp.gate_proj' in M. The available "
            "parameters belonging to a.mlp are: {'a.mlp.down_proj.weight_scale'}"
        )

    try:
        loader(make(names[0], (), torch.float32))
    except ValueError as e:
        assert _failing_name(e, names, names[1]) == names[1]


@pytest.mark.parametrize(
    ("projection", "severity"), [("c_attn", "warning"), ("k_proj", "error"), ("qkv_proj", "error")]
)
def test_kv_scales_of_a_block_without_kv_projections_are_contested(projection, severity) -> None:
    """GPTBigCode's `attn` holds a fused `c_attn`: real FP8 tools name no KV-cache scale at
    such a block (compressed-tensors wants `k_proj`/`v_proj`/`qkv_proj`), so the drop of
    `transformer.h.0.attn.k_scale` is a warning; with a key projection, an error."""
    from torch import nn

    from prefixlint.introspect.checks import findings_of
    from prefixlint.introspect.dryrun.quantlayouts import Synthesised, _dropped, _kv_namings
    from prefixlint.introspect.dryrun.realquant import kv_cache_method

    kv_cache = kv_cache_method()
    quantized = nn.Module()
    quantized.attn = nn.Module()
    quantized.attn.proj = nn.Linear(4, 4)
    quantized.attn.attn = nn.Module()
    quantized.attn.attn.quant_method = kv_cache.__new__(kv_cache)
    made = Synthesised()
    [block, *_] = _kv_namings(quantized, {"attn.proj": [f"h.0.attn.{projection}"]}, made)
    assert sorted(block) == ["h.0.attn.k_scale", "h.0.attn.v_scale"]
    [f] = findings_of([_dropped(sorted(block), block, made.unprojected, ("m.py", 1))])
    assert (f.severity, "a warning" in f.message) == (severity, severity == "warning")


@pytest.mark.parametrize(("attn_type", "named"), [("encoder_only", 0), ("decoder", 2)])
def test_an_encoder_attention_gets_no_kv_cache_scales(attn_type, named) -> None:
    """NomicBert's encoder-only attention caches nothing, so no FP8 checkpoint holds its
    `k_scale`/`v_scale` although `Fp8Config` gives it a KV-cache method."""
    from torch import nn

    from prefixlint.introspect.dryrun.quantlayouts import Synthesised, _kv_namings
    from prefixlint.introspect.dryrun.realquant import kv_cache_method

    kv_cache = kv_cache_method()
    quantized = nn.Module()
    quantized.attn = nn.Module()
    quantized.attn.k_proj = nn.Linear(4, 4)
    quantized.attn.attn = nn.Module()
    quantized.attn.attn.quant_method = kv_cache.__new__(kv_cache)
    quantized.attn.attn.attn_type = attn_type
    namings = _kv_namings(quantized, {"attn.k_proj": ["h.0.attn.k_proj"]}, Synthesised())
    assert sum(len(n) for n in namings[:1]) == named
