"""``check --introspect``: phase 2 for the architectures the checked files define.

Runs in the CLI's process and stays light: which classes to build is decided from the
static summaries (nothing is imported here); the builds run in phase 2's worker process.
Every file either gets phase 2's findings, or a PFX600 note that says why it was not
verified: nothing is reported as passed that was not built.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prefixlint.codes import url_for
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.paths import display_path

NOT_VERIFIED = "PFX600"
INTERNAL_SUFFIX = "__prefixlint"  # phase 2's name for a class that shadows a registered one
# ``ModelRegistry.register_model("Name", Cls)`` or ``("Name", "pkg.mod:Cls")``.
_REGISTER = re.compile(
    r"register_model\(\s*[\"'](\w+)[\"']\s*,\s*(?:[\"'][\w.]+:(\w+)[\"']|(\w+))\s*[,)]"
)
# Named like an architecture: ``LlamaForCausalLM``, not ``FeedForward``.
_ARCH_NAME = re.compile(r"For[A-Z0-9]\w*$")
# Methods only a model the engine drives as a whole has.
_MODEL_METHODS = ("compute_logits",)


class Phase2Unavailable(Exception):
    """torch or vLLM cannot be imported by this Python: phase 2 cannot run at all."""


def require_phase2() -> None:
    """Raise when phase 2 cannot run here (found without importing anything)."""
    missing = [m for m in ("torch", "vllm") if importlib.util.find_spec(m) is None]
    if missing:
        raise Phase2Unavailable(
            f"--introspect needs {' and '.join(missing)} importable by this Python "
            f"({sys.executable}), and it is not: phase 2 cannot run, nothing was built. "
            "Install prefixlint into the environment that has vLLM (`pip install prefixlint` "
            "there), or use the pre-commit hook `prefixlint-introspect` (language: system)."
        )


@dataclass
class Candidate:
    path: Path
    name: str  # the class
    line: int
    registered_as: str | None = None  # the name a ``register_model`` call gives it


@dataclass
class Phase2Result:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    built: int = 0  # classes phase 2 built on at least one layout


def registered_classes(text: str) -> dict[str, str]:
    """Class -> the architecture name a ``register_model`` call in ``text`` gives it."""
    out = {}
    for m in _REGISTER.finditer(text):
        out[m.group(2) or m.group(3)] = m.group(1)
    return out


def architectures_in(path: Path, registry: frozenset[str]) -> list[Candidate]:
    """The classes of ``path`` phase 2 builds as whole models: registered in the file or in
    vLLM's registry, or taking ``vllm_config`` and named like an architecture or having the
    model interface (``compute_logits``). An inner ``MyQwenModel`` is built by its
    architecture, not as one."""
    from prefixlint.static.resolve import summarize_file

    summary = summarize_file(path)
    if summary is None:
        return []
    try:
        registered = registered_classes(path.read_text("utf-8", "replace"))
    except OSError:
        registered = {}
    out: list[Candidate] = []
    for cls in summary.classes.values():
        if any(c.name == cls.name for c in out):
            continue  # the summary lists a class again under its aliases
        init = cls.methods.get("__init__")
        takes_config = init is not None and init.param("vllm_config") is not None
        if cls.name.startswith("_"):
            continue
        if cls.name in registered or (
            takes_config
            and (
                cls.name in registry
                or _ARCH_NAME.search(cls.name)
                or any(m in cls.methods for m in _MODEL_METHODS)
            )
        ):
            out.append(Candidate(path, cls.name, cls.lineno, registered.get(cls.name)))
    return out


def note(path: str, line: int, message: str, arch: str) -> Diagnostic:
    pos = Position(max(line, 1), 1)
    return Diagnostic(
        code=NOT_VERIFIED,
        message=message,
        severity=Severity.NOTE,
        filename=path,
        location=pos,
        end_location=pos,
        phase="introspect",
        url=url_for(NOT_VERIFIED),
        data={"architecture": arch},
    )


def public_name(text: str) -> str:
    """Phase 2's internal class names (``Qwen2Model__prefixlint``) as the user wrote them."""
    return text.replace(INTERNAL_SUFFIX, "")


def _outcome(cand: Candidate, report: Any, timeout: float) -> list[Diagnostic]:
    """Phase 2's findings for one class, or the note that says why it verified nothing."""
    where = display_path(cand.path)
    name = cand.name
    if report.error:
        return [
            note(
                where,
                cand.line,
                f"`{name}` not verified: phase 2 cannot load it: {public_name(report.error)}",
                name,
            )
        ]
    out: list[Diagnostic] = []
    for d in report.diagnostics:
        if d.code == "PFX604" and d.location.row == 1 and d.filename == where:
            # A hang or a crash of the whole build: at the class, not line 1 of the file.
            pos = Position(cand.line, 1)
            d = replace(d, location=pos, end_location=pos)
        out.append(d)
    for result in report.results:
        status = result.get("status")
        arch = public_name(str(result.get("arch") or name))
        if status == "skipped" and not any(
            d.data.get("architecture") == result.get("arch") for d in report.diagnostics
        ):
            reason = result.get("reason") or "no reason given"
            out.append(
                note(
                    where,
                    cand.line,
                    f"`{arch}` not verified: phase 2 skipped it: {public_name(reason)}",
                    arch,
                )
            )
    if not report.results and not out:
        out.append(
            note(
                where,
                cand.line,
                f"`{name}` not verified: phase 2 built nothing (timeout {timeout:.0f} s)",
                name,
            )
        )
    return out


