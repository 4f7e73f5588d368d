"""Builds run in a worker process: a hang, a crash or a segfault costs one target, not the run.

The worker imports torch and vLLM once and serves jobs, one JSON line each on stdin; it
answers one marked JSON line on stdout (vLLM and torch may print there too). The parent
side (``Worker``) waits with a timeout, kills the worker when it hangs, and starts a
fresh one for the next job.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from typing import Any

from prefixlint.introspect.process.crash import (
    EVENT_MARK,
    TRACE_ENV,
    TraceFile,
    crash_site,
    how_it_ended,
)

MARK = "@@prefixlint-result@@ "
# The share of a job's time budget after which optional verification steps are skipped.
DEADLINE_SHARE = 0.6
# Seconds a fresh worker may take to import torch and vLLM before a job's clock starts
# (the job's timeout counts from then: ``crash.event("started")``).
STARTUP_ALLOWANCE = 600.0


class WorkerFailed(Exception):
    """The job's build hung or killed the worker; ``site`` is the model's line it was at
    (None when the worker said nothing of it)."""

    def __init__(self, message: str, site: tuple[str, int] | None = None) -> None:
        super().__init__(message)
        self.site = site


class WorkerDied(WorkerFailed):
    pass


class WorkerTimeout(WorkerFailed):
    pass


class Worker:
    def __init__(self, log: Any = None) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.results: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self.log = log
        self.tmp: str | None = None
        self.trace: TraceFile | None = None
        self.building: dict[str, Any] = {}  # the worker's last "building" event
        self.target_file = ""  # the job's target, when it is a file

    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # Its own temp root, removed by ``close``: what a build writes there (synthesised
        # config folders) goes even when the worker is killed on a timeout.
        self.tmp = tempfile.mkdtemp(prefix="prefixlint-worker-")
        env["TMPDIR"] = self.tmp
        self.trace = self.trace or TraceFile()
        env[TRACE_ENV] = self.trace.path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "prefixlint.introspect.process.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log if self.log is not None else subprocess.DEVNULL,
            text=True,
            env=env,
            # Ctrl-C reaches the parent only, which closes its workers: a build killed by
            # the interrupt is never reported as a crash of the model. A worker whose
            # parent is gone exits at the end of its stdin.
            start_new_session=True,
        )
        self.results = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.results), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen[str], out: queue.Queue[tuple[str, str] | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARK):
                out.put(("result", line[len(MARK) :]))
            elif line.startswith(EVENT_MARK):
                out.put(("event", line[len(EVENT_MARK) :]))
        out.put(None)  # end of output: the worker exited

    def _site(self) -> tuple[tuple[str, int] | None, str]:
        """Where the job's build was (the model's line in the worker's trace, else the
        class being built) and how the worker ended, when it said."""
        text = self.trace.read() if self.trace is not None else ""
        prefer = str(self.building.get("file") or "")
        site = crash_site(text, [prefer, self.target_file])
        if site is None and prefer:
            site = (prefer, int(self.building.get("line") or 0))
        return site, how_it_ended(text)

    def run(self, job: dict[str, Any], timeout: float) -> Any:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            raise WorkerDied("the worker process exited before taking the job") from None
        self.building = {}
        target = str(job.get("target") or "")
        self.target_file = target.split(".py:")[0] + ".py" if ".py" in target else ""
        # the job's own clock starts when the worker says it has started (a fresh worker
        # imports torch and vLLM first); until then, with room for that
        deadline = time.monotonic() + timeout + STARTUP_ALLOWANCE
        while True:
            try:
                item = self.results.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                assert self.proc is not None
                if self.trace is not None:
                    self.trace.request_dump(self.proc.pid)
                site, _ = self._site()
                self.close()
                raise WorkerTimeout(f"no answer within {timeout:.0f} s", site) from None
            if item is None:
                code = self.proc.wait()
                site, how = self._site()
                self.close()
                how = how or (f"signal {-code}" if code < 0 else f"exit code {code}")
                raise WorkerDied(f"the worker process died ({how})", site)
            kind, payload = item
            if kind == "result":
                return json.loads(payload)
            event = json.loads(payload)
            if event.get("event") == "started":
                deadline = time.monotonic() + timeout
            elif event.get("event") == "building":
                self.building = event

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __del__(self) -> None:
        if getattr(self, "trace", None) is not None and getattr(self, "proc", None) is None:
            self.trace.remove()  # type: ignore[union-attr]


# -- worker side ------------------------------------------------------------------------


def _layouts(cls: Any, tps: list[int], pps: list[int]) -> list[Any]:
    from prefixlint.introspect.builds.parallel import Layout

    out = [Layout(tp=tp) for tp in tps]
    if getattr(cls, "supports_pp", False):
        for pp in pps:
            if pp > 1:
                # first, a middle one (pp > 2) and last: what each must and must not hold
                ranks = [0, 1, pp - 1] if pp > 2 else [0, pp - 1]
                out += [Layout(pp=pp, pp_rank=r) for r in ranks]
    return out


def handle(job: dict[str, Any]) -> Any:
    from prefixlint.introspect.builds import pipeline as build
    from prefixlint.introspect.finding import class_site
    from prefixlint.introspect.process import crash
    from prefixlint.introspect.targets import plugins

    crash.new_job()
    crash.event("started")  # torch and vLLM are imported: the job's timeout counts from here
    # as vLLM's start-up: its general plugins register their models first
    plugins.prepare(job.get("target"))
    if job["kind"] == "list":
        from prefixlint.introspect.vllm_api import architecture_groups

        registry = build.vllm_registry()
        # An architecture in several tables (LlamaForCausalLM also embeds) counts as text
        # generation, its main use; a plugin's architectures are their own group.
        groups = dict.fromkeys(plugins.plugin_architectures(), plugins.PLUGIN_GROUP)
        tables = architecture_groups(registry, registry.ModelRegistry.get_supported_archs())
        return {**tables, **groups}
    results = []
    # The verification steps that only add checks (the dry-run) stop at this deadline,
    # well inside the parent's timeout: a slow check is "not verified", never a hang
    # blamed on the model.
    budget = job.get("budget")
    deadline = time.monotonic() + DEADLINE_SHARE * budget if budget else None
    try:
        targets = build.resolve_targets(job["target"])
    except (Exception, SystemExit) as e:
        from prefixlint.introspect.checks.pfx608_engine_start import unloadable

        # the model's own module failing to import is a finding at its line
        return unloadable(job["target"], e) or {"error": f"{type(e).__name__}: {e}"}
    for target in targets:
        cls = target.cls
        if cls is None:
            # where the class will come from, before its module is imported (which may hang)
            crash.event("building", arch=target.arch, **plugins.entry_location(target.arch))
            try:
                cls = build.load_class(build.vllm_registry(), target.arch)
            except Exception:
                cls = None
        file, line = class_site(cls)
        crash.event("building", arch=target.arch, file=file, line=line)
        layouts = _layouts(cls, job.get("tp", [1, 2, 4, 8]), job.get("pp", [2]))
        result = build.run_target(
            target,
            layouts,
            job.get("config"),
            job.get("configs"),
            job.get("config_base"),
            dryrun=job.get("dryrun", True),
            explore_budget=job.get("explore_budget", 0.0),
            deadline=deadline,
            checkpoint=job.get("checkpoint")
            or (job.get("checkpoints") or {}).get(target.arch.removesuffix("__prefixlint")),
            lora=job.get("lora"),
        )
        data = asdict(result)
        data["layouts"] = [
            {
                **o.layout.to_json(),
                "name": o.layout.name,
                "status": o.status,
                "seconds": round(o.seconds, 4),
                "reason": o.reason,
            }
            for o in result.layouts
        ]
        data["class_file"], data["class_line"] = class_site(cls)
        results.append(data)
    return results


# What every build imports whatever its model: imported before the first job, so that a
# job's timeout counts from its build (``crash.event("started")``), not from these imports.
_EVERY_BUILD = (
    "prefixlint.introspect.builds.pipeline",
    "vllm.config",
    "vllm.transformers_utils.config",
    "vllm.model_executor.models.registry",
    "vllm.model_executor.model_loader.utils",
    "vllm.model_executor.layers.linear",
    "vllm.model_executor.layers.attention",
    "vllm.plugins",
)


def _warm_up() -> None:
    import contextlib
    import importlib

    for name in _EVERY_BUILD:
        with contextlib.suppress(Exception):  # a layout that moved: the job imports it
            importlib.import_module(name)


def main() -> None:
    from prefixlint.introspect.process.env import prepare

    prepare()
    from prefixlint.introspect.process.crash import arm

    arm()  # stacks into the trace file on a crash, a hang or os._exit (see crash.py)
    # Only here, in phase 2's own process: torchvision & co. from set-up's folder, with
    # the schemas their extensions would define. Another process that imports build.py
    # (the smoke phase's child) must not see them: its vLLM engine would import them
    # in a subprocess where the schemas are not defined.
    from prefixlint.introspect.process.optional import prepare_optional_packages

    prepare_optional_packages()
    # vLLM's CPU worker replaces torch.cuda.Event/Stream before it loads a model; builds
    # under its CpuPlatform get the same set-up (see cpuworker.py).
    from prefixlint.introspect.process.cpuworker import prepare_cpu_worker

    prepare_cpu_worker()
    _warm_up()
    real_stdout = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.stdout = sys.stderr  # anything the build prints must not mix with answers
        tempfile.tempdir = tempfile.mkdtemp()  # one folder per job, removed after it
        try:
            answer = handle(json.loads(line))
        except BaseException as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            sys.stdout = real_stdout
            shutil.rmtree(tempfile.tempdir, ignore_errors=True)
            tempfile.tempdir = None
        real_stdout.write(MARK + json.dumps(answer, default=str) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
