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
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

MARK = "@@prefixlint-result@@ "
# The share of a job's time budget after which optional verification steps are skipped.
DEADLINE_SHARE = 0.6


class WorkerDied(Exception):
    pass


class WorkerTimeout(Exception):
    pass


class Worker:
    def __init__(self, log: Any = None) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.results: queue.Queue[str | None] = queue.Queue()
        self.log = log

    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "prefixlint.introspect.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log if self.log is not None else subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.results = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.results), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen[str], out: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARK):
                out.put(line[len(MARK) :])
        out.put(None)  # end of output: the worker exited

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
        try:
            line = self.results.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise WorkerTimeout(f"no answer within {timeout:.0f} s") from None
        if line is None:
            code = self.proc.wait()
            self.proc = None
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise WorkerDied(f"the worker process died ({how})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# -- worker side ------------------------------------------------------------------------


def _layouts(cls: Any, tps: list[int], pps: list[int]) -> list[Any]:
    from prefixlint.introspect.parallel import Layout

    out = [Layout(tp=tp) for tp in tps]
    if getattr(cls, "supports_pp", False):
        for pp in pps:
            if pp > 1:
                # first, a middle one (pp > 2) and last: what each must and must not hold
                ranks = [0, 1, pp - 1] if pp > 2 else [0, pp - 1]
                out += [Layout(pp=pp, pp_rank=r) for r in ranks]
    return out


def handle(job: dict[str, Any]) -> Any:
    from prefixlint.introspect import build

    if job["kind"] == "list":
        from prefixlint.introspect.vllm_api import architecture_groups

        registry = build.vllm_registry()
        # An architecture in several tables (LlamaForCausalLM also embeds) counts as text
        # generation, its main use.
        return architecture_groups(registry, registry.ModelRegistry.get_supported_archs())
    results = []
    # The verification steps that only add checks (the dry-run) stop at this deadline,
    # well inside the parent's timeout: a slow check is "not verified", never a hang
    # blamed on the model.
    budget = job.get("budget")
    deadline = time.monotonic() + DEADLINE_SHARE * budget if budget else None
    try:
        targets = build.resolve_targets(job["target"])
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    for target in targets:
        cls = target.cls
        if cls is None:
            try:
                cls = build.load_class(build.vllm_registry(), target.arch)
            except Exception:
                cls = None
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
        data["class_file"], data["class_line"] = build.class_location(cls)
        results.append(data)
    return results


def main() -> None:
    from prefixlint.introspect.env import prepare

    prepare()
    # Only here, in phase 2's own process: torchvision & co. from set-up's folder, with
    # the schemas their extensions would define. Another process that imports build.py
    # (the smoke phase's child) must not see them: its vLLM engine would import them
    # in a subprocess where the schemas are not defined.
    from prefixlint.introspect.optional import prepare_optional_packages

    prepare_optional_packages()
    # vLLM's CPU worker replaces torch.cuda.Event/Stream before it loads a model; builds
    # under its CpuPlatform get the same set-up (see cpuworker.py).
    from prefixlint.introspect.cpuworker import prepare_cpu_worker

    prepare_cpu_worker()
    real_stdout = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.stdout = sys.stderr  # anything the build prints must not mix with answers
        try:
            answer = handle(json.loads(line))
        except BaseException as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            sys.stdout = real_stdout
        real_stdout.write(MARK + json.dumps(answer, default=str) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
