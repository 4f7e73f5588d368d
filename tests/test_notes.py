"""The note level end to end: a divergence note (no consumer today, or deliberate) is in JSON
and SARIF at level ``note`` and listed with ``--show-notes``; default text output, GitHub
annotations, rdjson and review comments leave it out and say how many they left out; a
"not verified" note stays shown everywhere and alone counts for ``--strict``."""

from __future__ import annotations

import io
import json
from pathlib import Path

from prefixlint.diagnostic import NOT_VERIFIED, Diagnostic, Position, Severity, default_view
from prefixlint.diffbase import ChangedLines
from prefixlint.reporters import REPORTERS
from prefixlint.review import build_review
from tests.test_cli import run

# PFX301 without `quant_config` at the site: nothing looks the name up (a note); with it,
# the quantization method is resolved under "" (an error).
MODEL = """\
from torch import nn
from vllm.model_executor.layers.linear import RowParallelLinear


class Block(nn.Module):
    def __init__(self, quant_config=None, prefix: str = ""):
        super().__init__()
        self.quiet = RowParallelLinear(8, 8)
        self.loud = RowParallelLinear(8, 8, quant_config=quant_config)
        self.named = RowParallelLinear(8, 8, prefix=f"{prefix}.named")
"""


def at(row: int, severity: Severity, code: str = "PFX301", **data) -> Diagnostic:
    return Diagnostic(
        code, f"finding at {row}", severity, "m.py", Position(row, 1), Position(row, 2), data=data
    )


DIVERGENCE = at(8, Severity.NOTE)
UNVERIFIED = at(9, Severity.NOTE, "PFX501", **{NOT_VERIFIED: True})
PHASE2 = at(10, Severity.NOTE, "PFX600")
ERROR = at(11, Severity.ERROR)


def render(fmt: str, diagnostics: list[Diagnostic], **options) -> str:
    out = io.StringIO()
    REPORTERS[fmt](diagnostics, out, {"files": 1, "show_source": False, **options})
    return out.getvalue()


def test_which_notes_are_shown_by_default() -> None:
    assert not DIVERGENCE.shown_by_default
    assert UNVERIFIED.is_not_verified and UNVERIFIED.shown_by_default
    assert PHASE2.is_not_verified and PHASE2.shown_by_default
    assert ERROR.shown_by_default and not ERROR.is_not_verified
    every = [DIVERGENCE, UNVERIFIED, PHASE2, ERROR]
    assert default_view(every) == [UNVERIFIED, PHASE2, ERROR]
    assert default_view(every, show_notes=True) == every


def test_text_hides_divergence_notes_and_says_so() -> None:
    every = [DIVERGENCE, UNVERIFIED, ERROR]
    text = render("text", every)
    assert "finding at 8" not in text and "finding at 9" in text and "finding at 11" in text
    assert "1 note not shown" in text and "--show-notes" in text
    assert "Not verified: 1" in text
    shown = render("text", every, show_notes=True)
    assert "finding at 8" in shown and "not shown" not in shown


def test_machine_formats_carry_every_note() -> None:
    every = [DIVERGENCE, UNVERIFIED, ERROR]
    assert [d["severity"] for d in json.loads(render("json", every))] == ["note", "note", "error"]
    sarif = json.loads(render("sarif", every, root=Path.cwd()))
    assert [r["level"] for r in sarif["runs"][0]["results"]] == ["note", "note", "error"]
    # Annotations and reviewdog comments are review comments: no divergence notes.
    assert "finding at 8" not in render("github", every)
    assert "finding at 9" in render("github", every)
    rd = json.loads(render("rdjson", every))["diagnostics"]
    assert [d["message"] for d in rd] == ["finding at 9", "finding at 11"]
    assert "finding at 8" in render("github", every, show_notes=True)


def test_review_comments_leave_divergence_notes_out(tmp_path: Path) -> None:
    changes = ChangedLines(root=tmp_path.resolve(), base="b" * 40, head="h" * 40)
    changes.whole.add("m.py")
    diagnostics = [
        Diagnostic(**{**d.__dict__, "filename": str(tmp_path / "m.py")})  # type: ignore[arg-type]
        for d in (DIVERGENCE, UNVERIFIED, ERROR)
    ]
    payload = build_review(diagnostics, changes)
    lines = [c["line"] for c in payload["comments"]]
    # the "not verified" note (line 9) is no comment either (issue 30): the body says so
    assert lines == [11]
    assert "1 error" in payload["body"] and "0 warnings" in payload["body"]
    assert '1 "not verified" note on the files changed' in payload["body"]


def test_check_shows_notes_on_request_and_strict_counts_only_unverified(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    # PFX405 also reports `quiet` and `named` (built without the `quant_config` in reach):
    # true, and not what this test is about
    code, out = run(["check", "m.py", "--ignore", "PFX405", "--no-cache", "--no-source"], tmp_path)
    assert code == 1 and "m.py:9:" in out and "m.py:8:" not in out
    assert "1 note not shown" in out
    code, out = run(
        ["check", "m.py", "--ignore", "PFX405", "--no-cache", "--no-source", "--show-notes"],
        tmp_path,
    )
    assert "m.py:8:" in out and "a note: no `quant_config` reaches it" in out
    code, out = run(
        ["check", "m.py", "--ignore", "PFX405", "--no-cache", "--format", "json"], tmp_path
    )
    assert sorted((d["location"]["row"], d["severity"]) for d in json.loads(out)) == [
        (8, "note"),
        (9, "error"),
    ]
    # A divergence note never fails a run, not even with --strict.
    (tmp_path / "m.py").write_text(MODEL.replace("        self.loud = ", "        # "))
    assert run(["check", "m.py", "--ignore", "PFX405", "--no-cache"], tmp_path)[0] == 0
    assert run(["check", "m.py", "--ignore", "PFX405", "--no-cache", "--strict"], tmp_path)[0] == 0
