"""Phase 2 against the real installed vLLM: the unmodified Llama builds clean on every
layout, and each PFX60x code fires on an out-of-tree copy of llama.py with one planted bug,
at the edited line. One worker process serves the whole module (vLLM imports once)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prefixlint.introspect import introspect
from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm


def llama_copy(folder: Path, name: str, edit) -> tuple[Path, str]:
    """llama.py as an out-of-tree plugin file (relative imports made absolute), edited."""
    assert VLLM is not None
    text = (VLLM / "model_executor" / "models" / "llama.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    text = edit(text)
    path = folder / f"{name}.py"
    path.write_text(text)
    return path, text


def replace_in_class(cls: str, old: str, new: str):
    def edit(text: str) -> str:
        start = text.index(f"class {cls}(")
        at = text.index(old, start)
        return text[:at] + new + text[at + len(old) :]

    return edit


def line_in_class(text: str, cls: str, needle: str) -> int:
    at = text.index(needle, text.index(f"class {cls}("))
    return text.count("\n", 0, at) + 1


# The one defect of the unmodified llama.py that phase 2 sees: the embedding is built
# without `prefix` (static PFX301 reports it too) while a quant_config reaches it.
LLAMA_KNOWN = {("PFX601", "self.embed_tokens = VocabParallelEmbedding(")}


def known_defect(diag) -> bool:
    import linecache

    line = linecache.getline(str(Path(diag.filename).resolve()), diag.location.row).strip()
    return (diag.code, line) in LLAMA_KNOWN


def test_llama_builds_clean_on_every_layout(worker) -> None:
    report = introspect("LlamaForCausalLM", worker=worker)
    assert report.error is None
    [result] = report.results
    assert result["status"] == "built" and result["config_source"].startswith("synthesised")
    names = [(lay["tp"], lay["pp"], lay["pp_rank"]) for lay in result["layouts"]]
    assert names == [
        (1, 1, 0),
        (2, 1, 0),
        (4, 1, 0),
        (8, 1, 0),
        (1, 2, 0),
        (1, 2, 1),
        (1, 4, 0),
        (1, 4, 1),
        (1, 4, 3),
    ]
    assert all(lay["status"] == "built" for lay in result["layouts"])
    assert [d.code for d in report.diagnostics] == ["PFX601"]
    [embedding] = report.diagnostics
    assert known_defect(embedding) and embedding.severity.value == "error", embedding
    assert "quantization" in embedding.message and "`model.embed_tokens`" in embedding.message
    coverage = result["coverage"]
    assert coverage["sites"] > 10 and coverage["executed"] == coverage["sites"], coverage


CASES = [
    # (id, code, class, old, new, text on the line expected)
    (
        "layer-prefix-inside-make-layers",
        "PFX601",
        "LlamaModel",
        "layer_type(vllm_config=vllm_config, prefix=prefix)",
        'layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers")',
        'layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers")',
    ),
    (
        "mlp-without-prefix",
        "PFX601",
        "LlamaDecoderLayer",
        'prefix=f"{prefix}.mlp",',
        "",
        "self.mlp = LlamaMLP(",
    ),
    (
        "lm-head-named-after-another-attribute",
        "PFX601",
        "LlamaForCausalLM",
        'maybe_prefix(prefix, "lm_head")',
        'maybe_prefix(prefix, "head")',
        "self.lm_head = ParallelLMHead(",
    ),
    (
        "literal-attention-prefix",
        "PFX602",
        "LlamaAttention",
        'prefix=f"{prefix}.attn",',
        'prefix="attn",',
        "self.attn = attn_cls(",
    ),
    (
        "raises-in-init",
        "PFX604",
        "LlamaForCausalLM",
        "        self.config = config\n",
        '        self.config = config\n        raise RuntimeError("planted")\n',
        'raise RuntimeError("planted")',
    ),
    (
        "packed-mapping-names-a-missing-module",
        "PFX606",
        "LlamaForCausalLM",
        '"qkv_proj": ["q_proj", "k_proj", "v_proj"],\n'
        '        "gate_up_proj": ["gate_proj", "up_proj"],',
        '"fused_xyz": ["x", "y"],',
        "class LlamaForCausalLM(",
    ),
]


@pytest.mark.parametrize(
    ("code", "cls", "old", "new", "at"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_planted_bug_is_reported_at_its_line(
    worker, tmp_path: Path, code: str, cls: str, old: str, new: str, at: str
) -> None:
    path, text = llama_copy(tmp_path, f"broken_{code.lower()}", replace_in_class(cls, old, new))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(2,), worker=worker)
    assert report.error is None, report.error
    new = [d for d in report.diagnostics if not known_defect(d)]
    found = [(d.code, Path(d.filename).name, d.location.row) for d in new]
    expected = (code, path.name, line_in_class(text, cls, at))
    assert expected in found, (expected, found, [d.message for d in report.diagnostics])
    # Nothing else is wrong with the copy: every finding is the planted one's code, or
    # PFX702's consequence for quantization (a wrong prefix: at the same line).
    others = {(c, f, line) for c, f, line in found if c != code}
    if code in ("PFX601", "PFX602", "PFX606"):
        others = {(c, f, line) for c, f, line in others if (c, f) != ("PFX702", path.name)}
    if code in ("PFX601", "PFX602"):
        assert all(line == expected[2] for c, _, line in found if c == "PFX702"), found
    assert not others, [d.message for d in report.diagnostics]


def test_heads_not_divisible_names_working_sizes(worker, tmp_path: Path) -> None:
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=256,
        max_position_embeddings=128,
    )
    config.save_pretrained(tmp_path)
    report = introspect("LlamaForCausalLM", tp=(1, 3), pp=(1,), config=str(tmp_path), worker=worker)
    [diag] = [d for d in report.diagnostics if not known_defect(d)]
    assert diag.code == "PFX603" and diag.severity.value == "warning"
    assert "in layout tp=3" in diag.message and "1, 2, 4, 8" in diag.message
    assert diag.filename.endswith("llama.py")
    statuses = [(lay["tp"], lay["status"]) for lay in report.results[0]["layouts"]]
    assert statuses == [(1, "built"), (3, "failed")]


def test_pp_class_building_every_layer_on_every_stage(worker, tmp_path: Path) -> None:
    old = """        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: layer_type(vllm_config=vllm_config, prefix=prefix),
            prefix=f"{prefix}.layers",
        )"""
    new = """        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = nn.ModuleList(
            [
                layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers.{i}")
                for i in range(config.num_hidden_layers)
            ]
        )"""
    path, text = llama_copy(tmp_path, "all_stages", replace_in_class("LlamaModel", old, new))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(2,), worker=worker)
    found = [(d.code, d.location.row) for d in report.diagnostics if not known_defect(d)]
    line = line_in_class(text, "LlamaModel", "layer_type(vllm_config=vllm_config, prefix=f")
    assert ("PFX605", line) in found, found
    assert {c for c, _ in found} == {"PFX605"}


def test_hanging_model_becomes_pfx604_and_the_worker_recovers(worker, tmp_path: Path) -> None:
    path, _ = llama_copy(
        tmp_path,
        "hangs",
        replace_in_class(
            "LlamaForCausalLM",
            "        self.config = config\n",
            "        self.config = config\n        import time\n        time.sleep(600)\n",
        ),
    )
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), timeout=20, worker=worker)
    [diag] = report.diagnostics
    assert diag.code == "PFX604" and "hung" in diag.message
    assert diag.filename.endswith("hangs.py")
    again = introspect("LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert again.results[0]["status"] == "built"


def test_unknown_target_is_an_error_not_a_traceback(worker) -> None:
    report = introspect("NoSuchArchitectureForCausalLM", worker=worker)
    assert report.error is not None and "registry" in report.error


def test_cli_json(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefixlint",
            "introspect",
            "LlamaForCausalLM",
            "--tp",
            "1,2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert out.returncode == 1, out.stderr[-2000:]  # llama.py's embedding (LLAMA_KNOWN)
    [finding] = json.loads(out.stdout)
    assert finding["code"] == "PFX601" and finding["filename"].endswith("llama.py")
    assert "tp=2" in out.stderr and "built" in out.stderr
    assert "construction sites executed" in out.stderr


# Config synthesis: how the model's code uses an attribute decides the guessed value.


def _config(**kw):
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=16, **kw)


def test_guess_reads_the_models_code() -> None:
    from prefixlint.introspect.configs import guess_attribute

    code = """
