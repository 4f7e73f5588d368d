"""What a phase-2 check reports: one finding at a line of the model's own code.

Light (stdlib only): the checks (``checks/``), the coverage notes (``coverage/sites.py``)
and the dry-run (``dryrun/``) all make findings, and none of them imports another for it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Finding:
    code: str
    severity: Literal["error", "warning", "note"]
    message: str
    file: str
    line: int
    layouts: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # where the same site's finding repeats
    variants: list[str] = field(default_factory=list)  # config variants it appeared in
    group: str = ""  # findings of one code, site and group are one

    def key(self) -> tuple[str, str, int, str]:
        return (self.code, self.file, self.line, self.group)


def class_site(cls: type | None) -> tuple[str, int]:
    """Where a class is defined: its file and the line of its ``class`` statement (``("",
    0)`` for None or a class without source)."""
    try:
        return inspect.getsourcefile(cls) or "", inspect.getsourcelines(cls)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return "", 0
