"""Out-of-tree models in every vLLM process.

vLLM builds the model in its engine-core process (and, at tensor parallel > 1, in worker
processes), all started with ``spawn``: a class registered in the smoke child is unknown
there. vLLM runs its ``vllm.general_plugins`` entry points in each of those processes, so
the child writes a throw-away distribution (a ``.dist-info`` folder with one entry point)
into its temp folder, puts that folder on ``sys.path`` and ``PYTHONPATH`` (spawned
children inherit the first, other children the second), and lists the classes to
register in ``PREFIXLINT_SMOKE_MODELS``. Nothing is installed; the temp folder goes away
with the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "PREFIXLINT_SMOKE_MODELS"
DIST = "prefixlint_smoke_plugin-0.0.dist-info"


def install(folder: Path, models: list[dict[str, Any]], env: dict[str, str]) -> None:
    """Write the entry point under ``folder`` and point ``env`` at it (and at the models)."""
    dist = folder / DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: prefixlint-smoke-plugin\nVersion: 0.0\n", "utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[vllm.general_plugins]\nprefixlint_smoke = prefixlint.smoke.plugin:register\n", "utf-8"
    )
    paths = [str(folder)] + [m["path"] for m in models if m.get("path")]
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    env[ENV] = json.dumps(models)
    # multiprocessing's spawn hands its children the parent's sys.path, not PYTHONPATH's
    import sys

    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)


def register() -> None:
    """The entry point: register each listed class under its architecture name."""
    models = json.loads(os.environ.get(ENV) or "[]")
    if not models:
        return
    import importlib
    import sys

    from vllm import ModelRegistry

    for m in models:
        if m["arch"] in ModelRegistry.get_supported_archs():
            continue
        if m.get("path") and m["path"] not in sys.path:
            sys.path.insert(0, m["path"])
        if m.get("module"):
            module = importlib.import_module(m["module"])
        else:  # a loose file
            import importlib.util

            name = m.get("alias") or "prefixlint_smoke_target"
            spec = importlib.util.spec_from_file_location(name, m["file"])
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        ModelRegistry.register_model(m["arch"], getattr(module, m["class"]))