if config.mlp_layer_types[layer_idx] == "sparse":
    pass
if (layer_idx + 1) % config.decoder_sparse_step == 0:
    pass
if self.config.hybrid_layer_pattern[self.layer_id] == 1:
    pass
window = getattr(config, "swa_window", 128)
if config.att_impl_type == "GQA":
    pass
if layer_id < config.dense_mlp_idx:
    pass
"""
    cfg = _config()
    assert guess_attribute("mlp_layer_types", cfg, [code]) == ["dense", "sparse"] * 2
    assert guess_attribute("decoder_sparse_step", cfg, [code]) == 1
    assert guess_attribute("hybrid_layer_pattern", cfg, [code]) == [0, 1, 0, 1]
    assert guess_attribute("swa_window", cfg, [code]) == 128
    assert guess_attribute("att_impl_type", cfg, [code]) == "GQA"
    assert guess_attribute("dense_mlp_idx", cfg, [code]) == 1
    # the name table still answers where the code says nothing, and beats a compared value
    act = 'if config.activation_function == "swiglu": pass'
    assert guess_attribute("activation_function", cfg, [act]) == "silu"
    assert guess_attribute("text_config", cfg, ["if config.text_config: pass"]) is None


def test_repair_fills_an_attribute_that_is_none_where_the_code_indexes_it(tmp_path) -> None:
    import importlib.util

    from prefixlint.introspect.configs import repair

    src = tmp_path / "models" / "toy.py"
    src.parent.mkdir()
    src.write_text(
        "def build(config):\n"
        "    for i in range(config.num_hidden_layers):\n"
        '        kind = config.layer_types[i] == "full_attention"\n'
    )
    spec = importlib.util.spec_from_file_location("toy_model", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = _config()
    cfg.layer_types = None
    try:
        module.build(cfg)
    except TypeError as e:
        assert repair(e, [cfg]) == "layer_types"
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2
    module.build(cfg)


def test_synthesis_finds_configs_by_name_and_keeps_derived_layer_indices() -> None:
    from prefixlint.introspect.configs import arch_to_model_types, synth_config

    # vLLM's own config class under the architecture's name (no mapping lists it)
    assert arch_to_model_types("Step3p5ForCausalLM") == ["step3p5"]
    # a causal LM prefers its family's text-only config
    assert arch_to_model_types("Llama4ForCausalLM")[0] == "llama4_text"
    # Zamba2 derives hybrid_layer_ids from layers_block_type: they must agree
    cfg = synth_config("Zamba2ForCausalLM")
    hybrid = [i for i, t in enumerate(cfg.layers_block_type) if t == "hybrid"]
    assert cfg.hybrid_layer_ids == hybrid and hybrid
    # Mamba2: SSM heads shrink with the hidden size
    assert synth_config("Mamba2ForCausalLM").num_heads == 16


def test_counts_of_a_kind_of_layer_keep_their_share_of_the_shrunk_layers() -> None:
    """Gemma 3n shares the KV cache of its last 15 of 35 layers: shrunk to 4 layers, the
    count must stay below 4 or no layer computes its own KV (transformers' reference then
    refuses the config), and a single MTP layer stays one."""
    from prefixlint.introspect.configs import synth_config

    gemma = synth_config("Gemma3nForCausalLM")
    assert 1 <= gemma.num_kv_shared_layers < gemma.num_hidden_layers
    assert synth_config("DeepseekV3ForCausalLM").num_nextn_predict_layers == 1


def test_backend_limits_are_environment() -> None:
    from prefixlint.introspect.builds.pipeline import classify

    for error in (
        ValueError("use_alibi_sqrt is not supported by backend CPU_ATTN."),
        TypeError("CPUAttentionBackendImpl.__init__() got an unexpected keyword argument 'x'"),
        RuntimeError("Tried to instantiate dummy base class Event"),
    ):
        assert classify(error, [], True) == "environment"


@requires_vllm
def test_duplicate_name_from_a_loop_without_index_points_at_the_loop(worker) -> None:
    """vLLM's "Duplicate layer name" is raised deep inside the second layer's attention,
    but the defect is the call in the comprehension that left out the index: PFX602
    points there, not at `Attention(...)`."""
    path = Path(__file__).parent / "fixtures" / "introspect" / "loop_without_index.py"
    lines = path.read_text().splitlines()
    loop_call = next(i for i, t in enumerate(lines, 1) if t.strip() == "Block(")
    report = introspect(f"{path}:LoopForCausalLM", tp=(1,), pp=(1,), worker=worker)
    found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX602"]
    assert found == [("PFX602", loop_call)], report.diagnostics


def test_vllm_private_tables_have_a_fallback(monkeypatch) -> None:
    """vLLM's architecture and config-class tables are private: where a release moves
    them, synthesis goes on with transformers' tables alone."""
    import vllm.transformers_utils.config as vllm_config

    from prefixlint.introspect.configs import (
        arch_to_model_types,
        vllm_architecture_types,
        vllm_config_registry,
    )

    assert vllm_config_registry() and vllm_architecture_types()  # vLLM 0.32's layout
    monkeypatch.delattr(vllm_config, "_CONFIG_REGISTRY")
    monkeypatch.delattr(vllm_config, "_ARCHITECTURE_TO_MODEL_TYPE")
    assert vllm_config_registry() == {} and vllm_architecture_types() == {}
    assert arch_to_model_types("LlamaForCausalLM") == ["llama"]


