"""The parent's side of a worker process: start it, hand it jobs, wait, stop it.

Builds run in a worker process (``server.py``): a hang, a crash or a segfault costs one
target, not the run. ``Worker`` writes a job as one JSON line on the worker's stdin and
waits, with a timeout, for its one marked JSON line on stdout (vLLM and torch may print
there too); it kills the worker when it hangs and starts a fresh one for the next job.
This side imports neither torch nor vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from prefixlint.introspect.process import warm, watchdog
from prefixlint.introspect.process.crash import (
    EVENT_MARK,
    TRACE_ENV,
    TraceFile,
    crash_site,
    how_it_ended,
)
from prefixlint.introspect.process.memory import peak_rss_mb, rss_mb
from prefixlint.introspect.process.warm import WarmProcess

MARK = "@@prefixlint-result@@ "
# Seconds a fresh worker may take to import torch and vLLM before a job's clock starts
# (the job's timeout counts from then: ``crash.event("started")``).
STARTUP_ALLOWANCE = 600.0
# A forked worker has imported them already: it starts its job at once.
WARM_STARTUP_ALLOWANCE = 60.0


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


class _WarmFailed(Exception):
    """A warm worker failed before its job started: the zygote's fault, not the model's."""


def worker_environment(base: Any) -> dict[str, str]:
    """The environment a worker (cold, or the zygote it is forked from) starts with."""
    env = dict(base)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # `python -m` puts the working folder first on sys.path: run from a plugin's project
    # folder, its source folder would be found as a namespace package before the
    # installed (editable) plugin, whose entry point then has no `register` (issue 30).
    # File targets put their own root on the path (targets/resolve.py).
    env["PYTHONSAFEPATH"] = "1"
    # A finding's words must not change from one run to the next: vLLM's own messages
    # print sets (the loader's "unloaded" parameter names), ordered by string hashing.
    env["PYTHONHASHSEED"] = "0"
    return env


class Worker:
    """``warm``: the cache folder of the zygote to fork workers from (``warm.py``); None,
    or a zygote that fails, starts a cold worker (``python -m ...server``)."""

    def __init__(self, log: Any = None, warm: Path | None = None) -> None:
        self.proc: subprocess.Popen[str] | WarmProcess | None = None
        self.warm = warm
        self.warm_info: dict[str, Any] = {}  # the zygote's answer: its pid, children served
        self.results: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self.log = log
        self.tmp: str | None = None
        self.trace: TraceFile | None = None
        self.lifeline: int | None = None  # the write end of the watchdog's pipe
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.building: dict[str, Any] = {}  # the worker's last "building" event
        self.target_file = ""  # the job's target, when it is a file
        self.peak_rss_mb = 0.0  # the highest resident memory of its processes so far
        # the last job's peak resident memory, the resident size it left and its growth
        # (MB; empty when its worker died): which architecture holds memory (issue 30)
        self.job_memory: dict[str, float] = {}
        self._job_start_rss: float | None = None
        self._closing = threading.RLock()

    def _start(self) -> None:
        env = worker_environment(os.environ)
        # Its own temp root, removed by ``close``: what a build writes there (synthesised
        # config folders) goes even when the worker is killed on a timeout.
        self.tmp = tempfile.mkdtemp(prefix="prefixlint-worker-")
        env["TMPDIR"] = self.tmp
        self.trace = TraceFile()
        env[TRACE_ENV] = self.trace.path
        self.proc = self._spawn(env)
        self._guard(self.proc.pid)
        self.results = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.results), daemon=True).start()

    def _spawn(self, env: dict[str, str]) -> subprocess.Popen[str] | WarmProcess:
        if self.warm is not None:
            stderr = self.log.fileno() if self.log is not None else os.open(os.devnull, os.O_WRONLY)
            try:
                proc = warm.spawn(self.warm, env, stderr)
                self.warm_info = proc.info
                return proc
            except warm.WarmUnavailable as e:
                self.warm = None  # this worker's next processes are cold too
                warm.note_fallback(str(e))
            finally:
                if self.log is None:
                    os.close(stderr)
        return subprocess.Popen(
            [sys.executable, "-m", "prefixlint.introspect.process.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log if self.log is not None else subprocess.DEVNULL,
            text=True,
            env=env,
            # Ctrl-C reaches the parent only, which closes its workers: a build killed by
            # the interrupt is never reported as a crash of the model. Its own group: the
            # worker goes with whatever the model started.
            start_new_session=True,
        )

    def _guard(self, pgid: int) -> None:
        """The worker's watchdog: it ends the worker and removes its files when this
        process ends, however (see ``watchdog.py``)."""
        trace = self.trace.path if self.trace is not None else ""
        read, self.lifeline = os.pipe()  # the write end stays here only (not inherited)
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", watchdog.__file__, str(pgid), self.tmp or "", trace],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)

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
            if self._fall_back("its worker exited before taking the job"):
                return self.run(job, timeout)
            self.close()
            raise WorkerDied("the worker process exited before taking the job") from None
        self.building = {}
        self.job_memory, self._job_start_rss = {}, None
        target = str(job.get("target") or "")
        self.target_file = target.split(".py:")[0] + ".py" if ".py" in target else ""
        try:
            return self._wait(timeout)
        except _WarmFailed as e:
            self._fall_back(str(e))
            return self.run(job, timeout)

    def _fall_back(self, reason: str) -> bool:
        """A warm worker that failed before its job started says nothing of the model:
        the job goes to a cold worker. False when this worker was not warm."""
        if not isinstance(self.proc, WarmProcess):
            return False
        self.close()
        self.warm = None
        warm.note_fallback(reason)
        return True

    def _wait(self, timeout: float) -> Any:
        """The job's answer; WorkerTimeout or WorkerDied when the worker fails it."""
        proc = self.proc  # another thread may close this worker meanwhile
        assert proc is not None
        # the job's own clock starts when the worker says it has started (a fresh worker
        # imports torch and vLLM first); until then, with room for that
        forked = isinstance(proc, WarmProcess)
        allowance = WARM_STARTUP_ALLOWANCE if forked else STARTUP_ALLOWANCE
        deadline = time.monotonic() + timeout + allowance
        started = False
        while True:
            try:
                item = self.results.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                if forked and not started:
                    raise _WarmFailed("its worker did not start the job") from None
                if self.trace is not None:
                    self.trace.request_dump(proc.pid)
                site, _ = self._site()
                self.close()
                raise WorkerTimeout(f"no answer within {timeout:.0f} s", site) from None
            if item is None:
                code = proc.wait()
                if forked and not started:
                    raise _WarmFailed(f"its worker ended before the job started ({code})")
                site, how = self._site()
                self.close()
                how = how or (f"signal {-code}" if code < 0 else f"exit code {code}")
                raise WorkerDied(f"the worker process died ({how})", site)
            kind, payload = item
            if kind == "result":
                self._measure(job=True)
                return json.loads(payload)
            event = json.loads(payload)
            if event.get("event") == "started":
                started = True
                deadline = time.monotonic() + timeout
                self._job_start_rss = event.get("rss_mb")
            elif event.get("event") == "building":
                self.building = event

    def _measure(self, job: bool = False) -> None:
        """The worker's peak so far; with ``job`` (its answer just came), the job's own
        peak (the worker restarted its mark as the job began) and resident growth."""
        if self.proc is None:
            return
        peak = peak_rss_mb(self.proc.pid)
        self.peak_rss_mb = max(self.peak_rss_mb, peak or 0.0)
        if job and peak is not None:
            self.job_memory = {"peak_rss_mb": round(peak, 1)}
            now, before = rss_mb(self.proc.pid), self._job_start_rss
            if now is not None:
                self.job_memory["rss_mb"] = round(now, 1)
            if isinstance(before, (int, float)):
                # the mark restarts at the resident size the job began with: its growth
                # to the peak is what this build alone needed
                self.job_memory["peak_growth_mb"] = round(peak - before, 1)
                if now is not None:
                    self.job_memory["rss_growth_mb"] = round(now - before, 1)

    def close(self) -> None:
        # the zoo closes its workers from the main thread on Ctrl-C while a build
        # thread closes the one whose build the kill ended: once, not twice
        with self._closing:
            if self.proc is not None:
                self._measure()
                if isinstance(self.proc, subprocess.Popen):
                    with contextlib.suppress(OSError):
                        os.killpg(self.proc.pid, signal.SIGKILL)  # what the model started too
                self.proc.kill()
                self.proc.wait()
                if isinstance(self.proc, WarmProcess):
                    self.proc.close()
                self.proc = None
            if self.lifeline is not None:
                with contextlib.suppress(OSError):
                    os.write(self.lifeline, watchdog.DISARM)  # stopped here: nothing to kill
                os.close(self.lifeline)
                self.lifeline = None
            if self.watchdog is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.watchdog.wait(timeout=5)
                self.watchdog = None
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None
            if self.trace is not None:
                self.trace.remove()
                self.trace = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
