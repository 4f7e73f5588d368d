"""The cost of a review (issue 39): base and head checked, against head alone.

    .venv/bin/python bench/review_cost.py [--files llama.py,...] [--introspect]
        [--tp 1,2] [--pp 2] [--repeat 3]

For each vLLM model file (default: the smallest, the median and the largest by lines of
the installed vLLM's model files that define an architecture, and llama.py), a temp git
repository holds a copy at ``vllm/model_executor/models/`` (as ``tests/conftest.py``'s
``vllm_copy``): the base commit is vLLM's file, the head adds one comment line in it.
Then, each a new command, best of ``--repeat``:

- ``check`` (head only) and ``check --diff-base base`` (base and head), the static phase:
  cold (``--no-cache``, as a CI run without a cache: the base's copies go to a temp
  folder) and cached (a run after the first: the head's results and the base's copies,
  kept in ``.prefixlint_cache/base/<commit>``, come from the cache);
- with ``--introspect``: the same with phase 2 (cached static phase), in the warm worker
  (a first call starts the zygote and is not counted).

Prints seconds per file and the review's overhead (diff-base / head-only).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.invalid",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.invalid",
}


def models_folder() -> Path:
    from prefixlint.static.index import find_installed_package

    vllm = find_installed_package("vllm")
    if vllm is None:
        sys.exit("vLLM is not installed")
    return vllm / "model_executor" / "models"


def default_files() -> list[str]:
    """The smallest, median and largest model file (by lines) with an architecture class
    (``class ...For...(``), and llama.py."""
    sized = []
    for path in models_folder().glob("*.py"):
        text = path.read_text("utf-8", "replace")
        if re.search(r"^class \w+For[A-Z]\w*\(", text, re.M):
            sized.append((text.count("\n"), path.name))
    sized.sort()
    picks = [sized[0][1], sized[len(sized) // 2][1], sized[-1][1], "llama.py"]
    return list(dict.fromkeys(picks))


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True)


def pull_request(folder: Path, name: str) -> Path:
    """A repository whose ``base`` tag holds vLLM's ``name`` and whose HEAD adds a comment
    line after its first ``super().__init__()``."""
    models = folder / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    for package in (folder / "vllm", folder / "vllm" / "model_executor", models):
        (package / "__init__.py").write_text("")
    text = (models_folder() / name).read_text()
    target = models / name
    target.write_text(text)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "base")
    git(folder, "tag", "base")
    found = re.search(r"^( +)super\(\).__init__\([^\n]*\n", text, re.M)
    at = found.end() if found else len(text)
    indent = found.group(1) if found else ""
    target.write_text(text[:at] + f"{indent}# reviewed\n" + text[at:])
    git(folder, "commit", "-q", "-am", "the pull request")
    return target


def timed(folder: Path, args: list[str], warm: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFIXLINT_WARM_WORKER": "1" if warm else "0"}
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", "check", "--format", "json", *args, "vllm"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t
    if done.returncode not in (0, 1):
        sys.exit(f"prefixlint check {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds


def best(folder: Path, args: list[str], repeat: int, warm: bool) -> float:
    return min(timed(folder, args, warm) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", help="comma-separated model file names")
    parser.add_argument("--introspect", action="store_true", help="also phase 2 (minutes)")
    parser.add_argument("--tp", default="1,2")
    parser.add_argument("--pp", default="2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from prefixlint.introspect.process.warm import stop

    names = args.files.split(",") if args.files else default_files()
    rows = []
    for name in names:
        folder = Path(tempfile.mkdtemp(prefix="prefixlint-review-bench-"))
        try:
            target = pull_request(folder, name)
            lines = target.read_text().count("\n")
            row = [name, lines]
            for cache in (["--no-cache"], []):  # cold (as a CI run without a cache), cached
                row.append(best(folder, cache, args.repeat, False))
                row.append(best(folder, [*cache, "--diff-base", "base"], args.repeat, False))
            if args.introspect:
                phase2 = ["--introspect", "--tp", args.tp, "--pp", args.pp]
                timed(folder, phase2, True)  # starts the zygote: not counted
                head = best(folder, phase2, args.repeat, True)
                both = best(folder, [*phase2, "--diff-base", "base"], args.repeat, True)
                row += [head, both]
            rows.append(row)
        finally:
            stop(folder / ".prefixlint_cache")
            shutil.rmtree(folder, ignore_errors=True)
    header = f"{'file':24s} {'lines':>6s} {'cold':>8s} {'+base':>8s} {'cached':>8s} {'+base':>8s}"
    if args.introspect:
        header += f" {'phase2':>8s} {'+base':>8s}   (--tp {args.tp} --pp {args.pp}, warm)"
    print(f"wall seconds, best of {args.repeat}, one command each")
    print(header)
    for row in rows:
        cells = f"{row[0]:24s} {row[1]:6d} " + " ".join(f"{v:8.2f}" for v in row[2:])
        print(cells)


if __name__ == "__main__":
    main()
