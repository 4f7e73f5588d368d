"""PFX703, the LoRA dry-run, against the real installed vLLM: a tiny PEFT adapter written
here (adapter_config.json and a safetensors file of lora_A/lora_B tensors) matched on
vLLM's LlamaForCausalLM and on copies of llama.py with one planted LoRA defect, and the
synthetic adapter (every linear checkpoint layer) on Llama. One worker serves the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.introspect import introspect
from prefixlint.introspect.targets.checkpoint import CheckpointError
from tests.conftest import requires_vllm
from tests.test_introspect import line_in_class, llama_copy, replace_in_class

PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PACKED = '        "qkv_proj": ["q_proj", "k_proj", "v_proj"],\n'


def write_adapter(folder: Path, modules: list[str], **config: object) -> Path:
    """A PEFT LoRA folder training ``modules`` (paths in the HF model), tiny tensors."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    targets = sorted({m.rsplit(".", 1)[-1] for m in modules})
    base = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": targets}
    (folder / "adapter_config.json").write_text(json.dumps({**base, **config}))
    tensors = {
        f"base_model.model.{m}.lora_{ab}.weight": torch.zeros(2, 2) for m in modules for ab in "AB"
    }
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


def llama_modules(layers: int = 2) -> list[str]:
    out = []
    for i in range(layers):
        out += [f"model.layers.{i}.self_attn.{p}" for p in PARTS[:4]]
        out += [f"model.layers.{i}.mlp.{p}" for p in PARTS[4:]]
    return out


def lora_findings(report) -> list:
    return [
        d
        for d in report.diagnostics
        if d.code == "PFX703" or (d.code == "PFX600" and "LoRA" in d.message)
    ]


# -- without a build ---------------------------------------------------------------------------


def test_an_adapter_is_read_from_its_header_only(tmp_path) -> None:
    from prefixlint.introspect.targets.adapter import read_adapter, resolve_adapter

    folder = write_adapter(tmp_path / "a", ["model.layers.0.self_attn.q_proj"])
    adapter = resolve_adapter(str(folder))
    assert adapter.folder == str(folder.resolve())
    assert adapter.keys == [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
    ]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"adapter_config\.json"):
        read_adapter(str(tmp_path / "empty"))
    (tmp_path / "empty" / "adapter_config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"adapter_model\.safetensors"):
        read_adapter(str(tmp_path / "empty"))


def test_an_unreachable_hub_adapter_is_refused_with_the_reason(monkeypatch) -> None:
    from huggingface_hub import constants

    from prefixlint.cli import main
    from prefixlint.introspect.targets.adapter import resolve_adapter

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError, match=r"HF_HUB_OFFLINE.*local PEFT folder"):
        resolve_adapter("some-org/some-adapter")
    result = CliRunner().invoke(main, ["introspect", "LlamaForCausalLM", "--lora", "no/such"])
    assert result.exit_code == 2 and "HF_HUB_OFFLINE" in result.output, result.output


# -- on vLLM's builds --------------------------------------------------------------------------


@requires_vllm
def test_a_llama_adapter_is_verified_with_nothing_to_report(worker, tmp_path) -> None:
    folder = write_adapter(tmp_path / "adapter", llama_modules())
    report = introspect("LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, lora=str(folder))
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]


@requires_vllm
def test_the_synthetic_adapter_runs_on_llama_with_nothing_to_report(worker) -> None:
    report = introspect("LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]


@requires_vllm
@pytest.mark.parametrize(
    ("entry", "code"),
    [
        ("", "PFX606"),  # no qkv_proj entry: PFX606's finding, confirmed by the LoRA dry-run
        ('        "qkv_proj": ["q_proj", "k_proj"],\n', "PFX703"),  # an entry without v_proj
    ],
    ids=["no-entry", "entry-without-v"],
)
def test_a_fused_layer_the_mapping_lacks_is_found_at_its_line(worker, tmp_path, entry, code):
    folder = write_adapter(tmp_path / "adapter", llama_modules())
    path, text = llama_copy(
        tmp_path, "lora_llama", replace_in_class("LlamaForCausalLM", PACKED, entry)
    )
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, lora=str(folder)
    )
    assert report.results[0]["lora"] == "verified", report.results[0]["lora_reason"]
    line = line_in_class(text, "LlamaAttention", "self.qkv_proj = QKVParallelLinear(")
    at = [d for d in report.diagnostics if d.location.row == line and Path(d.filename) == path]
    assert [d.code for d in at] == [code], [(d.code, d.message) for d in at]
    assert "LoRA" in at[0].message and at[0].severity.value == "error"
    if code == "PFX606":
        assert "LoRA dry-run confirms" in at[0].message
    else:
        assert "`v_proj`" in at[0].message and "refuses the adapter" in at[0].message
    # one finding per site: nothing else of the LoRA dry-run anywhere
    assert [d for d in lora_findings(report) if d not in at] == []


