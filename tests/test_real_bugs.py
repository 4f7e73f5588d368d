"""Real bugs, re-created in copies of the installed vLLM's llama.py, are found at the edit.

Each case edits one line of the real file; the test checks that exactly the new finding
appears, at the edited line, with the matching code, and nothing else changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixlint.rules import ALL_RULES
from prefixlint.static.engine import Linter
from prefixlint.static.index import package_root_for
from prefixlint.static.resolve import ModuleLoader, Resolver
from tests.conftest import requires_vllm

pytestmark = requires_vllm


def lint(path: Path) -> list:
    loader = ModuleLoader(roots=[package_root_for(path) / "vllm"])
    return Linter(ALL_RULES, Resolver(loader)).lint_path(path, path.name)


def line_of(text: str, needle: str) -> int:
    idx = text.index(needle)
    return text.count("\n", 0, idx) + 1


CASES = [
    # (id, code, old text, new text, text on the line to report): first occurrence only.
    (
        "attribute-mismatch",
        "PFX302",
        'prefix=f"{prefix}.o_proj"',
        'prefix=f"{prefix}.out_proj"',
        'prefix=f"{prefix}.out_proj"',
    ),
    (
        "lm-head-without-prefix",
        "PFX301",
        '                prefix=maybe_prefix(prefix, "lm_head"),\n',
        "",
        "self.lm_head = ParallelLMHead(",
    ),
    (
        "literal-attention-prefix",
        "PFX303",
        'prefix=f"{prefix}.attn"',
        'prefix="attn"',
        'prefix="attn"',
    ),
    (
        "layer-prefix-inside-make-layers",
        "PFX302",
        "layer_type(vllm_config=vllm_config, prefix=prefix)",
        'layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers")',
        'prefix=f"{prefix}.layers")',
    ),
]


@pytest.mark.parametrize(
    ("code", "old", "new", "at"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_recreated_bug_is_reported_at_the_edit(
    vllm_copy, code: str, old: str, new: str, at: str
) -> None:
    clean = vllm_copy("llama.py")
    before = {(d.code, d.location.row) for d in lint(clean)}
    text = clean.read_text()
    assert old in text, "llama.py changed: update the case"
    edited_line = line_of(text, old)
    broken = vllm_copy("llama.py", lambda s: s.replace(old, new, 1))
    after = lint(broken)
    shift = new.count("\n") - old.count("\n")
    moved = {(c, r + shift if r > edited_line else r) for c, r in before}
    new_findings = [d for d in after if (d.code, d.location.row) not in moved]
    expected_line = line_of(broken.read_text(), at)
    assert [(d.code, d.location.row) for d in new_findings] == [(code, expected_line)], after
    if code == "PFX301":
        assert new_findings[0].severity.value == "error"  # quant_config is passed


def test_unmodified_llama_has_only_the_known_embedding_finding(vllm_copy) -> None:
    findings = lint(vllm_copy("llama.py"))
    assert [(d.code, "VocabParallelEmbedding" in d.message) for d in findings] == [("PFX301", True)]


def _after(marker: str, old: str, new: str):
    """An edit of the first ``old`` after ``marker`` (the architecture class, say)."""

    def edit(text: str) -> str:
        start = text.index(marker)
        at = text.index(old, start)
        return text[:at] + new + text[at + len(old) :]

    return edit


@pytest.mark.parametrize(
    ("code", "edit", "at"),
    [
        (
            "PFX101",
            _after("class LlamaForCausalLM(", "        *,\n", ""),
            'vllm_config: VllmConfig,\n        prefix: str = "",\n        layer_type',
        ),
        (
            "PFX202",
            _after(
                "class LlamaForCausalLM(",
                "        inputs_embeds: torch.Tensor | None = None,\n",
                "        inputs_embeds: torch.Tensor | None = None,\n"
                "        attention_mask: torch.Tensor | None = None,\n",
            ),
            "attention_mask: torch.Tensor | None = None",
        ),
    ],
    ids=["positional-vllm-config", "attention-mask-in-forward"],
)
def test_recreated_contract_bug(vllm_copy, code: str, edit, at: str) -> None:
    clean = vllm_copy("llama.py")
    before = [(d.code, d.message) for d in lint(clean)]
    broken = vllm_copy("llama.py", edit)
    after = lint(broken)
    new = [d for d in after if (d.code, d.message) not in before]
    text = broken.read_text()
    expected = text.count("\n", 0, text.index(at, text.index("class LlamaForCausalLM("))) + 1
    assert [(d.code, d.location.row) for d in new] == [(code, expected)], after
