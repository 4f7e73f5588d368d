"""Two zoo reports (``prefixlint zoo --format json -o X.json``) compared as data: what a
change did to the builds, the dry-run and the findings, architecture by architecture.

    python bench/zoo_diff.py BEFORE.json AFTER.json

Prints the architectures whose status, failure category or dry-run status changed, the
findings (and notes) that appear in one report only, keyed by architecture, code, file
name, line and severity, and how many findings kept their key but changed their words.
Exit 0 when nothing differs, 1 otherwise. A machine under load can time a build out in
one run and not the other: such rows say "out of time" in their reason or dry-run reason.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def _rows(path: str) -> dict[str, dict]:
    return {r["arch"]: r for r in json.loads(Path(path).read_text())["architectures"]}


def _findings(row: dict) -> Counter:
    out: Counter = Counter()
    for d in [*row.get("findings", []), *row.get("notes", [])]:
        key = (d["code"], Path(d["filename"]).name, d["location"]["row"], d["severity"])
        out[key] += 1
    return out


def _messages(row: dict) -> dict[tuple, str]:
    return {
        (d["code"], Path(d["filename"]).name, d["location"]["row"], d["severity"]): d["message"]
        for d in [*row.get("findings", []), *row.get("notes", [])]
    }


def compare(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    out: list[str] = []
    for arch in sorted(set(before) | set(after)):
        a, b = before.get(arch), after.get(arch)
        if a is None or b is None:
            out.append(f"{arch}: only in {'after' if a is None else 'before'}")
            continue
        for field in ("status", "category", "dryrun"):
            if a.get(field) != b.get(field):
                why = b.get("reason") or b.get("dryrun_reason") or ""
                out.append(f"{arch}: {field} {a.get(field)!r} -> {b.get(field)!r} ({why[:160]})")
        fa, fb = _findings(a), _findings(b)
        for key in sorted((fa - fb).keys()):
            out.append(f"{arch}: - {' '.join(map(str, key))}: {_messages(a)[key][:160]}")
        for key in sorted((fb - fa).keys()):
            out.append(f"{arch}: + {' '.join(map(str, key))}: {_messages(b)[key][:160]}")
    return out


def reworded(before: dict[str, dict], after: dict[str, dict]) -> int:
    count = 0
    for arch in set(before) & set(after):
        ma, mb = _messages(before[arch]), _messages(after[arch])
        count += sum(1 for k in set(ma) & set(mb) if ma[k] != mb[k])
    return count


def main(argv: list[str]) -> int:
    before, after = _rows(argv[0]), _rows(argv[1])
    lines = compare(before, after)
    print("\n".join(lines) if lines else "no difference in builds, dry-run or finding keys")
    print(f"{reworded(before, after)} finding(s) with the same key and other words")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
