"""A reference that transformers cannot build because its config class leaves attributes
None (Qwen4Exp's QSA fields): the PFX600 note names them (``compare/unset.py``)."""

from __future__ import annotations

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _introspect

QSA = ["indexer_budget", "indexer_compress_ratio"]  # the failing statement's
QSA_TOO = ["indexer_n_heads", "indexer_kv_heads", "indexer_head_dim"]  # its function's


def _qsa_error() -> TypeError:
    """What transformers' own indexer raises on its config class's defaults."""
    pytest.importorskip("transformers.models.qwen4_exp")
    from transformers.models.qwen4_exp import configuration_qwen4_exp as conf
    from transformers.models.qwen4_exp import modeling_qwen4_exp as modeling

    config = conf.Qwen4ExpTextConfig(hidden_size=64, num_hidden_layers=4, head_dim=16)
    with pytest.raises(TypeError) as raised:
        modeling.Qwen4ExpTextQSAIndexer(config, 3)
    return raised.value


def test_the_attributes_read_as_none_are_named_through_the_function_s_copies() -> None:
    from prefixlint.introspect.compare.unset import none_attributes, said

    error = _qsa_error()
    function, config, attrs, others = none_attributes(error)
    assert function == "Qwen4ExpTextQSAIndexer.__init__"
    assert attrs == QSA  # read as ``self.token_budget // self.compress_ratio``
    assert sorted(others) == sorted(QSA_TOO)
    assert type(config).__name__ == "Qwen4ExpTextConfig"
    text = said(error)
    assert all(f"`{a}`" in text for a in QSA + QSA_TOO)
    assert "`Qwen4ExpTextConfig` declares them None" in text


class _Config:
    """A config of a class that declares ``ratio`` None and derives ``width``."""

    ratio = None

    def __init__(self) -> None:
        self.width = None  # set on the instance: no class default of None

    def to_dict(self) -> dict:
        return dict(vars(self))


def _fails(config: _Config, local: object = None) -> None:
    ratio = config.ratio
    if local is not None:
        return local // 2
    return 8 // ratio


def test_only_config_values_of_none_are_named() -> None:
    from prefixlint.introspect.compare.unset import said

    with pytest.raises(TypeError) as raised:
        _fails(_Config())
    text = said(raised.value)
    assert text.startswith(" (`_fails` read `ratio` as None: `_Config` declares them None")
    with pytest.raises(TypeError) as raised:  # None, but no config's
        _fails(_Config(), local="x")
    assert said(raised.value) == ""
    assert said(ValueError("NoneType")) == ""


def _widths(config: _Config) -> int:
    return config.width * 2


def test_an_instance_value_of_none_is_named_without_the_class_s_default() -> None:
    from prefixlint.introspect.compare.unset import said

    with pytest.raises(TypeError) as raised:
        _widths(_Config())
    assert said(raised.value) == " (`_widths` read `width` as None)"


@pytest.mark.slow
@requires_vllm
def test_qwen4_exp_s_note_names_the_qsa_fields_its_config_class_leaves_none(worker) -> None:
    """transformers' Qwen4Exp builds the QSA indexer on every ``indexed_attention`` layer
    and cannot build its config class's defaults; vLLM builds those layers as dense
    attention then (``nvidia/model.py:242-251``). The note says which fields it lacked."""
    report = _introspect(worker, "Qwen4ExpForCausalLM")
    [result] = report.results
    compare = result["compare"]
    assert (compare["status"], compare["reason"]) == ("not run", "reference_failed"), compare
    assert all(f"`{a}`" in compare["detail"] for a in QSA + QSA_TOO), compare["detail"]
    notes = [d.message for d in report.diagnostics if d.code == "PFX600" and QSA[0] in d.message]
    assert notes and "could not be built or run" in notes[0]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
