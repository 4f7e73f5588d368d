"""The fix a packed-mapping finding proposes is the model's own, and the same in every code
(issue 40: "two defects together produce a wrong packed-mapping fix").

The trial's plugin is Qwen2-MoE-shaped: its loader stacks the checkpoint's parts through
``WeightsMapper(orig_to_new_stacked=...)`` with names qualified by their parent
(``".mlp.gate_proj": (".mlp.gate_up_proj", 0)``, to keep the shared expert's apart), and
its ``packed_modules_mapping`` is missing. Together, the static PFX407 proposed a table
with ``qkv_proj`` alone (it read the qualified names as keys no fused layer has), while
phase 2's PFX606 named both fused layers and pointed at vLLM's ``interfaces.py`` as "the
table". Applying the static fix left ``gate_up_proj`` out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_vllm
from tests.plugin_qwen import MOE_ARCH, make_moe_plugin

CHECKOUT = Path(__file__).resolve().parents[1]

QKV = "'qkv_proj': ['q_proj', 'k_proj', 'v_proj']"
GATE_UP = "'gate_up_proj': ['gate_proj', 'up_proj']"
# vLLM's table, and the line of its __init__ that adds the shared expert's entry
TABLE = """    packed_modules_mapping = {
        "qkv_proj": [
            "q_proj",
            "k_proj",
            "v_proj",
        ]
    }
"""
ADDS_GATE_UP = 'self.packed_modules_mapping["gate_up_proj"] = ["gate_proj", "up_proj"]'


def no_table(source: str) -> str:
    """Defect one: no ``packed_modules_mapping``; its entry added in ``__init__`` goes too."""
    return source.replace(TABLE, "").replace(ADDS_GATE_UP, "pass")


def check(root: Path, *args: str) -> list[dict]:
    command = [sys.executable, "-m", "prefixlint", "check", "--no-cache", "--format", "json"]
    done = subprocess.run(
        [*command, *args, "myplugin"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(CHECKOUT), "NO_COLOR": "1"},
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


@requires_vllm
def test_static_fix_names_every_fused_layer_the_mapper_stacks(tmp_path: Path) -> None:
    models = make_moe_plugin(tmp_path, no_table)
    found = [f for f in check(tmp_path, "--select", "PFX407") if f["code"] == "PFX407"]
    [finding] = found
    line = next(
        i
        for i, text in enumerate(models.read_text().splitlines(), 1)
        if text.startswith(f"class {MOE_ARCH}(")
    )
    assert finding["location"]["row"] == line
    assert f"add `packed_modules_mapping = {{{QKV}, {GATE_UP}}}`" in finding["message"]


@requires_vllm
def test_static_clean_moe_plugin_proposes_no_table(tmp_path: Path) -> None:
    make_moe_plugin(tmp_path)
    assert [f for f in check(tmp_path, "--select", "PFX407")] == []


@requires_vllm
@pytest.mark.slow
def test_static_and_phase2_propose_the_same_entries(tmp_path: Path) -> None:
    """Phase 2's PFX606 proposes each entry at its fused layer; together they are the
    table PFX407 proposes, and none names vLLM's own file as the table to edit."""
    make_moe_plugin(tmp_path, no_table)
    found = check(tmp_path, "--introspect", "--tp", "1", "--pp", "2", "--select", "PFX4,PFX6,PFX7")
    static = [f for f in found if f["code"] == "PFX407"]
    packed = [
        f for f in found if f["code"] == "PFX606" and "packed_modules_mapping" in f["message"]
    ]
    assert len(static) == 1 and len(packed) == 2, found
    proposed = sorted(e for f in packed for e in (QKV, GATE_UP) if f"add `{e}`" in f["message"])
    assert proposed == sorted([QKV, GATE_UP]), packed
    assert all(f"{e}" in static[0]["message"] for e in proposed)
    assert not any("interfaces.py" in f["message"] for f in found), found
    # the dry-run's PFX702 of the same missing entries is folded into them (its group)
    assert all(f"add `{e}`; the quantization dry-run confirms it" in str(packed) for e in proposed)
    assert not [f for f in found if f["code"] == "PFX702" and "has no entry" in f["message"]]
    assert all(Path(f["filename"]).name == "models.py" for f in static + packed)
