"""Phase 2: build each model on the meta device under fake TP/PP groups, and check it.

This package is the only one that imports torch and vLLM, and only inside a worker
process (``process/server.py``). The functions here run in the caller's process and stay light.

Python API::

    from prefixlint.introspect import introspect
    report = introspect("LlamaForCausalLM", tp=(1, 2), pp=(2,))
    for d in report.diagnostics:
        print(d.filename, d.location.row, d.code, d.message)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prefixlint.codes import CONSTRUCTION_FAILED_CODE, NOT_VERIFIED_CODE, url_for
from prefixlint.diagnostic import NOT_VERIFIED, Diagnostic, Position, Severity
from prefixlint.introspect.process.client import Worker, WorkerDied, WorkerTimeout
from prefixlint.introspect.process.memory import over_bound
from prefixlint.introspect.verdict.gaps import GAP_CATEGORIES, note
from prefixlint.paths import display_path
from prefixlint.static.index import find_installed_package

DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_PP = (2, 4)
DEFAULT_TIMEOUT = 300.0
DEFAULT_EXPLORE_BUDGET = 10.0  # seconds of config variants per target (explore.py)


@dataclass
class IntrospectReport:
    target: str
    results: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None  # the target could not be resolved at all


def target_file(spec: str) -> str:
    """The file a target lives in, found without importing anything."""
    if spec.endswith(".py") or ".py:" in spec:
        return spec.split(".py:")[0] + ("" if spec.endswith(".py") else ".py")
    vllm = find_installed_package("vllm")
    if ":" in spec:
        module = spec.split(":")[0]
        top = module.split(".")[0]
        base = vllm.parent if vllm is not None and top == "vllm" else Path.cwd()
        rel = Path(*module.split("."))
        for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            if candidate.is_file():
                return str(candidate)
        return spec
    if vllm is not None:
        registry = vllm / "model_executor" / "models" / "registry.py"
        try:
            text = registry.read_text("utf-8")
        except OSError:
            return spec
        m = re.search(rf'"{re.escape(spec)}"\s*:\s*\(\s*"([\w.]+)"', text)
        if m:
            candidate = vllm / "model_executor" / "models" / (m.group(1).replace(".", "/") + ".py")
            if candidate.is_file():
                return str(candidate)
    return spec


def _class_line(path: str, name: str) -> int:
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return 1
    m = re.search(rf"^class {re.escape(name)}\b", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def skipped_findings(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A target that could not even be set up (its class needs a missing package, no
    config could be made) verified nothing: a PFX600 note, or PFX604 when the reason is
    the model's own (its module raises on import)."""
    if result.get("status") != "skipped" or result.get("findings"):
        return []
    arch = str(result.get("arch") or result["target"]).removesuffix("__prefixlint")
    file = result.get("class_file") or target_file(result["target"])
    line = result.get("class_line") or _class_line(file, arch)
    reason = result.get("reason") or "unknown reason"
    category = result.get("category", "")
    if category in GAP_CATEGORIES:
        synthesised = result.get("synthesised", True) is not False  # the worker's fact
        return [note(arch, [], category, reason, synthesised, file, line)]
    message = f"`{arch}` could not be set up for a build: {reason}"
    return [{"code": "PFX604", "severity": "error", "message": message, "file": file, "line": line}]


def to_diagnostics(result: dict[str, Any]) -> list[Diagnostic]:
    out = []
    for f in result.get("findings", []) + skipped_findings(result):
        pos = Position(max(int(f["line"] or 1), 1), 1)
        out.append(
            Diagnostic(
                code=f["code"],
                message=f["message"],
                severity=Severity(f["severity"]),
                filename=display_path(f["file"] or result.get("class_file") or result["target"]),
                location=pos,
                end_location=pos,
                phase="introspect",
                url=url_for(f["code"]),
                data={
                    "architecture": result.get("arch"),
                    "layouts": f.get("layouts", []),
                    "group": f.get("group", ""),  # "default-prefix": a leaf built with ""
                    # what it is, for code that reads it (`check --introspect`), never its words
                    **({"kind": f["facts"]["kind"]} if f.get("facts", {}).get("kind") else {}),
                    **_identity(f),
                    # a note that says a check has nothing to run against is not a gap
                    **_verified_flag(f.get("facts", {})),
                },
            )
        )
    return out


