"""Garbage in, a diagnostic out: never a traceback."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixlint.rules import ALL_RULES
from prefixlint.static.engine import Linter
from prefixlint.static.resolve import ModuleLoader, Resolver

LINTER = Linter(ALL_RULES, Resolver(ModuleLoader()))


def lint(data: bytes) -> list:
    return LINTER.lint_bytes(data, Path("fuzz.py"), "fuzz.py")


def codes(data: bytes) -> list[str]:
    return [d.code for d in lint(data)]


def test_empty_binary_and_non_utf8() -> None:
    assert codes(b"") == []
    assert codes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") == ["PFX001"]
    diag = lint(b"x = 1\ny = '\xff\xfe'\n")[0]
    assert diag.code == "PFX001" and "utf-8" in diag.message and diag.location.row == 2
    assert codes(b"\xef\xbb\xbfx = 1\n") == []  # a BOM is fine
    assert codes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n") == []
    assert codes(b"# -*- coding: no-such-codec -*-\n") == ["PFX001"]


def test_deep_nesting() -> None:
    assert codes(b"x = " + b"(" * 5000 + b")" * 5000 + b"\n") == ["PFX001"]
    assert codes(b"x = " + b"[" * 90 + b"]" * 90 + b"\n") == []
    deep = "".join(" " * i + "if x:\n" for i in range(99)) + " " * 99 + "pass\n"
    assert codes(deep.encode()) in ([], ["PFX001"])


def test_syntax_error_position() -> None:
    diag = lint(b"class A:\n    def f(self:\n        pass\n")[0]
    assert diag.code == "PFX001" and diag.location.row == 2


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data: bytes) -> None:
    for d in lint(data):
        assert d.code == "PFX001"


_FRAGMENTS = [
    "class M(nn.Module):\n",
    "    def __init__(self, *, vllm_config, prefix=''):\n",
    "        self.x = RowParallelLinear(1, 2, prefix=f'{prefix}.y')\n",
    "        self.l = nn.ModuleList([Attention(prefix=prefix) for i in range(3)])\n",
    "    def forward(self, input_ids, attention_mask):\n",
    "        return make_layers(2, lambda prefix: M(prefix=prefix + '.q'), prefix='x')\n",
    "from vllm.model_executor.layers.linear import RowParallelLinear\n",
    "from vllm.model_executor.layers.attention import Attention\n",
    "(((\n",
    '"""\n',
    "\\\n",
    "@decorator\n",
    "    pass\n",
    "\t\tx = (1,\n",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=12))
def test_random_model_like_text_never_crashes(parts: list[str]) -> None:
    for d in lint("".join(parts).encode()):
        assert d.code.startswith("PFX") and d.code != "PFX000"
        assert d.location.row >= 1 and d.location.column >= 1


def test_non_utf8_without_cookie_says_where() -> None:
    diag = lint(b'x = "\xff"\n')[0]
    assert diag.code == "PFX001" and "utf-8" in diag.message
    assert (diag.location.row, diag.location.column) == (1, 6)


def test_text_frame_of_long_and_binary_lines(tmp_path) -> None:
    import io

    from prefixlint.reporters.text import report_text

    (tmp_path / "long.py").write_text("x = " + "(" * 3000 + ")" * 3000 + "\n")
    (tmp_path / "bin.py").write_bytes(b"\x89PNG\x00\x01\x1b[31m\n")
    diags = [
        LINTER.lint_path(tmp_path / name, str(tmp_path / name))[0] for name in ("long.py", "bin.py")
    ]
    out = io.StringIO()
    report_text(diags, out, {"files": 2})
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) < 400
    assert "\x00" not in text and "\x1b" not in text


def test_python_312_syntax_is_not_a_syntax_error(tmp_path) -> None:
    """``type X = str``, ``class Box[T]`` and PEP 701 f-strings are valid Python 3.12: on an
    older interpreter the file is "not checked" (a note naming the version it needs), never
    a PFX001 error; on 3.12+ it is checked like any file."""
    import json
    import sys

    from click.testing import CliRunner

    from prefixlint.cli import main

    sources = ["type X = str\n", "class Box[T]:\n    pass\n", 'x = f"{\'a\' + "b"}"\n']
    for i, text in enumerate(sources):
        (tmp_path / f"m{i}.py").write_text(text)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--format", "json", str(tmp_path)])
    found = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    if sys.version_info >= (3, 12):
        assert found == []
    else:
        assert [f["severity"] for f in found] == ["note"] * len(sources)
        assert all("Python 3.12 syntax" in f["message"] for f in found)


def test_text_frame_counts_lines_as_python_does(tmp_path: Path) -> None:
    """A form feed is no line break for Python: the frame shows the reported line."""
    from click.testing import CliRunner

    from prefixlint.cli import main

    model = (Path(__file__).parent / "fixtures" / "bad_model.py").read_text()
    (tmp_path / "model.py").write_text("# page one\x0c page two\n" + model)
    out = CliRunner().invoke(main, ["check", "--no-cache", str(tmp_path / "model.py")]).output
    frame = [line for line in out.splitlines() if " | " in line and "lm_head" in line]
    assert frame and "ParallelLMHead(" in frame[0], out
