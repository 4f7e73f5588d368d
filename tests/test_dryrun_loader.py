"""Issue 29, a broken loader: names a loader refuses that the model's own tables say its
checkpoint holds (a part a stacked-params mapper or ``packed_modules_mapping`` stacks into
a fused layer built beside it) are PFX701 errors at the loader's line, never "config read
differently" or "another checkpoint format" notes. Copies of the installed vLLM's files,
made at test time, with one re-created bug each."""

from __future__ import annotations

from pathlib import Path

from prefixlint.introspect import introspect
from tests.conftest import requires_vllm
from tests.test_dryrun import dry_run_diagnostics, line_of, model_copy, save_small_llama_config

pytestmark = requires_vllm

LLAMA_LOADER = "        return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)"
QWEN2_LOADER = LLAMA_LOADER


def _declared(report) -> list[tuple[str, str, int, str]]:
    return [
        (d.code, Path(d.filename).name, d.location.row, d.severity.value)
        for d in dry_run_diagnostics(report)
        if d.code == "PFX701"
    ]


def _notes(report) -> list[str]:
    return [d.message for d in dry_run_diagnostics(report) if d.code == "PFX600"]


def test_a_stacked_entry_removed_is_the_loaders_error(worker, tmp_path) -> None:
    """llama's mapper without its ``.gate_proj`` entry: the loader refuses every
    ``gate_proj`` tensor, which ``packed_modules_mapping`` says the checkpoint holds. One
    error at the loader's line (not at the fused layer, not a config-divergence note, not
    a PFX702 on the table that is right)."""
    entry = '            ".gate_proj": (".gate_up_proj", 0),\n'
    path, text = model_copy(tmp_path, "llama", "no_gate_entry", [("LlamaModel", entry, "")])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, "LlamaModel", LLAMA_LOADER)
    assert _declared(report) == [("PFX701", path.name, line, "error")], report.diagnostics
    [diag] = [d for d in dry_run_diagnostics(report) if d.code == "PFX701"]
    assert "`gate_proj` (into `gate_up_proj` by `packed_modules_mapping`" in diag.message
    assert not [n for n in _notes(report) if "gate_proj" in n], _notes(report)
    # the table is right: the quantization dry-run does not blame it for what never arrived
    quant = [d.message for d in dry_run_diagnostics(report) if d.code == "PFX702"]
    assert not quant, quant


def test_a_mapper_assigned_twice_is_the_loaders_error(worker, tmp_path) -> None:
    """Qwen2Model's ``hf_to_vllm_mapper`` assigned again below the first, without its
    stacked entries: every q/k/v/gate/up tensor is refused. One error at the loader's
    line that names the hidden first assignment's entry; no finding per fused layer."""
    anchor = "    supports_aux_hidden_states_over_pp"
    again = '    hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"transformer.": "model."})\n'
    edit = ("Qwen2Model", anchor, again + anchor)
    path, text = model_copy(tmp_path, "qwen2", "mapper_twice", [edit])
    report = introspect(f"{path}:Qwen2ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, "Qwen2Model", QWEN2_LOADER)
    assert _declared(report) == [("PFX701", path.name, line, "error")], report.diagnostics
    [diag] = [d for d in dry_run_diagnostics(report) if d.code == "PFX701"]
    first = line_of(text, "Qwen2Model", '".gate_proj": (".gate_up_proj", 0)')
    assert f"{path.name}:{first} names both" in diag.message, diag.message
    for part in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
        assert f"`{part}`" in diag.message


def test_too_many_kinds_of_declared_names_is_still_the_loaders_error(worker, tmp_path) -> None:
    """With biases the dropped stacked entries are ten kinds of names, more than the stream
    retries: the layout was called "another checkpoint format" (PFX600 notes). The names
    are the model's own and every other name loads: a PFX701 error."""
    config = save_small_llama_config(tmp_path / "cfg", attention_bias=True, mlp_bias=True)
    anchor = "    supports_aux_hidden_states_over_pp"
    edit = ("LlamaModel", anchor, f"    hf_to_vllm_mapper = WeightsMapper()\n{anchor}")
    path, text = model_copy(tmp_path, "llama", "mapper_dropped", [edit])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), config=config, worker=worker)
    line = line_of(text, "LlamaModel", LLAMA_LOADER)
    assert _declared(report) == [("PFX701", path.name, line, "error")], report.diagnostics
    assert not [n for n in _notes(report) if "load_weights` raises" in n], _notes(report)
    assert "declare" in report.results[0]["dryrun_reason"]


def test_the_clean_copy_with_biases_has_nothing_to_report(worker, tmp_path) -> None:
    config = save_small_llama_config(tmp_path / "cfg", attention_bias=True, mlp_bias=True)
    path, _ = model_copy(tmp_path, "llama", "clean_bias", [])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), config=config, worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]
