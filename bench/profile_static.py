"""Where a static run's CPU time goes: ``prefixlint`` under cProfile, timed in CPU seconds.

    .venv/bin/python bench/profile_static.py OUT.prof -- check --no-cache --jobs 1 PATH...
    .venv/bin/python bench/profile_static.py OUT.prof --show 40      # print the table

The profiler's clock is the process's CPU time, not the wall clock: on a loaded machine a
wall-clock profile charges other processes' time to whatever happened to be running.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    out = sys.argv[1]
    if sys.argv[2:3] == ["--show"]:
        stats = pstats.Stats(out)
        stats.sort_stats("cumulative").print_stats(int(sys.argv[3]))
        return
    argv = sys.argv[sys.argv.index("--") + 1 :]
    profiler = cProfile.Profile(time.process_time)
    sys.argv = ["prefixlint", *argv]
    profiler.enable()
    try:
        from prefixlint.cli import main as cli

        cli()
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
