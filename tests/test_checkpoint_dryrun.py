"""The dry-run against a real checkpoint (``--checkpoint``), with the real installed vLLM:
tiny checkpoints written here (unquantized, FP8 with ``ignored_layers``, compressed-tensors
with ``ignore``) verify clean on a copy of vLLM's llama.py, and copies with one planted
defect give the finding at the planted line. One worker serves the module."""

from __future__ import annotations

import pytest

from prefixlint.introspect import introspect
from tests import tiny_checkpoints
from tests.conftest import requires_vllm
from tests.test_dryrun import dry_run_diagnostics, findings, line_of, model_copy

pytestmark = requires_vllm

KINDS = ["plain", "fp8", "compressed", "awq", "w4a16"]
QUANTIZED = ["fp8", "compressed"]

# (a) the MLP built under another name than its attribute: the checkpoint's ignore list
# names `mlp.down_proj`, the layer's prefix says `feed_forward.down_proj`
MLP_RENAMED = ("LlamaDecoderLayer", 'prefix=f"{prefix}.mlp",', 'prefix=f"{prefix}.feed_forward",')
# (b) the head skipped whatever the config says (right for tied embeddings only)
HEAD_SKIPPED = (
    "LlamaForCausalLM",
    "        loader = AutoWeightsLoader(self)\n",
    "        loader = AutoWeightsLoader(self)\n"
    '        weights = ((n, w) for n, w in weights if not n.startswith("lm_head."))\n',
)
# (c) a stacked-params shard typo
SHARD_TYPO = ("LlamaModel", '".v_proj": (".qkv_proj", "v"),', '".v_proj": (".qkv_proj", "k"),')
# a fused layer built without the quantization config the checkpoint was made for
NO_QUANT_CONFIG = ("LlamaMLP", "quant_config=quant_config,", "quant_config=None,")


def run(worker, tmp_path, kind: str, edits=(), name: str = "copy", **checkpoint):
    folder = tiny_checkpoints.write(tmp_path / f"ckpt_{kind}", kind, **checkpoint)
    path, text = model_copy(tmp_path, "llama", name, list(edits))
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, checkpoint=str(folder)
    )
    assert report.error is None, report.error
    return report, path, text


@pytest.mark.parametrize("kind", KINDS)
def test_the_clean_model_verifies_clean_on_each_checkpoint(worker, tmp_path, kind) -> None:
    report, _, _ = run(worker, tmp_path, kind, name=f"clean_{kind}")
    [result] = report.results
    assert result["config_source"].startswith("checkpoint "), result["config_source"]
    assert result["dryrun"] == "verified", result["dryrun_reason"]
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]
    reason = result["dryrun_reason"]
    assert "tensors from the headers of 1 safetensors file" in reason
    if kind == "plain":
        assert "synthetic `Fp8Config`" in reason
    else:  # built under the checkpoint's own config, its ignore list as vLLM read it
        method = {
            "fp8": "`fp8`, `ignored_layers` `lm_head`",
            "compressed": "`compressed-tensors`, `ignore` `lm_head`",
            "awq": "`awq`, `modules_to_not_convert` `down_proj`",
            "w4a16": "`compressed-tensors`, `ignore` `lm_head`",
        }
        assert f"vLLM's {method[kind]}" in reason, reason


@pytest.mark.parametrize("kind", QUANTIZED)
def test_an_mlp_under_another_name_quantizes_its_ignored_down_proj(worker, tmp_path, kind) -> None:
    report, path, text = run(worker, tmp_path, kind, [MLP_RENAMED], f"mlp_{kind}")
    line = line_of(text, "LlamaDecoderLayer", "self.mlp = LlamaMLP(")
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [quant] = dry_run_diagnostics(report)
    message = quant.message
    assert "`model.layers.0.mlp.down_proj` is quantized" in message
    assert "stores it unquantized" in message and "bfloat16 `weight`, no scales" in message
    assert "prefix `model.layers.0.feed_forward.down_proj`" in message
    # what follows from it is in the same finding, not more findings elsewhere
    assert "`input_scale`, `weight_scale` stay unwritten" in message


@pytest.mark.parametrize("kind", ["plain", "fp8"])
def test_an_unconditional_head_skip_leaves_the_untied_head_unloaded(worker, tmp_path, kind) -> None:
    report, path, text = run(worker, tmp_path, kind, [HEAD_SKIPPED], f"head_{kind}")
    line = line_of(text, "LlamaForCausalLM", 'if not n.startswith("lm_head.")')
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "`lm_head.weight` is never loaded" in diag.message and "stays random" in diag.message


def test_the_same_skip_is_fine_on_a_tied_checkpoint(worker, tmp_path) -> None:
    report, _, _ = run(worker, tmp_path, "fp8", [HEAD_SKIPPED], "head_tied", tie=True)
    assert report.results[0]["dryrun"] == "verified"
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]


