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

from prefixlint.codes import NOT_VERIFIED_CODE, url_for
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.noqa import SAME_DEFECT
from prefixlint.paths import display_path

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
    # architecture -> its build: where its class is, and each layout's status and reason
    # (what ``basediff_phase2`` compares between base and head)
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)


def registered_classes(text: str) -> dict[str, str]:
    """Class -> the architecture name a ``register_model`` call in ``text`` gives it."""
    out = {}
    for m in _REGISTER.finditer(text):
        out[m.group(2) or m.group(3)] = m.group(1)
    return out


def architectures_in(path: Path, registry: frozenset[str]) -> list[Candidate]:
    """The classes of ``path`` phase 2 builds as whole models: registered in the file,
    architectures of vLLM's registry (also those that inherit their constructor), or
    taking ``vllm_config`` and named like an architecture or having the model interface
    (``compute_logits``). An inner ``MyQwenModel`` is built by its architecture, not as
    one."""
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
        # A registry architecture that inherits its constructor (``class
        # MistralForCausalLM(LlamaForCausalLM)``) is built as the registry builds it.
        inherits_init = init is None and bool(cls.bases) and cls.name in registry
        if (
            cls.name in registered
            or inherits_init
            or (
                takes_config
                and (
                    cls.name in registry
                    or _ARCH_NAME.search(cls.name)
                    or any(m in cls.methods for m in _MODEL_METHODS)
                )
            )
        ):
            out.append(Candidate(path, cls.name, cls.lineno, registered.get(cls.name)))
    return out


def note(path: str, line: int, message: str, arch: str) -> Diagnostic:
    pos = Position(max(line, 1), 1)
    return Diagnostic(
        code=NOT_VERIFIED_CODE,
        message=message,
        severity=Severity.NOTE,
        filename=path,
        location=pos,
        end_location=pos,
        phase="introspect",
        url=url_for(NOT_VERIFIED_CODE),
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
    compare: bool = True,
    checkpoints: Any = None,
    warm: Path | None = None,
) -> Phase2Result:
    """Phase 2 for every architecture class of ``files``; see ``architectures_in``.
    ``checkpoints`` (``checkpoint.Checkpoints``): the checkpoint each class's dry-run
    checks against; its errors (``CheckpointError``) are raised before any build.
    ``warm``: the cache folder of the zygote workers are forked from (None: cold)."""
    from prefixlint.introspect import introspect as build
    from prefixlint.introspect.process.pool import WorkerPool, worker_count
    from prefixlint.static.index import find_installed_package
    from prefixlint.static.vllm_source import registry_architectures

    registry = registry_architectures(find_installed_package("vllm"))
    candidates = [c for path in files for c in architectures_in(path, registry)]
    checkpoint_of: dict[int, str | None] = {}
    if checkpoints is not None:
        checkpoints.check([c.name for c in candidates])
        checkpoint_of = {i: checkpoints.for_class(c.path, c.name) for i, c in enumerate(candidates)}
    out = Phase2Result()
    executed: set[tuple[str, int]] = set()

    def build_one(i: int, worker: Any) -> Any:
        cand = candidates[i]
        progress(
            f"phase 2 [{i + 1}/{len(candidates)}]: building {cand.name} "
            f"({display_path(cand.path)}) for tp={','.join(map(str, tp))}"
        )
        table, base = configs_for(cand.path)
        return build(
            f"{cand.path}:{cand.name}",
            tp=tp,
            pp=pp,
            configs=table,
            config_base=base,
            timeout=timeout,
            worker=worker,
            dryrun=dryrun,
            compare=compare,
            explore_budget=explore_budget,
            checkpoint=checkpoint_of.get(i),
        )

    with WorkerPool(worker_count(warm, len(candidates)), warm) as pool:
        for i, report in pool.run(range(len(candidates)), build_one):
            _take(out, executed, candidates[i], report, (timeout, progress))
    out.diagnostics = merge_classes(out.diagnostics, executed)
    return out


