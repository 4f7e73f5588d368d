"""PFX405/PFX406 on copies of vLLM's llama.py made at test time: the clean file gives no
finding; one linear layer without its `quant_config`, or the `Attention` without its
`cache_config`, gives one at that line, whose fix passes it again."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from prefixlint.diagnostic import Severity
from prefixlint.rules import RULES_BY_CODE
from prefixlint.static.engine import Linter
from prefixlint.static.fix import fix_source
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.rule import example
from prefixlint.static.testing import lint_source
from tests.conftest import requires_vllm

RULES = [RULES_BY_CODE["PFX405"], RULES_BY_CODE["PFX406"]]


@lru_cache(maxsize=1)
def resolver() -> Resolver:
    return Resolver(ModuleLoader())


def findings(path: Path, text: str | None = None) -> list:
    data = (text if text is not None else path.read_text()).encode()
    return Linter(RULES, resolver()).lint_bytes(data, path, path.name)


def drop(text: str, anchor: str, argument: str) -> tuple[str, int]:
    """``text`` without the first ``argument`` line after ``anchor``, and the 1-based line
    of the call that ``anchor`` starts."""
    start = text.index(anchor)
    cut = text.index(argument, start)
    line = text.count("\n", 0, start) + 1
    return text[:cut] + text[text.index("\n", cut) + 1 :], line


@requires_vllm
def test_clean_llama_has_no_finding(vllm_copy) -> None:
    assert findings(vllm_copy("llama.py")) == []


@requires_vllm
@pytest.mark.parametrize(
    ("anchor", "argument", "code"),
    [
        ("self.o_proj = RowParallelLinear(", "quant_config=quant_config,", "PFX405"),
        ("self.down_proj = RowParallelLinear(", "quant_config=quant_config,", "PFX405"),
        ("self.qkv_proj = QKVParallelLinear(", "quant_config=quant_config,", "PFX405"),
        ("self.attn = attn_cls(", "cache_config=cache_config,", "PFX406"),
    ],
)
def test_dropped_config_is_found_at_its_line(vllm_copy, anchor, argument, code) -> None:
    clean = vllm_copy("llama.py")
    text, line = drop(clean.read_text(), anchor, argument)
    assert text != clean.read_text(), "vLLM changed: the argument is not there"
    found = findings(clean, text)
    assert [(d.code, d.location.row, d.severity) for d in found] == [
        (code, line, Severity.ERROR)
    ], [d.message for d in found]
    # The fix passes the config again, and the result lints clean and is stable.
    fixed = fix_source(text, str(clean), [code], resolver=resolver())
    assert [a.line for a in fixed.applied] == [line]
    assert findings(clean, fixed.new_code) == []
    assert fix_source(fixed.new_code, str(clean), [code], resolver=resolver()).applied == []


def _severity(body: str) -> list[tuple[int, Severity]]:
    code = example(body)
    offset = code.count("\n") - body.count("\n")
    found = lint_source(code, RULES)
    return [(d.location.row - offset, d.severity) for d in found if d.code == "PFX405"]


def test_router_and_fixed_dtype_are_notes_a_block_is_an_error() -> None:
    body = """
from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear


class Mlp(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(hidden, hidden, quant_config=quant_config,
                                           prefix=f"{prefix}.down_proj")


class DecoderLayer(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.gate = GateLinear(hidden, 8, prefix=f"{prefix}.gate")
        self.conv = RowParallelLinear(hidden, hidden, params_dtype=torch.float32,
                                      prefix=f"{prefix}.conv")
        self.mlp = Mlp(hidden, prefix=f"{prefix}.mlp")
"""
    assert _severity(body) == [(15, Severity.NOTE), (16, Severity.NOTE), (18, Severity.ERROR)]