@requires_vllm
def test_targets_heads_and_features_the_model_cannot_take(worker, tmp_path) -> None:
    """A target no module of Llama is (refused, at the attention that would hold it), a
    `modules_to_save` head a generative Llama does not expose (at the class), and a
    feature vLLM refuses in any adapter (a PFX600 note)."""
    modules = [*llama_modules(1), "model.layers.0.self_attn.rotary"]
    folder = write_adapter(tmp_path / "adapter", modules, modules_to_save=["score"], use_dora=True)
    path, text = llama_copy(tmp_path, "plain_llama", lambda t: t)
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, lora=str(folder)
    )
    found = {(d.code, d.location.row, d.severity.value) for d in lora_findings(report)}
    attention = line_in_class(text, "LlamaDecoderLayer", "self.self_attn = ")
    head = line_in_class(text, "LlamaForCausalLM", "class LlamaForCausalLM")
    assert ("PFX703", attention, "error") in found, [d.message for d in lora_findings(report)]
    assert ("PFX703", head, "error") in found
    notes = [d.message for d in lora_findings(report) if d.code == "PFX600"]
    assert any("DoRA" in n for n in notes), notes


@requires_vllm
@pytest.mark.slow
def test_a_router_renamed_in_code_is_a_warning_at_the_loader(worker) -> None:
    """GraniteMoe renames the checkpoint's `router.layer` to `gate` in `load_weights`, not
    in `hf_to_vllm_mapper`: vLLM's LoRA loader refuses an all-linear adapter, but only
    one that trains the router (docs/precision.md), so a warning at that loader."""
    report = introspect("GraniteMoeForCausalLM", tp=(1,), pp=(1,), worker=worker)
    found = [d for d in lora_findings(report) if d.code == "PFX703"]
    assert [(Path(d.filename).name, d.severity.value) for d in found] == [
        ("granitemoe.py", "warning")
    ], [d.message for d in found]
    assert "router.layer" in found[0].message and "hf_to_vllm_mapper" in found[0].message


# the checkpoint dry-run streams nothing through a loader that raises on every name
LOADER = "        loader = AutoWeightsLoader(self)\n        return loader.load_weights(weights)\n"
BROKEN = '        raise ValueError("this loader reads no name")\n'


@requires_vllm
@pytest.mark.parametrize(
    "entry",
    [PACKED, '        "qkv_proj": ["q_proj", "k_proj"],\n'],
    ids=["plain", "entry-without-v"],
)
def test_the_synthetic_adapter_runs_on_the_own_layout_when_nothing_streamed(
    worker, tmp_path, entry
) -> None:
    """A loader the checkpoint dry-run cannot stream (it raises on every name): the
    synthetic adapter trains the model's own layout's linear layers instead of not
    running, and still finds a fused layer the mapping lacks a part of."""
    edits = [
        replace_in_class("LlamaForCausalLM", LOADER, BROKEN),
        replace_in_class("LlamaForCausalLM", PACKED, entry),
    ]
    path, text = llama_copy(tmp_path, "unstreamed_llama", lambda t: edits[1](edits[0](t)))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["dryrun"] == "not verified", result["dryrun_reason"]
    assert result["lora"] == "verified", result["lora_reason"]
    assert "own layout" in result["lora_reason"]
    found = [(d.code, d.location.row) for d in lora_findings(report)]
    if entry == PACKED:
        assert found == [], [d.message for d in lora_findings(report)]
    else:
        line = line_in_class(text, "LlamaAttention", "self.qkv_proj = QKVParallelLinear(")
        assert found == [("PFX703", line)], [d.message for d in lora_findings(report)]


@requires_vllm
def test_a_model_that_does_not_build_at_tp1_is_matched_on_another_layout(worker, tmp_path):
    """vLLM's LoRA layers replace sharded linear layers as whole ones (the names are the
    same): when tp=1 does not build and tp=2 does, the adapter is matched there."""
    fails = (
        "        super().__init__()\n"
        "        if get_tensor_model_parallel_world_size() == 1:\n"
        '            raise ValueError("this model needs tp > 1")\n'
    )
    edit = replace_in_class("LlamaForCausalLM", "        super().__init__()\n", fails)
    path, _ = llama_copy(tmp_path, "tp2_llama", edit)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert "tp=2 build" in result["lora_reason"], result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]


