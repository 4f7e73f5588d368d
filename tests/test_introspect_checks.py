"""Phase 2's check units (``prefixlint/introspect/checks/``), as ``test_rules.py`` is for
the rules: every phase-2 code has its unit in ``CHECKS``, every unit its documentation and
examples, and every example (vLLM's ``llama.py`` copied at test time with one planted
defect) gives its finding at its line, while the clean copy gives none of that code."""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path

import pytest

from prefixlint.codes import CODES, INTROSPECT
from tests.conftest import requires_vllm
from tests.test_introspect import known_defect, line_in_class, llama_copy, replace_in_class

pytestmark = requires_vllm

DRYRUN_CODES = ("PFX701", "PFX702", "PFX703")


def _checks():
    from prefixlint.introspect.checks import CHECKS

    return CHECKS


def _examples() -> list[tuple[str, object, object]]:
    out = []
    for check in _checks():
        for i, case in enumerate(check.examples):
            out.append((f"{type(check).__name__}-{i}", check, case))
    return out


def test_every_phase2_code_has_its_unit_in_the_table() -> None:
    checks = _checks()
    codes = {c.code for c in CODES.values() if c.phase == INTROSPECT}
    assert codes == {check.code for check in checks}
    for code in codes:
        module, _, name = CODES[code].check.partition(":")
        [unit] = [c for c in checks if type(c).__name__ == name]
        assert type(unit).__module__ == module and unit.code == code


@pytest.mark.parametrize("check", _checks(), ids=lambda c: type(c).__name__)
def test_every_unit_is_documented_and_has_examples(check) -> None:
    doc = inspect.cleandoc(type(check).__doc__ or "")
    assert "## What it does" in doc and "## Why is this bad?" in doc, type(check)
    assert check.examples, f"{type(check).__name__} has no example"
    file = Path(inspect.getsourcefile(type(check)) or "").name
    assert file.startswith(check.code.lower() + "_"), file


@cache
def _build(worker, target: str, tp: tuple, pp: tuple, config: str | None, dryrun: bool):
    from prefixlint.introspect import introspect

    return introspect(target, tp=tp, pp=pp, config=config, worker=worker, dryrun=dryrun)


def _config(folder: Path, values: tuple) -> str | None:
    if not values:
        return None
    from transformers import LlamaConfig

    base = dict(hidden_size=384, intermediate_size=384, num_hidden_layers=2)
    base.update(vocab_size=384, max_position_embeddings=128)
    folder.mkdir(exist_ok=True)
    LlamaConfig(**{**base, **dict(values)}).save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "check", "case"), _examples(), ids=[e[0] for e in _examples()])
def test_example_gives_its_finding_and_the_clean_copy_none(worker, tmp_path, name, check, case):
    dryrun = check.code in DRYRUN_CODES
    config = _config(tmp_path / "config", case.config)
    path, text = llama_copy(
        tmp_path, name.replace("-", "_").lower(), replace_in_class(case.cls, case.old, case.new)
    )
    report = _build(worker, f"{path}:LlamaForCausalLM", case.tp, case.pp, config, dryrun)
    found = [
        (d.code, Path(d.filename).name, d.location.row, d.severity.value)
        for d in report.diagnostics
    ]
    expected = (
        check.code,
        path.name,
        line_in_class(text, case.at_cls or case.cls, case.at),
        case.severity,
    )
    assert expected in found, (expected, found, [d.message for d in report.diagnostics])

    clean, _ = llama_copy(tmp_path / "..", "clean_llama", lambda t: t)
    clean_config = _config(tmp_path / "clean_config", case.clean_config) or config
    report = _build(
        worker, f"{clean.resolve()}:LlamaForCausalLM", case.tp, case.pp, clean_config, dryrun
    )
    others = [d for d in report.diagnostics if d.code == check.code and not known_defect(d)]
    assert not others, [d.message for d in others]


SENDS_NO_RESIDUAL = """
from torch import nn
from vllm.model_executor.models.utils import make_empty_intermediate_tensors_factory
from vllm.sequence import IntermediateTensors


class Stage(nn.Module):
    def __init__(self, keys):
        super().__init__()
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(keys, 8)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        if intermediate_tensors is not None:
            hidden_states = intermediate_tensors["hidden_states"]
        return IntermediateTensors({"hidden_states": hidden_states})
"""


def test_buffers_compared_with_what_a_stage_sends_and_reads(tmp_path) -> None:
    """Issue 29: a buffer no stage sends, and a key read that no buffer holds, each at
    their line; the buffers a stage sends and reads give nothing."""
    from prefixlint.introspect.checks.pfx606_interface import buffer_mismatches
    from tests.conftest import model_module

    module = model_module(tmp_path, SENDS_NO_RESIDUAL)
    [unsent] = buffer_mismatches(module.Stage(["hidden_states", "residual"]))
    assert unsent.line == SENDS_NO_RESIDUAL.count("\n", 0, SENDS_NO_RESIDUAL.index("return")) + 1
    assert "never sends `residual`" in unsent.message
    found = [f.message for f in buffer_mismatches(module.Stage(["residual"]))]
    assert any("reads `intermediate_tensors['hidden_states']`" in m for m in found), found
    assert not buffer_mismatches(module.Stage(["hidden_states"]))


@pytest.mark.slow
def test_a_failure_names_its_layout_and_heads_list_every_size_once(worker, tmp_path) -> None:
    """Issue 40: PFX604 of a build that failed in one layout names it (tp=2), and heads that
    divide for neither tp=3 nor tp=5 are one PFX603 naming both sizes, not one per size."""
    planted = (
        "        self.config = config\n"
        "        if get_tensor_model_parallel_world_size() == 2:\n"
        '            raise RuntimeError("planted")\n'
    )
    path, _ = llama_copy(
        tmp_path,
        "fails_at_tp2",
        replace_in_class("LlamaModel", "        self.config = config\n", planted),
    )
    config = _config(tmp_path / "config", (("num_attention_heads", 8), ("num_key_value_heads", 8)))
    report = _build(worker, f"{path}:LlamaForCausalLM", (1, 2), (1,), config, False)
    [failed] = [d for d in report.diagnostics if d.code == "PFX604"]
    assert "tp=2" in failed.message, failed.message

    config = _config(tmp_path / "heads", (("num_attention_heads", 32), ("num_key_value_heads", 8)))
    report = _build(worker, "LlamaForCausalLM", (1, 3, 5), (1,), config, False)
    [heads] = [d for d in report.diagnostics if d.code == "PFX603"]
    assert "tp=3" in heads.message and "tp=5" in heads.message, heads.message


def test_an_error_is_kept_whole() -> None:
    """Issue 40: PFX701 cut vLLM's error mid-name. The first line is kept whole; a line
    longer than any real error is cut after a whole word, never inside a name."""
    from prefixlint.introspect.finding import describe_error

    name = "model.layers.0.mlp.experts.w13_weight_scale_inv"
    error = KeyError(f"{'x' * 230} parameter {name} is not in the model")
    assert name in describe_error(error)
    huge = describe_error(ValueError(", ".join(f"{name}.{i}" for i in range(100))))
    assert huge.endswith(" ...") and huge.split(", ")[-1].startswith(f"{name}.")
    assert all(part.startswith(name) for part in huge[len("ValueError: ") : -4].split(", "))
