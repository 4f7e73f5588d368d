"""The process set-up vLLM's own CPU worker does before it loads a model.

Model code written for GPUs builds CUDA streams and events in ``__init__`` (DeepSeek-V4's
attention: ``self.ln_events = [torch.cuda.Event() for _ in range(4)]``; Inkling's MoE:
``(torch.cuda.Event(), torch.cuda.Event())``), even on vLLM's CPU path. On a CPU-only
torch those classes are dummies that raise ("Tried to instantiate dummy base class
Event"). vLLM's CPU worker does not fail there: ``vllm/v1/worker/cpu_worker.py`` imports
``vllm.v1.worker.cpu.shm`` first ("Must be imported firstly"), which replaces
``torch.cuda.Event``/``Stream`` and friends with no-op placeholders for the whole
process. A meta build under vLLM's ``CpuPlatform`` builds what that worker would build
only after the same set-up, so the phase-2 worker imports that module itself: vLLM's own
code, not a stand-in of prefixlint's; the platform stays vLLM's CpuPlatform, and nothing
the model's code builds changes (the placeholders hold no parameters or modules).

A vLLM without that module (other releases lay their CPU worker out otherwise) is left
as it is: such builds then fail as before and are reported as needing a CUDA platform.
"""

from __future__ import annotations

import importlib

# vLLM's CPU worker set-up, newest layout first.
CPU_WORKER_SETUP = ("vllm.v1.worker.cpu.shm",)
STATUS: dict[str, str] = {}


def prepare_cpu_worker() -> str:
    """Run vLLM's CPU worker set-up when vLLM's platform is its CpuPlatform; how it went:
    "not cpu", "<module>" (imported), "absent" (no such module in this vLLM) or "error:
    ..." (the module failed; nothing else is changed)."""
    if "cpu" in STATUS:
        return STATUS["cpu"]
    try:
        from vllm.platforms import current_platform

        is_cpu = current_platform.is_cpu()
    except Exception as e:  # no vLLM, or a platform that fails to resolve
        STATUS["cpu"] = f"error: {type(e).__name__}: {e}"
        return STATUS["cpu"]
    if not is_cpu:
        STATUS["cpu"] = "not cpu"  # a GPU worker has real streams and events
        return STATUS["cpu"]
    STATUS["cpu"] = "absent"
    for name in CPU_WORKER_SETUP:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):
                continue  # this vLLM has no such module: try the next layout
            STATUS["cpu"] = f"error: {type(e).__name__}: {e}"
            break
        except Exception as e:
            STATUS["cpu"] = f"error: {type(e).__name__}: {e}"
            break
        else:
            STATUS["cpu"] = name
            break
    return STATUS["cpu"]
