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
            # positional-only: vLLM's loader passes it by keyword and the call fails (a
            # positional-or-keyword one works, as in vLLM's own aria.py: not reported)
            "PFX101",
            lambda text: _after(
                "class LlamaForCausalLM(",
                '        vllm_config: VllmConfig,\n        prefix: str = "",',
                '        vllm_config: VllmConfig,\n        /,\n        prefix: str = "",',
            )(_after("class LlamaForCausalLM(", "        *,\n", "")(text)),
            "vllm_config: VllmConfig,\n        /,",
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
        (
            # LoRA expands the fused layers by this table: an adapter of q_proj is refused
            "PFX407",
            _after(
                "class LlamaForCausalLM(",
                "    packed_modules_mapping = {\n"
                '        "qkv_proj": ["q_proj", "k_proj", "v_proj"],\n'
                '        "gate_up_proj": ["gate_proj", "up_proj"],\n'
                "    }\n",
                "",
            ),
            "class LlamaForCausalLM(",
        ),
    ],
    ids=["positional-only-vllm-config", "attention-mask-in-forward", "no-packed-mapping"],
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


# -- patterns the static phase used to stay silent on ------------------------------------------


def _new_findings(vllm_copy, name: str, edit) -> tuple[list, str]:
    """The findings an edit of a copy of ``name`` adds (rows matched by code and message)."""
    before = {(d.code, d.message) for d in lint(vllm_copy(name))}
    broken = vllm_copy(name, edit)
    new = [d for d in lint(broken) if (d.code, d.message) not in before]
    return new, broken.read_text()


