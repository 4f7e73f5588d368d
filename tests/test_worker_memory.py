"""A worker's memory (issue 30): a job's own peak is readable after it (and is in the
zoo's rows); the dry-run's write recorder holds no per-element state for a whole
meta-device model."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

from prefixlint.introspect.process.memory import (
    peak_rss_mb,
    release,
    reset_peak,
    resident_mb,
)
from tests.conftest import requires_vllm

LINUX = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="reads /proc/self/status"
)


@LINUX
def test_reset_peak_starts_a_new_high_water_mark() -> None:
    before = resident_mb()
    block = bytearray(300 * 2**20)  # touched: resident
    block[::4096] = b"x" * len(block[::4096])
    high = peak_rss_mb(os.getpid())
    del block
    reset_peak()
    after = peak_rss_mb(os.getpid())
    assert before is not None and high is not None and after is not None
    assert high - before > 250, (before, high)
    # the mark after the reset is today's resident size, not the freed block's peak
    assert after < high - 250, (high, after)


@LINUX
def test_release_frees_what_a_job_left_in_reference_cycles() -> None:
    """A build's modules in reference cycles outlive the job until the collector runs:
    the worker releases them after each job, not whenever the next one allocates."""

    class Node:
        pass

    gc.disable()  # the cycle waits for ``release``, not for an automatic collection
    try:
        before = resident_mb()
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        a.block = bytearray(300 * 2**20)  # type: ignore[attr-defined]
        a.block[::4096] = b"x" * len(a.block[::4096])  # type: ignore[attr-defined]
        del a, b
        held = resident_mb()
        release()
    finally:
        gc.enable()
    after = resident_mb()
    assert before is not None and held is not None and after is not None
    assert held - before > 250, (before, held)
    assert after < held - 250, (held, after)


@LINUX
def test_the_write_recorder_holds_no_mask_per_element_of_the_model() -> None:
    """Ten meta parameters of 40M elements: a coverage mask kept per parameter held a byte
    per element (Molmo's full-size meta model: 8 GB); masks are made when asked."""
    torch = pytest.importorskip("torch")
    from prefixlint.introspect.dryrun.tagged import WriteRecorder

    params = {f"p{i}.weight": torch.empty(4000, 10_000, device="meta") for i in range(10)}
    before = resident_mb()
    recorder = WriteRecorder({n: (p, True) for n, p in params.items()})
    grown = resident_mb() - before  # type: ignore[operator]
    assert grown < 100, f"{grown:.0f} MB resident for the recorder of a meta model"
    targets = {t.name: t for t in recorder.by_storage.values()}
    # the coverage is still element-wise: the rows written, and only those
    first = targets["p0.weight"]
    recorder.mark(first, first.tensor.narrow(0, 0, 1000), frozenset({"a"}))
    recorder.mark(first, first.tensor.narrow(1, 0, 10), frozenset({"b"}))
    covered = recorder.covered(first)
    assert covered is not None and covered.shape == (4000, 10_000)
    assert int(covered.sum()) == 1000 * 10_000 + 3000 * 10
    assert bool(covered[:1000].all()) and not bool(covered[1000:, 10:].any())
    assert not bool(recorder.covered(targets["p1.weight"]).any())  # type: ignore[union-attr]


@requires_vllm
@pytest.mark.slow
@LINUX
def test_the_zoo_names_each_architectures_peak_memory(tmp_path) -> None:
    """Each row carries its own build's peak (the worker restarts its mark per job) and
    what the build left resident; the summary names the highest, in the journal too."""
    from prefixlint.introspect.zoo.run import read_journal, run_zoo

    journal = tmp_path / "zoo.jsonl"
    summary = run_zoo(
        only=["GPT2LMHeadModel", "OPTForCausalLM"],
        progress=False,
        dryrun=False,
        explore_budget=0,
        journal=journal,
    )
    assert [r.status for r in summary.rows] == ["built", "built"]
    [worker] = summary.worker_peak_rss_mb
    for row in summary.rows:
        # a torch+vLLM worker is hundreds of MB; no build's peak is above the worker's
        assert 100 < row.peak_rss_mb <= worker + 1, (row.arch, row.peak_rss_mb, worker)
        assert abs(row.rss_growth_mb) < row.peak_rss_mb, row
        # the growth to the peak is measured from the build's start, not from zero
        assert 0 <= row.peak_growth_mb < row.peak_rss_mb - 100, row
    heaviest = json.loads(summary.to_json_text())["summary"]["heaviest_architectures"]
    assert [h["arch"] for h in heaviest] == [
        r.arch for r in sorted(summary.rows, key=lambda r: -r.peak_growth_mb)
    ]
    assert heaviest[0]["arch"] in summary.to_text()
    params = {"tp": [1], "pp": [1], "dryrun": False, "explore_budget": 0}
    again = {r.arch: r.peak_rss_mb for r in read_journal(journal, params)}
    assert again == {r.arch: r.peak_rss_mb for r in summary.rows}


def test_the_zoo_replaces_a_worker_left_holding_too_much(monkeypatch) -> None:
    """A bound, not the fix: after a build that left the worker over the threshold, the
    next build gets a fresh worker; one under it keeps its worker."""
    from prefixlint.introspect.zoo import run

    closed: list[str] = []

    class Fake:
        peak_rss_mb = 0.0

        def __init__(self, warm: object = None) -> None:
            self.job_memory: dict[str, float] = {}

        def close(self) -> None:
            closed.append(self.job_memory.get("arch_done", ""))  # type: ignore[arg-type]

    left = {"Heavy": run.RECYCLE_RSS_MB + 1, "Light": run.RECYCLE_RSS_MB - 1}

    def built(worker: Fake, arch: str, group: str, params: dict, timeout: float) -> run.Row:
        worker.job_memory = {"rss_mb": left[arch], "arch_done": arch}  # type: ignore[dict-item]
        return run.Row(arch, group, "built")

    from prefixlint.introspect.process import pool

    monkeypatch.setattr(pool, "Worker", Fake)
    monkeypatch.setattr(run, "_built_row", built)
    monkeypatch.setattr(
        run, "_selected", lambda only, shard, warm: (dict.fromkeys(left, "g"), list(left))
    )
    summary = run.run_zoo(progress=False)
    assert [r.arch for r in summary.rows] == ["Heavy", "Light"]
    # closed once after the heavy build, then by the zoo's end (twice: its shutdown)
    assert closed[0] == "Heavy" and set(closed[1:]) == {"Light"}, closed
