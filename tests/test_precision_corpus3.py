"""The static rules' classes of the third blind plugin corpus (issue 40): each false or
contested finding and each miss as a fixture that failed before its fix. Why each
severity is what it is: docs/precision.md, "Third blind corpus"."""

from __future__ import annotations

from prefixlint.rules.pfx203_missing_embed_input_ids import MissingEmbedInputIds
from prefixlint.rules.pfx501_pp_interface_incomplete import PPInterfaceIncomplete
from prefixlint.rules.pfx503_multimodal_interface_incomplete import (
    MultiModalInterfaceIncomplete,
)
from prefixlint.static.rule import example
from prefixlint.static.testing import lint_source


def found(code: str, rule: type, wanted: str) -> list[tuple[str, str]]:
    return [(d.severity.value, d.message) for d in lint_source(code, [rule]) if d.code == wanted]


# -- a method whose body only raises NotImplementedError is a method, not a missing one ----

_RAISING_EMBED = example(
    """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def embed_input_ids(self, input_ids):
        raise NotImplementedError("no separate embedding")

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
)


def test_embed_input_ids_that_raises_is_a_note_not_missing() -> None:
    [(severity, message)] = found(_RAISING_EMBED, MissingEmbedInputIds, "PFX203")
    assert severity == "note" and "has no" not in message
    assert "`MyForCausalLM.embed_input_ids` only raises `NotImplementedError`" in message
    # Without the method it is still the error it was.
    gone = _RAISING_EMBED.replace("def embed_input_ids", "def unrelated")
    [(severity, message)] = found(gone, MissingEmbedInputIds, "PFX203")
    assert severity == "warning" and "has no `embed_input_ids`" in message


def test_pp_buffers_that_raise_are_named_as_raising() -> None:
    code = example(
        """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def make_empty_intermediate_tensors(self, batch_size, dtype, device):
        raise NotImplementedError

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
    )
    # A true defect (pipeline stages call it at start-up): still an error, told truly.
    [(severity, message)] = found(code, PPInterfaceIncomplete, "PFX501")
    assert severity == "error" and "has no" not in message
    assert "only raises `NotImplementedError`" in message


def test_multimodal_embedding_that_raises_is_named_as_raising() -> None:
    code = example(
        """
@MULTIMODAL_REGISTRY.register_processor(P, info=I, dummy_inputs=D)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        raise NotImplementedError()
"""
    )
    [(severity, message)] = found(code, MultiModalInterfaceIncomplete, "PFX503")
    assert severity == "error" and "implements no" not in message
    assert "`MyForConditionalGeneration.embed_multimodal` only raises" in message


# -- a collective in a model that builds no vLLM layer: no layer owns its communication ---


def test_collective_in_a_model_without_vllm_layers_is_a_note() -> None:
    from prefixlint.rules.pfx401_direct_collective import DirectCollective

    code = example(
        """
class ShardedMLP(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.hidden = hidden
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        y = self.fc(x)
        if y.shape[-1] != self.hidden:  # sharded: gather the pieces
            y = tensor_model_parallel_all_gather(y)
        return y
"""
    )
    [(severity, message)] = found(code, DirectCollective, "PFX401")
    assert severity == "note" and "no vLLM layer is built in this file" in message
    # With a vLLM parallel layer in the file, the same call is the warning it was.
    with_layer = code.replace(
        "nn.Linear(hidden, hidden)", 'RowParallelLinear(hidden, hidden, prefix=f"{prefix}.fc")'
    )
    [(severity, _)] = found(with_layer, DirectCollective, "PFX401")
    assert severity == "warning"
