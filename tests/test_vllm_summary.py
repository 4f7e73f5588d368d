"""The summary of vLLM that ships with prefixlint matches the vLLM it was made from, and
the facts the rules read are the same from either source."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prefixlint.static.index import module_name_for
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.vllm_facts import Reduction, embed_method, owns_engine_cache, reduction
from prefixlint.static.vllm_source import (
    InstalledVllm,
    build_summary,
    installed_vllm,
    load_shipped,
    shipped_summaries,
)
from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm


def shipped_for_installed():
    assert VLLM is not None
    version = InstalledVllm(VLLM).version
    for path in shipped_summaries():
        if path.name == f"vllm-{version}.json.gz":
            return load_shipped(path)
    pytest.skip(f"no shipped summary of the installed vLLM {version}")


@pytest.mark.slow
def test_shipped_summary_is_the_installed_vllm() -> None:
    """Regenerate with ``python scripts/vllm_summary.py`` when this fails."""
    assert VLLM is not None
    shipped = shipped_for_installed()
    fresh = build_summary(VLLM)
    assert fresh["vllm_version"] == shipped.version
    assert sorted(fresh["modules"]) == sorted(shipped.data["modules"])
    assert fresh == shipped.data


# Names the rules resolve in model files, by the module model files import them from.
LAYERS = {
    "vllm.model_executor.layers.linear": [
        "RowParallelLinear",
        "ColumnParallelLinear",
        "QKVParallelLinear",
        "MergedColumnParallelLinear",
        "ReplicatedLinear",
    ],
    "vllm.model_executor.layers.vocab_parallel_embedding": [
        "VocabParallelEmbedding",
        "ParallelLMHead",
    ],
    "vllm.model_executor.layers.fused_moe": ["FusedMoEFactory", "GateLinear"],
    "vllm.model_executor.layers.attention": ["Attention"],
}


def facts(resolver: Resolver) -> dict:
    from prefixlint.static.index import ModuleSummary

    out: dict = {"embed": embed_method(resolver)}
    for module, names in LAYERS.items():
        here = ModuleSummary(path="<probe>", module="probe", is_package=False)
        here.imports = {n: (module, n) for n in names}
        for name in names:
            sig = resolver.prefix_signature(here, name)
            symbol = resolver.resolve(here, name)
            out[name] = (
                None if sig is None else [p.name for p in sig.params],
                None if symbol is None else reduction(resolver, symbol),
                None if symbol is None else owns_engine_cache(resolver, symbol),
            )
    llama = resolver.loader.by_name("vllm.model_executor.models.llama")
    assert llama is not None
    for cls in ("LlamaForCausalLM", "LlamaModel"):
        from prefixlint.static.resolve import Symbol

        symbol = Symbol(llama, cls, cls=llama.classes[cls])
        out[cls] = [
            resolver.class_has(symbol, m)
            for m in ("make_empty_intermediate_tensors", "embed_input_ids", "load_weights")
        ]
    return out


def test_the_rules_read_the_same_facts_from_either_source() -> None:
    assert VLLM is not None
    shipped = shipped_for_installed()
    from_disk = facts(Resolver(ModuleLoader(vllm=InstalledVllm(VLLM))))
    from_summary = facts(Resolver(ModuleLoader(vllm=shipped)))
    assert from_disk == from_summary
    # What the facts say, read from vLLM's code.
    assert from_disk["RowParallelLinear"][1] == Reduction("reduce_results", True)
    assert from_disk["FusedMoEFactory"][1] == Reduction("reduce_results", True)
    assert from_disk["VocabParallelEmbedding"][1] == Reduction("reduce_results", True)
    assert from_disk["ParallelLMHead"][1] is None  # a head: its forward reduces nothing
    assert from_disk["ColumnParallelLinear"][1] is None
    assert from_disk["Attention"][2] is True and from_disk["ReplicatedLinear"][2] is False
    assert from_disk["LlamaForCausalLM"] == [True, True, True]


def test_registry_reads_the_same_from_either_source() -> None:
    assert VLLM is not None
    shipped = shipped_for_installed()
    assert InstalledVllm(VLLM).registry() == shipped.registry()
    llama = [e for e in shipped.registry() if e.architecture == "LlamaForCausalLM"]
    assert [e.definitions for e in llama] == [
        (("vllm.model_executor.models.llama", "LlamaForCausalLM"),)
    ]


def test_a_folder_named_vllm_that_is_not_an_installation_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "vllm" / "model_executor" / "models"
    mirror.mkdir(parents=True)
    for folder in (tmp_path / "vllm", mirror.parent, mirror):
        (folder / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert installed_vllm() == VLLM
    assert module_name_for(mirror / "__init__.py")[0] == "vllm.model_executor.models"


def test_a_layer_whose_forward_all_reduces_always_reduces(tmp_path: Path) -> None:
    """A release whose embedding had no flag: ``reduction`` reads its forward."""
    layers = tmp_path / "vllm" / "model_executor" / "layers"
    layers.mkdir(parents=True)
    for folder in (tmp_path / "vllm", layers.parent, layers):
        (folder / "__init__.py").write_text("")
    (layers / "embedding.py").write_text(
        "from torch import nn\n"
        "from vllm.distributed import tensor_model_parallel_all_reduce\n\n"
        "class OldEmbedding(nn.Module):\n"
        '    def __init__(self, vocab, dim, prefix=""):\n'
        "        super().__init__()\n\n"
        "    def forward(self, ids):\n"
        "        return tensor_model_parallel_all_reduce(ids)\n\n"
        "class OldHead(OldEmbedding):\n"
        "    def forward(self, ids):\n"
        "        raise RuntimeError\n"
    )
    resolver = Resolver(ModuleLoader(roots=[tmp_path / "vllm"]))
    summary = resolver.loader.by_name("vllm.model_executor.layers.embedding")
    assert summary is not None
    from prefixlint.static.resolve import Symbol

    embed = Symbol(summary, "OldEmbedding", cls=summary.classes["OldEmbedding"])
    head = Symbol(summary, "OldHead", cls=summary.classes["OldHead"])
    assert reduction(resolver, embed) == Reduction(None)
    assert reduction(resolver, head) is None
