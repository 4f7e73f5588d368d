"""Phase-2 figures over the installed vLLM registry, measured in one run.

    .venv/bin/python bench/introspect_zoo.py [--jobs 2]

Runs ``prefixlint zoo`` (tp=1, every registered architecture) and prints how many built,
were skipped or failed (with the reason classes: config-synthesis gap, environment gap,
finding), the share of the registry's text-generation architectures that build, the
median build time and the wall time. Targets from the issue: >= 90% of text-generation
architectures build at tp=1, median build <= 2 s, whole sweep <= 10 minutes.

It also prints the share of text-generation architectures that build which the checkpoint
and quantization dry-run (PFX701/PFX702) verifies (target >= 80%), and the dry-run's median
cost per architecture, timed around the dry-run alone in the worker (target <= 1 s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--markdown", type=Path, help="Also write the report as Markdown here.")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("prefixlint"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "zoo.json"
        started = time.perf_counter()
        proc = subprocess.run(
            [exe, "zoo", "--jobs", str(args.jobs), "--format", "json", "-o", str(out)],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        if proc.returncode not in (0, 1):
            sys.exit(f"zoo failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        data = json.loads(out.read_text())
    s = data["summary"]
    print(f"architectures               {s['architectures']}")
    print(f"built / skipped / failed    {s['built']} / {s['skipped']} / {s['failed']}")
    for key, n in s["by_category"].items():
        print(f"  {key:<26}{n}")
    print(f"with findings               {s['with_findings']} ({s['findings']} findings)")
    ratio = s["text_generation_built_ratio"] or 0
    print(
        f"text generation built       {s['text_generation_built']}/{s['text_generation']} "
        f"({ratio * 100:.1f}%)   target >= 90%"
    )
    print(f"median build (tp=1)         {s['median_build_seconds']} s   target <= 2 s")
    dry = s.get("text_generation_dryrun_ratio") or 0
    print(
        f"dry-run (PFX701/702)        {s.get('text_generation_dryrun')}/"
        f"{s['text_generation_built']} text-generation builds ({dry * 100:.1f}%)   target >= 80%"
    )
    print(f"median dry-run cost         {s.get('median_dryrun_seconds')} s   target <= 1 s")
    print(f"wall                        {wall:.1f} s   target <= 600 s")
    print()
    print(f"{'group':<34} {'built':>9} {'%':>6}  not verified (why)")
    for group, g in s.get("by_group", {}).items():
        why = ", ".join(f"{k} {n}" for k, n in sorted(g["not_verified"].items())) or "-"
        print(
            f"{group[:34]:<34} {g['built']:>4}/{g['architectures']:<4} "
            f"{g['built_ratio'] * 100:>5.1f}%  {why}"
        )
    if args.markdown:
        from prefixlint.introspect.zoo import Row, ZooSummary

        rows = [Row(**row) for row in data["architectures"]]
        args.markdown.write_text(ZooSummary(rows, wall).to_markdown() + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
