"""Phase 2 on one model file, first and second call: what the warm worker saves (issue 27).

    .venv/bin/python bench/warm_worker.py [--tp 1,2,4,8] [--keep]

Copies vLLM's llama.py into a fresh folder (relative imports made absolute, as an
out-of-tree plugin file), then runs ``prefixlint check --introspect`` on it three times,
each as a new command: cold (``--no-warm-worker``), first warm call (starts the zygote in
the folder's cache) and second warm call (forks from it). Prints each call's wall seconds
and whether the three reports are identical (compared as data). The zygote is stopped at
the end unless ``--keep``.

Target: the second call <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def llama_copy(folder: Path) -> Path:
    from prefixlint.static.index import find_installed_package

    vllm = find_installed_package("vllm")
    if vllm is None:
        sys.exit("vLLM is not installed")
    text = (vllm / "model_executor" / "models" / "llama.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    path = folder / "llama_copy.py"
    path.write_text(text)
    return path


def call(folder: Path, model: Path, tp: str, *extra: str) -> tuple[float, list, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFIXLINT_WARM_WORKER": "1"}
    args = [sys.executable, "-m", "prefixlint", "check", "--introspect", "--no-cache"]
    args += ["--tp", tp, "--format", "json", *extra, str(model)]
    t = time.perf_counter()
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode not in (0, 1):
        sys.exit(f"prefixlint check failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout), done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", default="1,2,4,8")
    parser.add_argument("--keep", action="store_true", help="leave the zygote running")
    args = parser.parse_args()
    from prefixlint.introspect.process.warm import stop

    with tempfile.TemporaryDirectory(prefix="prefixlint-bench-") as tmp:
        folder = Path(tmp)
        model = llama_copy(folder)
        try:
            cold, cold_report, _ = call(folder, model, args.tp, "--no-warm-worker")
            first, first_report, err1 = call(folder, model, args.tp)
            second, second_report, err2 = call(folder, model, args.tp)
        finally:
            if not args.keep:
                stop(folder / ".prefixlint_cache")
    for err in (err1, err2):
        for line in err.splitlines():
            if "warm worker" in line:
                print(f"note: {line}")
    print(f"check --introspect --tp {args.tp} of a llama.py copy (wall seconds, one command each)")
    print(f"  cold worker:        {cold:6.2f}")
    print(f"  warm, first call:   {first:6.2f}  (starts the zygote)")
    print(f"  warm, second call:  {second:6.2f}  (target <= 2 s)")
    same = cold_report == first_report == second_report
    print(f"  reports identical:  {same}  ({len(cold_report)} findings)")


if __name__ == "__main__":
    main()
