"""Autofix of PFX301/PFX302 on copies of real vLLM model files with re-injected bugs.

Each case breaks a correct file (drops a ``prefix=`` argument, or renames the name in a
prefix literal), fixes it, and checks that the fix restores the exact text expected (so
everything outside the edit is byte-identical), that the fixed file lints clean for
PFX301/PFX302, and that fixing again changes nothing.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from pathlib import Path

import pytest

from prefixlint.diagnostic import Severity
from prefixlint.rules import RULES_BY_CODE
from prefixlint.static.engine import Linter
from prefixlint.static.fix import fix_file, fix_source, unified_diff
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.testing import lint_source
from tests.conftest import requires_vllm

PREFIX_RULES = [RULES_BY_CODE["PFX301"], RULES_BY_CODE["PFX302"]]


@lru_cache(maxsize=1)
def resolver() -> Resolver:
    """One resolver for the session: the copies differ from the installed vLLM only in the
    file under test, which the linter reads itself (a fresh one re-reads vLLM: seconds)."""
    return Resolver(ModuleLoader())


def prefix_findings(path: Path, text: str | None = None) -> list:
    data = (text if text is not None else path.read_text()).encode()
    return Linter(PREFIX_RULES, resolver()).lint_bytes(data, path, path.name)


def shown(found: list) -> list:
    """The findings shown by default (a note carries no fix: mixtral's router is one)."""
    return [d for d in found if d.severity is not Severity.NOTE]


def fixed(path: Path, text: str | None = None):
    return fix_source(
        text if text is not None else path.read_text(), str(path), resolver=resolver()
    )


def check_fixed(path: Path, expected: str, applied: list[str]) -> None:
    """Fixing ``path`` gives exactly ``expected``, lints clean, and is idempotent."""
    result = fixed(path)
    assert [a.code for a in result.applied] == applied, result
    assert result.new_code == expected, unified_diff(expected, result.new_code, "x")
    assert shown(prefix_findings(path, result.new_code)) == []
    again = fixed(path, result.new_code)
    assert again.applied == [] and again.new_code == result.new_code


def remove(old: str, new: str = "", count: int = 1):
    def edit(text: str) -> str:
        assert text.count(old) >= count, f"vLLM changed: {old!r} not found"
        return text.replace(old, new, count)

    return edit


# -- llama.py: both styles; the file calls maybe_prefix, so inserts use it -----------------

LLAMA_EMBED = (
    "                quant_config=quant_config,\n            )\n        else:\n"
    "            self.embed_tokens = PPMissingLayer()"
)


@pytest.fixture
def llama(vllm_copy):
    """llama.py with its one known finding (``embed_tokens`` without prefix) fixed."""
    clean = vllm_copy("llama.py")
    text = clean.read_text()
    result = fixed(clean)
    assert [(a.code, a.description) for a in result.applied] == [
        ("PFX301", 'Add `prefix=maybe_prefix(prefix, "embed_tokens")`')
    ]
    assert result.skipped == []
    fixed_embed = LLAMA_EMBED.replace(
        "quant_config=quant_config,\n",
        "quant_config=quant_config,\n"
        '                prefix=maybe_prefix(prefix, "embed_tokens"),\n',
    )
    assert result.new_code == text.replace(LLAMA_EMBED, fixed_embed, 1)
    base = result.new_code

    def copy(edit=None) -> tuple[Path, str]:
        path = vllm_copy("llama.py", lambda _: edit(base) if edit else base)
        return path, base

    return copy


pytestmark = requires_vllm


def test_llama_base_lints_clean(llama) -> None:
    path, base = llama()
    assert prefix_findings(path) == []
    assert fixed(path, base).applied == []


@pytest.mark.parametrize(
    ("old", "new", "restored", "code"),
    [
        # a dropped argument on its own line (one argument per line, trailing comma)
        (
            '            prefix=f"{prefix}.o_proj",\n',
            "",
            '            prefix=maybe_prefix(prefix, "o_proj"),\n',
            "PFX301",
        ),
        # the lm_head, nested in an ``if`` block
        ('                prefix=maybe_prefix(prefix, "lm_head"),\n', "", None, "PFX301"),
        # make_layers' layer function: its parameter is the full path
        (
            "layer_type(vllm_config=vllm_config, prefix=prefix)",
            "layer_type(vllm_config=vllm_config)",
            None,
            "PFX301",
        ),
        # renamed literals
        ('prefix=f"{prefix}.o_proj"', 'prefix=f"{prefix}.out_proj"', None, "PFX302"),
        ('prefix=f"{prefix}.self_attn"', 'prefix=f"{prefix}.attention"', None, "PFX302"),
        ('maybe_prefix(prefix, "lm_head")', 'maybe_prefix(prefix, "head")', None, "PFX302"),
        (
            "layer_type(vllm_config=vllm_config, prefix=prefix)",
            'layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers")',
            None,
            "PFX302",
        ),
    ],
    ids=[
        "drop-o_proj",
        "drop-lm_head",
        "drop-make-layers-prefix",
        "rename-o_proj",
        "rename-self_attn",
        "rename-lm_head",
        "make-layers-inner-prefix",
    ],
)
def test_llama_reinjected_bug_is_fixed(llama, old, new, restored, code) -> None:
    path, base = llama(remove(old, new))
    assert [d.code for d in prefix_findings(path)] == [code]
    expected = base.replace(old, restored, 1) if restored else base
    check_fixed(path, expected, [code])


def test_llama_several_bugs_at_once(llama) -> None:
    def edit(text: str) -> str:
        for line in (
            '            prefix=f"{prefix}.gate_up_proj",\n',
            '            prefix=f"{prefix}.down_proj",\n',
            '            prefix=f"{prefix}.qkv_proj",\n',
        ):
            text = remove(line)(text)
        return text.replace('prefix=f"{prefix}.mlp"', 'prefix=f"{prefix}.ffn"', 1)

    path, base = llama(edit)
    expected = base
    for name in ("gate_up_proj", "down_proj", "qkv_proj"):
        expected = expected.replace(
            f'            prefix=f"{{prefix}}.{name}",\n',
            f'            prefix=maybe_prefix(prefix, "{name}"),\n',
            1,
        )
    check_fixed(path, expected, ["PFX301", "PFX301", "PFX301", "PFX302"])


def test_fix_file_writes_and_diffs(llama) -> None:
    path, base = llama(remove('prefix=f"{prefix}.o_proj"', 'prefix=f"{prefix}.out_proj"'))
    broken = path.read_text()
    diff, _ = fix_file(path, write=False)
    assert path.read_text() == broken  # write=False writes nothing
    assert diff.startswith(f"--- a/{path}\n+++ b/{path}\n@@ ")
    removed = [x for x in diff.splitlines() if x.startswith("-") and not x.startswith("---")]
    added = [x for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]
    assert removed == ['-            prefix=f"{prefix}.out_proj",']
    assert added == ['+            prefix=f"{prefix}.o_proj",']
    diff2, _ = fix_file(path, write=True)
    assert diff2 == diff and path.read_text() == base
    assert fix_file(path, write=True)[0] == ""  # nothing more to do


# -- files without maybe_prefix: f-string inserts, other layouts ------------------------


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        # one argument per line
        ("blip.py", '            prefix=f"{prefix}.qkv",\n', ""),
        # all on one line
        ("blip.py", ', prefix=f"{prefix}.mlp")', ")"),
        # a comprehension over range(): the index variable goes in
        ("blip.py", ',\n                    prefix=f"{prefix}.layers.{layer_idx}",\n', ",\n"),
        ("aimv2.py", ', prefix=f"{prefix}.blocks.{i}")', ")"),
        # black's collapsed layout: the arguments on one line inside the parentheses
        ("aimv2.py", ', prefix=f"{prefix}.mlp"\n', "\n"),
        # renames
        (
            "blip.py",
            'prefix=f"{prefix}.layers.{layer_idx}"',
            'prefix=f"{prefix}.layer.{layer_idx}"',
        ),
        ("aimv2.py", 'prefix=f"{prefix}.fc2"', 'prefix=f"{prefix}.fc_2"'),
    ],
    ids=[
        "drop-line",
        "drop-single-line",
        "drop-loop-index",
        "drop-comprehension",
        "drop-collapsed",
        "rename-indexed",
        "rename",
    ],
)
def test_fstring_file_restored_byte_for_byte(vllm_copy, name, old, new) -> None:
    clean = vllm_copy(name)
    original = clean.read_text()
    assert "maybe_prefix(" not in original
    assert prefix_findings(clean) == []
    broken = vllm_copy(name, remove(old, new))
    codes = [d.code for d in prefix_findings(broken)]
    assert len(codes) == 1
    check_fixed(broken, original, codes)


