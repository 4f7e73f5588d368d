"""PFX701/PFX702 against the real installed vLLM: clean llama.py and qwen2.py dry-run with
nothing to report, and out-of-tree copies with one planted loading or quantization bug
are caught at the responsible line. One worker serves the module (vLLM imports once)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefixlint.introspect import introspect
from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm


def model_copy(folder: Path, source: str, name: str, edits) -> tuple[Path, str]:
    """vLLM's ``source``.py as an out-of-tree file (relative imports made absolute), with
    each (class, old, new) edit applied inside that class."""
    assert VLLM is not None
    text = (VLLM / "model_executor" / "models" / f"{source}.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    for cls, old, new in edits:
        start = text.index(f"class {cls}(")
        at = text.index(old, start)
        text = text[:at] + new + text[at + len(old) :]
    path = folder / f"{name}.py"
    path.write_text(text)
    return path, text


def line_of(text: str, cls: str, needle: str) -> int:
    at = text.index(needle, text.index(f"class {cls}("))
    return text.count("\n", 0, at) + 1


def filtering_llama_weights(expression: str) -> tuple[str, str, str]:
    """An edit of llama's ``LlamaForCausalLM.load_weights``: the checkpoint's
    ``weights`` pass through ``expression`` before vLLM's loader sees them."""
    line = "        loader = AutoWeightsLoader(self)\n"
    return ("LlamaForCausalLM", line, f"{line}        weights = {expression}\n")


def dry_run_diagnostics(report) -> list:
    """The dry-run's own findings and notes (phase 2's other checks report on these
    copies too: llama's `embed_tokens` without prefix, coverage notes)."""
    return [
        d
        for d in report.diagnostics
        if d.code in ("PFX701", "PFX702") or (d.code == "PFX600" and "dry-run" in d.message)
    ]


def findings(report, codes=("PFX701", "PFX702", "PFX600")) -> list[tuple[str, str, int]]:
    return [
        (d.code, Path(d.filename).name, d.location.row)
        for d in dry_run_diagnostics(report)
        if d.code in codes
    ]


@pytest.mark.parametrize(("source", "cls"), [("llama", "Llama"), ("qwen2", "Qwen2")])
def test_clean_copies_dry_run_with_nothing_to_report(worker, tmp_path, source, cls) -> None:
    path, _ = model_copy(tmp_path, source, f"clean_{source}", [])
    report = introspect(f"{path}:{cls}ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.error is None, report.error
    [result] = report.results
    assert result["dryrun"] == "verified", result["dryrun_reason"]
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]


def test_registry_llama_is_dry_run(worker) -> None:
    report = introspect("LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified"
    assert dry_run_diagnostics(report) == []


SKIP_HEAD = (
    "LlamaForCausalLM",
    "        loader = AutoWeightsLoader(self)\n        return loader.load_weights(weights)",
    "        loader = AutoWeightsLoader(self)\n"
    '        weights = ((n, w) for n, w in weights if not n.startswith("lm_head."))\n'
    "        return loader.load_weights(weights)",
)


def test_unconditional_lm_head_skip_on_an_untied_head(worker, tmp_path) -> None:
    path, text = model_copy(tmp_path, "llama", "skip_head", [SKIP_HEAD])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, "LlamaForCausalLM", "def load_weights")
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    [diag] = dry_run_diagnostics(report)
    assert "`lm_head.weight`" in diag.message and "stays random" in diag.message


def save_small_llama_config(folder: Path, **overrides) -> str:
    """A small real Llama config.json (as a checkpoint ships it) in ``folder``."""
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        **overrides,
    ).save_pretrained(folder)
    return str(folder)


def test_the_same_skip_on_a_tied_head_is_fine(worker, tmp_path) -> None:
    save_small_llama_config(tmp_path / "cfg", tie_word_embeddings=True)
    path, _ = model_copy(tmp_path, "llama", "skip_tied", [SKIP_HEAD])
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), config=str(tmp_path / "cfg"), worker=worker
    )
    assert report.results[0]["dryrun"] == "verified"
    assert dry_run_diagnostics(report) == [], [d.message for d in report.diagnostics]


