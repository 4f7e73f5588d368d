"""Every static verdict, saved as data, to compare before and after a change.

    .venv/bin/python bench/verdicts.py save BEFORE.json   # on the old code
    .venv/bin/python bench/verdicts.py save AFTER.json    # on the new code
    .venv/bin/python bench/verdicts.py compare BEFORE.json AFTER.json

``save`` runs ``prefixlint check --format json --no-cache`` over (a) the installed vLLM's
model files (``--installed-vllm``), (b) the plugin fixtures (``tests/fixtures/plugins/*``),
and (c) the plugin fixtures and a copy of the installed vLLM's model files in a mirror of
its package path, once in this environment and once in a Python where vLLM and torch are
not importable (``tests/test_without_vllm.py``'s isolated site; it reads the shipped
summary). Each finding is kept as (file, line, column, code, severity, message), sorted;
``compare`` exits 1 and prints the differences when any configuration differs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from prefixlint.static.discovery import installed_vllm_model_dirs  # noqa: E402
from tests.test_without_vllm import _RUN, isolated_site  # noqa: E402

PLUGINS = sorted(p for p in (REPO / "tests" / "fixtures" / "plugins").iterdir() if p.is_dir())


def _rows(output: str, roots: list[Path]) -> list[list]:
    def short(name: str) -> str:
        for root in roots:
            if Path(name).is_relative_to(root):
                return str(Path(name).relative_to(root))
        return name

    rows = [
        [
            short(d["filename"]),
            d["location"]["row"],
            d["location"]["column"],
            d["code"],
            d["severity"],
            d["message"],
        ]
        for d in json.loads(output)
    ]
    return sorted(rows)


def _check(paths: list[str], cwd: Path, site: Path | None, extra: list[str]) -> str:
    args = ["check", *paths, *extra, "--format", "json", "--no-cache"]
    if site is None:
        command = [sys.executable, "-m", "prefixlint", *args]
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    else:
        code = _RUN.format(site=str(site), repo=str(REPO), args=args)
        command, env = [sys.executable, "-I", "-S", "-c", code], {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def save(out: Path) -> None:
    models = installed_vllm_model_dirs()[0]
    result: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        result["installed-vllm"] = _rows(
            _check([], root, None, ["--installed-vllm"]), [models.parents[2]]
        )
        plugins = []
        for p in PLUGINS:
            shutil.copytree(p, root / p.name)
            plugins.append(str(root / p.name))
        result["plugins"] = _rows(_check(plugins, root, None, []), [root])
        mirror = root / "vllm" / "model_executor" / "models"
        shutil.copytree(models, mirror, ignore=shutil.ignore_patterns("__pycache__"))
        for pkg in (root / "vllm", root / "vllm" / "model_executor"):
            (pkg / "__init__.py").write_text("")
        both = [*plugins, str(mirror)]
        result["mirror, with vLLM"] = _rows(_check(both, root, None, []), [root])
        site = isolated_site(root / "site")
        result["mirror, without vLLM"] = _rows(_check(both, root, site, []), [root])
    out.write_text(json.dumps(result, indent=0))
    for name, rows in result.items():
        print(f"{name:24} {len(rows)} findings")


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    failed = 0
    for name in sorted(set(old) | set(new)):
        a = {tuple(r) for r in old.get(name, [])}
        b = {tuple(r) for r in new.get(name, [])}
        same = old.get(name) == new.get(name)
        print(f"{name:24} {len(a)} -> {len(b)} findings: {'identical' if same else 'DIFFER'}")
        if not same:
            failed = 1
            for r in sorted(a - b):
                print("  -", r)
            for r in sorted(b - a):
                print("  +", r)
    return failed


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("save").add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.out)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
