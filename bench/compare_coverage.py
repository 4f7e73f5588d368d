"""The comparison's coverage as issue 38 counts it, read off a zoo report.

    .venv/bin/python bench/compare_coverage.py ZOO.json [BEFORE.json]

Counts the architectures of the text-generation groups that transformers has a class for:
how many the comparison ran (equal or differs), and, for the others, why not. An
architecture that did not build on this machine has no comparison fact: whether
transformers has a class for it is read from the installed transformers (the dry-run's
``reference_class``, the same lookup the comparison starts from). With a second report,
prints what moved between the two.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

# the text-generation group, and the Transformers backend's text models (vLLM lists them
# apart; they generate text as the others do)
GROUPS = {"text_generation_models", "transformers_supported_models"}
# reasons that say transformers has nothing to compare with: outside the count
OUTSIDE = {"no_reference", "not_generative"}


def rows(path: str) -> list[dict]:
    return [r for r in json.loads(Path(path).read_text())["architectures"] if r["group"] in GROUPS]


def has_reference(arch: str) -> bool:
    from prefixlint.introspect.dryrun.layouts import reference_class

    return reference_class([arch]) is not None


def verdict(row: dict) -> str | None:
    """``compared``, ``not run: REASON``, ``no build: CATEGORY``, or None (outside)."""
    fact = row.get("compare") or {}
    if row["status"] != "built" or not fact:
        if not has_reference(row["arch"]):
            return None
        return f"no build: {row['status']} {row.get('category') or fact.get('reason', '')}"
    if fact.get("status") in ("equal", "differs"):
        return "compared"
    if fact.get("reason") in OUTSIDE:
        return None
    return f"not run: {fact.get('reason')}"


def summary(path: str) -> dict[str, str]:
    out = {r["arch"]: verdict(r) for r in rows(path)}
    return {a: v for a, v in out.items() if v is not None}


def show(path: str, verdicts: dict[str, str]) -> None:
    total = len(verdicts)
    compared = sum(v == "compared" for v in verdicts.values())
    built = sum(not v.startswith("no build") for v in verdicts.values())
    print(
        f"{path}: {compared} of {total} compared ({compared / total:.0%}); "
        f"{compared} of {built} that build here ({compared / built:.0%})"
    )
    for why, n in sorted(Counter(v for v in verdicts.values() if v != "compared").items()):
        names = sorted(a for a, v in verdicts.items() if v == why)
        print(f"  {why}: {n}: {', '.join(names)}")


def main(argv: list[str]) -> int:
    after = summary(argv[-1])
    if len(argv) == 2:
        before = summary(argv[0])
        show(argv[0], before)
        show(argv[1], after)
        for arch in sorted(set(before) | set(after)):
            if before.get(arch) != after.get(arch):
                print(f"  {arch}: {before.get(arch)} -> {after.get(arch)}")
    else:
        show(argv[-1], after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