def run_phase2(
    files: list[Path],
    tp: list[int],
    pp: list[int],
    timeout: float,
    configs_for: Callable[[Path], tuple[dict[str, str], str | None]],
    progress: Callable[[str], None] = lambda text: None,
    dryrun: bool = True,
    explore_budget: float = 10.0,
    checkpoints: Any = None,
) -> Phase2Result:
    """Phase 2 for every architecture class of ``files``; see ``architectures_in``.
    ``checkpoints`` (``checkpoint.Checkpoints``): the checkpoint each class's dry-run
    checks against; its errors (``CheckpointError``) are raised before any build."""
    from prefixlint.introspect import introspect as build
    from prefixlint.introspect.worker import Worker
    from prefixlint.static.index import find_installed_package
    from prefixlint.static.model_classes import registry_architectures

    registry = registry_architectures(find_installed_package("vllm"))
    candidates = [c for path in files for c in architectures_in(path, registry)]
    checkpoint_of: dict[int, str | None] = {}
    if checkpoints is not None:
        checkpoints.check([c.name for c in candidates])
        checkpoint_of = {i: checkpoints.for_class(c.path, c.name) for i, c in enumerate(candidates)}
    out = Phase2Result()
    executed: set[tuple[str, int]] = set()
    worker = Worker()
    try:
        for i, cand in enumerate(candidates, 1):
            progress(
                f"phase 2 [{i}/{len(candidates)}]: building {cand.name} "
                f"({display_path(cand.path)}) for tp={','.join(map(str, tp))}"
            )
            table, base = configs_for(cand.path)
            report = build(
                f"{cand.path}:{cand.name}",
                tp=tp,
                pp=pp,
                configs=table,
                config_base=base,
                timeout=timeout,
                worker=worker,
                dryrun=dryrun,
                explore_budget=explore_budget,
                checkpoint=checkpoint_of.get(i - 1),
            )
            for result in report.results:
                layouts = result.get("layouts", [])
                built = sum(layout.get("status") == "built" for layout in layouts)
                out.built += bool(built)
                progress(
                    f"phase 2: {public_name(str(result.get('arch')))}: {result.get('status')}, "
                    f"{built}/{len(layouts)} layouts built "
                    f"(config: {result.get('config_source') or '-'})"
                )
                for file, cov in result.get("coverage", {}).get("files", {}).items():
                    executed.update((str(Path(file).resolve()), n) for n in cov["executed"])
            out.diagnostics.extend(_outcome(cand, report, timeout))
    finally:
        worker.close()
    out.diagnostics = merge_classes(out.diagnostics, executed)
    return out


def merge_classes(found: list[Diagnostic], executed: set[tuple[str, int]]) -> list[Diagnostic]:
    """Classes of one file build the same sites (a model and its ``ForCausalLM``, a
    subclass and its base): one finding per code and place (the longest message: its path
    is the full one), and no "not verified" note at a site another class's build ran."""
    from prefixlint.introspect.coverage import UNEXECUTED_SITE  # light: stdlib ast only

    best: dict[tuple, Diagnostic] = {}
    for d in found:
        place = (str(Path(d.filename).resolve()), d.location.row)
        if d.data.get("group") == UNEXECUTED_SITE and place in executed:
            continue  # another class's build ran it
        key = (
            (d.code, d.filename, d.location.row)
            if d.code != "PFX600"
            else (d.code, d.filename, d.location.row, d.message)
        )
        if key not in best or len(d.message) > len(best[key].message):
            best[key] = d
    return sorted(best.values(), key=Diagnostic.sort_key)


def polish(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Phase-2 findings as a person reads them: internal names replaced, the column of the
    statement on the reported line (phase 2 records lines only), and ``# noqa`` honoured."""
    from prefixlint.static.engine import is_suppressed

    lines: dict[str, list[str]] = {}
    out = []
    for d in diagnostics:
        if d.filename not in lines:
            try:
                text = Path(d.filename).read_text("utf-8", "replace")
            except OSError:
                text = ""
            lines[d.filename] = text.splitlines()
        source = lines[d.filename]
        if is_suppressed(d, source):
            continue
        d = replace(d, message=public_name(d.message))
        row = d.location.row
        if d.location.column == 1 and 1 <= row <= len(source) and source[row - 1].strip():
            text = source[row - 1]
            start = len(text) - len(text.lstrip()) + 1
            end = len(text.rstrip()) + 1
            if d.end_location.row == row:
                d = replace(d, location=Position(row, start), end_location=Position(row, end))
            else:
                d = replace(d, location=Position(row, start))
        out.append(d)
    return out
