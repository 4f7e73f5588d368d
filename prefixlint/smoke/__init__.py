"""Phase 3: run the model in vLLM on random weights and compare greedy tokens.

``smoke(target)`` makes a small config (phase 2's synthesis; a model folder is used as
is), writes a random-weight checkpoint with the transformers reference class, and in a
child process (``child.py``) compares vLLM's greedy tokens with the reference and with
vLLM itself under other settings: batching, chunked prefill, prefix caching, tensor
parallel 2 and compilation. Each check passes, fails with a Diagnostic (``phase="smoke"``,
at the model class's line) or is skipped with a reason.

Python API::

    from prefixlint.smoke import smoke
    report = smoke("LlamaForCausalLM")
    for c in report.checks:
        print(c.code, c.status, c.reason)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.codes import CONSTRUCTION_FAILED_CODE, SMOKE, codes_of, url_for
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.paths import display_path

# code -> (name, summary)
# code -> (name, summary), from the one codes table.
CHECKS: dict[str, tuple[str, str]] = {c: (e.name, e.summary) for c, e in codes_of(SMOKE).items()}
DEFAULT_TIMEOUT = 900.0

_WHAT = {
    "PFX801": "vLLM's greedy tokens differ from transformers' `generate` on the same weights",
    "PFX802": "the request's greedy tokens change when 30 other requests share its batch",
    "PFX803": "the prompt's greedy tokens change when its prefill is split into chunks "
    "(max_num_batched_tokens=32)",
    "PFX804": "the prompt's greedy tokens change when its prefix is served from the prefix cache",
    "PFX805": "greedy tokens at tensor parallel 2 differ from tensor parallel 1",
    "PFX806": "greedy tokens of the compiled model differ from eager mode",
}
_LABELS = {
    "PFX801": ("reference", "vLLM"),
    "PFX802": ("alone", "batched"),
    "PFX803": ("unchunked", "chunked"),
    "PFX804": ("first run", "cached run"),
    "PFX805": ("tp=1", "tp=2"),
    "PFX806": ("eager", "compiled"),
}


@dataclass
class CheckResult:
    code: str
    status: str  # pass | fail | skip | error
    reason: str = ""
    seconds: float | None = None

    @property
    def name(self) -> str:
        return CHECKS[self.code][0]


@dataclass
class SmokeReport:
    target: str
    arch: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    gate: list[Diagnostic] = field(default_factory=list)  # phase-2 findings
    blocked: str = ""  # why nothing ran (phase 2 errors without --force)
    error: str = ""  # the run itself failed (timeout, crash, unresolvable target)
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    config_source: str = ""  # which config the checkpoint was made from
    shared_memory: list[str] = field(default_factory=list)  # /dev/shm names its engines mapped
    released: list[str] = field(default_factory=list)  # those left after it, unlinked


def parse_checks(value: str | None) -> list[str]:
    """``"801,PFX803,greedy-mismatch"`` -> codes; ``None``/empty -> all."""
    if not value:
        return list(CHECKS)
    by_name = {name: code for code, (name, _) in CHECKS.items()}
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        code = by_name.get(item.lower()) or item.upper()
        if code.isdigit():
            code = f"PFX{code}"
        if code not in CHECKS:
            raise ValueError(f"unknown smoke check {item!r} (known: {', '.join(CHECKS)})")
        if code not in out:
            out.append(code)
    return out


def _gate_spec(target: str) -> tuple[str, str | None]:
    """What phase 2 builds for ``target``: a folder is its config's architecture."""
    folder = Path(target)
    if folder.is_dir():
        try:
            data = json.loads((folder / "config.json").read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise LookupError(f"{folder} holds no readable config.json: {e}") from None
        archs = data.get("architectures") or []
        if not archs:
            raise LookupError(f"{folder}/config.json names no architecture")
        return archs[0], str(folder)
    return target, None


def _diagnostic(code: str, finding: dict[str, Any], file: str, line: int, arch: str) -> Diagnostic:
    ref, got = _LABELS[code]
    pos = Position(max(line, 1), 1)
    margin = finding.get("margin")
    message = (
        f"{_WHAT[code]}: {finding['prompt']} prompt, first divergence at generated token "
        f"{finding['position']}: {ref} {finding['expected']}, {got} {finding['got']}"
        + (f" (logit margin {margin:.3g})" if isinstance(margin, float) else "")
    )
    return Diagnostic(
        code=code,
        message=message,
        severity=Severity.ERROR,
        filename=display_path(file) if file else arch,
        location=pos,
        end_location=pos,
        phase="smoke",
        url=url_for(code),
        data={"architecture": arch, **finding},
    )


def smoke(
    target: str,
    device: str = "auto",
    checks: list[str] | None = None,
    force: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    gate: bool = True,
    config: str | None = None,
    configs: dict[str, str] | None = None,
    log: Path | None = None,
    config_base: str | None = None,
    progress: Any = None,
) -> SmokeReport:
    """Gate on phase 2, then run the checks in a child process (see ``child.py``)."""
    started = time.perf_counter()
    codes = checks or list(CHECKS)
    report = SmokeReport(target)
    try:
        spec, config_folder = _gate_spec(target)
    except LookupError as e:
        report.error = str(e)
        return report
    if gate:
        from prefixlint.introspect import introspect

        t = time.perf_counter()
        if progress is not None:
            progress("phase 2: building the model on the meta device for tp=1,2 and pp=2")
        gated = introspect(
            spec,
            tp=(1, 2),
            pp=(2,),
            config=config or config_folder,
            configs=configs,
            config_base=config_base,
        )
        report.timings["phase 2"] = time.perf_counter() - t
        if gated.error:
            report.error = f"cannot resolve {target}: {gated.error}"
            return report
        from prefixlint.check_introspect import polish

        report.gate = polish(gated.diagnostics)  # names as written, noqa honoured
        # A leaf built without `prefix` (phase 2's form of PFX301) costs quantization its
        # name, not an unquantized random-weight run its meaning: reported, not blocking.
        errors = [
            d
            for d in report.gate
            if d.severity is Severity.ERROR and (d.data or {}).get("group") != "default-prefix"
        ]
        if errors and not force:
            listed = "; ".join(f"{d.code} {d.message}" for d in errors[:3])
            report.blocked = (
                f"phase 2 reported {len(errors)} error(s), so the model is not run "
                f"(--force runs it anyway): {listed}"
            )
            report.checks = [CheckResult(c, "skip", "blocked by phase 2 errors") for c in codes]
            report.seconds = time.perf_counter() - started
            return report
    job = {"config": config, "configs": configs, "config_base": config_base}
    _run_child(report, target, device, codes, timeout, job, log, progress)
    report.seconds = time.perf_counter() - started
    return report


def _run_child(
    report: SmokeReport,
    target: str,
    device: str,
    codes: list[str],
    timeout: float,
    config_job: dict[str, Any],
    log: Path | None,
    progress: Any = None,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="prefixlint-smoke-"))
    results = work / "results.jsonl"
    (work / "tmp").mkdir()
    job = {
        "target": str(Path(target).resolve()) if Path(target).is_dir() else target,
        "device": device,
        "checks": codes,
        "workdir": str(work),
        "results": str(results),
        **config_job,
    }
    (work / "job.json").write_text(json.dumps(job), "utf-8")
    env = dict(os.environ)
    env["TMPDIR"] = str(work / "tmp")  # the config synthesis's temp folders go too
    sockets = _socket_folder(work / "tmp")
    env.setdefault("VLLM_RPC_BASE_PATH", str(sockets))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    log_path = log or work / "child.log"
    timed_out = False
    try:
        with open(log_path, "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "prefixlint.smoke.child", str(work / "job.json")],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: engines die with it
            )
            try:
                _wait(proc, timeout, results, progress)
            except subprocess.TimeoutExpired:
                timed_out = True
            except KeyboardInterrupt:
                _kill_group(proc)
                raise
            finally:
                _kill_group(proc)  # vLLM's engine processes, whether it finished or not
        _collect(report, results, codes, log_path, timed_out, timeout, proc.returncode)
    finally:
        from prefixlint.smoke.shm import release

        # The group is gone (killed above, on every path): no process uses them now.
        report.shared_memory = _recorded_shared_memory(results)
        report.released = release(report.shared_memory)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


