"""The one phase-2 worker pool (``process/pool.py``) that ``check --introspect``, ``zoo`` and
the pytest plugin build in: its order, its errors and its one way of ending. The real
processes' ends (Ctrl-C while building) are tests/test_ctrl_c*.py's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from prefixlint.introspect.process import pool


class _Fake:
    """A worker that only counts how often it was closed."""

    def __init__(self, warm: object = None) -> None:
        self.closed = 0
        self.peak_rss_mb = 0.0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "Worker", _Fake)


def _slow_first(i: int, worker: _Fake) -> int:
    time.sleep(0.3 if i == 0 else 0.01)  # the first finishes last
    return i * 10


def test_results_come_in_order_or_as_they_finish(fake_workers: None, tmp_path: Path) -> None:
    assert list(pool.WorkerPool(2, tmp_path).run(range(3), _slow_first)) == [
        (0, 0),
        (1, 10),
        (2, 20),
    ]
    finished = [i for i, _ in pool.WorkerPool(2, tmp_path).run(range(3), _slow_first, False)]
    assert sorted(finished) == [0, 1, 2] and finished[-1] == 0


def _boom(i: int, worker: _Fake) -> int:
    raise RuntimeError(f"build {i}")


@pytest.mark.parametrize("count", [1, 2])
def test_every_way_out_closes_every_worker(fake_workers: None, tmp_path: Path, count: int) -> None:
    """The last job done, a job's error, a caller leaving the loop (as an interrupt does):
    each ends every worker, which is what kills a build in flight."""
    done = pool.WorkerPool(count, tmp_path)
    assert list(done.run(range(3), lambda i, w: i)) == [(0, 0), (1, 1), (2, 2)]
    assert all(w.closed for w in done.workers)

    failed = pool.WorkerPool(count, tmp_path)
    with pytest.raises(RuntimeError, match="build 0"):
        list(failed.run(range(3), _boom))
    assert all(w.closed for w in failed.workers)

    left = pool.WorkerPool(count, tmp_path)
    started: list[int] = []
    lock = threading.Lock()

    def record(i: int, worker: _Fake) -> int:
        with lock:
            started.append(i)
        time.sleep(0.05)
        return i

    results = left.run(range(20), record)
    next(results)
    results.close()  # what a KeyboardInterrupt in the caller's loop does to the generator
    assert all(w.closed for w in left.workers)
    assert len(started) < 20  # the jobs not started were cancelled


def test_one_worker_per_cpu_when_forked_one_when_cold(tmp_path: Path) -> None:
    assert pool.worker_count(None, 5) == 1
    assert pool.worker_count(tmp_path, 1) == 1
    assert 1 <= pool.worker_count(tmp_path, 8) <= pool.MAX_WARM_WORKERS
