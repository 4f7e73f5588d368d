"""Phase 2 on one model file, first and later calls: what the warm worker saves (issue 27).

    .venv/bin/python bench/warm_worker.py [--tp 1,2,4,8] [--pause 5] [--keep]

Copies vLLM's llama.py into a fresh folder (relative imports made absolute, as an
out-of-tree plugin file), then runs ``prefixlint check --introspect`` on it, each call a
new command: cold (``--no-warm-worker --no-cache``), the first warm call (starts the
zygote in the bench's warm folder), the second warm call (forks from it; the file unchanged, so
the static phase's results come from the cache, as for a user's second run) and a third
after the file was edited (a comment appended: static phase and phase 2 both run again).
``--pause`` seconds pass between calls, as between a person's commands (the zygote warms
itself up while idle after its first child). Prints each call's wall seconds and whether
the reports are identical (compared as data). The zygote is stopped at the end unless
``--keep``.

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
    args = [sys.executable, "-m", "prefixlint", "check", "--introspect"]
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
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between calls")
    parser.add_argument("--keep", action="store_true", help="leave the zygote running")
    args = parser.parse_args()
    from prefixlint.introspect.process.warm import stop

    calls: list[tuple[str, float, list]] = []
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="prefixlint-bench-") as tmp:
        folder = Path(tmp)
        # the bench's own warm folder: a zygote of the user's would not be a first call
        os.environ.setdefault("PREFIXLINT_WARM_DIR", str(folder / "warm"))
        model = llama_copy(folder)
        steps = [
            ("cold worker", ("--no-warm-worker", "--no-cache")),
            ("warm, first call (starts the zygote)", ()),
            ("warm, second call (same file)", ()),
            ("warm, third call (file edited)", ()),
        ]
        try:
            for i, (name, extra) in enumerate(steps):
                if i == 3:
                    with model.open("a") as f:
                        f.write("# edited\n")
                if i > 1:
                    time.sleep(args.pause)
                seconds, report, err = call(folder, model, args.tp, *extra)
                calls.append((name, seconds, report))
                errors.append(err)
        finally:
            if not args.keep:
                stop(Path(os.environ["PREFIXLINT_WARM_DIR"]))
    for err in errors:
        for line in err.splitlines():
            if "warm worker" in line:
                print(f"note: {line}")
    print(f"check --introspect --tp {args.tp} of a llama.py copy (wall seconds, one command each;")
    print(f"{args.pause:g} s between calls)")
    for name, seconds, _ in calls:
        print(f"  {name:40s} {seconds:6.2f}")
    print("  target: second call <= 2 s")
    reports = [report for _, _, report in calls]
    same = all(r == reports[0] for r in reports)
    print(f"  reports identical: {same}  ({len(reports[0])} findings)")


if __name__ == "__main__":
    main()
