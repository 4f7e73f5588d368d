"""Phase 2 builds vision-language, speech and draft architectures, and a prefix defect
planted in a vision tower, an audio encoder or a draft head is reported at its line.

Each case copies the installed vLLM's model file as an out-of-tree plugin (relative
imports made absolute), builds the clean copy and the edited one, and compares: the
edit adds a finding at the edited line, and nothing else changes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from prefixlint.introspect import introspect
from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm


def _optional_site_has(package: str) -> bool:
    from prefixlint.introspect.process.optional import optional_site

    site = optional_site()
    return importlib.util.find_spec(package) is not None or (
        site is not None and (site / package).is_dir()
    )


def model_copy(folder: Path, source: str, name: str, edit=None) -> tuple[Path, str]:
    assert VLLM is not None
    text = (VLLM / "model_executor" / "models" / source).read_text()
    text = re.sub(r"^(\s*)from \.(\w+)", r"\1from vllm.model_executor.models.\2", text, flags=re.M)
    if edit is not None:
        edited = edit(text)
        assert edited != text, "the edit did not apply"
        text = edited
    path = folder / f"{name}.py"
    path.write_text(text)
    return path, text


def in_class(cls: str, old: str, new: str):
    def edit(text: str) -> str:
        at = text.index(old, text.index(f"class {cls}("))
        return text[:at] + new + text[at + len(old) :]

    return edit


def line_of(text: str, anchor: str, needle: str) -> int:
    """The line of ``needle`` after ``anchor`` (``class X(`` or ``def f(``)."""
    return text.count("\n", 0, text.index(needle, text.index(anchor))) + 1


def findings(worker, path: Path, cls: str) -> set[tuple[str, str, int]]:
    report = introspect(f"{path}:{cls}", tp=(1, 2), pp=(1,), worker=worker)
    assert report.error is None, report.error
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    return {(d.code, Path(d.filename).name, d.location.row) for d in report.diagnostics}


def planted_defect_is_found(worker, tmp_path, source, cls, edit_cls, old, new, at=None):
    """``at``: (anchor, needle) of the line the finding belongs on (where the module with
    the wrong prefix is constructed); by default the edited line."""
    code = "PFX601"
    clean, _ = model_copy(tmp_path, source, f"clean_{source[:-3]}")
    edit = in_class(edit_cls, old, new)
    broken, text = model_copy(tmp_path, source, f"broken_{source[:-3]}", edit)
    before = {(c, f.replace("clean_", "broken_"), r) for c, f, r in findings(worker, clean, cls)}
    after = findings(worker, broken, cls)
    added = after - before
    anchor, needle = at or (f"class {edit_cls}(", new)
    expected = (code, broken.name, line_of(text, anchor, needle))
    assert expected in added, (expected, sorted(added))
    # Nothing but the wrong name, and what follows from it: with the checkpoint dry-run,
    # a quantization config that matches the checkpoint's names misses the renamed layers
    # (PFX702), at the same line.
    assert {c for c, _, _ in added} <= {code, "PFX702"}, sorted(added)
    assert {(f, r) for c, f, r in added if c == "PFX702"} <= {expected[1:]}, sorted(added)


@pytest.mark.skipif(not _optional_site_has("torchvision"), reason="torchvision not installed")
def test_vision_tower_prefix_defect_in_llava(worker, tmp_path: Path) -> None:
    planted_defect_is_found(
        worker,
        tmp_path,
        "llava.py",
        "LlavaForConditionalGeneration",
        "LlavaForConditionalGeneration",
        'prefix=maybe_prefix(prefix, "vision_tower"),',
        'prefix=maybe_prefix(prefix, "vision_model"),',
        # the tower is constructed in the file's helper, which passes the prefix on
        at=("def init_vision_tower_for_llava(", "return CLIPVisionModel("),
    )


def test_audio_encoder_prefix_defect_in_whisper(worker, tmp_path: Path) -> None:
    planted_defect_is_found(
        worker,
        tmp_path,
        "whisper.py",
        "WhisperForConditionalGeneration",
        "WhisperEncoderLayer",
        'prefix=f"{prefix}.self_attn",',
        'prefix=f"{prefix}.attn",',
        at=("class WhisperEncoderLayer(", "self.self_attn = WhisperAttention("),
    )


@pytest.mark.parametrize("package", ["torchvision", "torchaudio", "timm"])
def test_optional_package_imports_in_the_worker(package: str) -> None:
    """Set-up's torchvision/torchaudio cannot load their extension beside the CPU torch;
    the worker's preparation makes them import all the same (schemas only when the
    extension fails), and reports which way it went."""
    import subprocess
    import sys

    if not _optional_site_has(package):
        pytest.skip(f"{package} not installed")
    code = (
        "import torch\n"
        "from prefixlint.introspect.process.optional import prepare_optional_packages, STATUS\n"
        "prepare_optional_packages()\n"
        f"import {package}\n"
        "print(STATUS)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    status = out.stdout.strip().splitlines()[-1]
    assert "error" not in status, status
    if package == "torchvision":
        assert "'torchvision': 'extension'" in status or "'torchvision': 'schemas'" in status


def test_draft_head_prefix_defect_in_eagle(worker, tmp_path: Path) -> None:
    # EAGLE builds against a synthesised Llama target under vLLM's SpeculativeConfig
    planted_defect_is_found(
        worker,
        tmp_path,
        "llama_eagle.py",
        "EagleLlamaForCausalLM",
        "LlamaModel",
        'prefix=maybe_prefix(prefix, "fc"),',
        'prefix=maybe_prefix(prefix, "proj"),',
        at=("class LlamaModel(", "self.fc = ReplicatedLinear("),
    )


def test_eagle_draft_builds_clean_against_its_target(worker) -> None:
    """The draft's layers are numbered on from the target's (``start_layer_id``): vLLM's
    naming for KV-cache uniqueness, not a prefix mismatch."""
    report = introspect("EagleLlamaForCausalLM", tp=(1, 2), pp=(1,), worker=worker)
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    assert "draft (eagle) of LlamaForCausalLM" in result["config_source"]
    assert not [d for d in report.diagnostics if d.severity.value == "error"], [
        d.message for d in report.diagnostics
    ]
    mtp = introspect("DeepSeekMTPModel", tp=(1,), pp=(1,), worker=worker)
    assert mtp.results[0]["status"] == "built", mtp.results[0]["reason"]
    assert "draft (mtp) of Deepseek" in mtp.results[0]["config_source"]


@pytest.mark.skipif(not _optional_site_has("torchvision"), reason="torchvision not installed")
def test_processor_is_not_loaded_for_a_meta_build(worker) -> None:
    # ColQwen3's ModelConfig asks its processor which modalities it takes; a synthesised
    # folder has no processor files, and a meta build runs no processor.
    report = introspect("ColQwen3", tp=(1,), pp=(1,), worker=worker)
    assert report.results[0]["status"] == "built", report.results[0]["reason"]
