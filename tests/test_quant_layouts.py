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
from tests.test_dryrun import dry_run_diagnostics, findings, line_of, model_copy
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
