"""Live progress on stderr (rich): which file, layout or check is running.

On a terminal, one status line that rewrites itself; elsewhere (CI logs, pipes), one
plain line per step, so a long run is never silent. ``NO_COLOR`` is honoured by rich.
Nothing goes to stdout: JSON and SARIF there stay parseable.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import IO, Any


class Progress:
    def __init__(self, enabled: bool = True) -> None:
        from rich.console import Console

        self.enabled = enabled
        self.console = Console(stderr=True, highlight=False)
        self.live = enabled and self.console.is_terminal
        self._status: Any = None
        self.started = time.perf_counter()

    def __enter__(self) -> Progress:
        if self.live:
            self._status = self.console.status("starting", spinner="dots")
            self._status.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.__exit__(kind, value, tb)
            self._status = None

    def __call__(self, text: str) -> None:
        """Show the step now running (and keep it in the log when not on a terminal)."""
        if not self.enabled:
            return
        took = f"[{time.perf_counter() - self.started:5.0f}s] "
        if self._status is not None:
            self._status.update(took + text)
        else:
            self.console.print(took + text, markup=False, soft_wrap=True)

    def done(self, text: str) -> None:
        """A finished step that stays on screen (a terminal too)."""
        if self.enabled:
            self.console.print(text, markup=False, soft_wrap=True)


def step(stream: IO[str], text: str) -> None:
    """One step of a counted run (the zoo's ``[n/total] arch``): on a terminal, a line that
    rewrites itself; elsewhere one line per step, as a CI log needs (carriage returns there
    make one long line)."""
    if stream.isatty():
        stream.write(f"\r{text:<72}")
    else:
        stream.write(text + "\n")
    stream.flush()


def end_steps(stream: IO[str]) -> None:
    """Close the self-rewriting line of :func:`step` (nothing to close off a terminal)."""
    if stream.isatty():
        stream.write("\n")
