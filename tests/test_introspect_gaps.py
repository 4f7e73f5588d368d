"""A build that fails for a reason outside the model (prefixlint's synthesised config, a
package or kernel this machine lacks) is a PFX600 "not verified" note, never a PFX604
error on the user's model; PFX604 stays for what the model's own code raises under a
config it was given. Real installed vLLM, one worker for the module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prefixlint.introspect import introspect, skipped_findings
from tests.conftest import requires_vllm
from tests.test_introspect import line_in_class, llama_copy, replace_in_class

pytestmark = requires_vllm

INIT = "        self.config = config\n"


def planted(tmp_path: Path, name: str, line: str) -> tuple[Path, str]:
    """llama.py with ``line`` run first thing in LlamaForCausalLM.__init__."""
    return llama_copy(tmp_path, name, replace_in_class("LlamaForCausalLM", INIT, INIT + line))


def test_cuda_only_import_is_not_verified(worker, tmp_path: Path) -> None:
    # KimiLinear's kernels import `cutlass` at construction; so does this copy.
    path, text = planted(tmp_path, "needs_cutlass", "        import cutlass  # noqa\n")
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(1,), worker=worker)
    [diag] = report.diagnostics
    assert diag.code == "PFX600" and diag.severity.value == "note", diag
    assert "not verified" in diag.message and "No module named 'cutlass'" in diag.message
    assert "GPU machine" in diag.message and "tp=1, tp=2" in diag.message
    # at the class, in the user's file: a place to click, not prefixlint's code
    assert Path(diag.filename).name == path.name
    assert diag.location.row == line_in_class(text, "LlamaForCausalLM", "class LlamaForCausalLM")
    assert report.results[0]["category"] == "environment"


def test_kimi_linear_cutlass_is_a_note_not_pfx604(worker) -> None:
    report = introspect("KimiLinearForCausalLM", tp=(1,), pp=(1,), worker=worker)
    codes = {d.code for d in report.diagnostics}
    assert "PFX604" not in codes, [d.message for d in report.diagnostics]
    if report.results[0]["status"] != "built":  # a machine with cutlass builds it
        assert codes == {"PFX600"}
        assert all(d.severity.value == "note" for d in report.diagnostics)


def test_whisper_pad_token_fits_the_shrunk_vocabulary(worker) -> None:
    from prefixlint.introspect.configs import synth_config

    cfg = synth_config("WhisperForConditionalGeneration")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        assert getattr(cfg, name) < cfg.vocab_size, name
    report = introspect("WhisperForConditionalGeneration", tp=(1, 2), pp=(1,), worker=worker)
    assert report.results[0]["status"] == "built", report.results[0]["reason"]
    assert "PFX604" not in {d.code for d in report.diagnostics}
    # No layout is "not verified" (notes of unexecuted sites or of the dry-run may remain).
    gaps = [d for d in report.diagnostics if d.code == "PFX600" and "building `" in d.message]
    assert gaps == [], [d.message for d in gaps]


def test_synthesised_config_gap_is_a_note_but_a_given_config_keeps_pfx604(
    worker, tmp_path: Path
) -> None:
    # The model demands a real checkpoint's vocabulary: a synthesised config cannot
    # have it (not the model's fault), a given config that lacks it is the model's word.
    path, _ = planted(tmp_path, "big_vocab", "        assert config.vocab_size > 100000\n")
    synthesised = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert [d.code for d in synthesised.diagnostics] == ["PFX600"]
    assert "--config path/to/config.json" in synthesised.diagnostics[0].message

    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=256,
    ).save_pretrained(tmp_path / "cfg")
    given = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), config=str(tmp_path / "cfg"), worker=worker
    )
    assert [d.code for d in given.diagnostics] == ["PFX604"]
    assert given.diagnostics[0].severity.value == "error"


def test_a_class_that_cannot_be_loaded_is_a_note() -> None:
    result = {
        "target": "SomeVisionForConditionalGeneration",
        "arch": "SomeVisionForConditionalGeneration",
        "status": "skipped",
        "category": "environment",
        "reason": "needs package torchvision",
        "findings": [],
        "class_file": "models/some_vision.py",
        "class_line": 12,
    }
    [note] = skipped_findings(result)
    assert note["code"] == "PFX600" and note["severity"] == "note"
    assert note["file"] == "models/some_vision.py" and note["line"] == 12
    assert "install `torchvision`" in note["message"]
    assert skipped_findings({**result, "status": "built"}) == []


def test_a_skipped_config_gap_says_what_the_worker_read_not_its_words() -> None:
    """Issue 37: whether the config was synthesised is the worker's typed fact
    (``TargetResult.synthesised``), read by the parent as it is; ``config_source`` is
    words for people and decides nothing."""
    result = {
        "target": "M",
        "arch": "M",
        "status": "skipped",
        "category": "config-gap",
        "reason": "no head_dim",
        "findings": [],
        "class_file": "m.py",
        "class_line": 3,
        "config_source": "synthesised (llama)",
    }
    [given] = skipped_findings({**result, "synthesised": False})
    assert "check `--config`" in given["message"] and "synthesised config" not in given["message"]
    [made] = skipped_findings({**result, "config_source": "file x", "synthesised": True})
    assert "prefixlint synthesised this config" in made["message"]
    # a target skipped before any config was read: nothing was given
    [early] = skipped_findings({k: v for k, v in result.items() if k != "config_source"})
    assert "prefixlint synthesised this config" in early["message"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefixlint", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_cli_not_verified_is_a_sarif_note_and_fails_only_with_strict(tmp_path: Path) -> None:
    path, _ = planted(tmp_path, "needs_cutlass", "        import cutlass  # noqa\n")
    target = f"{path}:LlamaForCausalLM"
    out = _cli("introspect", target, "--tp", "1", "--pp", "1", "--format", "sarif", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    [result] = json.loads(out.stdout)["runs"][0]["results"]
    assert result["ruleId"] == "PFX600" and result["level"] == "note"
    strict = _cli("introspect", target, "--tp", "1", "--pp", "1", "--strict", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout
    assert "not verified" in strict.stdout and "Not verified: 1" in strict.stdout
    check = _cli("check", str(path), "--introspect", "--tp", "1", "--pp", "1", cwd=tmp_path)
    assert "PFX600" in check.stdout and "PFX604" not in check.stdout


def test_zoo_summary_per_group_and_strict(monkeypatch, tmp_path: Path) -> None:
    from prefixlint.introspect.zoo import run as zoo
    from tests.test_cli import run

    note = {
        "code": "PFX600",
        "message": "not verified: building `C` failed because of this machine",
        "severity": "note",
        "phase": "introspect",
        "filename": "c.py",
        "location": {"row": 4, "column": 1},
        "end_location": {"row": 4, "column": 1},
        "fix": None,
        "url": None,
    }
    finding = {**note, "code": "PFX601", "severity": "error", "message": "wrong prefix"}
    rows = [
        zoo.Row("AForCausalLM", "text_generation_models", "built", findings=[finding]),
        zoo.Row("BForCausalLM", "text_generation_models", "built"),
        zoo.Row(
            "CVLForConditionalGeneration",
            "multimodal_models",
            "failed",
            "environment",
            "No module named 'cutlass'",
            notes=[note],
        ),
        zoo.Row("DVLForConditionalGeneration", "multimodal_models", "skipped", "config-gap"),
    ]
    summary = zoo.ZooSummary(rows, 1.0)
    groups = summary.by_group()
    assert groups["text_generation_models"]["built"] == 2
    assert groups["text_generation_models"]["with_findings"] == 1
    assert groups["multimodal_models"]["built"] == 0
    assert groups["multimodal_models"]["not_verified"] == {"environment": 1, "config-gap": 1}
    assert summary.findings == 1  # notes are not findings
    text = summary.to_text()
    assert "multimodal_models" in text and "environment 1" in text
    monkeypatch.setattr(zoo, "run_zoo", lambda **kw: zoo.ZooSummary(rows[1:], 1.0))
    code, out = run(["zoo", "--format", "sarif"], tmp_path)
    assert code == 0  # not verified is not a failure...
    assert [r["level"] for r in json.loads(out)["runs"][0]["results"]] == ["note"]
    code, _ = run(["zoo", "--strict"], tmp_path)
    assert code == 1  # ... unless --strict


# issue 40: the hub and the environment are "not verified" with their own cause and advice,
# never blamed on the synthesised config (with `--config` as the advice) nor the model's
HUB = (
    "        from huggingface_hub import hf_hub_download\n"
    '        hf_hub_download("org/companion-files", "vocab.json")\n'
)
ENV = '        import os\n        self.home = os.environ["MY_MODEL_HOME"]\n'


def test_a_constructor_downloading_from_the_hub_offline_is_not_verified(
    worker, tmp_path: Path
) -> None:
    path, _ = planted(tmp_path, "hub_files", HUB)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [diag] = [d for d in report.diagnostics if d.code in ("PFX600", "PFX604")]
    assert (diag.code, diag.severity.value) == ("PFX600", "note"), diag.message
    assert "Hugging Face Hub" in diag.message and "org/companion-files" in diag.message
    assert "--config" not in diag.message and "synthesised config" not in diag.message
    assert report.results[0]["category"] == "environment"


def test_a_missing_environment_variable_is_not_verified(worker, tmp_path: Path) -> None:
    path, _ = planted(tmp_path, "env_var", ENV)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    [diag] = [d for d in report.diagnostics if d.code in ("PFX600", "PFX604")]
    assert (diag.code, diag.severity.value) == ("PFX600", "note"), diag.message
    assert "environment variable `MY_MODEL_HOME`" in diag.message
    assert "--config" not in diag.message and "synthesised config" not in diag.message
    assert report.results[0]["category"] == "environment"


def test_a_module_level_cuda_only_import_is_not_verified(worker, tmp_path: Path) -> None:
    """The model's file imports a CUDA-only package at module level: not an error that
    stops the command (exit 2), a "not verified" note at the import with the advice."""
    path, _text = llama_copy(tmp_path, "top_cuda", lambda t: "import flash_attn  # noqa\n" + t)
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.error is None, report.error
    [diag] = report.diagnostics
    assert (diag.code, diag.severity.value, diag.location.row) == ("PFX600", "note", 1)
    assert "`flash_attn` is CUDA-only" in diag.message, diag.message
    assert report.results[0]["category"] == "environment"
