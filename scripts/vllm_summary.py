#!/usr/bin/env python3
"""Write the summary of a vLLM release that ships with prefixlint.

Without vLLM installed (a pre-commit hook environment, the GitHub Action), the static
phase reads vLLM's layers, interfaces and registry from this summary instead of vLLM's
files, so that a file gets the same verdict as on a machine with vLLM
(``prefixlint/static/vllm_source.py``). Run it against an installed release, never an
import of it (the files are read with ``ast``):

    python scripts/vllm_summary.py                      # the vLLM on sys.path
    python scripts/vllm_summary.py --vllm path/to/vllm  # a package folder

It writes ``prefixlint/static/vllm_summaries/vllm-<version>.json.gz`` (byte-identical for
the same release); ``tests/test_vllm_summary.py`` checks it against the installed vLLM.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from prefixlint.static.vllm_source import (  # noqa: E402
    SUMMARY_DIR,
    build_summary,
    installed_vllm,
    write_summary,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", type=Path, help="the vllm package folder (default: found)")
    parser.add_argument("--out", type=Path, default=SUMMARY_DIR, help="folder to write into")
    args = parser.parse_args(argv)
    package = args.vllm or installed_vllm()
    if package is None or not (package / "__init__.py").is_file():
        print("no vLLM package found: pass --vllm path/to/site-packages/vllm", file=sys.stderr)
        return 2
    data = build_summary(package)
    if not data["vllm_version"]:
        print(f"{package}: no _version.py, cannot tell the release", file=sys.stderr)
        return 2
    target = write_summary(data, args.out)
    print(
        f"{target}: vLLM {data['vllm_version']}, {len(data['modules'])} modules, "
        f"{len(data['registry'])} registry entries, {target.stat().st_size} bytes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
