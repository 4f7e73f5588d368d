"""The comparison with transformers (PFX609), per architecture: its status and its own
seconds, measured in one phase-2 worker (imports paid once, as in the warm worker).

    .venv/bin/python bench/compare.py [--only LlamaForCausalLM ...]

Each architecture is built for tp=1 only, without the dry-runs and config exploration,
so the target's seconds are the synthesised config, one meta build and the comparison
(its real CPU build, the reference model, the load, both forwards). Printed per
architecture: status, boundaries compared, the first divergent module, the comparison's
seconds and the target's; then the median and the largest comparison time.

``--explore-budget S`` turns config exploration on (as ``introspect`` does, 10 s): the
comparison then runs on its config variants too (``compare/variants.py``), its seconds
include theirs, and each variant's status is printed below its architecture.

Target: <= 5 s per architecture on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = [
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Phi3ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "MixtralForCausalLM",
    "Qwen2MoeForCausalLM",
    "OlmoeForCausalLM",
    "OPTForCausalLM",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=DEFAULT)
    parser.add_argument("--explore-budget", type=float, default=0.0)
    args = parser.parse_args()
    from prefixlint.introspect import introspect
    from prefixlint.introspect.process.client import Worker

    worker = Worker()
    times = []
    try:
        for arch in args.only:
            started = time.perf_counter()
            report = introspect(
                arch,
                tp=(1,),
                pp=(1,),
                worker=worker,
                dryrun=False,
                explore_budget=args.explore_budget,
            )
            wall = time.perf_counter() - started
            facts = report.results[0].get("compare", {}) if report.results else {}
            seconds = facts.get("seconds", 0.0)
            if facts.get("status") in ("equal", "differs"):
                times.append(seconds)
            what = facts.get("first") or facts.get("reason") or ""
            print(
                f"{arch:<32} {facts.get('status', '-'):<8} {facts.get('compared', 0):>4} "
                f"{seconds:>6.2f}s  target {wall:>6.2f}s  {what}",
                flush=True,
            )
            for v in facts.get("variants", []):
                what = v.get("first") or v.get("reason") or ""
                print(f"    {v['variant']:<44} {v['status']:<8} {v['seconds']:>6.2f}s  {what}")
            pfx609 = [d for d in report.diagnostics if d.code == "PFX609"]
            for d in pfx609:
                print(f"    PFX609 {d.filename}:{d.location.row}: {d.message[:160]}")
    finally:
        worker.close()
    if times:
        print(f"median {statistics.median(times):.2f}s, max {max(times):.2f}s over {len(times)}")


if __name__ == "__main__":
    main()