# vLLM names its engines' ZMQ sockets ``{VLLM_RPC_BASE_PATH}/{uuid4}``; a Unix socket's
# path holds at most 107 bytes (``sockaddr_un.sun_path``).
_SOCKET_PATH_MAX = 107 - 1 - 36


def _socket_folder(preferred: Path) -> Path:
    """Where the engines' sockets go: the run's temp folder, or, when its path is too
    long for a socket name (a deep TMPDIR), a short folder of its own under /tmp."""
    if len(os.fsencode(str(preferred))) <= _SOCKET_PATH_MAX or not Path("/tmp").is_dir():
        return preferred
    return Path(tempfile.mkdtemp(prefix="prefixlint-rpc-", dir="/tmp"))


def _recorded_shared_memory(results: Path) -> list[str]:
    names: list[str] = []
    with contextlib.suppress(OSError):
        for line in results.read_text("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                event = json.loads(line)
                if event.get("event") == "shm":
                    names += [n for n in event.get("names", []) if n not in names]
    return names


def _wait(proc: subprocess.Popen[Any], timeout: float, results: Path, progress: Any) -> None:
    """Wait for the child; meanwhile show the step it reached (its results file grows one
    JSON line per step)."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        try:
            proc.wait(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if progress is None or not results.exists():
            continue
        lines = results.read_text("utf-8", "replace").splitlines()
        for line in lines[seen:]:
            with contextlib.suppress(ValueError):
                progress(_describe_event(json.loads(line)))
        seen = len(lines)


def _describe_event(e: dict[str, Any]) -> str:
    kind = e.get("event")
    if kind == "target":
        return f"{e.get('arch')}: config {e.get('config_source')}"
    if kind == "timing":
        return f"done: {e.get('step')} ({e.get('seconds', 0):.1f}s)"
    if kind == "check":
        return f"{e.get('code')} {CHECKS.get(e.get('code', ''), ('?',))[0]}: {e.get('status')}"
    return str(kind)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _root_cause(log_path: Path) -> str:
    """vLLM's engine processes log the real error; its own exception says 'see above'."""
    try:
        lines = log_path.read_text("utf-8", "replace").splitlines()
    except OSError:
        return ""
    causes = [line for line in lines if re.search(r"\b\w+(Error|Exception): ", line)]
    return f" (root cause: {causes[0].split('] ', 1)[-1].strip()[:400]})" if causes else ""


def _engine_failure(
    report: SmokeReport, class_file: str, log_path: Path, child_traceback: str
) -> Diagnostic | None:
    """PFX604 at the model's line when what stopped the run is a traceback through the
    model's files (vLLM's engine log first: it holds the root cause)."""
    from prefixlint.smoke.blame import blame, model_files
    from prefixlint.static.index import find_installed_package

    vllm = find_installed_package("vllm")
    try:
        log = log_path.read_text("utf-8", "replace")
    except OSError:
        log = ""
    found = blame([log, child_traceback], model_files(class_file, str(vllm) if vllm else None))
    if found is None:
        return None
    pos = Position(found.line, 1)
    return Diagnostic(
        code=CONSTRUCTION_FAILED_CODE,
        message=(
            f"vLLM's engine failed in the model's code (`{found.function}`): "
            f"{found.exception[:400]}; the smoke checks could not run"
        ),
        severity=Severity.ERROR,
        filename=display_path(found.file),
        location=pos,
        end_location=pos,
        phase="smoke",
        url=url_for(CONSTRUCTION_FAILED_CODE),
        data={"architecture": report.arch, "exception": found.exception},
    )


def _collect(
    report: SmokeReport,
    results: Path,
    codes: list[str],
    log_path: Path,
    timed_out: bool,
    timeout: float,
    returncode: int | None,
) -> None:
    events = []
    if results.exists():
        for line in results.read_text("utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    file, line = "", 0
    child_traceback = ""
    done: dict[str, CheckResult] = {}
    for e in events:
        kind = e.get("event")
        if kind == "target":
            report.arch, file, line = e["arch"], e["file"], int(e["line"] or 1)
            report.config_source = e.get("config_source", "")
        elif kind == "timing":
            report.timings[e["step"]] = e["seconds"]
        elif kind == "error":
            report.error = e["message"]
            child_traceback = e.get("traceback", "")
        elif kind == "check":
            code = e["code"]
            reason = e.get("reason") or e.get("note") or ""
            done[code] = CheckResult(code, e["status"], reason, e.get("seconds"))
            for finding in e.get("findings", []):
                report.diagnostics.append(_diagnostic(code, finding, file, line, report.arch))
    if report.error and "root cause" in report.error:
        report.error += _root_cause(log_path)
    if timed_out:
        report.error = f"the smoke run did not finish within {timeout:.0f} s"
    elif not report.error and returncode:
        tail = ""
        with contextlib.suppress(OSError):
            tail = " ".join(log_path.read_text("utf-8", "replace").split()[-60:])
        report.error = f"the smoke run died (exit code {returncode}): {tail}"[:1500]
    missing = CheckResult("", "error", report.error or "not reached")
    if report.error and not timed_out and file:
        found = _engine_failure(report, file, log_path, child_traceback)
        if found is not None:  # the model's defect, a finding: not a failure of the run
            report.diagnostics.append(found)
            where = f"{found.filename}:{found.location.row}"
            missing = CheckResult("", "skip", f"not run: the engine failed at {where} (PFX604)")
            report.error = ""
    for code in codes:
        if code not in done:
            done[code] = CheckResult(code, missing.status, missing.reason)
    report.checks = [done[c] for c in codes]
    report.diagnostics.sort(key=Diagnostic.sort_key)
