"""How a command that runs workers stops on SIGINT/SIGTERM (``stopping.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixlint.introspect.process.stopping import stop_on_signals


@pytest.fixture
def handlers_kept() -> Iterator[None]:
    """The test's signals leave pytest's own handlers as they were."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, old in saved.items():
        signal.signal(sig, old)


@pytest.mark.usefixtures("handlers_kept")
def test_sigterm_stops_like_ctrl_c_and_a_second_signal_is_ignored() -> None:
    with stop_on_signals(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
    # after the block the command is ending: a late Ctrl-C must not kill it by signal,
    # also while the interpreter finalizes (which resets only Python handlers)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.usefixtures("handlers_kept")
def test_a_block_ended_without_a_signal_gives_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals() as state:
        state.shield()
        os.kill(os.getpid(), signal.SIGINT)  # shielded: ignored while the report is written
    assert signal.getsignal(signal.SIGINT) is before


ENDING = """
import os, signal, subprocess, sys, time

from prefixlint.introspect.process.stopping import stop_on_signals


class SlowToFinalize:
    def __del__(self):
        time.sleep(1.0)  # runs while the interpreter finalizes, after its signal clean-up


kept = SlowToFinalize()
try:
    with stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
except KeyboardInterrupt:
    pass
subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -INT {os.getpid()}"])  # a late Ctrl-C
sys.exit(2)
"""


def test_a_ctrl_c_while_the_interrupted_command_finalizes_keeps_its_exit_code(tmp_path) -> None:
    """The CI's -2: the interpreter's finalization resets Python handlers to the default
    action, so a Ctrl-C then killed the interrupted command by signal."""
    script = tmp_path / "ending.py"
    script.write_text(ENDING)
    checkout = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": checkout}
    done = subprocess.run([sys.executable, str(script)], env=env, timeout=60, check=False)
    assert done.returncode == 2
