"""PFX608: what vLLM's engine start-up would refuse, found with vLLM's own validators.

A model can build on the meta device and still never start: vLLM checks a class when its
module defines it (``@support_torch_compile`` infers the dynamic dimensions of ``forward``
from its annotations and refuses a ``forward`` without them), when it makes the model
config (the runner needs a text-generation or pooling model: ``compute_logits``,
``embed_input_ids``, a ``forward`` taking ``input_ids`` and ``positions``), and when it
binds the KV cache (``extract_layer_index`` on every attention layer's name: one integer,
the layer's index). Each is called here as vLLM calls it, on the class or the built model,
and a refusal is reported at the line of the model that causes it, with vLLM's message.

A failure of the model's own code while its module is imported (``sys.exit``, a raise at
module level) is PFX604 at that line, as a failure in ``__init__`` is.

Runs inside the worker process (imports vLLM).
"""

from __future__ import annotations

import functools
import inspect
import re
import traceback
from pathlib import Path
from typing import Any, ClassVar

from prefixlint.codes import CONSTRUCTION_FAILED_CODE
from prefixlint.introspect.checks.base import Case, Check, class_site
from prefixlint.introspect.finding import Finding, model_code

CODE = "PFX608"


class EngineStart(Check):
    """## What it does
    Calls vLLM's own start-up validators as vLLM calls them: `@support_torch_compile`'s
    inference of `forward`'s dynamic dimensions, the model interface the runner needs
    (`compute_logits` or a pooler, `embed_input_ids`, `forward(input_ids, positions)`),
    `extract_layer_index` on every KV-cache layer's name. The pipeline calls
    `import_failure`, `interface_refusal` and `layer_index_refusals` where vLLM would.

    ## Details
    vLLM checks a model class when its module defines it, when it makes the model config
    and when it binds the KV cache; a model that builds can still fail there. Phase 2
    calls vLLM's own validators as vLLM calls them: `@support_torch_compile`'s inference
    of the dynamic dimensions of an un-annotated `forward`, the model interface the
    runner needs (`compute_logits` or a pooler, `embed_input_ids`, a `forward` taking
    `input_ids` and `positions`), and `extract_layer_index` on the name of every
    attention layer with a KV cache (one integer: its decoder layer's index). Reported
    at the line that causes the refusal, with vLLM's message.

    ## Why is this bad?
    A model that builds can still never start: vLLM refuses it at start-up.

    ## Example
    A causal LM whose `compute_logits` is named `project_logits`.

    ## Fix
    Do what vLLM's message asks, at the reported line.
    """

    code = CODE
    stages: ClassVar[tuple[str, ...]] = ("set-up", "checks")
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            "    def compute_logits(",
            "    def project_logits(",
            "class LlamaForCausalLM(",
        ),
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:240] if text else ''}".rstrip(": ")


# -- while the model's module is imported --------------------------------------------------


def import_failure(error: BaseException) -> Finding | None:
    """A finding for an exception raised while the model's module was imported, when the
    model's own code is at fault: its module-level code raised (or exited), or one of
    vLLM's class decorators refused a class it defines (PFX608). A missing package, or a
    failure inside a library that module-level code merely called, is not judged here;
    a module its own package lacks is (``_missing_own_module``)."""
    if isinstance(error, ModuleNotFoundError):
        return _missing_own_module(error)
    if isinstance(error, ImportError):
        return None
    frames = list(traceback.walk_tb(error.__traceback__))
    model = [(i, f, n) for i, (f, n) in enumerate(frames) if model_code(f.f_code.co_filename)]
    if not model:
        return None
    index, frame, line = model[-1]
    file = frame.f_code.co_filename
    if index == len(frames) - 1 or isinstance(error, SystemExit):
        message = f"importing the model's module failed: {_first_line(error)}"
        if isinstance(error, SystemExit):
            message = (
                f"the model's module exits the interpreter on import (`sys.exit({error.code!r})`)"
            )
        return Finding(CONSTRUCTION_FAILED_CODE, "error", message, file, line)
    callee = frames[index + 1][0]
    decorated = [
        v
        for v in callee.f_locals.values()
        if isinstance(v, type) and v.__module__ == frame.f_globals.get("__name__")
    ]
    if frame.f_code.co_name != "<module>" or not decorated:
        return None
    decorator = callee.f_code.co_qualname if hasattr(callee.f_code, "co_qualname") else ""
    where = f"`{decorator.split('.<locals>')[0]}`" if decorator else "a vLLM decorator"
    message = (
        f"vLLM refuses `{decorated[0].__name__}` when its module defines it: {where} "
        f"raises {_first_line(error)}"
    )
    return Finding(CODE, "error", message, file, line)


