"""Static-phase speed over the installed vLLM's model tree, as ratios measured in one run.

    .venv/bin/python bench/static_vllm.py [--models-dir DIR]

Prints files, lines, bare libcst parse time (one process, and split over the cores as
prefixlint does), prefixlint cold (empty cache) and warm (same cache, nothing changed) wall
time as subprocesses, their ratios, and the wall time of checking one file. Targets from
the issue: cold <= 1.5x bare parse, warm <= 0.5 s, one file <= 0.4 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from prefixlint.static.discovery import installed_vllm_model_dirs


def parse_all(paths: list[str]) -> int:
    for p in paths:
        cst.parse_module(Path(p).read_text(encoding="utf-8"))
    return len(paths)


def timed(cmd: list[str], cwd: str) -> tuple[float, int]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    args = ap.parse_args()
    folder = args.models_dir or installed_vllm_model_dirs()[0]
    files = sorted(str(p) for p in folder.glob("*.py"))
    lines = sum(Path(p).read_text(encoding="utf-8").count("\n") for p in files)
    cores = os.cpu_count() or 1

    t = time.perf_counter()
    parse_all(files)
    bare_one = time.perf_counter() - t
    chunks = [files[i::cores] for i in range(cores)]
    t = time.perf_counter()
    with ProcessPoolExecutor(cores) as pool:
        list(pool.map(parse_all, chunks))
    bare_all = time.perf_counter() - t

    exe = str(Path(sys.executable).with_name("prefixlint"))
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        base = [exe, "check", "--cache-dir", cache, "--no-source", str(folder)]
        cold, rc = timed(base, tmp)
        warm, _ = timed(base, tmp)
        one_cold, _ = timed([exe, "check", "--no-cache", str(folder / "llama.py")], tmp)
        # The pre-commit case: one file just edited, the cache warm from an earlier run. The
        # edited copy sits in a mirror of vLLM's package path so its imports still resolve.
        mirror = Path(tmp) / "mirror" / "vllm" / "model_executor" / "models"
        mirror.mkdir(parents=True)
        for pkg in (mirror.parents[1], mirror.parent, mirror):
            (pkg / "__init__.py").write_text("")
        edited = mirror / "llama.py"
        edited.write_text((folder / "llama.py").read_text() + "\n# edited\n")
        timed([exe, "check", "--cache-dir", cache, str(edited)], tmp)  # mirror's first sight
        edited.write_text(edited.read_text() + "# edited again\n")
        one, _ = timed([exe, "check", "--cache-dir", cache, str(edited)], tmp)

    print(f"files                       {len(files)}")
    print(f"lines                       {lines}")
    print(f"cores                       {cores}")
    print(f"bare libcst parse, 1 proc   {bare_one:6.2f} s")
    print(f"bare libcst parse, {cores} procs  {bare_all:6.2f} s")
    print(f"prefixlint cold             {cold:6.2f} s   (exit {rc})")
    print(f"prefixlint warm             {warm:6.2f} s")
    print(f"one file, no cache (llama)  {one_cold:6.2f} s")
    print(f"one file, edited, warm      {one:6.2f} s")
    print(f"cold / bare parse (1 proc)  {cold / bare_one:6.2f}x")
    print(f"cold / bare parse ({cores} procs) {cold / bare_all:6.2f}x   target <= 1.5x")
    print(f"warm                        {'ok' if warm <= 0.5 else 'OVER'} (target <= 0.5 s)")
    print(f"one file                    {'ok' if one <= 0.4 else 'OVER'} (target <= 0.4 s)")


if __name__ == "__main__":
    main()