def test_a_divergence_no_consumer_reads_is_a_note(worker, tmp_path: Path) -> None:
    """PFX601 is an error where a consumer looks the name up (Llama's ``embed_tokens``
    gets ``quant_config``) and a note where none does: the same embedding built without
    ``quant_config`` breaks nothing today (issue 20: JSON and SARIF carry it at level
    note, default text output and review comments leave it out)."""
    path, _ = llama_copy(
        tmp_path,
        "quiet_embedding",
        replace_in_class(
            "LlamaModel",
            "config.hidden_size,\n                quant_config=quant_config,\n            )",
            "config.hidden_size,\n            )",
        ),
    )
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert report.error is None, report.error
    found = [(d.code, d.severity.value) for d in report.diagnostics]
    assert found == [("PFX601", "note")], [d.message for d in report.diagnostics]
    assert "nothing looks this name up today" in report.diagnostics[0].message


def test_a_constructor_that_always_raises_is_one_finding_at_its_line(worker, tmp_path) -> None:
    """Issue 30: a bare `assert` that every layout reaches is one PFX604 at its line, which
    quotes the statement (the error says nothing itself) and names the layouts; the
    pipeline stages of a two-layer config fail the same way before any layer is built, so
    they give no "a config with more layers would tell" note."""
    from transformers import LlamaConfig

    planted = "        assert config.hidden_size < 0\n"
    init = "        self.config = config\n"
    path, text = llama_copy(
        tmp_path, "always_raises", replace_in_class("LlamaForCausalLM", init, init + planted)
    )
    LlamaConfig(
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=256,
    ).save_pretrained(tmp_path / "config")
    report = introspect(
        f"{path}:LlamaForCausalLM",
        tp=(1, 2),
        pp=(2,),
        config=str(tmp_path / "config"),
        worker=worker,
    )
    line = line_in_class(text, "LlamaForCausalLM", "assert config.hidden_size < 0")
    [failed] = [d for d in report.diagnostics if d.code == "PFX604"]
    assert failed.location.row == line, failed
    assert "`assert config.hidden_size < 0`" in failed.message, failed.message
    assert "tp=1" in failed.message and "stage 1" in failed.message, failed.message
    assert not [d for d in report.diagnostics if d.code == "PFX600"], report.diagnostics
