"""``prefixlint check`` from a warm process (``prefixlint/warm/cli.py``, issue 27): a later
call is run by a child of a zygote that imported the static phase once, with the same
output, exit code and files as a fresh process; the first call runs itself and starts the
zygote; a zygote whose imported files changed is not used again; phase 2, --no-cache and
``PREFIXLINT_WARM_WORKER=0`` run in the calling process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prefixlint.warm import cli, client
from prefixlint.warm.zygote import SERVED
from tests.conftest import requires_vllm
from tests.test_worker_lifetime import HANGS, INTROSPECT, _env, alive, descendants, wait_until

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = """
from torch import nn
from vllm.model_executor.layers.linear import RowParallelLinear


class ToyMLP(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        super().__init__()
        self.down_proj = RowParallelLinear(8, 8, quant_config=quant_config)
"""


@pytest.mark.parametrize(
    ("argv", "warm_env", "expected"),
    [
        (["check", "a.py"], "1", True),
        (["check", "--format", "json", "--cache-dir", "c", "a.py"], "1", True),
        (["check", "--introspect", "a.py"], "1", True),  # its builds: phase 2's workers
        (["check", "--introspect", "--no-warm-worker", "a.py"], "1", False),
        (["check", "--no-cache", "a.py"], "1", False),  # reuses nothing
        (["check", "a.py"], "0", False),
        (["rules"], "1", False),
        ([], "1", False),
    ],
)
def test_which_calls_go_to_a_warm_process(monkeypatch, argv, warm_env, expected) -> None:
    monkeypatch.setenv(client.WARM_ENV, warm_env)
    assert cli.eligible(argv) is expected


def test_the_warm_folder_is_the_users_never_the_working_folders(monkeypatch, tmp_path) -> None:
    """One zygote serves every folder of an environment: it lives in the user's folder,
    and the working folder is not in its key (a run there writes nothing)."""
    monkeypatch.delenv(client.DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert client.home() == tmp_path / "prefixlint"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert client.home() == tmp_path / "c" / "prefixlint" / "warm"
    monkeypatch.setenv(client.DIR_ENV, str(tmp_path / "w"))
    assert client.home() == tmp_path / "w"
    env = {"PATH": "/bin"}
    monkeypatch.chdir(tmp_path)
    here = cli.zygote_files()
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert cli.zygote_files() == here
    assert here["sock"].parent == tmp_path / "w"
    assert client.key(env) == client.key({**env, "PWD": "/elsewhere"})
    assert client.key(env) != client.key({**env, "PYTHONPATH": "/x"})


def test_the_zygote_imports_the_static_phase_and_no_torch() -> None:
    code = (
        "import sys; from prefixlint.warm import cli; cli.set_up(); "
        "assert 'libcst' in sys.modules and 'prefixlint.rules.pfx301_missing_prefix' in "
        "sys.modules; print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _prefixlint(cwd: Path, *args: str, warm: bool = True, stdin: str = "", env=None):
    environ = {**os.environ, **(env or {}), client.WARM_ENV: "1" if warm else "0"}
    return subprocess.run(
        [sys.executable, "-m", "prefixlint", *args],
        cwd=cwd,
        env=environ,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _served(cache: Path) -> int:
    return sum(p.read_text().count(SERVED) for p in cache.glob("zygote-cli-*.log"))


def _zygotes(cache: Path) -> set[int]:
    return {int(t.split()[0]) for p in cache.glob("zygote-cli-*.lock") if (t := p.read_text())}


@pytest.fixture
def project(tmp_path: Path, monkeypatch):
    """A folder with a model file and its own cache folder; its zygotes stopped after."""
    (tmp_path / "toy.py").write_text(MODEL)
    cache = tmp_path / "warm"  # the test's own warm folder
    monkeypatch.setenv(client.DIR_ENV, str(cache))
    pids: set[int] = set()
    yield tmp_path, cache, pids
    pids |= _zygotes(cache)
    client.stop(cache)
    assert wait_until(lambda: not alive(pids), 10), f"zygotes left: {alive(pids)}"


def _socket_up(cache: Path) -> bool:
    return any(client.connect(s) for s in cache.glob("zygote-cli-*.sock"))


def test_a_later_check_is_served_warm_with_the_same_output_and_exit(project) -> None:
    folder, cache, pids = project
    first = _prefixlint(folder, "check", "toy.py")  # runs here, starts the zygote
    assert first.returncode == 1 and "PFX301" in first.stdout, first.stderr
    assert wait_until(lambda: _socket_up(cache), 30), os.listdir(cache)
    pids |= _zygotes(cache)
    calls = [
        ("check", "toy.py"),  # unchanged: from the results cache
        ("check", "--format", "json", "toy.py"),
        ("check", "--select", "PFX402", "toy.py"),  # exit 0
        ("check", "missing.py"),  # exit 2, a clear error on stderr
        ("check", "--select", "NOPE", "toy.py"),  # a usage error (exit 2)
    ]
    for args in calls:
        served = _served(cache)
        warm = _prefixlint(folder, *args)
        assert _served(cache) == served + 1, (args, warm.stderr)  # a child ran it
        cold = _prefixlint(folder, *args, warm=False)
        assert (warm.returncode, warm.stdout, warm.stderr) == (
            cold.returncode,
            cold.stdout,
            cold.stderr,
        ), args
    # An edited file is checked again, not answered from anything the zygote kept.
    (folder / "toy.py").write_text(
        MODEL.replace(
            "quant_config=quant_config)", "quant_config=quant_config, prefix=f'{prefix}.down_proj')"
        )
    )
    fixed = _prefixlint(folder, "check", "toy.py")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "PFX301" not in fixed.stdout
    # --no-cache and PREFIXLINT_WARM_WORKER=0 run here.
    served = _served(cache)
    _prefixlint(folder, "check", "--no-cache", "toy.py")
    _prefixlint(folder, "check", "toy.py", warm=False)
    assert _served(cache) == served


def test_a_zygote_whose_imports_changed_is_not_used_again(project) -> None:
    """An edited prefixlint or libcst (an editable install): a child of the old zygote would
    run the old code. The call runs here, and the next one is served by a new zygote."""
    folder, cache, pids = project
    site = folder / "site"
    site.mkdir()
    imported = site / "sitecustomize.py"  # every Python started with it imports it
    imported.write_text("VERSION = 1\n")
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    _prefixlint(folder, "check", "toy.py", env=env)
    assert wait_until(lambda: _socket_up(cache), 30)
    old = _zygotes(cache)
    pids |= old
    served = _served(cache)
    assert _prefixlint(folder, "check", "toy.py", env=env).returncode == 1
    assert _served(cache) == served + 1
    imported.write_text("VERSION = 22\n")
    here = _prefixlint(folder, "check", "toy.py", env=env)
    assert here.returncode == 1 and "PFX301" in here.stdout
    assert wait_until(lambda: not alive(old), 10)  # retired: it had no child running
    # the call that ran here started a new zygote, once it had done its work
    assert wait_until(lambda: _socket_up(cache), 30)
    new = _zygotes(cache)
    pids |= new
    assert new and not new & old
    served = _served(cache)
    assert _prefixlint(folder, "check", "toy.py", env=env).returncode == 1
    assert _served(cache) == served + 1


def _last_child(cache: Path) -> int | None:
    found = [
        int(line.rsplit(" ", 1)[1])
        for log in cache.glob("zygote-cli-*.log")
        for line in log.read_text().splitlines()
        if line.startswith(SERVED)
    ]
    return found[-1] if found else None


@requires_vllm
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_warm_check_introspect_that_ends_leaves_nothing_running(
    project, sig: signal.Signals
) -> None:
    """``check --introspect`` served warm: its child runs phase 2 in phase 2's own warm
    worker. Ctrl-C on the command reaches the child (exit 2, as a cold run); a command
    that is killed takes its child with it, and the child's workers go with the child."""
    folder, cache, pids = project
    (folder / "slow.py").write_text(HANGS)
    env = {**_env(folder), client.WARM_ENV: "1"}
    _prefixlint(folder, "check", "slow.py", env=env)  # starts the zygote
    assert wait_until(lambda: _socket_up(cache), 30)
    pids |= _zygotes(cache)
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefixlint", "check", "--introspect", "slow.py", *INTROSPECT],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: (folder / "building").exists(), 300), "never built"
        child = _last_child(cache)
        assert child is not None and alive({child})
        running = {child} | descendants(child)  # the child and its worker's watchdog
        for sock in cache.glob("zygote-*.sock"):
            if not sock.name.startswith("zygote-cli-"):  # phase 2's: its forked worker
                zygote = int(sock.with_suffix(".lock").read_text().split()[0])
                running |= descendants(zygote)
                running.discard(zygote)  # the child started it; it outlives the command
                pids.add(zygote)
        assert len(running) >= 3, running
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 2), err
    assert wait_until(lambda: not alive(running), 10), f"still running: {alive(running)}"