def _take(
    out: Phase2Result,
    executed: set[tuple[str, int]],
    cand: Any,
    report: Any,
    said: tuple[float, Callable[[str], None]],
) -> None:
    """One class's report into the result: its builds, its coverage, its findings (the
    run's timeout and its progress line in ``said``)."""
    timeout, progress = said
    for result in report.results:
        layouts = result.get("layouts", [])
        built = sum(layout.get("status") == "built" for layout in layouts)
        out.built += bool(built)
        out.builds[public_name(str(result.get("arch")))] = {
            "file": str(cand.path),
            "line": cand.line,
            "layouts": {str(lay.get("name")): lay for lay in layouts},
            "loading": result.get("loading") or {},
        }
        progress(
            f"phase 2: {public_name(str(result.get('arch')))}: {result.get('status')}, "
            f"{built}/{len(layouts)} layouts built "
            f"(config: {result.get('config_source') or '-'})"
        )
        for file, cov in result.get("coverage", {}).get("files", {}).items():
            executed.update((str(Path(file).resolve()), n) for n in cov["executed"])
    out.diagnostics.extend(_outcome(cand, report, timeout))


def merge_classes(found: list[Diagnostic], executed: set[tuple[str, int]]) -> list[Diagnostic]:
    """Classes of one file build the same sites (a model and its ``ForCausalLM``, a
    subclass and its base): one finding per code and place (the one whose module path or
    checkpoint name is the longest: the class that wraps the other names it in full), and
    no "not verified" note at a site another class's build ran. Notes at one place are one
    when their facts are (``data["note"]``), else when their groups are; a note with
    neither stands alone."""
    from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE  # light: stdlib ast only

    best: dict[tuple, Diagnostic] = {}
    for n, d in enumerate(found):
        place = (str(Path(d.filename).resolve()), d.location.row)
        if d.data.get("group") == UNEXECUTED_SITE and place in executed:
            continue  # another class's build ran it
        key: tuple = (d.code, d.filename, d.location.row)
        if d.code == NOT_VERIFIED_CODE:
            # its fact, else its group (a finding's group: one per code, site and group)
            fact, group = d.data.get("note"), d.data.get("group", "")
            key += (group, fact or group or n)
        if key not in best or _depth(d) > _depth(best[key]):
            best[key] = d
    return sorted(best.values(), key=Diagnostic.sort_key)


def _depth(d: Diagnostic) -> int:
    return len(d.data.get("path") or "")