def _replace_once(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, "the vLLM file changed: update the case"
        return text.replace(old, new, 1)

    return edit


SILENT_CASES = [
    # (id, file, edit, text on the reported line, code, severity, message fragment)
    (
        "stale-prefix-after-weights-mapper-rename",
        "lfm2.py",
        _replace_once('prefix=f"{prefix}.short_conv"', 'prefix=f"{prefix}.conv"'),
        'prefix=f"{prefix}.conv"',
        "PFX302",
        "error",
        "WeightsMapper",
    ),
    (
        "guarded-all-reduce-after-row-parallel",
        "llama.py",
        lambda text: _replace_once(
            "        output, _ = self.o_proj(attn_output)\n",
            "        output, _ = self.o_proj(attn_output)\n"
            "        if get_tensor_model_parallel_world_size() > 1:\n"
            "            output = tensor_model_parallel_all_reduce(output)\n",
        )(
            _replace_once(
                "from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size",
                "from vllm.distributed import (\n    get_pp_group,\n"
                "    get_tensor_model_parallel_world_size,\n"
                "    tensor_model_parallel_all_reduce,\n)",
            )(text)
        ),
        "output = tensor_model_parallel_all_reduce(output)",
        "PFX401",
        "error",
        "self.o_proj",
    ),
    (
        "nested-attribute-target",
        "llama_eagle3.py",
        _replace_once(
            'prefix=maybe_prefix(prefix, "self_attn.qkv_proj")',
            'prefix=maybe_prefix(prefix, "qkv_proj")',
        ),
        'prefix=maybe_prefix(prefix, "qkv_proj")',
        "PFX302",
        "error",
        "self.self_attn.qkv_proj",
    ),
    (
        "model-constructor-in-a-variable",
        "deepseek_v2.py",
        _replace_once(
            'vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model")\n        )\n'
            "        if get_pp_group().is_last_rank:",
            'vllm_config=vllm_config, prefix=maybe_prefix(prefix, "transformer")\n        )\n'
            "        if get_pp_group().is_last_rank:",
        ),
        'prefix=maybe_prefix(prefix, "transformer")',
        "PFX302",
        "error",
        "self.model",
    ),
    (
        "nn-linear-router-in-moe-block",
        "mixtral.py",
        _replace_once(
            "        self.gate = GateLinear(\n"
            "            hidden_size,\n"
            "            num_experts,\n"
            "            params_dtype=params_dtype,\n"
            '            prefix=f"{prefix}.gate",\n'
            "        )\n",
            "        self.gate = nn.Linear(hidden_size, num_experts, bias=False)\n",
        ),
        "self.gate = nn.Linear(hidden_size, num_experts, bias=False)",
        "PFX402",
        "warning",
        "router",
    ),
    (
        # The all-reduce after the MoE, re-added: ``FusedMoEFactory`` reduces its output
        # (``reduce_results`` defaults to True in vLLM's signature), so this sums it again.
        "all-reduce-after-fused-moe-factory",
        "bailing_moe.py",
        lambda text: _replace_once(
            "        final_hidden_states = self.experts(\n"
            "            hidden_states=hidden_states, router_logits=router_logits\n"
            "        )\n",
            "        final_hidden_states = self.experts(\n"
            "            hidden_states=hidden_states, router_logits=router_logits\n"
            "        )\n"
            "        final_hidden_states = tensor_model_parallel_all_reduce(final_hidden_states)\n",
        )(
            _replace_once(
                "    get_tensor_model_parallel_world_size,\n)",
                "    get_tensor_model_parallel_world_size,\n"
                "    tensor_model_parallel_all_reduce,\n)",
            )(text)
        ),
        "final_hidden_states = tensor_model_parallel_all_reduce(final_hidden_states)",
        "PFX401",
        "error",
        "`FusedMoEFactory`",
    ),
    (
        # ModernBERT's MLP input projection as a plain ``nn.Linear`` (a real report): the
        # attribute is ``Wi``, which no list of projection names holds.
        "plain-linear-wi-in-modernbert",
        "modernbert.py",
        _replace_once(
            "        self.Wi = MergedColumnParallelLinear(\n"
            "            config.hidden_size,\n"
            "            [int(config.intermediate_size)] * 2,\n"
            "            bias=config.mlp_bias,\n"
            "            quant_config=quant_config,\n"
            '            prefix=f"{prefix}.Wi",\n'
            "        )\n",
            "        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size)\n",
        ),
        "self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size)",
        "PFX402",
        "warning",
        "`self.Wi`",
    ),
    (
        # ``f"{prefix}.model"`` in the architecture vLLM builds with ``prefix=""``.
        "leading-dot-root-prefix",
        "llama.py",
        lambda text: (
            text[: text.index("class LlamaForCausalLM(")]
            + _replace_once('prefix=maybe_prefix(prefix, "model"),', 'prefix=f"{prefix}.model",')(
                text[text.index("class LlamaForCausalLM(") :]
            )
        ),
        'prefix=f"{prefix}.model",',
        "PFX302",
        "error",
        "starts with a dot",
    ),
    (
        "maybe-prefix-alias",
        "llama.py",
        lambda text: (
            _replace_once('prefix=maybe_prefix(prefix, "lm_head"),', 'prefix=mp(prefix, "head"),')(
                text
            )
            + "\n\nmp = maybe_prefix\n"
        ),
        'prefix=mp(prefix, "head"),',
        "PFX302",
        "error",
        "lm_head",
    ),
]


@pytest.mark.parametrize(
    ("name", "edit", "at", "code", "severity", "fragment"),
    [c[1:] for c in SILENT_CASES],
    ids=[c[0] for c in SILENT_CASES],
)
def test_silent_pattern_is_reported_at_the_edit(
    vllm_copy, name: str, edit, at: str, code: str, severity: str, fragment: str
) -> None:
    new, text = _new_findings(vllm_copy, name, edit)
    assert [(d.code, d.location.row) for d in new] == [(code, line_of(text, at))], new
    assert new[0].severity.value == severity
    assert fragment in new[0].message


def test_positions_ignore_an_earlier_identical_call(vllm_copy) -> None:
    """The same call text stands earlier in the file, correct there: the finding points at
    the later, wrong copy, not at the first occurrence of its text."""
    call = 'RowParallelLinear(8, 8, quant_config=quant_config, prefix=f"{prefix}.probe")'
    anchor = "        self.hidden_size = config.hidden_size\n"

    def edit(text: str) -> str:
        first = text.index(anchor)
        text = text[:first] + f"        self.probe = {call}\n" + text[first:]
        second = text.index(anchor, text.index("class LlamaDecoderLayer"))
        return text[:second] + f"        self.other = {call}\n" + text[second:]

    new, text = _new_findings(vllm_copy, "llama.py", edit)
    assert text.index(f"self.probe = {call}") < text.index(f"self.other = {call}")
    wrong_line = line_of(text, f"self.other = {call}")
    assert [(d.code, d.location.row) for d in new] == [("PFX302", wrong_line)], new


def test_positions_ignore_a_commented_out_copy(vllm_copy) -> None:
    """A commented-out copy of the call stands before it: the finding points at the code."""
    old = 'prefix=f"{prefix}.o_proj"'

    def edit(text: str) -> str:
        at = text.index("        self.o_proj = RowParallelLinear(")
        comment = '        # self.o_proj = RowParallelLinear(..., prefix=f"{prefix}.out_proj")\n'
        text = text[:at] + comment + text[at:]
        return text.replace(old, 'prefix=f"{prefix}.out_proj"', 1)

    new, text = _new_findings(vllm_copy, "llama.py", edit)
    code_line = next(
        i + 1
        for i, line in enumerate(text.splitlines())
        if 'prefix=f"{prefix}.out_proj"' in line and not line.lstrip().startswith("#")
    )
    assert [(d.code, d.location.row) for d in new] == [("PFX302", code_line)], new


# -- correct code the static phase used to report -----------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "not_model_code"


@pytest.mark.parametrize("name", ["compiler_pass.py", "name_walker.py", "model_collectives.py"])
def test_false_positive_patterns_are_not_reported(name: str) -> None:
    path = FIXTURES / name
    loader = ModuleLoader(roots=[])
    found = Linter(ALL_RULES, Resolver(loader)).lint_path(path, name)
    assert [(d.code, d.location.row, d.message) for d in found] == []
