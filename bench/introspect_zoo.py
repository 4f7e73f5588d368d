"""Phase-2 figures over the installed vLLM registry, measured in one run.

    .venv/bin/python bench/introspect_zoo.py [--jobs 2]

Runs ``prefixlint zoo`` (tp=1, every registered architecture) and prints how many built,
were skipped or failed (with the reason classes: config-synthesis gap, environment gap,
finding), the share of the registry's text-generation architectures that build, the
median build time and the wall time; the construction coverage: the share of the
prefix-taking construction sites of the built architectures' model files that some build
(the synthesised config or an explored variant) executed, registry-wide and for the files
of text-generation architectures; the share of text-generation builds that the checkpoint
and quantization dry-run (PFX701/PFX702) verifies and its median cost per architecture;
and, per registry group, what built and why the rest is not verified.

Targets: >= 97% of text-generation architectures build, construction coverage of
text-generation files >= 95%, dry-run share >= 80% at <= 1 s median, zoo wall at tp=1
<= 3 minutes on 2 cores (``--explore-budget`` is the zoo's per-target budget).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_zoo(jobs: int, explore_budget: str | None) -> tuple[dict, float]:
    budget = ["--explore-budget", explore_budget] if explore_budget else []
    exe = str(Path(sys.executable).with_name("prefixlint"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "zoo.json"
        started = time.perf_counter()
        proc = subprocess.run(
            [exe, "zoo", "--jobs", str(jobs), "--format", "json", "-o", str(out), *budget],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        if proc.returncode not in (0, 1):
            sys.exit(f"zoo failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return json.loads(out.read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--markdown", type=Path, help="Also write the report as Markdown here.")
    ap.add_argument("--explore-budget", default=None, help="seconds per target (zoo default)")
    ap.add_argument(
        "--from-json",
        type=Path,
        action="append",
        help="Report on this `prefixlint zoo --format json` output instead of running the "
        "zoo (its own wall time is reported). Repeat it for several vLLM releases: the "
        "report is on the last, the Markdown has a column per file.",
    )
    args = ap.parse_args()
    runs = [json.loads(p.read_text()) for p in args.from_json or []]
    if runs:
        data = runs[-1]
        wall = data["summary"]["wall_seconds"]
    else:
        data, wall = run_zoo(args.jobs, args.explore_budget)
        runs = [data]
    s = data["summary"]
    print(f"architectures               {s['architectures']}")
    print(f"built / skipped / failed    {s['built']} / {s['skipped']} / {s['failed']}")
    for key, n in s["by_category"].items():
        print(f"  {key:<26}{n}")
    print(f"with findings               {s['with_findings']} ({s['findings']} findings)")
    ratio = s["text_generation_built_ratio"] or 0
    print(
        f"text generation built       {s['text_generation_built']}/{s['text_generation']} "
        f"({ratio * 100:.1f}%)   target >= 97%"
    )
    print(f"median build (tp=1)         {s['median_build_seconds']} s   target <= 2 s")
    dry = s.get("text_generation_dryrun_ratio") or 0
    print(
        f"dry-run (PFX701/702)        {s.get('text_generation_dryrun')}/"
        f"{s['text_generation_built']} text-generation builds ({dry * 100:.1f}%)   target >= 80%"
    )
    every = s.get("dryrun_ratio") or 0
    print(
        f"dry-run, all builds         {s.get('dryrun')}/{s['built']} ({every * 100:.1f}%)"
        "   target >= 90%"
    )
    print(f"median dry-run cost         {s.get('median_dryrun_seconds')} s   target <= 1 s")
    for label, key, target in (
        ("construction sites (all)", "coverage", ""),
        ("construction sites (text)", "text_generation_coverage", "   target >= 95%"),
    ):
        cov = s[key]
        print(
            f"{label:<28}{cov['executed']}/{cov['sites']} executed "
            f"({(cov['ratio'] or 0) * 100:.1f}%) in {cov['files']} files{target}"
        )
    variants = [v for row in data["architectures"] for v in row.get("variants", [])]
    kept = sum(v["status"] == "kept" for v in variants)
    print(f"config variants             {len(variants)} built or tried, {kept} kept")
    print(f"wall                        {wall:.1f} s   target <= 180 s")
    print()
    print(f"{'group':<34} {'built':>9} {'%':>6}  not verified (why)")
    for group, g in s.get("by_group", {}).items():
        why = ", ".join(f"{k} {n}" for k, n in sorted(g["not_verified"].items())) or "-"
        print(
            f"{group[:34]:<34} {g['built']:>4}/{g['architectures']:<4} "
            f"{g['built_ratio'] * 100:>5.1f}%  {why}"
        )
    if args.markdown:
        from prefixlint.introspect.zoo.run import Row, ZooSummary
        from prefixlint.introspect.zoo.versions import versions_markdown

        summaries = [
            ZooSummary(
                [Row(**row) for row in run["architectures"]],
                run["summary"]["wall_seconds"],
                vllm=run["summary"].get("vllm", ""),
            )
            for run in runs
        ]
        one = len(summaries) == 1
        text = summaries[0].to_markdown() if one else versions_markdown(summaries)
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