def test_other_real_files_restored(vllm_copy) -> None:
    """qwen2.py and mixtral.py: several dropped arguments restored in the file's style."""
    for name in ("qwen2.py", "mixtral.py"):
        clean = vllm_copy(name)
        base = fixed(clean).new_code  # their own findings fixed first, if any
        all_lines = base.splitlines(keepends=True)
        # ``prefix=f"{prefix}.name",`` as the last argument (the fix appends it there)
        picked = [
            i
            for i, (line, after) in enumerate(pairwise(all_lines))
            if line.strip().startswith('prefix=f"{prefix}.')
            and line.strip().endswith('",')
            and "{" not in line.strip()[len('prefix=f"{prefix}') :]
            and after.strip().startswith(")")
            # a layer quant_config reaches: its missing prefix is shown, so it is fixed
            and any("quant_config=" in x for x in all_lines[max(0, i - 6) : i])
        ][:4]
        assert len(picked) >= 2, name
        text = "".join(x for i, x in enumerate(all_lines) if i not in picked)
        broken = vllm_copy(name, lambda _, text=text: text)
        assert len(shown(prefix_findings(broken))) == len(picked)
        want = list(all_lines)
        for i in picked:
            line = all_lines[i]
            attr = line.strip()[len('prefix=f"{prefix}.') : -2]
            indent = line[: len(line) - len(line.lstrip())]
            want[i] = f'{indent}prefix=maybe_prefix(prefix, "{attr}"),\n'
        check_fixed(broken, "".join(want), ["PFX301"] * len(picked))


