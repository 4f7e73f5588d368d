"""The warm worker (issue 27): phase 2 forks its worker from a zygote that imported torch and
vLLM once. Reused by a later call, the same verdicts as a cold worker, never reused across
a change of what it imported, gone after its idle time; its failure falls back to a cold
worker with a note."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefixlint.introspect.process import warm
from prefixlint.warm import client
from prefixlint.warm.zygote import WARMED
from tests.conftest import requires_vllm
from tests.test_introspect import llama_copy
from tests.test_worker_lifetime import alive, wait_until


def _zygote_pid(folder: Path) -> set[int]:
    return {int(p.read_text().split()[0]) for p in folder.glob("zygote-*.lock") if p.read_text()}


@pytest.fixture
def cache(tmp_path: Path):
    """A cache folder of the test's own; every zygote started there is stopped after."""
    folder = tmp_path / "cache"
    pids: set[int] = set()
    yield folder, pids
    pids |= _zygote_pid(folder)
    warm.stop(folder)
    assert wait_until(lambda: not alive(pids), 10), f"zygotes left: {alive(pids)}"


def test_the_key_changes_with_what_the_zygote_imported(monkeypatch, tmp_path: Path) -> None:
    env = {"PATH": "/bin", "VLLM_LOGGING_LEVEL": "ERROR", "TMPDIR": "/tmp/a"}
    base = warm.key(env)
    assert warm.key({**env, "TMPDIR": "/tmp/b", "PYTEST_CURRENT_TEST": "x"}) == base
    assert warm.key({**env, "PWD": "/elsewhere"}) == base  # every folder: one zygote
    assert warm.key({**env, "VLLM_LOGGING_LEVEL": "DEBUG"}) != base
    monkeypatch.setattr(warm, "_sources_digest", lambda: "another prefixlint")
    assert warm.key(env) != base


def test_warm_workers_are_off_by_flag_or_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    monkeypatch.setenv(client.DIR_ENV, str(tmp_path))
    assert warm.warm_folder(False) == tmp_path
    assert warm.warm_folder(True) is None
    monkeypatch.setenv(warm.WARM_ENV, "0")
    assert warm.warm_folder(False) is None


def _build(worker, model: Path) -> list[dict]:
    from prefixlint.introspect import introspect

    report = introspect(f"{model}:LlamaForCausalLM", tp=(1, 2), pp=(2,), worker=worker)
    return [d.to_json() for d in report.diagnostics]


@requires_vllm
@pytest.mark.slow
def test_a_second_call_forks_from_the_same_zygote_with_the_cold_verdicts(
    cache, tmp_path: Path, capsys
) -> None:
    from prefixlint.introspect.process.client import Worker

    folder, pids = cache
    model, _ = llama_copy(tmp_path, "llama_copy", lambda text: text)
    first, second = Worker(warm=folder), Worker(warm=folder)
    try:
        found_first = _build(first, model)
        found_second = _build(second, model)
    finally:
        first.close()
        second.close()
    pids.add(first.warm_info["zygote"])
    assert first.warm_info["zygote"] == second.warm_info["zygote"]  # reused
    assert second.warm_info["served"] == first.warm_info["served"] + 1
    assert first.warm_info["pid"] != second.warm_info["pid"]  # one child per call
    assert "no warm worker" not in capsys.readouterr().err
    # Idle after its first children, the zygote builds one of vLLM's models to warm up;
    # a child forked after that (torch single-threaded: an OpenMP team started there
    # would deadlock it) builds with the same verdicts.
    log = next(folder.glob("zygote-*.log"))
    assert wait_until(lambda: WARMED in log.read_text(), 120), log.read_text()[-2000:]
    third = Worker(warm=folder)
    try:
        found_third = _build(third, model)
    finally:
        third.close()
    assert third.warm_info["zygote"] == first.warm_info["zygote"]
    assert found_third == found_first
    # A zygote that cannot start: a cold worker, with a note; the same findings.
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    cold = Worker(warm=blocked / "cache")
    try:
        found_cold = _build(cold, model)
    finally:
        cold.close()
    assert "no warm worker (cannot start the zygote" in capsys.readouterr().err
    assert not cold.warm_info and cold.warm is None
    assert found_first == found_second == found_cold
    assert found_cold  # llama.py's known finding: the comparison compares something


def _list_call(folder: Path) -> dict:
    """One job in a worker forked from the zygote in ``folder``; the zygote's answer."""
    from prefixlint.introspect.process.client import Worker

    worker = Worker(warm=folder)
    try:
        assert worker.run({"kind": "list"}, 300)
    finally:
        worker.close()
    return worker.warm_info


@requires_vllm
@pytest.mark.slow
def test_a_changed_prefixlint_starts_a_new_zygote_and_idle_ones_stop(
    cache, tmp_path: Path, monkeypatch
) -> None:

    folder, pids = cache
    monkeypatch.setenv(warm.IDLE_ENV, "2")

    before = _list_call(folder)
    monkeypatch.setattr(warm, "_sources_digest", lambda: "an edited prefixlint")
    after = _list_call(folder)
    pids |= {before["zygote"], after["zygote"]}
    assert before["zygote"] != after["zygote"]
    assert len(list(folder.glob("zygote-*.sock"))) <= 2
    # idle for 2 s: both stop, and take their socket and lock with them
    assert wait_until(lambda: not alive(pids), 30), alive(pids)
    assert wait_until(lambda: not list(folder.glob("zygote-*")), 5), os.listdir(folder)