def polish(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Phase-2 findings as a person reads them: internal names replaced, ``# noqa``
    honoured, and the span of the statement that holds the reported line (phase 2 records
    the line a frame was at: the first line of a multi-line call), from the column where
    it starts on that line to the statement's end (a class or ``def``: its header)."""
    from prefixlint.noqa import is_suppressed

    files: dict[str, tuple[list[str], list[tuple[int, int, int, int]]]] = {}
    out = []
    for d in diagnostics:
        if d.filename not in files:
            try:
                text = Path(d.filename).read_text("utf-8", "replace")
            except OSError:
                text = ""
            files[d.filename] = (text.splitlines(), statement_spans(text))
        source, spans = files[d.filename]
        statement = innermost(spans, d.location.row)
        if is_suppressed(d, source, statement[::2] if statement else None):
            continue
        d = replace(d, message=public_name(d.message))
        row = d.location.row
        if d.location.column == 1 and 1 <= row <= len(source) and source[row - 1].strip():
            text = source[row - 1]
            start = Position(row, len(text) - len(text.lstrip()) + 1)
            end = Position(row, len(text.rstrip()) + 1)
            span = innermost(spans, row)
            if span is not None and d.end_location.row == row:
                last = source[span[2] - 1] if span[2] <= len(source) else ""
                end = Position(span[2], min(span[3] + 1, len(last.rstrip()) + 1))
            if d.end_location.row == row:
                d = replace(d, location=start, end_location=max(end, start))
            else:
                d = replace(d, location=start)
        out.append(d)
    return out


def statement_spans(text: str) -> list[tuple[int, int, int, int]]:
    """(first row, first column, last row, last column) of every statement of ``text``
    (rows 1-based, columns 0-based as ``ast`` gives them); a compound statement's span is
    its header. Empty when the text does not parse."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = max(node.lineno, body[0].lineno - 1)
            # A decorated class or def starts at its first decorator (where inspect puts it).
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            out.append((first, node.col_offset, last, 10**6))
        else:
            out.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset or 0))
    return out


def innermost(spans: list[tuple[int, int, int, int]], row: int) -> tuple[int, int, int, int] | None:
    """The smallest statement span that holds ``row``."""
    holding = [s for s in spans if s[0] <= row <= s[2]]
    return min(holding, key=lambda s: (s[2] - s[0], -s[0]), default=None)


# A phase-2 check that sees, at one site, the defect a static rule reports there: one
# finding, the static one (its span and fix are exact), with the run-time evidence added.
# (``noqa.SAME_DEFECT``: the same table lets one noqa comment silence both)
# PFX606 of this group is the method's check (other groups: packed_modules_mapping keys);
# PFX501 names the method when that is what it misses (else: forward's parameter).
_PP_METHOD = "make_empty_intermediate_tensors"
# The quantization dry-run's kind of finding for a layer that never received
# `quant_config` (introspect/dryrun/quant.py `unthreaded`), the run-time side of PFX405.
UNTHREADED = "unthreaded"


def _same_defect(static: Diagnostic, runtime: Diagnostic) -> bool:
    if static.phase != "static" or static.code not in SAME_DEFECT.get(runtime.code, ()):
        return False
    if runtime.code == "PFX606" and (
        runtime.data.get("group") != "pp" or static.data.get("about") != _PP_METHOD
    ):
        return False
    return _same_place(static, runtime)


def _same_place(a: Diagnostic, b: Diagnostic) -> bool:
    if Path(a.filename).resolve() != Path(b.filename).resolve():
        return False
    return a.location.row <= b.end_location.row and b.location.row <= a.end_location.row


def _folds_into(runtime: Diagnostic, site: Diagnostic, evidence: list[Diagnostic]) -> bool:
    if runtime.code == "PFX702" and site.code == "PFX405" and _same_place(site, runtime):
        # a layer built without `quant_config` (PFX405) is what the quantization dry-run
        # finds treated otherwise at that statement, whatever it says of it
        return True
    if runtime.code == "PFX702" and runtime.data.get("kind") == UNTHREADED:
        return False  # only PFX405 names a layer never given `quant_config`
    if runtime.code == "PFX702":
        # The dry-run reports a quantization mismatch at the construction site only when
        # the module's prefix is not its path: where phase 2 found that prefix wrong
        # (PFX601), it is the same defect.
        wrong_prefix = site.code == "PFX601" or any(e.code == "PFX601" for e in evidence)
        return wrong_prefix and _same_place(site, runtime)
    return _same_defect(site, runtime)


def one_per_site(static: list[Diagnostic], runtime: list[Diagnostic]) -> list[Diagnostic]:
    """Static and phase-2 findings, one per site: a run-time finding that ``SAME_DEFECT``
    pairs with a static finding at its statement, and a PFX702 at a statement with a wrong
    prefix, are folded into that finding; their messages are added to its message and
    their JSON to its ``data["runtime"]``."""
    entries: list[tuple[Diagnostic, list[Diagnostic]]] = [(d, []) for d in static]
    for r in sorted(runtime, key=lambda d: d.code == "PFX702"):  # PFX702 after the PFX601s
        home = next((evidence for d, evidence in entries if _folds_into(r, d, evidence)), None)
        if home is None:
            entries.append((r, []))
        else:
            home.append(r)
    return sorted((_with_evidence(d, evidence) for d, evidence in entries), key=Diagnostic.sort_key)


def _with_evidence(d: Diagnostic, found: list[Diagnostic]) -> Diagnostic:
    if not found:
        return d
    severity = max([d.severity, *(f.severity for f in found)], key=lambda s: s.rank)
    said = "; ".join(f"{f.code} {f.message}" for f in found)
    phase2 = "phase 2 confirms it" if d.phase == "static" else "and"
    runtime = [*d.data.get("runtime", []), *(f.to_json() for f in found)]
    return replace(
        d,
        message=f"{d.message} ({phase2}: {said})",
        severity=severity,
        data={**d.data, "runtime": runtime},
    )