def test_a_note_carries_no_fix(vllm_copy) -> None:
    """Fixes only from findings that are shown: qwen2_moe.py builds its router
    (``GateLinear``) without ``quant_config`` by vLLM's design, a PFX405 note; fixing the
    file must not add it (an FP8 checkpoint would no longer load), in fix_source or in
    ``check --diff``/``--fix``."""
    clean = vllm_copy("qwen2_moe.py")
    linter = Linter([RULES_BY_CODE["PFX405"]], resolver())
    notes = linter.lint_bytes(clean.read_bytes(), clean, clean.name)
    assert notes and all(d.severity is Severity.NOTE for d in notes)
    assert all(d.fix is None for d in notes)
    result = fix_source(clean.read_text(), str(clean), resolver=resolver())
    assert result.applied == [] and result.new_code == clean.read_text()
    diff, outcome = fix_file(clean, write=False)
    assert diff == "" and outcome.applied == []
    from click.testing import CliRunner

    from prefixlint.cli import main

    out = CliRunner().invoke(main, ["check", "--diff", "--no-cache", str(clean)])
    assert out.exit_code == 0 and "+" not in out.stdout, out.output


# -- synthetic cases: layouts, skipped findings, noqa ---------------------------------------

HEADER = """\
from torch import nn
from vllm.model_executor.layers.linear import RowParallelLinear
from vllm.model_executor.layers.linear import RowParallelLinear as Row
"""


def fix(body: str, **kwargs):
    return fix_source(HEADER + body, "example.py", **kwargs)