def test_a_usage_error_starts_nothing_and_writes_nothing(project) -> None:
    """A run that fails before it does any work (exit 2) leaves no cache folder in the
    working folder and starts no warm process; a run that did its work starts one, in the
    user's warm folder, not the working folder."""
    folder, cache, pids = project
    for args in (("check", "toy.py", "--diff-base", "main"), ("check", "missing.py")):
        done = _prefixlint(folder, *args)
        assert done.returncode == 2, done.stderr
    assert not (folder / ".prefixlint_cache").exists()
    assert not _zygotes(cache) and not list(cache.glob("zygote-*.sock"))
    assert _prefixlint(folder, "check", "toy.py").returncode == 1
    assert wait_until(lambda: _socket_up(cache), 30)
    pids |= _zygotes(cache)
    assert len(pids) == 1


def test_warm_processes_are_bounded_listed_and_stopped(project, monkeypatch) -> None:
    """One zygote per environment, whatever the folder; at most PREFIXLINT_WARM_MAX live,
    the least recently used retiring for a new one; ``warm status`` lists each with its
    memory and last folder, ``warm stop --all`` stops them."""
    import json

    folder, cache, pids = project
    monkeypatch.setenv("PREFIXLINT_WARM_MAX", "2")
    for sub in ("a", "b"):  # two folders, one environment: one zygote
        (folder / sub).mkdir()
        (folder / sub / "toy.py").write_text(MODEL)
        _prefixlint(folder / sub, "check", "toy.py")
        assert wait_until(lambda: _socket_up(cache), 30)
    pids |= _zygotes(cache)
    assert len(pids) == 1
    first = next(iter(pids))
    for n in ("1", "2"):  # two more environments: the bound of 2 retires the first
        _prefixlint(folder, "check", "toy.py", env={"PREFIXLINT_TEST_ENV": n})
        known = set(pids)
        assert wait_until(lambda known=known: _zygotes(cache) - known, 30), n
        pids |= _zygotes(cache)
    assert wait_until(lambda: not alive({first}), 10), "the least recently used still lives"
    shown = _prefixlint(folder, "warm", "status", "--json")
    rows = json.loads(shown.stdout)["processes"]
    assert len(rows) == 2 and first not in {r["pid"] for r in rows}
    assert all(r["kind"] == "check" and 0 < r["rss_mb"] < 500 for r in rows)
    assert all(r["idle_limit_s"] == cli.IDLE for r in rows)
    text = _prefixlint(folder, "warm", "status").stdout
    assert "2 warm process(es)" in text and str(rows[0]["pid"]) in text
    stopped = _prefixlint(folder, "warm", "stop", "--all")
    assert "stopped 2" in stopped.stdout, stopped.stdout + stopped.stderr
    assert wait_until(lambda: not alive(pids), 10)
    assert "no warm process" in _prefixlint(folder, "warm", "status").stdout


def test_warm_stop_without_all_stops_this_environments_processes_only(project) -> None:
    """``warm stop`` (no ``--all``) stops the warm processes whose key is this environment's
    and leaves another environment's running; run from that environment, it stops that one."""
    folder, cache, pids = project
    _prefixlint(folder, "check", "toy.py")
    assert wait_until(lambda: _socket_up(cache), 30)
    here = _zygotes(cache)
    pids |= here
    other_env = {"PREFIXLINT_TEST_ENV": "other"}
    _prefixlint(folder, "check", "toy.py", env=other_env)
    assert wait_until(lambda: _zygotes(cache) - here, 30)
    other = _zygotes(cache) - here
    pids |= other
    assert len(here) == 1 and len(other) == 1
    stopped = _prefixlint(folder, "warm", "stop")
    assert "stopped 1 " in stopped.stdout, stopped.stdout + stopped.stderr
    assert wait_until(lambda: not alive(here), 10), "this environment's still runs"
    assert alive(other), "another environment's was stopped too"
    stopped = _prefixlint(folder, "warm", "stop", env=other_env)
    assert "stopped 1 " in stopped.stdout, stopped.stdout + stopped.stderr
    assert wait_until(lambda: not alive(other), 10)
