"""The build plan (``builds/layout.py``): how a model config is built (a draft under its
target's VllmConfig, Model Runner V2) is passed with the config, and a config derived
from the model's (a demanded dtype, a checkpoint's quantization) gets a plan derived from
the model's. On the installed vLLM's own objects, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import tiny_checkpoints
from tests.conftest import requires_vllm

DRAFT = "EagleLlamaForCausalLM"


@requires_vllm
def test_a_draft_planned_again_in_its_demanded_dtype_keeps_its_runner() -> None:
    from prefixlint.introspect.process import env

    env.prepare()
    from prefixlint.introspect.builds import pipeline
    from prefixlint.introspect.builds.layout import plain_vllm_config
    from prefixlint.introspect.builds.parallel import Layout
    from prefixlint.introspect.targets.resolve import load_class, vllm_registry

    registry = vllm_registry()
    cls = load_class(registry, DRAFT)
    planned = pipeline._draft_model_config(DRAFT, cls, registry, DRAFT)
    assert planned is not None
    plan = planned[0]
    assert plan.draft_spec.draft_model_config is plan.model_config
    assert not plan.runner_v2
    plan.runner_v2 = True  # as needs_model_runner_v2 sets it when V1 refuses the model

    demand = RuntimeError("this kernel cache supports bfloat16 only")
    again = pipeline._draft_in_dtype(plan, DRAFT, cls, registry, DRAFT, demand)
    assert again is not plan and again.runner_v2
    assert again.draft_spec is not plan.draft_spec  # planned against a bfloat16 target
    assert again.draft_spec.draft_model_config is again.model_config
    assert str(again.model_config.dtype) == "torch.bfloat16"
    assert str(plan.model_config.dtype) == "torch.float32"  # the first plan is kept
    # built under its own target's VllmConfig, not the first plan's
    vllm_config = plain_vllm_config(again, Layout())
    assert vllm_config.speculative_config is again.draft_spec
    assert vllm_config.model_config is again.draft_spec.target_model_config
    # no dtype demanded: the same plan
    assert pipeline._draft_in_dtype(plan, DRAFT, cls, registry, DRAFT, None) is plan


@pytest.mark.slow  # a meta build, in-process
@requires_vllm
def test_a_checkpoints_quantized_build_keeps_the_models_runner(tmp_path: Path) -> None:
    from prefixlint.introspect.process import env

    env.prepare()
    from prefixlint.introspect.builds.layout import BuildPlan
    from prefixlint.introspect.builds.modelconfig import load_model_config
    from prefixlint.introspect.dryrun.realquant import quantized_build
    from prefixlint.introspect.targets.checkpoint import read

    folder = tiny_checkpoints.write(tmp_path / "ckpt", "fp8")
    checkpoint = read(str(folder))
    for runner_v2 in (False, True):
        plan = BuildPlan(load_model_config(str(folder)), runner_v2=runner_v2)
        quant = quantized_build(plan, checkpoint)
        assert quant.build is not None, quant.reason
        derived = quant.build.plan
        assert derived is not None and derived is not plan
        assert derived.model_config is quant.model_config is not plan.model_config
        assert derived.runner_v2 is runner_v2 and derived.draft_spec is None
        assert quant.build.vllm_config.quant_config is not None  # built under fp8