def _identity(f: dict[str, Any]) -> dict[str, Any]:
    """What tells one class's finding from another's at the same place, as data: a PFX600
    note's fact (``note``), and the module path or checkpoint name the finding is about
    (``path``: the class that wraps the other names it in full)."""
    facts = f.get("facts") or {}
    out: dict[str, Any] = {}
    if facts.get("note"):
        out["note"] = facts["note"]
    path = (f.get("paths") or [None])[0] or facts.get("path") or facts.get("subject")
    if isinstance(path, str) and path:
        out["path"] = path
    return out


def _verified_flag(facts: dict[str, Any]) -> dict[str, bool]:
    return {NOT_VERIFIED: facts[NOT_VERIFIED]} if NOT_VERIFIED in facts else {}


def failure(spec: str, message: str, site: tuple[str, int] | None = None) -> Diagnostic:
    """PFX604 for a target whose build hung, crashed or could not start: at ``site``, the
    model's line the worker was at (``WorkerFailed.site``), else line 1 of its file."""
    file, line = site if site and site[0] else (target_file(spec), 1)
    pos = Position(max(int(line or 1), 1), 1)
    return Diagnostic(
        code=CONSTRUCTION_FAILED_CODE,
        message=message,
        severity=Severity.ERROR,
        filename=display_path(file),
        location=pos,
        end_location=pos,
        phase="introspect",
        data={"architecture": spec},
    )


def died(spec: str, error: WorkerDied) -> Diagnostic:
    """A worker that died building ``spec``: PFX604 at the model's line it was at, or, when
    it was stopped at its memory bound, a "not verified" PFX600 note there (a meta build
    holds no weights: what filled the memory is a limit of this way of building, and
    ``PREFIXLINT_WORKER_MAX_RSS_MB`` raises it)."""
    finding = failure(spec, f"building `{spec}` crashed: {error}", error.site)
    if not over_bound(str(error)):
        return finding
    return replace(
        finding,
        code=NOT_VERIFIED_CODE,
        severity=Severity.NOTE,
        message=f"not verified: building `{spec}` was stopped: {error}",
        url=url_for(NOT_VERIFIED_CODE),
    )


def introspect(
    target: str,
    tp: tuple[int, ...] | list[int] = DEFAULT_TP,
    pp: tuple[int, ...] | list[int] = DEFAULT_PP,
    config: str | None = None,
    configs: dict[str, str] | None = None,
    config_base: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    worker: Worker | None = None,
    dryrun: bool = True,
    explore_budget: float = DEFAULT_EXPLORE_BUDGET,
    checkpoint: str | None = None,
    checkpoints: dict[str, str] | None = None,
    lora: str | None = None,
    compare: bool = True,
) -> IntrospectReport:
    """Build ``target`` (an architecture of the installed registry, ``module:Class`` or
    ``path/to/file.py[:Class]``) for each layout in a worker process and check it.
    ``checkpoint``: a local checkpoint folder (``checkpoint.resolve`` makes one of a hub
    id) the dry-run checks against, for every class of the target; ``checkpoints``: one
    per architecture name. ``lora``: a local PEFT adapter folder (``lora.resolve_adapter``
    makes one of a hub id) the LoRA dry-run matches instead of its synthetic adapter."""
    own = worker is None
    worker = worker or Worker()
    report = IntrospectReport(target)
    job = {
        "kind": "build",
        "target": target,
        "tp": list(tp),
        "pp": list(pp),
        "config": config,
        "configs": configs,
        "config_base": config_base,
        "dryrun": dryrun,
        "budget": timeout,
        "explore_budget": explore_budget,
        "checkpoint": checkpoint,
        "checkpoints": checkpoints or {},
        "lora": lora,
        "compare": compare,
    }
    try:
        answer = worker.run(job, timeout)
    except WorkerTimeout as e:
        report.diagnostics.append(failure(target, f"building `{target}` hung: {e}", e.site))
        return report
    except WorkerDied as e:
        report.diagnostics.append(died(target, e))
        return report
    finally:
        if own:
            worker.close()
    if isinstance(answer, dict) and "error" in answer:
        report.error = answer["error"]
        return report
    report.results = answer
    for result in answer:
        report.diagnostics.extend(to_diagnostics(result))
    report.diagnostics.sort(key=Diagnostic.sort_key)
    return report


def list_architectures(worker: Worker, timeout: float = DEFAULT_TIMEOUT) -> dict[str, str]:
    """Architecture -> registry group (``text_generation_models``, ...)."""
    answer = worker.run({"kind": "list"}, timeout)
    if isinstance(answer, dict) and "error" in answer and len(answer) == 1:
        raise RuntimeError(answer["error"])
    return answer
