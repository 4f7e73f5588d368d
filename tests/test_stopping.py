"""How a command that runs workers stops on SIGINT/SIGTERM (``stopping.py``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

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
    # after the block the command is ending: a late Ctrl-C must not kill it by signal
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.usefixtures("handlers_kept")
def test_a_block_ended_without_a_signal_gives_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals() as state:
        state.shield()
        os.kill(os.getpid(), signal.SIGINT)  # shielded: ignored while the report is written
    assert signal.getsignal(signal.SIGINT) is before