def malformed_config(error: BaseException) -> Finding | None:
    """An error at the line of a ``config.json`` the plugin ships that is not JSON
    (``targets/plugins.MalformedConfig``): vLLM cannot read it as a model's config, and a
    build with a guess in its place would check another model."""
    from prefixlint.introspect.targets.plugins import MalformedConfig

    if not isinstance(error, MalformedConfig):
        return None
    message = (
        f"`{error.path.name}` shipped with the model's package is not valid JSON: "
        f"{error.reason}; vLLM cannot read it as the model's config, and nothing was built "
        "with a guessed one in its place"
    )
    return Finding(CODE, "error", message, str(error.path), error.line)


def unresolved_registration(registry: Any, arch: str) -> Finding | None:
    """An error at the registration line when the plugin registers ``arch`` as
    ``"module:Class"`` and the module, which imports, defines no such class: the user's
    defect (vLLM cannot load the architecture), never a gap of the synthesised config."""
    import importlib

    from prefixlint.introspect import vllm_api

    named = vllm_api.lazy_registration(registry, arch)
    if named is None:
        return None
    module_name, class_name = named
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit):
        return None  # ``import_failure`` judges what importing raised
    file = getattr(module, "__file__", None) or ""
    if hasattr(module, class_name) or not model_code(file):
        return None
    spec = f"{module_name}:{class_name}"
    where, line = _registration_line(module_name, spec) or (file, 1)
    message = (
        f"the plugin registers `{arch}` as `{spec}`, but `{module_name}` defines no "
        f"`{class_name}`: vLLM cannot load the architecture"
    )
    return Finding(CODE, "error", message, where, line)


def _registration_line(module_name: str, spec: str) -> tuple[str, int] | None:
    """The file and line of the plugin's package that spells ``spec`` (``"pkg.m:Cls"``)."""
    import sys

    top = sys.modules.get(module_name.split(".")[0])
    if top is None or not getattr(top, "__path__", None) or not top.__file__:
        return None
    for path in sorted(Path(top.__file__).parent.rglob("*.py"))[:500]:
        try:
            lines = path.read_text("utf-8", "replace").splitlines()
        except OSError:
            continue
        for i, text in enumerate(lines, 1):
            if spec in text:
                return str(path), i
    return None


def _missing_own_module(error: ModuleNotFoundError) -> Finding | None:
    """PFX604 at the import, in the model's file, of a module of the model's own package
    that does not exist (a typo, a file left out of the package): every user gets the same
    error. A missing top-level package is not judged: an optional dependency not installed
    here (vLLM's `cutlass`) reads the same, and is a gap of this machine."""
    frames = list(traceback.walk_tb(error.__traceback__))
    model = [(f, n) for f, n in frames if model_code(f.f_code.co_filename)]
    missing = error.name or ""
    if not model or not missing:
        return None
    frame, line = model[-1]
    own = str(frame.f_globals.get("__name__", "")).split(".")[0]
    if own in ("", "__main__") or missing.split(".")[0] != own or missing == own:
        return None
    message = f"the model's module imports `{missing}`, which its own package `{own}` lacks"
    return Finding(CONSTRUCTION_FAILED_CODE, "error", message, frame.f_code.co_filename, line)


# -- when the model config is made ----------------------------------------------------------


def interface_refusal(cls: type | None, error: BaseException) -> Finding | None:
    """vLLM's model config refused the class (``error``) and vLLM's own interface
    predicates say why: it is neither a text-generation nor a pooling model. None when
    the class passes them (the refusal is about something else)."""
    if cls is None:
        return None
    try:
        from vllm.model_executor.models import interfaces_base as base
    except ImportError:
        return None
    try:
        if base.is_text_generation_model(cls) or base.is_pooling_model(cls):
            return None
        missing = []
        if not callable(getattr(cls, "embed_input_ids", None)):
            missing.append("no callable `embed_input_ids`")
        forward = getattr(cls, "forward", None)
        kws = [kw for kw in ("input_ids", "positions") if not _takes(forward, kw)]
        if kws:
            missing.append(f"a `forward` without {', '.join(f'`{k}`' for k in kws)}")
        if not missing and not callable(getattr(cls, "compute_logits", None)):
            missing.append("no `compute_logits` (a text-generation model) and no pooler")
    except Exception:
        return None
    if not missing:
        return None
    message = (
        f'vLLM\'s engine refuses `{cls.__name__}` at start-up ("{_vllm_says(error)}"): '
        f"vLLM's model interface finds {'; '.join(missing)}"
    )
    return Finding(CODE, "error", message, *class_site(cls))


def _vllm_says(error: BaseException) -> str:
    """vLLM's own sentence in a config validation error (pydantic wraps it as
    ``Value error, <message>``), else the error's first line."""
    m = re.search(r"Value error, ([^\n\[]+)", str(error))
    return m.group(1).strip() if m else _first_line(error)