@requires_vllm
@pytest.mark.slow
def test_a_file_the_zygote_imported_changed_a_new_zygote_serves(
    cache, tmp_path: Path, monkeypatch
) -> None:
    """An edited vLLM (an editable install keeps its version): a child of the old zygote
    would run the old code, so the old one retires and a new one imports the file anew."""

    folder, pids = cache
    site = tmp_path / "site"
    site.mkdir()
    imported = site / "sitecustomize.py"  # every Python started with it imports it
    imported.write_text("VERSION = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))

    before = _list_call(folder)
    again = _list_call(folder)
    pids |= {before["zygote"]}
    assert again["zygote"] == before["zygote"]  # nothing changed: reused
    imported.write_text("VERSION = 22\n")
    after = _list_call(folder)
    pids |= {after["zygote"]}
    assert after["zygote"] != before["zygote"]
    assert wait_until(lambda: not alive({before["zygote"]}), 30)  # retired, then gone
    assert alive({after["zygote"]})  # the old one left the new one's files alone
    assert len(list(folder.glob("zygote-*.sock"))) == 1


def test_no_warm_worker_applies_with_introspect_only(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from prefixlint.cli import main

    (tmp_path / "m.py").write_text("x = 1\n")
    done = CliRunner().invoke(main, ["check", "--no-warm-worker", str(tmp_path / "m.py")])
    assert done.exit_code == 2 and "--no-warm-worker only apply with --introspect" in done.output
    assert "--no-warm-worker" in CliRunner().invoke(main, ["introspect", "--help"]).output


@requires_vllm
@pytest.mark.slow
def test_the_zoo_forks_its_workers_from_the_zygote(cache) -> None:
    from prefixlint.introspect.zoo.run import run_zoo

    folder, pids = cache
    kwargs = {"only": ["LlamaForCausalLM"], "progress": False, "dryrun": False}
    warm_rows = run_zoo(warm=folder, **kwargs).rows
    pids |= _zygote_pid(folder)
    assert pids, "no zygote served the zoo"
    cold_rows = run_zoo(**kwargs).rows
    assert [(r.arch, r.status) for r in warm_rows] == [("LlamaForCausalLM", "built")]
    assert [r.findings for r in warm_rows] == [r.findings for r in cold_rows]


def test_parallel_builds_report_in_the_files_order(tmp_path: Path) -> None:
    import threading
    import time

    from prefixlint.introspect.process.pool import WorkerPool, worker_count

    assert worker_count(None, 5) == 1  # cold workers: one at a time
    assert 1 <= worker_count(tmp_path, 5) <= min(5, os.cpu_count() or 1)
    assert worker_count(tmp_path, 1) == 1
    used: dict[int, int] = {}
    lock = threading.Lock()

    def build_one(i: int, worker: object) -> str:
        time.sleep(0.2 if i == 0 else 0.01)  # the first finishes last
        with lock:
            used[i] = id(worker)
        return f"report {i}"

    got = list(WorkerPool(2, tmp_path).run(range(4), build_one))
    assert got == [(i, f"report {i}") for i in range(4)]
    assert len(set(used.values())) == 2  # two workers shared the four builds

    def failing(i: int, worker: object) -> str:
        raise RuntimeError(f"build {i}")

    with pytest.raises(RuntimeError, match="build 0"):
        list(WorkerPool(2, tmp_path).run(range(3), failing))


def test_a_workers_messages_print_sets_in_the_same_order_in_every_run() -> None:
    """vLLM's loader errors print sets of names; the worker's hash seed is fixed, so the
    same finding has the same words in every run (cold or forked: the zygote starts with
    the same environment)."""
    import subprocess
    import sys

    from prefixlint.introspect.process.client import worker_environment

    env = worker_environment({**os.environ, "PYTHONHASHSEED": "random"})
    names = [f"model.layers.{i}.mlp.down_proj.weight_scale" for i in range(12)]
    code = f"print(list(set({names!r})))"
    runs = {
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
        for _ in range(3)
    }
    assert len(runs) == 1, runs


def test_a_caller_who_connects_stops_the_warm_up(tmp_path: Path) -> None:
    """The zygote's warm-up (a build of Llama, seconds) stops as soon as a caller connects,
    so the caller is served at once; without a caller the warm-up runs to its end."""
    import socket
    import time

    from prefixlint.warm.zygote import CallerWaiting, caller_interrupts

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s"))
    listener.listen(1)
    with caller_interrupts(listener):
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # no caller: not stopped
            pass
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    began = time.monotonic()
    with pytest.raises(CallerWaiting), caller_interrupts(listener):
        caller.connect(str(tmp_path / "s"))
        while time.monotonic() < began + 10:
            pass
    assert time.monotonic() - began < 1
    caller.close()
    listener.close()
