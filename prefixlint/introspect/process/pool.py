"""The one pool of phase-2 workers that ``check --introspect``, ``zoo`` and the pytest
plugin build in: how many workers, which job each takes, and the one way they all end.

Ending is the same for every caller (an interrupt, an error, the last job done): every
worker is closed, which kills a build in flight with its process group instead of
waiting for its timeout; the jobs not started are cancelled; and every worker is closed
once more, for one a job thread started while the others were being closed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from queue import SimpleQueue
from typing import Any, TypeVar

from prefixlint.introspect.process.client import Worker

Item = TypeVar("Item")
Result = TypeVar("Result")

# Forked workers building at once, at most: each may grow to ~1.5 GB while it builds.
MAX_WARM_WORKERS = 4


def worker_count(warm: Path | None, jobs: int) -> int:
    """How many workers build at once: one per CPU (up to ``MAX_WARM_WORKERS``) when they
    fork from a zygote (a worker costs a fork); one when each is a cold start (its imports
    would compete for the CPUs the builds need)."""
    if warm is None:
        return 1
    return max(1, min(jobs, os.cpu_count() or 1, MAX_WARM_WORKERS))


class WorkerPool:
    """``count`` workers forked from the zygote of ``warm`` (None: cold workers), each
    started on its first job. Use it as a context manager, or call ``close``."""

    def __init__(self, count: int, warm: Path | None) -> None:
        self.workers = [Worker(warm=warm) for _ in range(max(1, count))]

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def peak_rss_mb(self) -> list[float]:
        return [round(w.peak_rss_mb, 1) for w in self.workers]

    def close(self) -> None:
        """Every worker closed: a build in flight ends now (its job's wait returns)."""
        for worker in self.workers:
            worker.close()

    def run(
        self, items: Sequence[Item], job: Callable[[Item, Any], Result], ordered: bool = True
    ) -> Iterator[tuple[int, Result]]:
        """``job(item, worker)`` for every item, at most one per worker at a time; yields
        ``(index, result)`` in the items' order (``ordered``) or as each finishes. A job's
        exception reaches the caller; leaving the loop early (an interrupt included)
        ends every build in flight. One worker runs its jobs in this thread."""
        if len(self.workers) == 1:
            try:
                for i, item in enumerate(items):
                    yield i, job(item, self.workers[0])
            finally:
                self.close()
            return
        idle: SimpleQueue[Any] = SimpleQueue()
        for worker in self.workers:
            idle.put(worker)

        def task(item: Item) -> Result:
            worker = idle.get()
            try:
                return job(item, worker)
            finally:
                idle.put(worker)

        threads = ThreadPoolExecutor(max_workers=len(self.workers), thread_name_prefix="phase2")
        try:
            futures = [threads.submit(task, item) for item in items]
            yield from _in_order(futures) if ordered else _as_finished(futures)
        finally:
            self.close()
            threads.shutdown(wait=True, cancel_futures=True)
            self.close()


def _in_order(futures: list[Future[Result]]) -> Iterator[tuple[int, Result]]:
    for i, future in enumerate(futures):
        yield i, future.result()


def _as_finished(futures: list[Future[Result]]) -> Iterator[tuple[int, Result]]:
    index = {future: i for i, future in enumerate(futures)}
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=index.__getitem__):
            yield index[future], future.result()