# AWQ packs its output dimension (``qweight`` is (in, out / 8)): its shards are not told
# apart, so the typo is reported at the fused layer, not at the entry (not judged here)
@pytest.mark.parametrize("kind", ["plain", "fp8", "compressed", "w4a16"])
def test_a_stacked_shard_typo_is_reported_at_the_entry(worker, tmp_path, kind) -> None:
    report, path, text = run(worker, tmp_path, kind, [SHARD_TYPO], f"typo_{kind}")
    line = line_of(text, "LlamaModel", SHARD_TYPO[2])
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "shard `v` of `model.layers.0.self_attn.qkv_proj.weight" in diag.message
    if kind in ("fp8", "compressed"):  # per-shard scales miss the same slot, by the entry
        assert "that shard's slot of its `input_scale`, `weight_scale`" in diag.message
    if kind == "w4a16":  # per-group scales miss the same rows
        assert "qkv_proj.weight_packed`" in diag.message
        assert "so is the same part of its `weight_scale`" in diag.message


@pytest.mark.parametrize(
    ("kind", "held"),
    [
        ("fp8", "float8_e4m3fn `weight` with `input_scale`, `weight_scale`"),
        ("awq", "with `qweight`, `qzeros`, `scales`"),
    ],
)
def test_a_layer_built_without_the_quant_config_is_left_unquantized(
    worker, tmp_path, kind, held
) -> None:
    report, path, text = run(worker, tmp_path, kind, [NO_QUANT_CONFIG], f"no_quant_{kind}")
    line = line_of(text, "LlamaMLP", "self.gate_up_proj = MergedColumnParallelLinear(")
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "`model.layers.0.mlp.gate_up_proj` is left unquantized" in diag.message
    assert held in diag.message, diag.message
    assert "built without the `quant_config`" in diag.message


# a layer built with torch's own `nn.Linear`, which no quantization config reaches
TORCH_LINEAR = (
    "LlamaMLP",
    """        self.down_proj = RowParallelLinear(
            input_size=intermediate_size,
            output_size=hidden_size,
            bias=bias,
            quant_config=quant_config,
            reduce_results=reduce_results,
            disable_tp=disable_tp,
            prefix=f"{prefix}.down_proj",
        )""",
    "        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)",
)


def test_a_torch_linear_gets_the_checkpoints_fp8_values_cast(worker, tmp_path) -> None:
    report, path, text = run(
        worker, tmp_path, "fp8", [TORCH_LINEAR], "torch_linear", ignored=["lm_head"]
    )
    line = line_of(text, "LlamaMLP", TORCH_LINEAR[2].strip())
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "`model.layers.0.mlp.down_proj` is left unquantized" in diag.message
    assert "built as torch's `Linear`, which no quantization config reaches" in diag.message


def test_a_quantized_weight_of_another_dtype_than_the_methods_is_cast(worker, tmp_path) -> None:
    """The method agrees (both quantized), the stored values do not: int8 codes written
    into a float8 weight are cast, not read as float8."""
    stored_as = {"self_attn.o_proj.weight": "int8"}
    report, path, text = run(worker, tmp_path, "fp8", name="int8_o", stored_as=stored_as)
    line = line_of(text, "LlamaAttention", "self.o_proj = RowParallelLinear(")
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert diag.message.startswith(
        "checkpoint tensor `model.layers.0.self_attn.o_proj.weight` (int8) is written into "
        "`model.layers.0.self_attn.o_proj.weight` (float8_e4m3fn)"
    ), diag.message


def test_a_quantized_head_vllm_cannot_quantize_is_named_at_the_head(worker, tmp_path) -> None:
    report, path, text = run(worker, tmp_path, "fp8", name="head_fp8", quantize_head=True)
    line = line_of(text, "LlamaForCausalLM", "self.lm_head = ParallelLMHead(")
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "`lm_head` is left unquantized" in diag.message
    assert "has no quantized method for a `ParallelLMHead`" in diag.message