def _takes(fn: Any, name: str) -> bool:
    try:
        from vllm.utils.func_utils import supports_kw
    except ImportError:  # older layouts of vLLM
        try:
            return name in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False
    try:
        return bool(supports_kw(fn, name))
    except Exception:
        return False


# -- when the KV cache is bound -------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _dual_attention_model_types() -> tuple[str, ...]:
    """The model types vLLM's model runner binds with two attention modules per layer
    index (``num_attn_module = 2 if ... model_type == "longcat_flash" else 1``), read from
    the runner's source; none where it says otherwise."""
    try:
        import vllm.v1.worker.gpu_model_runner as runner

        text = Path(runner.__file__).read_text(encoding="utf-8")
    except Exception:
        return ()
    return tuple(
        re.findall(r"num_attn_module\s*=\s*\(?\s*2\s+if[^\n]*model_type\s*==\s*\"(\w+)\"", text)
    )


def kv_cache_layer_names(build: Any) -> dict[str, Any]:
    """The attention layers vLLM allocates a KV cache for: the ones in the build's forward
    context whose ``get_kv_cache_spec`` gives one (a layer whose spec cannot be made on
    this machine is left out, not judged)."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    context = build.vllm_config.compilation_config.static_forward_context
    out = {}
    for name, layer in context.items():
        if not isinstance(layer, AttentionLayerBase):
            continue
        try:
            spec = layer.get_kv_cache_spec(build.vllm_config)
        except Exception:
            continue
        if spec is not None:
            out[name] = layer
    return out


def layer_index_refusals(
    builds: list[Any], model_config: Any, cls: type | None = None
) -> list[Finding]:
    """``extract_layer_index`` on the name of every attention layer with a KV cache, as
    vLLM's ``bind_kv_cache`` calls it: a name with more integers than it accepts is an
    assertion at engine start-up. At the line that built the layer; once per site."""
    from vllm.model_executor.models.utils import extract_layer_index

    hf = getattr(model_config, "hf_config", None)
    per_layer = 2 if getattr(hf, "model_type", None) in _dual_attention_model_types() else 1
    out: dict[tuple[str, int], Finding] = {}
    for build in builds:
        if build.error is not None or build.vllm_config is None:
            continue
        for name, layer in kv_cache_layer_names(build).items():
            try:
                extract_layer_index(name, per_layer)
                continue
            except (AssertionError, ValueError, IndexError) as e:
                said = str(e).strip() or type(e).__name__
            record = build.recorder.records.get(id(layer))
            built_here = record is not None and record.site_file
            site = (record.site_file, record.site_line) if built_here else class_site(cls)
            if site in out:
                continue
            message = (
                f"vLLM's engine start-up refuses attention layer `{name}`: binding the KV "
                f'cache, `extract_layer_index` asserts "{said}"; an attention layer\'s name '
                "holds one integer, its decoder layer's index (several attention layers of "
                "one decoder layer: each stored under a name, `attn_0`, `attn_1`, not as "
                "elements of a list, `attns.0`)"
            )
            out[site] = Finding(CODE, "error", message, *site)
    return list(out.values())


def unloadable(spec: str, error: BaseException) -> list[dict[str, Any]] | None:
    """The answer for a file or module target whose import failed because of the model's
    own code (``import_failure``): one skipped result with the finding at its line, as
    for a registry architecture. None when the failure is not the model's (a missing
    package, a bad target): the job's error then says why."""
    from dataclasses import asdict

    from prefixlint.introspect.verdict.outcome import TargetResult

    finding = import_failure(error)
    arch = spec.rpartition(":")[2] if ":" in spec else Path(spec).stem
    if finding is None:
        return _package_missing_here(spec, arch, error)
    result = TargetResult(target=spec, arch=arch, status="skipped", category="finding")
    result.reason = _first_line(error)
    result.findings.append(finding)
    data = asdict(result)
    data["layouts"] = []
    data["class_file"], data["class_line"] = finding.file, finding.line
    return [data]


def _package_missing_here(
    spec: str, arch: str, error: BaseException
) -> list[dict[str, Any]] | None:
    """The model's file imports a top-level package this machine lacks (a CUDA-only
    kernel package, an optional dependency): a skipped target of this environment, whose
    "not verified" note (``skipped_findings``) stands at the import with the advice. None
    for any other failure."""
    from dataclasses import asdict

    from prefixlint.introspect.verdict.outcome import TargetResult

    frames = list(traceback.walk_tb(error.__traceback__))
    model = [(f, n) for f, n in frames if model_code(f.f_code.co_filename)]
    if not isinstance(error, ModuleNotFoundError) or not error.name or not model:
        return None
    frame, line = model[-1]
    result = TargetResult(target=spec, arch=arch, status="skipped", category="environment")
    result.reason = f"needs package {error.name}"
    data = asdict(result)
    data["layouts"] = []
    data["class_file"], data["class_line"] = frame.f_code.co_filename, line
    return [data]
