"""A guessed size transformers never reads, aligned with the size transformers builds the
same tensors with (``compare/widths.py``).

Fast: which guesses are aligned, from a model's and a checkpoint's tensor sizes. Slow
(real vLLM, one worker): HY V3's experts, ``expert_hidden_dim`` wide in vLLM (guessed)
and ``moe_intermediate_size`` wide in transformers, compare on clean vLLM (before: the
reference checkpoint did not load), and a planted routing scale gives PFX609 at the
experts' line."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import model_module, requires_vllm
from tests.test_compare import _line, _replace, model_copy

pytestmark = requires_vllm

MODEL = """
def build(config):
    return config.expert_width, config.other_width, config.num_experts
"""
REFERENCE = """
class Reference:
    def __init__(self, config):
        self.width = config.moe_intermediate_size
"""
EXPERTS = "model.layers.1.mlp.experts"


class _Config:
    num_experts: int = 4  # declared by the class: never a guess


def _aligned(tmp_path: Path, values: dict, reference: str = REFERENCE, mine=(4, 32, 16)):
    from prefixlint.introspect.compare.widths import aligned

    config = _Config()
    vars(config).update(values)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    files = tmp_path / "model.py"
    files.write_text(MODEL)
    module = model_module(tmp_path, reference)
    sys.modules[module.__name__] = module  # as transformers' modules are: its source is read
    ref_cls = module.Reference
    params = {f"{EXPERTS}.w2_weight": torch.empty(mine, device="meta")}
    model = SimpleNamespace(named_parameters=lambda: iter(params.items()))
    checkpoint = {f"{EXPERTS}.down_proj": torch.empty(4, 32, 64, device="meta")}
    try:
        return aligned(model_config, ref_cls, [str(files)], (model, checkpoint, None))
    finally:
        del sys.modules[module.__name__]


def test_a_guessed_width_takes_the_size_transformers_builds_the_experts_with(tmp_path) -> None:
    assert _aligned(tmp_path, {"expert_width": 16, "other_width": 8}) == {"expert_width": 64}
    # transformers stores its experts transposed: the same size
    transposed = _aligned(tmp_path, {"expert_width": 16}, mine=(4, 16, 32))
    assert transposed == {"expert_width": 64}


def test_no_guess_is_aligned_where_the_size_says_nothing_of_one(tmp_path) -> None:
    # the sizes agree
    assert _aligned(tmp_path, {"expert_width": 16}, mine=(4, 32, 64)) == {}
    # two guesses of that value: which one sizes the experts is not known
    assert _aligned(tmp_path, {"expert_width": 16, "other_width": 16}) == {}
    # more than one size differs
    assert _aligned(tmp_path, {"expert_width": 16}, mine=(4, 8, 16)) == {}
    # transformers reads the attribute itself: both sides see the same value
    named = REFERENCE + "\nNAMES = ('expert_width',)\n"
    assert _aligned(tmp_path, {"expert_width": 16}, reference=named) == {}
    # an attribute the config class declares is no guess: the model's own reading
    assert _aligned(tmp_path, {"num_experts": 16}) == {}


def test_the_unit_says_which_size_it_ran_with() -> None:
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Comparison, Status

    result = Comparison(Status.EQUAL, reference="R", aligned={"expert_width": 64})
    [note] = OutputMismatch().findings(result, None)
    assert note.code == "PFX600" and "`expert_width=64`" in note.message
    assert result.to_json()["aligned"] == {"expert_width": 64}


def _introspect(worker, target: str):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=0.0)


@pytest.mark.slow
def test_hy_v3_compares_with_its_guessed_expert_width_aligned(worker) -> None:
    report = _introspect(worker, "HYV3ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["aligned"] == {"expert_hidden_dim": 64}
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


CODE = "PFX609"
SCALE = "routed_scaling_factor=router_scaling_factor,"


@pytest.mark.slow
def test_a_routing_scale_planted_in_hy_v3_differs_at_its_experts(worker, tmp_path) -> None:
    """A copy of ``hy_v3.py`` whose routed experts' weights are scaled by 0.9: PFX609 at
    the line that builds them."""
    edit = _replace("HYV3MoEFused", SCALE, SCALE.replace(",", " * 0.9,"))
    folder = tmp_path / "models"  # where synthesis reads the model's code for its guesses
    folder.mkdir()
    path, text = model_copy(folder, "hy_v3.py", edit)
    report = _introspect(worker, f"{path}:HYV3ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "differs", result["compare"]
    found = [
        (Path(d.filename).name, d.location.row) for d in report.diagnostics if d.code == "PFX609"
    ]
    line = _line(text, "HYV3MoEFused", "self.experts = FusedMoEFactory(")
    assert found == [(path.name, line)], (found, result["compare"])