def test_a_checkpoint_quantizing_part_of_a_fused_layer_is_found_at_the_mapping(
    worker, tmp_path
) -> None:
    """vLLM refuses to build a fused `qkv_proj` whose `q_proj` the checkpoint leaves
    unquantized: a finding at `packed_modules_mapping`, not a gap of this machine."""
    ignored = ["lm_head", "model.layers.0.self_attn.q_proj"]
    report, path, text = run(worker, tmp_path, "fp8", name="mixed", ignored=ignored)
    line = line_of(text, "LlamaForCausalLM", "packed_modules_mapping = {")
    assert findings(report) == [("PFX702", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "model.layers.0.self_attn.qkv_proj" in diag.message and "same precision" in diag.message


def test_kv_cache_scales_are_judged_only_where_the_checkpoint_has_them(worker, tmp_path) -> None:
    """vLLM fills the KV-cache scales a checkpoint lacks; one that stores them for some
    layers only leaves the others' unwritten."""
    report, _, _ = run(worker, tmp_path / "all", "fp8", name="kv_all", kv_scales=(0, 1))
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]
    report, path, text = run(worker, tmp_path / "some", "fp8", name="kv_some", kv_scales=(0,))
    line = line_of(text, "LlamaAttention", "self.attn = attn_cls(")
    assert set(findings(report)) == {("PFX701", path.name, line)}, report.diagnostics
    messages = " ".join(d.message for d in dry_run_diagnostics(report))
    assert "`model.layers.1.self_attn.attn.k_scale` is never written" in messages
    assert "layers.0.self_attn.attn.k_scale" not in messages


def test_config_overrides_the_checkpoints_and_a_truncated_load_is_found(worker, tmp_path) -> None:
    """``--config`` is the build config over the checkpoint's own. Its MLP is narrower
    than the checkpoint's: vLLM's sharded loaders narrow each checkpoint tensor to the
    shard the parameter has room for, so the load truncates silently; each tensor loaded
    in part is reported at the layer that is too small."""
    folder = tiny_checkpoints.write(tmp_path / "ckpt", "fp8")
    narrow = tmp_path / "narrow"
    tiny_checkpoints.llama_config(intermediate_size=96).save_pretrained(narrow)
    path, text = model_copy(tmp_path, "llama", "narrow_mlp", [])
    report = introspect(
        f"{path}:LlamaForCausalLM",
        tp=(1,),
        pp=(1,),
        worker=worker,
        config=str(narrow),
        checkpoint=str(folder),
    )
    [result] = report.results
    assert result["config_source"].startswith("file "), result["config_source"]
    gate_up = line_of(text, "LlamaMLP", "self.gate_up_proj = MergedColumnParallelLinear(")
    down = line_of(text, "LlamaMLP", "self.down_proj = RowParallelLinear(")
    assert set(findings(report)) == {("PFX701", path.name, gate_up), ("PFX701", path.name, down)}
    messages = [d.message for d in dry_run_diagnostics(report)]
    for layer, read in (("gate_proj", 6144), ("up_proj", 6144), ("down_proj", 6144)):
        expected = (
            f"only {read} of the 8192 elements of checkpoint tensor `model.layers.0.mlp.{layer}"
        )
        assert any(m.startswith(expected) for m in messages), messages


def test_a_method_vllm_cannot_build_here_is_not_verified(worker, tmp_path) -> None:
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": []}
    report, _, _ = run(worker, tmp_path, "plain", name="nvfp4", quantization=nvfp4)
    [result] = report.results
    assert result["status"] == "built" and result["dryrun"] == "not verified"
    [note] = dry_run_diagnostics(report)
    assert note.code == "PFX600" and note.severity.value == "note"
    assert "cannot build `modelopt_fp4` layers on this machine" in note.message


def test_a_sharded_checkpoint_and_its_hub_manifest_verify_alike(worker, tmp_path) -> None:
    from prefixlint.introspect.targets import checkpoint as ck

    report, _, _ = run(worker, tmp_path, "fp8", [MLP_RENAMED], "sharded", shards=3)
    sharded = [(d.code, d.location.row, d.message) for d in dry_run_diagnostics(report)]
    assert "headers of 3 safetensors files" in report.results[0]["dryrun_reason"]
    local = ck.read(str(tmp_path / "ckpt_fp8"))
    manifest = ck.write_manifest(
        str(tmp_path / "hub"),
        "org/tiny",
        (tmp_path / "ckpt_fp8/config.json").read_text(),
        local.files,
        local.tensors,
    )
    path, _ = model_copy(tmp_path, "llama", "sharded", [MLP_RENAMED])
    hub = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, checkpoint=manifest
    )
    assert [(d.code, d.location.row, d.message) for d in dry_run_diagnostics(hub)] == sharded
    assert "`org/tiny`" in hub.results[0]["dryrun_reason"]


def run_moe(worker, tmp_path, name: str, edits=(), **checkpoint):
    folder = tiny_checkpoints.write_moe(tmp_path / f"ckpt_{name}", **checkpoint)
    path, text = model_copy(tmp_path, "qwen2_moe", name, list(edits))
    report = introspect(
        f"{path}:Qwen2MoeForCausalLM", tp=(1,), pp=(1,), worker=worker, checkpoint=str(folder)
    )
    assert report.error is None, report.error
    [result] = report.results
    assert result["dryrun"] == "verified", result["dryrun_reason"]
    return report, text


