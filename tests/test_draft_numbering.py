"""Draft numbering (issue 29): a draft's per-layer lists are varied for layers numbered on
from the target's. vLLM's llama.py reads ``layer_types`` of an EAGLE-3 draft at the layer's
position in the draft (its number minus ``target_layer_count``); a copy made at test time
that indexes it with the layer's number reads past the end of a draft checkpoint's list,
which a synthesised draft config without ``layer_types`` never shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefixlint.introspect import introspect
from prefixlint.introspect.coverage.variants import file_facts
from tests.conftest import VLLM, requires_vllm

RELATIVE_INDEX = """            if hasattr(config, "target_layer_count"):
                # This is a draft model,
                # adjust layer_idx to be relative to draft layers
                effective_layer_idx = layer_idx - config.target_layer_count
            else:
                # This is a target model, use layer_idx directly
                effective_layer_idx = layer_idx
            assert effective_layer_idx < len(layer_types), (
                f"effective_layer_idx: {effective_layer_idx} "
                f"is out of bounds for layer_types: {layer_types}"
            )

            is_sliding = layer_types[effective_layer_idx] == "sliding_attention"
"""
GLOBAL_INDEX = '            is_sliding = layer_types[layer_idx] == "sliding_attention"\n'


def draft_package(folder: Path, global_index: bool) -> tuple[Path, str]:
    """vLLM's llama.py and llama_eagle3.py as a package (the draft imports the copied
    llama; a name per copy, as the module's worker keeps what it imported), the llama copy
    indexing ``layer_types`` globally or not."""
    assert VLLM is not None
    models = VLLM / "model_executor" / "models"
    name = "toydraft_global" if global_index else "toydraft_relative"
    package = folder / name
    package.mkdir()
    (package / "__init__.py").write_text("")

    def absolute(text: str) -> str:
        text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
        return text.replace(
            "from vllm.model_executor.models.llama import", f"from {name}.llama import"
        )

    llama = absolute((models / "llama.py").read_text())
    assert RELATIVE_INDEX in llama, "the installed llama.py changed"
    if global_index:
        llama = llama.replace(RELATIVE_INDEX, GLOBAL_INDEX)
    (package / "llama.py").write_text(llama)
    (package / "llama_eagle3.py").write_text(absolute((models / "llama_eagle3.py").read_text()))
    return package / "llama_eagle3.py", llama


def test_a_list_indexed_by_a_layer_number_is_read(tmp_path: Path) -> None:
    source = (
        "def build(config, layer_idx, prefix, i):\n"
        "    if layer_types := getattr(config, 'layer_types', None):\n"
        "        kind = layer_types[layer_idx - config.offset]\n"
        "    window = config.windows[i]\n"
        "    head = config.heads[0]\n"  # a literal index: not a per-layer read
        "    name = config.names[prefix]\n"  # not a layer index
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    uses = file_facts(str(path)).uses
    assert uses["layer_types"].indexed == {3}
    assert uses["windows"].indexed == {4}
    assert all(not uses[a].indexed for a in ("heads", "names") if a in uses)


@requires_vllm
@pytest.mark.slow
def test_a_draft_indexing_a_per_layer_list_by_its_global_number(worker, tmp_path) -> None:
    path, text = draft_package(tmp_path, global_index=True)
    report = introspect(f"{path}:Eagle3LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    line = text[: text.index(GLOBAL_INDEX)].count("\n") + 1
    found = [
        (Path(d.filename).name, d.location.row, d.message)
        for d in report.diagnostics
        if d.code == "PFX604"
    ]
    assert [(f, at) for f, at, _ in found] == [("llama.py", line)], found
    assert "layer_types" in found[0][2] and "IndexError" in found[0][2]


@requires_vllm
@pytest.mark.slow
def test_the_clean_draft_builds_with_its_own_per_layer_list(worker, tmp_path) -> None:
    path, _ = draft_package(tmp_path, global_index=False)
    report = introspect(f"{path}:Eagle3LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert [d for d in report.diagnostics if d.code == "PFX604"] == []
    (result,) = report.results
    tried = [v for v in result["variants"] if "one entry per draft layer" in v["why"]]
    assert tried and all(v["status"] in ("no new site", "kept") for v in tried), tried
