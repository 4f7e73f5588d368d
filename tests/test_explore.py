"""Reading what guards a construction site, and the variants derived from it (stdlib ``ast``
only: no torch, no vLLM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from prefixlint.introspect.coverage.sites import construction_sites, passes_quant_config
from prefixlint.introspect.coverage.variants import OTHER_KIND, applied, file_facts, variants_for

MODEL = """
TABLE = {"attention": AttnLayer, "mamba": MambaLayer}


class Attn:
    def __init__(self, config, q_lora_rank, prefix=""):
        self.q_lora_rank = q_lora_rank
        if self.q_lora_rank is not None:
            self.q_a = ReplicatedLinear(1, 2, quant_config=qc, prefix=f"{prefix}.q_a")
        else:
            self.q = ColumnParallelLinear(1, 2, prefix=f"{prefix}.q")


class Layer:
    def __init__(self, config, layer_idx, prefix=""):
        is_conv = config.layer_types[layer_idx] == "conv"
        self.mixer = Conv(prefix=f"{prefix}.conv") if is_conv else Attn(
            config, q_lora_rank=config.q_lora_rank, prefix=f"{prefix}.attn"
        )
        if (layer_idx + 1) % config.decoder_sparse_step == 0:
            self.mlp = MoE(prefix=f"{prefix}.mlp")
        block = TABLE[config.block_types[layer_idx]]
        self.block = block(prefix=f"{prefix}.block")
        self.embed = VocabParallelEmbedding(8, 8)

    def forward(self, x):
        return Helper(x, prefix="not a construction site")
"""


def test_sites_are_calls_passing_prefix_or_prefix_layers(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    sites = construction_sites(str(path))
    callees = [s.callee for s in sites]
    assert callees == [
        "ReplicatedLinear",
        "ColumnParallelLinear",
        "Attn",
        "Conv",
        "MoE",
        "block",
        "VocabParallelEmbedding",
    ]
    embed = next(s for s in sites if s.callee == "VocabParallelEmbedding")
    assert not embed.prefixed and embed.owner == "Layer"
    assert passes_quant_config(str(path), sites[0].line)
    assert not passes_quant_config(str(path), sites[1].line)


def test_guards_follow_locals_parameters_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    text = MODEL.splitlines()
    line = {s.callee: s.line for s in construction_sites(str(path))}
    facts = file_facts(str(path))
    assert "layer_types" in facts.guards[line["Conv"]]  # through ``is_conv``
    assert "q_lora_rank" in facts.guards[line["ReplicatedLinear"]]  # through the parameter
    assert "decoder_sparse_step" in facts.guards[line["MoE"]]
    assert facts.uses["decoder_sparse_step"].schedule
    assert facts.uses["q_lora_rank"].none
    assert facts.uses["layer_types"].compared == ["conv"]
    assert "block_types" in facts.uses and set(facts.uses["block_types"].compared) == {
        "attention",
        "mamba",
    }
    assert text[line["Conv"] - 1].strip().startswith("self.mixer = Conv(")


class _Config:
    def __init__(self) -> None:
        self.num_hidden_layers = 4
        self.layer_types = ["attn"] * 4
        self.q_lora_rank = 32
        self.decoder_sparse_step = 1
        self.block_types = ["attention"] * 4
        self.tie_word_embeddings = True


def test_variants_for_the_unexecuted_sites(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    line = {s.callee: s.line for s in construction_sites(str(path))}
    config = _Config()
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    missing = [f"{path}:{line[c]}" for c in ("Conv", "ColumnParallelLinear", "block")]
    variants = [v.overrides for v in variants_for(model_config, [str(path)], missing)]
    # one layer of each kind: the kinds the code names (and one it names nowhere when it
    # names a single one: the ``else`` branch)
    kinds = {k: set(v) for o in variants for k, v in o.items() if isinstance(v, list)}
    assert kinds == {"layer_types": {"conv", "attn"}, "block_types": {"mamba", "attention"}}
    assert all(len(v) == 4 for o in variants for v in o.values() if isinstance(v, list))
    assert {"q_lora_rank": None} in variants
    assert not any(OTHER_KIND in str(v) for v in variants)


def test_applied_restores_everything() -> None:
    config = _Config()
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    with applied(model_config, {"q_lora_rank": None, "new_attr": 3}) as ok:
        assert ok and config.q_lora_rank is None and config.new_attr == 3
        config.repaired = 1  # a repair of the variant
    assert config.q_lora_rank == 32 and not hasattr(config, "new_attr")
    assert not hasattr(config, "repaired")