@pytest.mark.parametrize(
    ("source", "old", "new", "shard"),
    [
        ("llama", '".v_proj": (".qkv_proj", "v"),', '".v_proj": (".qkv_proj", "k"),', "v"),
        ("qwen2", '".up_proj": (".gate_up_proj", 1),', '".up_proj": (".gate_up_proj", 0),', "1"),
    ],
    ids=["llama-qkv", "qwen2-gate-up"],
)
def test_stacked_mapping_shard_typo_is_reported_at_the_entry(
    worker, tmp_path, source, old, new, shard
) -> None:
    cls = "Llama" if source == "llama" else "Qwen2"
    path, text = model_copy(tmp_path, source, f"typo_{source}", [(f"{cls}Model", old, new)])
    report = introspect(f"{path}:{cls}ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, f"{cls}Model", new)
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    assert f"shard `{shard}`" in dry_run_diagnostics(report)[0].message


def test_packed_mapping_without_a_fused_layer_quantizes_an_ignored_layer(worker, tmp_path) -> None:
    edit = ("Qwen2ForCausalLM", '        "gate_up_proj": ["gate_proj", "up_proj"],\n', "")
    path, text = model_copy(tmp_path, "qwen2", "packed", [edit])
    report = introspect(f"{path}:Qwen2ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    # one defect, one finding (issue 19): PFX606 at the line that built the fused layer,
    # with the quantization dry-run's PFX702 folded in as its confirmation
    line = line_of(text, "Qwen2MLP", "self.gate_up_proj = MergedColumnParallelLinear(")
    assert findings(report) == [], report.diagnostics
    [packed] = [d for d in report.diagnostics if d.code == "PFX606"]
    assert (Path(packed.filename).name, packed.location.row) == (path.name, line)
    assert "gate_up_proj" in packed.message and "quantization dry-run confirms" in packed.message
    assert packed.severity.value == "error"


def test_prefix_unlike_the_checkpoint_name_quantizes_an_ignored_layer(worker, tmp_path) -> None:
    edit = ("LlamaAttention", 'prefix=f"{prefix}.o_proj",', 'prefix=f"{prefix}.out_proj",')
    path, text = model_copy(tmp_path, "llama", "prefix", [edit])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, "LlamaAttention", "self.o_proj = RowParallelLinear(")
    assert ("PFX702", path.name, line) in findings(report), report.diagnostics
    [quant] = [d for d in report.diagnostics if d.code == "PFX702"]
    assert "out_proj" in quant.message and "o_proj" in quant.message
    # PFX601 says the same from the prefix alone; nothing else fires
    assert {d.code for d in report.diagnostics} == {"PFX601", "PFX702"}


def test_renamed_layer_without_mapper_entry(worker, tmp_path) -> None:
    edits = [
        (
            "LlamaAttention",
            "self.o_proj = RowParallelLinear(",
            "self.out_proj = RowParallelLinear(",
        ),
        ("LlamaAttention", 'prefix=f"{prefix}.o_proj",', 'prefix=f"{prefix}.out_proj",'),
        ("LlamaAttention", "self.o_proj(attn_output)", "self.out_proj(attn_output)"),
    ]
    path, text = model_copy(tmp_path, "llama", "renamed", edits)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = line_of(text, "LlamaAttention", "self.out_proj = RowParallelLinear(")
    found = findings(report)
    assert ("PFX701", path.name, line) in found, report.diagnostics
    messages = " ".join(d.message for d in report.diagnostics)
    assert "raises on checkpoint tensor `model.layers.0.self_attn.o_proj.weight`" in messages
    assert "`model.layers.0.self_attn.out_proj.weight` is never written" in messages


def test_weight_loader_needing_real_data_is_a_note(worker, tmp_path) -> None:
    edit = filtering_llama_weights("((n, w / float(w.abs().max())) for n, w in weights)")
    path, _ = model_copy(tmp_path, "llama", "needs_data", [edit])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [diag] = dry_run_diagnostics(report)
    assert diag.code == "PFX600" and diag.severity.value == "note"
    assert "needs real data" in diag.message
    assert report.results[0]["dryrun"] == "not verified"


def test_no_reference_class_still_dry_runs(worker, tmp_path) -> None:
    """A class transformers does not know by name is dry-run all the same (issue 19):
    against the class of its config's model type, else a layout derived from the model."""
    path, text = model_copy(tmp_path, "llama", "homebrew", [])
    path.write_text(text + "\n\nclass HomebrewForCausalLM(LlamaForCausalLM):\n    pass\n")
    report = introspect(f"{path}:HomebrewForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert not dry_run_diagnostics(report)


@pytest.mark.slow
def test_builds_that_use_the_time_budget_leave_the_dry_run_not_verified(worker, tmp_path) -> None:
    """The dry-run stops at a deadline inside the per-target timeout: a slow build gives
    its findings and a "not verified" note for the dry-run, never a hang (PFX604)."""
    slow_init = (
        "LlamaForCausalLM",
        "        super().__init__()\n",
        "        super().__init__()\n        import time\n\n        time.sleep(14)\n",
    )
    path, _ = model_copy(tmp_path, "llama", "slow_build", [slow_init])
    save_small_llama_config(tmp_path / "cfg")
    worker.run({"kind": "list"}, 300)  # the worker is up: the timeout is the build's own
    report = introspect(
        f"{path}:LlamaForCausalLM",
        tp=(1,),
        pp=(1,),
        config=str(tmp_path / "cfg"),
        timeout=30,
        explore_budget=0,
        worker=worker,
    )
    assert not [d for d in report.diagnostics if d.code == "PFX604"], report.diagnostics
    # the checkpoint dry-run or (later) its quantization builds are skipped, with a note
    [note] = [d for d in dry_run_diagnostics(report) if "time budget" in d.message]
    assert note.code == "PFX600" and note.severity.value == "note"


def test_no_dryrun_turns_both_checks_off(worker, tmp_path) -> None:
    path, _ = model_copy(tmp_path, "llama", "skip_head_off", [SKIP_HEAD])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, dryrun=False)
    assert dry_run_diagnostics(report) == []
    assert report.results[0]["dryrun"] == "off"


# A bias that vLLM builds whatever the config says, while transformers builds it only when
# ``attention_bias`` is set: on a synthesised config the two read it differently.
ALWAYS_BIAS = ("LlamaAttention", "            bias=bias_o_proj,", "            bias=True,")


def test_config_read_differently_is_a_note_on_a_synthesised_config(worker, tmp_path) -> None:
    path, _ = model_copy(tmp_path, "llama", "always_bias", [ALWAYS_BIAS])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    dry = [
        d
        for d in report.diagnostics
        if d.code in ("PFX701", "PFX702") or "read the synthesised config" in d.message
    ]  # (phase 2's other checks report llama's `embed_tokens` and coverage notes too)
    assert [d.code for d in dry] == ["PFX600"], report.diagnostics
    [note] = dry
    assert note.severity.value == "note"
    assert "read the synthesised config differently" in note.message
    assert "`model.layers.0.self_attn.o_proj` with a bias, transformers without" in note.message
    assert report.results[0]["dryrun"] == "verified"


def test_the_same_divergence_is_a_finding_with_a_real_config(worker, tmp_path) -> None:
    """A real checkpoint's config says what the checkpoint holds: no bias, so vLLM's is
    left random, and that is reported."""
    save_small_llama_config(tmp_path / "cfg")
    path, text = model_copy(tmp_path, "llama", "always_bias_real", [ALWAYS_BIAS])
    report = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), config=str(tmp_path / "cfg"), worker=worker
    )
    line = line_of(text, "LlamaAttention", "self.o_proj = RowParallelLinear(")
    assert findings(report) == [("PFX701", path.name, line)], report.diagnostics
    assert (
        "`model.layers.0.self_attn.o_proj.bias` is never written"
        in dry_run_diagnostics(report)[0].message
    )


