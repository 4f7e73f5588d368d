"""One build: a model constructed for one parallel layout on the meta device, every
construction recorded.

The steps mirror vLLM's own loader (``initialize_model`` under
``set_default_torch_dtype``), with the parallel groups faked and parameters on meta. A
draft is built under its target's ``VllmConfig``, a model that V1 refuses under Model
Runner V2: both said by the ``BuildPlan`` the pipeline passes. Runs inside a worker
process."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from prefixlint.introspect.process.env import prepare

prepare()

import torch  # noqa: E402
from torch import nn  # noqa: E402

from prefixlint.introspect import vllm_api  # noqa: E402
from prefixlint.introspect.builds.meta import meta_parameters  # noqa: E402
from prefixlint.introspect.builds.parallel import Layout, fake_parallel_state  # noqa: E402
from prefixlint.introspect.builds.recorder import PrefixRecorder  # noqa: E402
from prefixlint.introspect.process.kernels import install_stand_ins, install_triton_stand_ins  # noqa: E402
from prefixlint.introspect.verdict.gaps import runner_v2_reason  # noqa: E402


@dataclass
class BuildPlan:
    """How a model config is built: the pipeline makes one per target and passes it to
    every build (a rebuild under a quantization or LoRA config reuses its base build's)."""

    model_config: Any
    # The SpeculativeConfig a draft belongs to (``drafts/plan.py``): a draft is built
    # under its target's VllmConfig, as vLLM's proposers build it. None for a model.
    draft_spec: Any = None
    # Built under vLLM's Model Runner V2 (``model_runner_v2``); set once V1 refuses it.
    runner_v2: bool = False
    # The class to build instead of the one the config's architecture resolves to (vLLM's
    # own class of an out-of-tree copy's architecture, ``verdict/own.py``'s evidence)
    model_class: type | None = None

    def replanned(self, model_config: Any, draft_spec: Any = None) -> BuildPlan:
        """The plan for another config of the same model (a demanded dtype, a tokenizer,
        the checkpoint's quantization): built under the same runner. A draft planned again
        passes its new spec (the old one's target has the old dtype); a quantized config
        is built as vLLM builds a checkpoint's, on its own."""
        return BuildPlan(model_config, draft_spec, self.runner_v2)


@dataclass
class Build:
    layout: Layout
    model: nn.Module | None
    vllm_config: Any
    recorder: PrefixRecorder
    seconds: float
    error: BaseException | None = None
    error_tb: Any = None
    variant: str = ""  # the config variant it was built with ("" for the base config)
    plan: BuildPlan | None = None  # how it was built: a rebuild of it reuses the plan


def build_layout(
    plan: BuildPlan,
    layout: Layout,
    quant_config: Any = None,
    lora_config: Any = None,
    meta: bool = True,
    attention_backend: Any = None,
    native_ops: bool = False,
) -> Build:
    """``meta=False``: parameters real, on the CPU (the comparison with transformers runs
    the model). ``attention_backend``: the backend its layers select instead of the
    platform's choice (the comparison's: ``vllm_api.reference_mla_backend``).
    ``native_ops``: every CustomOp dispatches to vLLM's torch implementation of it (the
    comparison's, where this vLLM build has no CPU kernels: ``kernels.py``)."""
    from vllm.model_executor.model_loader.utils import initialize_model

    set_default_torch_dtype = vllm_api.set_default_torch_dtype()

    recorder = PrefixRecorder()
    install_stand_ins()  # vLLM's compiled ops this build lacks (kernels.py)
    install_triton_stand_ins()  # what vLLM's Triton placeholder lacks
    started = time.perf_counter()
    model_config = plan.model_config
    try:
        vllm_config = _vllm_config(plan, layout)
        if quant_config is not None:  # the quantization dry-run's synthetic config
            vllm_config.quant_config = quant_config
        if lora_config is not None:  # the LoRA dry-run's: as `--enable-lora` builds it
            vllm_config.lora_config = lora_config
        if attention_backend is not None:  # read when each attention layer is built
            vllm_config.attention_config.backend = attention_backend
        if native_ops:  # read when each CustomOp is built
            vllm_api.select_native_custom_ops(vllm_config)
    except Exception as e:
        return Build(layout, None, None, recorder, 0.0, e, e.__traceback__, plan=plan)
    model = None
    error: BaseException | None = None
    tb = None
    try:
        with (
            _fresh_caches(),
            # vLLM makes the expert group only for MoE configs; a synthesised config may
            # not say MoE where the model still builds experts, and a spare group is inert.
            fake_parallel_state(layout, moe=True),
            set_default_torch_dtype(model_config.dtype),
            torch.device("cpu"),
            meta_parameters() if meta else contextlib.nullcontext(),
            recorder.active(),
            model_runner_v2(plan),
        ):
            model = initialize_model(
                vllm_config=vllm_config, model_config=model_config, model_class=plan.model_class
            )
    except (Exception, SystemExit) as e:  # a model's sys.exit is its failure too
        error, tb = e, e.__traceback__
    seconds = time.perf_counter() - started
    return Build(layout, model, vllm_config, recorder, seconds, error, tb, plan=plan)


@contextlib.contextmanager
def _fresh_caches() -> Any:
    """get_rope() memoises rotary modules across models: a second build would reuse the
    first one's and never construct (or record) its own."""
    cache = vllm_api.rope_cache()
    saved = dict(cache) if isinstance(cache, dict) else None
    if isinstance(cache, dict):
        cache.clear()
    try:
        yield
    finally:
        if isinstance(cache, dict) and saved is not None:
            cache.clear()
            cache.update(saved)


V2_SOURCE = (
    "Model Runner V2 selected (VLLM_USE_V2_MODEL_RUNNER=1, as vLLM selects it where "
    "Triton has a GPU backend; its Triton check skipped: a meta build runs no kernel)"
)


@contextlib.contextmanager
def model_runner_v2(plan: BuildPlan) -> Any:
    """Select vLLM's Model Runner V2 for a model that V1 refuses ("Model Runner V1 does
    not support: dspark speculative decoding") or that requires V2 at construction.
    vLLM selects V2 by default wherever Triton finds a backend; here Triton finds none,
    so its check in VllmConfig's validation (``HAS_TRITON``, read by name there) is
    skipped for this build: the build constructs the model on the meta device and runs
    no Triton kernel. Restored afterwards; other models keep V1."""
    if not plan.runner_v2:
        yield
        return
    vllm_config_module = vllm_api.vllm_config_module()
    flag = vllm_api.TRITON_FLAG
    name = "VLLM_USE_V2_MODEL_RUNNER"
    old_env = os.environ.get(name)
    old_triton = getattr(vllm_config_module, flag, None)
    os.environ[name] = "1"
    if old_triton is not None:
        setattr(vllm_config_module, flag, True)
    try:
        yield
    finally:
        if old_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old_env
        if old_triton is not None:
            setattr(vllm_config_module, flag, old_triton)


def _vllm_config(plan: BuildPlan, layout: Layout) -> Any:
    with model_runner_v2(plan):
        return plain_vllm_config(plan, layout)


def plain_vllm_config(plan: BuildPlan, layout: Layout) -> Any:
    from vllm.config import ParallelConfig, VllmConfig

    parallel = ParallelConfig(tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp)
    spec = plan.draft_spec
    if spec is not None:
        return VllmConfig(
            model_config=spec.target_model_config,
            parallel_config=parallel,
            speculative_config=spec,
        )
    return VllmConfig(model_config=plan.model_config, parallel_config=parallel)


def needs_model_runner_v2(plan: BuildPlan, layout: Layout, error: Any = None) -> bool:
    """Whether vLLM refuses the model under Model Runner V1 (VllmConfig's validation, or
    ``error``: the model's own "requires the V2 model runner"): then it is built under
    V2 (``model_runner_v2``) from here on: ``plan.runner_v2`` is set. Costs a
    VllmConfig, not a build."""
    if plan.runner_v2:
        return False
    if error is None:
        try:
            plain_vllm_config(plan, layout)
            return False
        except Exception as e:
            error = e
    if not runner_v2_reason(str(error)):
        return False
    plan.runner_v2 = True
    return True