def assert_clean(code: str) -> None:
    assert lint_source(code, PREFIX_RULES) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Attention(8, 8)", 'Attention(8, 8, prefix=f"{prefix}.proj")'),
        ("Attention()", 'Attention(prefix=f"{prefix}.proj")'),
        (
            "Attention(\n            8,\n            8,  # sizes\n        )",
            "Attention(\n            8,\n            8,  # sizes\n"
            '            prefix=f"{prefix}.proj",\n        )',
        ),
        (
            "Attention(\n            8\n        )",
            'Attention(\n            8, prefix=f"{prefix}.proj"\n        )',
        ),
        (
            "Attention(8,\n                                      8)",
            "Attention(8,\n                                      8,\n"
            '                                      prefix=f"{prefix}.proj")',
        ),
        (
            "Attention(input_size = 8)",
            'Attention(input_size = 8, prefix = f"{prefix}.proj")',
        ),
    ],
    ids=["one-line", "no-args", "per-line-comment", "collapsed", "aligned", "spaced-equals"],
)
def test_layouts(before: str, after: str) -> None:
    template = """
from vllm.model_executor.layers.attention import Attention


class M(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.proj = {}
"""
    result = fix(template.format(before))
    assert result.new_code == HEADER + template.format(after)
    assert_clean(result.new_code)
    assert fix_source(result.new_code, "example.py").applied == []


def test_maybe_prefix_style_and_other_root_name() -> None:
    body = """
from vllm.model_executor.models.utils import maybe_prefix


class M(nn.Module):
    def __init__(self, layer_prefix: str = ""):
        super().__init__()
        self.proj = Row(8, 8, quant_config=qc)
        self.seq = nn.Sequential(Row(8, 8, quant_config=qc), nn.ReLU(), Row(8, 8, quant_config=qc))
"""
    result = fix(body)
    assert result.new_code == HEADER + body.replace(
        "Row(8, 8, quant_config=qc)\n",
        'Row(8, 8, quant_config=qc, prefix=maybe_prefix(layer_prefix, "proj"))\n',
    ).replace(
        "nn.Sequential(Row(8, 8, quant_config=qc), nn.ReLU(), Row(8, 8, quant_config=qc))",
        'nn.Sequential(Row(8, 8, quant_config=qc, prefix=maybe_prefix(layer_prefix, "seq.0")), '
        'nn.ReLU(), Row(8, 8, quant_config=qc, prefix=maybe_prefix(layer_prefix, "seq.2")))',
    )
    assert_clean(result.new_code)


def test_rename_forms() -> None:
    body = """
from vllm.model_executor.models.utils import maybe_prefix


class M(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.a = Row(8, 8, quant_config=qc, prefix=prefix + '.x')
        self.b = Row(8, 8, quant_config=qc, prefix="{}.x".format(prefix))
        self.c = Row(8, 8, quant_config=qc, prefix=maybe_prefix(prefix, 'x'))
        self.d = nn.ModuleList(
            [Row(8, 8, quant_config=qc, prefix=maybe_prefix(prefix, f"x.{i}")) for i in range(2)]
        )
"""
    result = fix(body)
    assert [a.code for a in result.applied] == ["PFX302"] * 4
    assert result.new_code == HEADER + body.replace("prefix + '.x'", "prefix + '.a'").replace(
        '"{}.x".format', '"{}.b".format'
    ).replace("(prefix, 'x')", "(prefix, 'c')").replace('f"x.{i}"', 'f"d.{i}"')
    assert_clean(result.new_code)


SKIPPED = """
class M(nn.Module):
    def __init__(self, prefix: str = "", **kwargs):
        super().__init__()
        local = Row(8, 8, quant_config=qc)
        self.grid = nn.ModuleList(
            [Row(8, 8, quant_config=qc) for i in range(2) for j in range(2)]
        )
        self.named = nn.ModuleList([Row(8, 8, quant_config=qc) for name in names])
        self.joined = Row(8, 8, quant_config=qc, prefix=".".join([prefix, "other"]))
        self.stacked = nn.ModuleList()
        for i in range(2):
            self.stacked.append(Row(8, 8, quant_config=qc))
        self.ok = RowParallelLinear(8, 8, **kwargs)

    def build(self, config):
        self.late = Row(8, 8, quant_config=qc)


class Shifted(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        prefix = f"{prefix}.inner"
        self.proj = Row(8, 8, quant_config=qc)
"""