@pytest.mark.parametrize("experts", ["fused", "split"])
def test_unquantized_experts_an_fp8_checkpoint_ignores_are_no_finding(
    worker, tmp_path, experts
) -> None:
    """Issue 40: experts stored in bfloat16 and listed in `ignored_layers` (as transformers
    5 saves them, `experts.gate_up_proj` with no scale, or one tensor per expert) are
    what vLLM builds: no "stores it quantized" error, no mapper advice."""
    report, _ = run_moe(worker, tmp_path, f"moe_{experts}", experts=experts)
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]


@pytest.mark.parametrize("experts", ["fused", "split"])
def test_unquantized_experts_an_fp8_checkpoint_does_not_ignore_are_an_error(
    worker, tmp_path, experts
) -> None:
    """The same experts left out of `ignored_layers`: vLLM builds them FP8 and their
    scales stay unwritten, an error at the experts' line."""
    report, text = run_moe(
        worker, tmp_path, f"moe_q_{experts}", experts=experts, ignore_experts=False
    )
    found = [(d.code, d.location.row) for d in dry_run_diagnostics(report)]
    assert found == [("PFX702", line_of(text, "Qwen2MoeSparseMoeBlock", "self.experts ="))], [
        d.message for d in report.diagnostics
    ]
    [d] = dry_run_diagnostics(report)
    assert "is quantized (Fp8MoEMethod) although the checkpoint stores it unquantized" in d.message
    assert "hf_to_vllm_mapper" not in d.message


# the routed experts built without the quantization config
EXPERTS_UNQUANTIZED = (
    "Qwen2MoeSparseMoeBlock",
    'quant_config=quant_config,\n            prefix=f"{prefix}.experts",',
    'quant_config=None,\n            prefix=f"{prefix}.experts",',
)


def test_fp8_experts_are_clean_and_experts_built_unquantized_are_an_error(worker, tmp_path) -> None:
    """FP8 experts (a float8 weight and scales per projection) under vLLM's Fp8MoEMethod
    are clean; the same checkpoint on a copy that builds the experts without
    `quant_config` is an error at the experts' line."""
    report, _ = run_moe(worker, tmp_path, "moe_fp8", experts="split", fp8_experts=True)
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]
    report, text = run_moe(
        worker, tmp_path, "moe_fp8_none", [EXPERTS_UNQUANTIZED], experts="split", fp8_experts=True
    )
    line = line_of(text, "Qwen2MoeSparseMoeBlock", "self.experts =")
    errors = [(d.code, d.location.row) for d in dry_run_diagnostics(report) if d.code == "PFX702"]
    assert errors == [("PFX702", line)], [d.message for d in report.diagnostics]
    [d] = [d for d in dry_run_diagnostics(report) if d.code == "PFX702"]
    assert "left unquantized although the checkpoint stores it quantized" in d.message


@pytest.mark.slow
def test_the_command_line_takes_the_checkpoint_from_the_option_and_the_table(tmp_path) -> None:
    """``introspect --checkpoint`` says which parts of the check ran; ``check --introspect``
    takes the class's checkpoint from ``[tool.prefixlint.checkpoints]`` and reports the
    planted defect at its line."""
    import json

    from tests.test_check_introspect import prefixlint

    tiny_checkpoints.write(tmp_path / "ckpts" / "fp8", "fp8")
    path, text = model_copy(tmp_path, "llama", "my_llama", [MLP_RENAMED])
    args = ("--tp", "1", "--pp", "1", "--explore-budget", "0", "--format", "json")
    done = prefixlint(
        "introspect",
        f"{path.name}:LlamaForCausalLM",
        *args,
        "--checkpoint",
        "ckpts/fp8",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "checkpoint/quantization dry-run: verified: checkpoint `" in done.stderr
    assert "ckpts/fp8` (45 tensors from the headers of 1 safetensors file)" in done.stderr
    assert "built under its quantization config (vLLM's `fp8`" in done.stderr
    (tmp_path / "pyproject.toml").write_text(
        '[tool.prefixlint.checkpoints]\nLlamaForCausalLM = "ckpts/fp8"\n'
    )
    done = prefixlint("check", "--no-cache", "--introspect", *args, path.name, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    line = line_of(text, "LlamaDecoderLayer", "self.mlp = LlamaMLP(")
    # one finding per site (issue 21): the PFX702 at a statement the static phase also
    # reports is that finding's runtime evidence
    found = json.loads(done.stdout)
    quant = [f for f in found if f["code"] == "PFX702"]
    quant += [
        r for f in found for r in f.get("data", {}).get("runtime", []) if r["code"] == "PFX702"
    ]
    assert [f["location"]["row"] for f in quant] == [line], done.stdout
    assert "stores it unquantized" in quant[0]["message"]