def test_bare_base_model_loads_through_vllms_embedding_adapter(worker) -> None:
    """A ``LlamaModel`` checkpoint has no ``model.`` prefix; vLLM serves the architecture
    through ``as_embedding_model``, whose loader adds it. Only the head the adapter keeps
    and never uses is left unwritten: a note (nothing reads it, issue 20's severity)."""
    report = introspect("LlamaModel", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    loading = [d for d in report.diagnostics if d.code == "PFX701"]
    assert [(d.severity.value, "lm_head.weight" in d.message) for d in loading] == [
        ("note", True)
    ], [d.message for d in loading]


def test_reference_class_names_match_ignoring_case() -> None:
    from prefixlint.introspect.dryrun import reference_class

    assert reference_class(["PhiMoEForCausalLM"]).__name__ == "PhimoeForCausalLM"
    assert reference_class(["NoSuchThingForCausalLM"]) is None


@pytest.mark.slow
def test_composite_checkpoint_layout_is_the_hub_one(worker) -> None:
    """transformers 5 reverts a composite model's renamings all at once (Qwen2-Audio's
    language model gets ``language_model.model.model.``); the layout transformers itself
    loads, as the hub holds it, is found and vLLM's loader accepts it."""
    report = introspect("Qwen2AudioForConditionalGeneration", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert [d.message for d in report.diagnostics if d.code == "PFX701"] == []


@pytest.mark.slow
def test_a_bias_the_loader_makes_itself_is_written(worker) -> None:
    """Whisper's checkpoints have no ``k_proj`` bias; vLLM's loader feeds zeros for that
    shard of the fused ``qkv_proj`` bias (whisper.py ``_create_fake_bias_for_k_proj``):
    the shard is written, not left random."""
    report = introspect("WhisperForConditionalGeneration", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    shards = [d.message for d in report.diagnostics if d.code == "PFX701" and "shard" in d.message]
    assert shards == []


def test_incomplete_reference_experts_are_not_streamed() -> None:
    """Experts lacking a tensor every other expert of the block has are an allocation of
    the reference class, not checkpoint tensors; complete experts are all kept."""
    from prefixlint.introspect.dryrun import incomplete_experts

    shape = ((4, 4), None)
    layout = {
        f"model.layers.0.mlp.experts.{i}.{leaf}.weight": shape
        for i in range(4)
        for leaf in ("gate_proj", "up_proj", "down_proj")
    }
    assert incomplete_experts(layout) == (set(), "")
    extra = {
        f"model.layers.0.mlp.experts.{i}.{p}.weight": shape
        for i in (4, 5)
        for p in ("gate_proj", "up_proj")
    }
    dropped, why = incomplete_experts({**layout, **extra})
    assert dropped == set(extra)
    assert "2 incomplete experts" in why and "model.layers.N.mlp.experts" in why


@pytest.mark.slow
def test_identity_experts_of_the_reference_are_not_checkpoint_tensors(worker) -> None:
    """transformers' Longcat-Flash sizes the fused ``gate_up_proj`` for its routed and its
    weightless identity (zero) experts, ``down_proj`` for the routed ones: reverted, the
    layout has gate/up projections for experts no checkpoint holds. They are left out
    with a note, and vLLM's per-expert loader is judged on the routed experts only (it
    loads them all: no PFX701)."""
    report = introspect("LongcatFlashForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert [d.message for d in report.diagnostics if d.code == "PFX701"] == []
    notes = [d.message for d in dry_run_diagnostics(report) if d.code == "PFX600"]
    assert any("incomplete experts" in n for n in notes), notes


@pytest.mark.slow
def test_fused_experts_transposed_on_load_only_when_needed_have_the_hub_layout(worker) -> None:
    """Qwen3-VL-MoE's converter transposes the fused experts on load only when the shape
    is not the parameter's, so transformers saves its own (E, H, I) ``down_proj``; the hub
    (and vLLM's loader, ``is_fused_checkpoint_transposed``) has (E, I, H). That original
    layout is made too, and vLLM loads it: no raise, nothing left random."""
    report = introspect("Qwen3VLMoeForConditionalGeneration", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert [d.message for d in report.diagnostics if d.code == "PFX701"] == []


@pytest.mark.slow
def test_a_head_tied_from_another_sub_config_is_a_note_on_a_synthesised_config(worker) -> None:
    """The synthesised Qwen2.5-Omni config ties the thinker's text config and not the
    thinker: vLLM reads the former and ties ``lm_head``, transformers the latter and keeps
    it. What a checkpoint holds is unknown there: a note, not a dropped-tensor finding. The
    talker and token2wav weights, which the class's mapper maps to None (a thinker-only
    model), are dropped as declared: not reported."""
    report = introspect("Qwen2_5OmniForConditionalGeneration", tp=(1,), pp=(1,), worker=worker)
    loading = [d.message for d in report.diagnostics if d.code == "PFX701"]
    assert not [m for m in loading if "talker." in m or "token2wav." in m], loading
    dropped = [
        d.message for d in report.diagnostics if d.code == "PFX701" and "lm_head" in d.message
    ]
    assert dropped == []
    notes = [d.message for d in dry_run_diagnostics(report) if d.code == "PFX600"]
    assert any("vLLM ties `language_model.lm_head.weight`" in n for n in notes), notes


def test_an_attribute_passed_as_a_layers_width_is_guessed_as_the_hidden_size() -> None:
    """An attribute the config lacks that a layer takes as ``dim=``/``hidden_size=`` is
    the model's width (Lfm2's ``dim=config.block_dim``, dropped by transformers 5), not
    the table's small size; a tensor ``dim=`` keyword with another value is not one."""
    from types import SimpleNamespace

    from prefixlint.introspect.configs import code_hints, guess_from_code

    config = SimpleNamespace(hidden_size=128, num_hidden_layers=2, num_attention_heads=4)
    text = "self.mlp = Lfm2MLP(\n    dim=config.block_dim,\n    quant_config=quant_config,\n)"
    assert code_hints("block_dim", [text]).width
    assert guess_from_code("block_dim", config, [text]) == 128
    assert not code_hints("concat_dim", ["torch.cat(xs, dim=config.concat_dim + 1)"]).width


@pytest.mark.slow
def test_lfm2_dry_runs_clean_with_its_width_guessed(worker) -> None:
    """With ``block_dim`` guessed as the hidden size, Lfm2's checkpoint ``w1``/``w3``
    stack into ``w13`` and nothing raises or stays random (they did with 16)."""
    report = introspect("Lfm2ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "verified", report.results[0]["dryrun_reason"]
    assert [d.message for d in report.diagnostics if d.code == "PFX701"] == []


def test_a_loader_that_refuses_the_whole_layout_is_not_verified(worker, tmp_path) -> None:
    """A loader that reads another checkpoint format (here: every name under `llm.`)
    raises on more kinds of names than the stream retries: not verified, and its raises
    are "not verified" notes that say the layout may not be the loader's, never errors
    or default-shown warnings (issue 20: all six on vLLM's registry read another
    format)."""
    renamed = '((n.replace("model.", "llm.", 1), w) for n, w in weights)'
    other_format = filtering_llama_weights(renamed)
    path, _ = model_copy(tmp_path, "llama", "other_format", [other_format])
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["dryrun"] == "not verified"
    assert not [d for d in report.diagnostics if d.code == "PFX701"], report.diagnostics
    raises = [d for d in report.diagnostics if "`load_weights` raises" in d.message]
    assert raises and all((d.code, d.severity.value) == ("PFX600", "note") for d in raises)
    assert all(d.message.startswith("not verified:") and "layout" in d.message for d in raises)


def test_a_tensor_the_model_does_without_is_a_note(worker) -> None:
    """vLLM's ``BertModel`` drops the checkpoint's ``pooler.dense.*`` and every parameter
    is written without it: nothing stays random, nothing breaks today, so a note (issue
    20's severity), never a warning that costs a reviewer a minute."""
    report = introspect("BertModel", tp=(1,), pp=(1,), worker=worker)
    assert report.error is None, report.error
    dropped = [d for d in report.diagnostics if d.code == "PFX701" and "pooler.dense" in d.message]
    assert dropped, [d.message for d in report.diagnostics]
    assert {d.severity.value for d in dropped} == {"note"}
    assert all("nothing stays random" in d.message for d in dropped)


def test_a_layout_that_fails_hides_no_finding_of_the_others(worker, tmp_path) -> None:
    """Issue 30: a literal attention prefix fails the layouts that build two layers (tp=1,
    tp=2) and not the pipeline stages of one layer each (pp=4). The stages still show the table's
    missing `gate_up_proj` entry (PFX606 at the fused layer), and the dry-run, which loads
    into the tp=1 build, says it did not run and why instead of saying nothing."""
    path, text = model_copy(
        tmp_path,
        "llama",
        "fails_some_layouts",
        [
            ("LlamaAttention", 'prefix=f"{prefix}.attn",', 'prefix="attn",'),
            ("LlamaForCausalLM", '        "gate_up_proj": ["gate_proj", "up_proj"],\n', ""),
        ],
    )
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(4,), worker=worker)
    statuses = {lay["name"]: lay["status"] for lay in report.results[0]["layouts"]}
    assert statuses["tp=1"] == "failed" and "built" in statuses.values(), statuses
    found = [(d.code, d.location.row, d.severity.value) for d in report.diagnostics]
    fused = line_of(text, "LlamaMLP", "self.gate_up_proj = MergedColumnParallelLinear(")
    assert any(code == "PFX606" and row == fused for code, row, _ in found), found
    [note] = [d for d in report.diagnostics if d.code == "PFX600" and "dry-run" in d.message]
    assert "tp=1 build, which failed" in note.message and "Duplicate layer name" in note.message
    assert Path(note.filename).name == path.name
    assert report.results[0]["dryrun"] == "not verified"


def test_a_fused_layers_mapping_is_blamed_only_when_it_is_wrong(tmp_path: Path) -> None:
    """The quantization dry-run's reason for a fused layer whose parts the checkpoint lists:
    the model's ``packed_modules_mapping`` entry when it is missing or names other parts;
    never "is [q, k, v], not [q, k, v]" (the entry was right: the cause is elsewhere). The
    site is the model's own mapping line, never a library's default (vLLM's
    ``SupportsLoRA.packed_modules_mapping = {}``)."""
    import importlib.util
    import sys

    from torch import nn
    from vllm.model_executor.models.interfaces import SupportsLoRA

    from prefixlint.introspect.checks.pfx702_quantization import packed_entry_wrong
    from prefixlint.introspect.dryrun.quant import packed_entry
    from prefixlint.introspect.dryrun.sites import Sites

    def said(packed: dict, parts: list[str]) -> str | None:
        entry = packed_entry(packed, "qkv_proj", parts)  # the dry-run's fact
        return packed_entry_wrong(entry)  # the unit's words

    parts = ["q_proj", "k_proj", "v_proj"]
    assert packed_entry({}, "qkv_proj", parts).state == "missing"
    assert said({}, parts) == (
        "`packed_modules_mapping` has no entry `'qkv_proj': ['q_proj', 'k_proj', 'v_proj']`"
    )
    assert said({"qkv_proj": ["q_proj", "v_proj"]}, parts) == (
        "`packed_modules_mapping['qkv_proj']` is ['q_proj', 'v_proj'], not "
        "['q_proj', 'k_proj', 'v_proj']"
    )
    listed = {"qkv_proj": ("q_proj", "k_proj", "v_proj")}
    assert packed_entry(listed, "qkv_proj", parts).state == "listed"
    assert said(listed, parts) is None

    path = tmp_path / "mapped_model.py"
    path.write_text(
        "from torch import nn\n"
        "from vllm.model_executor.models.interfaces import SupportsLoRA\n"
        "\n"
        "class Inherits(nn.Module, SupportsLoRA):\n"
        "    pass\n"
        "\n"
        "class Own(nn.Module, SupportsLoRA):\n"
        "    packed_modules_mapping = {'qkv_proj': ['q_proj', 'k_proj', 'v_proj']}\n"
    )
    spec = importlib.util.spec_from_file_location("mapped_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mapped_model"] = module
    try:
        spec.loader.exec_module(module)
        assert "packed_modules_mapping" in vars(SupportsLoRA)  # the default this is about
        inherits = Sites(module.Inherits, nn.Module(), None)
        assert inherits.packed_mapping() == (str(path), 4)  # the class, not interfaces.py
        assert Sites(module.Own, nn.Module(), None).packed_mapping() == (str(path), 8)
    finally:
        sys.modules.pop("mapped_model", None)


def test_a_verified_dry_run_built_positionally_keeps_its_mapping_out_of_its_facts() -> None:
    """``dryrun.run`` builds ``DryRun(status, reason, findings, mapping, loading)``; the
    typed facts came fourth and took the mapping (every introspect then failed: "no
    phase-2 check reads str")."""
    from prefixlint.introspect.dryrun import DryRun

    outcome = DryRun("verified", "", [], {"a.weight": "a"}, {"streamed": ["a.weight"]})
    assert outcome.mapping == {"a.weight": "a"} and outcome.loading["streamed"] == ["a.weight"]
    assert outcome.facts == []
