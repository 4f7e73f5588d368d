"""The worker's side: the job loop ``python -m prefixlint.introspect.process.server`` runs.

It sets the process up (environment, crash trace, optional packages, vLLM's CPU-worker
set-up), imports what every build needs, then serves jobs, one JSON line each on stdin,
answering each with one line marked ``MARK`` on stdout (see ``client.py``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from prefixlint.introspect.process.client import MARK

# The share of a job's time budget after which optional verification steps are skipped.
DEADLINE_SHARE = 0.6


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
    from prefixlint.introspect.process import crash
    from prefixlint.introspect.process.memory import resident_mb
    from prefixlint.introspect.targets import plugins

    crash.new_job()
    # torch and vLLM are imported: the job's timeout counts from here, and its memory
    # growth from this resident size
    crash.event("started", rss_mb=resident_mb())
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
    try:
        targets = build.resolve_targets(job["target"])
    except (Exception, SystemExit) as e:
        from prefixlint.introspect.checks.pfx608_engine_start import unloadable

        # the model's own module failing to import is a finding at its line
        return unloadable(job["target"], e) or {"error": f"{type(e).__name__}: {e}"}
    return build_targets(job, targets)


def build_targets(job: dict[str, Any], targets: list[Any]) -> list[dict[str, Any]]:
    """Build and check each target of a job; one result per target."""
    from prefixlint.introspect.builds import pipeline as build
    from prefixlint.introspect.finding import class_site
    from prefixlint.introspect.process import crash
    from prefixlint.introspect.targets import plugins

    results = []
    # The verification steps that only add checks (the dry-run) stop at this deadline,
    # well inside the parent's timeout: a slow check is "not verified", never a hang
    # blamed on the model.
    budget = job.get("budget")
    deadline = time.monotonic() + DEADLINE_SHARE * budget if budget else None
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
            config=job.get("config"),
            config_table=job.get("configs"),
            config_base=job.get("config_base"),
            dryrun=job.get("dryrun", True),
            explore_budget=job.get("explore_budget", 0.0),
            deadline=deadline,
            checkpoint=job.get("checkpoint")
            or (job.get("checkpoints") or {}).get(target.arch.removesuffix("__prefixlint")),
            lora=job.get("lora"),
            compare=job.get("compare", True),
        )
        data = asdict(result)
        data["layouts"] = [
            {
                **o.layout.to_json(),
                "name": o.layout.name,
                "status": o.status,
                "seconds": round(o.seconds, 4),
                "reason": o.reason,
                "params": o.params,
                "modules": o.modules,
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
    # what a build's checks and dry-run import (~1 s under load): before the clock, and
    # once per zygote rather than once per forked child
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.attention.backends.zentorch_sdpa",
    "vllm.v1.executor.multiproc_executor",
    "vllm.model_executor.models.utils",
    "vllm.model_executor.layers.pooler",
    "vllm.model_executor.layers.rotary_embedding",
    "prefixlint.introspect.checks.pfx608_engine_start",
    "prefixlint.introspect.dryrun.checkpoint_run",
    "prefixlint.introspect.dryrun.selflayout",
    "prefixlint.introspect.targets.plugins",
)


def _warm_up() -> None:
    import importlib

    for name in _EVERY_BUILD:
        with contextlib.suppress(Exception):  # a layout that moved: the job imports it
            importlib.import_module(name)


def set_up() -> None:
    """What a worker does before its first job, whatever the job: the environment, the
    crash trace, optional packages, vLLM's CPU-worker set-up, the common imports. A
    zygote (``zygote.py``) does it once for the children it forks."""
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
    import torch

    # One thread: the builds' tensors are on the meta device or tiny, so an OpenMP team
    # costs more than it saves (a llama build job: 1.24 s with 2 threads, 0.67 s with 1),
    # and a team started in a zygote would deadlock the children it forks (libgomp is
    # not fork-safe).
    torch.set_num_threads(1)
    # What the imports built lives as long as the process: out of the collector's reach,
    # a full collection no longer walks torch's and vLLM's millions of objects (~0.4 s
    # each, several per job), and a zygote's children do not copy those pages to do it.
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def _job_scope() -> Iterator[None]:
    """Around one job: what the build prints goes to stderr (stdout carries the answers
    only), and what it writes goes to a temp folder of its own, removed after it."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    tempfile.tempdir = tempfile.mkdtemp()
    try:
        yield
    finally:
        sys.stdout = real_stdout
        shutil.rmtree(tempfile.tempdir, ignore_errors=True)
        tempfile.tempdir = None


# vLLM's own model a zygote builds once, when idle, before it forks further workers.
WARM_UP_ARCHITECTURE = "LlamaForCausalLM"


def warm_up_build() -> None:
    """Build and check one of vLLM's own models and drop the result: what every first job
    pays once per process (the compiled-op scan of vLLM's layers, transformers' conversion
    tables, vLLM's speculative-config patterns, source reads, compiled regexes) is then
    paid in the zygote instead of in each forked worker. No plugin is loaded and nothing of
    the user's is read. A failure only loses the saving."""
    from prefixlint.introspect.builds import pipeline as build

    with _job_scope(), contextlib.suppress(Exception):
        job = {"tp": [1], "pp": [2], "dryrun": True, "explore_budget": 1.0, "budget": 120}
        build_targets(job, build.resolve_targets(WARM_UP_ARCHITECTURE))
    with contextlib.suppress(Exception):
        from prefixlint.introspect.dryrun.layouts import exported_names

        exported_names()  # read when a class's name is not transformers' own spelling
    gc.collect()
    gc.freeze()


def serve() -> None:
    """Answer jobs until the end of stdin."""
    from prefixlint.introspect.process.crash import arm
    from prefixlint.introspect.process.memory import release, reset_peak, watch_memory

    arm()  # a zygote's child: its own trace file (a cold worker armed in ``set_up``)
    watch_memory()
    for line in sys.stdin:
        if not line.strip():
            continue
        reset_peak()  # the peak the parent reads after this job is this job's
        try:
            with _job_scope():
                answer = handle(json.loads(line))
        except BaseException as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            release()  # before the answer: the next job starts from what is really held
        sys.stdout.write(MARK + json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()


def main() -> None:
    set_up()
    serve()


if __name__ == "__main__":
    main()