def test_unsafe_cases_are_skipped_with_a_reason() -> None:
    result = fix(SKIPPED)
    assert result.applied == []
    assert result.new_code == HEADER + SKIPPED
    offset = HEADER.count("\n")
    lines = (HEADER + SKIPPED).splitlines()
    reasons = {lines[line - 1].strip(): why for line, why in result.skipped}
    assert "not stored at a `self` attribute" in reasons["local = Row(8, 8, quant_config=qc)"]
    assert (
        "nested loops"
        in reasons["[Row(8, 8, quant_config=qc) for i in range(2) for j in range(2)]"]
    )
    assert (
        "not over `range(n)`"
        in reasons["self.named = nn.ModuleList([Row(8, 8, quant_config=qc) for name in names])"]
    )
    assert (
        "built from other parts"
        in reasons['self.joined = Row(8, 8, quant_config=qc, prefix=".".join([prefix, "other"]))']
    )
    assert "`.append`" in reasons["self.stacked.append(Row(8, 8, quant_config=qc))"]
    assert "no `prefix` parameter" in reasons["self.late = Row(8, 8, quant_config=qc)"]
    assert "reassigned" in reasons["self.proj = Row(8, 8, quant_config=qc)"]
    assert len(result.skipped) == 7 and all(line > offset for line, _ in result.skipped)
    # ``**kwargs`` may carry the prefix: not even a finding, so nothing to skip.
    assert not any("kwargs" in line for line in reasons)


def test_noqa_and_code_selection() -> None:
    body = """
class M(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.a = Row(8, 8, quant_config=qc)  # noqa: PFX301
        self.b = Row(8, 8, quant_config=qc, prefix=f"{prefix}.x")
        self.c = Row(8, 8, quant_config=qc)
"""
    only_302 = fix(body, codes=["PFX302"])
    assert [(a.code, a.line) for a in only_302.applied] == [("PFX302", 9)]
    both = fix(body)
    assert [(a.code, a.line) for a in both.applied] == [("PFX302", 9), ("PFX301", 10)]
    assert "self.a = Row(8, 8, quant_config=qc)  # noqa: PFX301" in both.new_code
    with pytest.raises(ValueError, match="PFX303"):
        fix(body, codes=["PFX303"])


def test_line_endings_and_encoding_kept(tmp_path: Path) -> None:
    body = (
        "# coding: latin-1\n"
        + HEADER
        + (
            "\n"
            "class M(nn.Module):\n"
            "    def __init__(self, prefix: str = ''):\n"
            "        super().__init__()\n"
            "        self.caf\u00e9 = Row(8, 8, quant_config=qc)\n"
        )
    ).replace("\n", "\r\n")
    path = tmp_path / "crlf.py"
    path.write_bytes(body.encode("latin-1"))
    _, result = fix_file(path, write=True)
    assert [a.code for a in result.applied] == ["PFX301"]
    data = path.read_bytes()
    assert data == body.replace(
        "Row(8, 8, quant_config=qc)\r\n",
        'Row(8, 8, quant_config=qc, prefix=f"{prefix}.caf\u00e9")\r\n',
    ).encode("latin-1")


def test_syntax_error_is_left_alone() -> None:
    result = fix_source("def f(:\n", "bad.py")
    assert result.new_code == "def f(:\n" and result.applied == []
    assert result.skipped and "syntax error" in result.skipped[0][1]


def test_form_feed_does_not_shift_the_fix() -> None:
    """A form feed is no line break for Python or git: the edit lands on the right row and
    the diff is one hunk of real lines."""
    body = """
class MLP(nn.Module):
    def __init__(self, hidden, prefix: str = ""):\x0c
        super().__init__()
        self.down_proj = RowParallelLinear(hidden, hidden, bias=False, quant_config=qc)
"""
    result = fix(body)
    assert [a.code for a in result.applied] == ["PFX301"]
    assert 'bias=False, quant_config=qc, prefix=f"{prefix}.down_proj")' in result.new_code
    assert "\x0c" in result.new_code
    diff = unified_diff(HEADER + body, result.new_code, "m.py")
    assert "No newline" not in diff and diff.count("\n+ ") + diff.count("\n+\t") <= 1