@requires_vllm
def test_a_pooling_models_adapter_is_taken_without_model_prefix(worker) -> None:
    """An embedding model's checkpoint (and adapter) names its layers without `model.`;
    vLLM's manager retries a pooling model's `model.X` as `X`, so nothing is dropped."""
    report = introspect("Qwen2Model", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]


@requires_vllm
def test_a_model_that_builds_otherwise_under_a_lora_config_is_matched_so(worker, tmp_path):
    """vLLM builds the model with its `LoRAConfig` under `--enable-lora`; a model that
    maps `qkv_proj` to all three parts only then (as Qwen4Exp does) is no finding."""
    only_with_lora = (
        "        super().__init__()\n"
        "        if vllm_config.lora_config is None:\n"
        "            self.packed_modules_mapping = {\n"
        '                **self.packed_modules_mapping, "qkv_proj": ["q_proj", "k_proj"]\n'
        "            }\n"
    )
    edit = replace_in_class("LlamaForCausalLM", "        super().__init__()\n", only_with_lora)
    path, _ = llama_copy(tmp_path, "lora_config_llama", edit)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]


@requires_vllm
def test_a_fused_layer_trained_whole_that_the_mapping_splits_says_so(worker) -> None:
    """GLM-4's checkpoint holds `mlp.gate_up_proj` fused, so an adapter trains it whole;
    Glm4's `packed_modules_mapping` splits it into `gate_proj`/`up_proj`, the only names
    vLLM's loader expects: refused, and the module exists (it is no missing module)."""
    report = introspect("Glm4ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    found = [d for d in lora_findings(report) if d.code == "PFX703"]
    assert len(found) == 1, [d.message for d in found]
    message = found[0].message
    assert "`model.layers.0.mlp.gate_up_proj`" in message and "whole" in message, message
    assert "maps `gate_up_proj` to ['gate_proj', 'up_proj']" in message, message
    assert "no module" not in message, message


# issue 40: the synthetic adapter trains the embeddings and the head where the model lists
# them in `embedding_modules` (vLLM's embedding LoRA), so an embedding the list does not
# expose under its name is caught
EMBEDDINGS = (
    "LlamaForCausalLM",
    '        "embed_tokens": "input_embeddings",\n',
    '        "embed_in": "input_embeddings",\n',
)


@requires_vllm
def test_the_synthetic_adapter_trains_the_embeddings_the_model_lists(worker, tmp_path) -> None:
    path, text = llama_copy(tmp_path, "embed_in", replace_in_class(*EMBEDDINGS))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    found = lora_findings(report)
    line = line_in_class(text, "LlamaForCausalLM", "class LlamaForCausalLM")
    assert [(d.code, d.location.row) for d in found] == [("PFX703", line)], [
        d.message for d in found
    ]
    assert "`embed_tokens`" in found[0].message and "embedding_modules" in found[0].message


# a model that lists its input embedding alone does not take a head adapter by design
# (vLLM's Transformers backend: `embedding_modules = {"embed_tokens": ...}`); the synthetic
# adapter trained every ParallelLMHead and warned on ~25 of vLLM's own architectures
HEAD_UNLISTED = ("LlamaForCausalLM", '        "lm_head": "output_embeddings",\n', "")


@requires_vllm
def test_the_synthetic_adapter_trains_no_head_the_model_does_not_list(worker, tmp_path) -> None:
    path, _text = llama_copy(tmp_path, "no_head", replace_in_class(*HEAD_UNLISTED))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert not lora_findings(report), [d.message for d in lora_findings(report)]


@requires_vllm
@pytest.mark.parametrize("arch", ["LlamaBidirectionalModel", "VoxtralForConditionalGeneration"])
def test_the_synthetic_adapter_trains_only_what_a_checkpoint_holds(worker, arch) -> None:
    """Issue 40, two PFX703 warnings judged false on vLLM's tree (one each before).
    LlamaBidirectionalModel is Llama as an embedding model: `as_embedding_model` puts a
    `StageMissingLayer` where `lm_head` was (it forwards attribute reads to the head it
    replaced) while `embedding_modules` still lists `lm_head`; the synthetic adapter
    trained that head, which the model never runs and its checkpoint does not hold.
    Voxtral's file stacks its causal audio encoder's `.mlp.fc1`/`.mlp.fc3` into
    `gate_up_proj`; read by leaf, they were taken as parts of the language model's
    `gate_up_proj` beside Llama's `gate_proj`/`up_proj` (the table's)."""
    report = introspect(arch, tp=(1,), pp=(1,), worker=worker)
    [result] = report.results
    assert result["lora"] == "verified", result["lora_reason"]
    assert lora_findings(report) == [], [d.message for d in lora_findings(report)]
