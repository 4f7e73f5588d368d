"""What the quantization dry-runs observe, as typed facts (issue 37): ``quant.py`` under a
synthetic ``Fp8Config``, ``realquant.py`` and ``checkpoint_run.py`` under a real
checkpoint's config. They carry the model's site and the data the words need; the PFX702
unit (``checks/pfx702_quantization.py``) and the PFX701 unit's checkpoint part
(``checks/pfx701_checkpoint.py``) turn them into findings. Nothing here imports torch or
vLLM: the check units read these classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Site = tuple[str, int]


@dataclass(frozen=True)
class PackedEntry:
    """A fused layer's ``packed_modules_mapping`` entry against the checkpoint layers'
    parts that reach it."""

    leaf: str  # the fused layer's own name (``qkv_proj``)
    parts: tuple[str, ...]  # the checkpoint's parts, in the order they fill it
    entry: tuple[str, ...] | None  # the model's entry; None where it has none

    @property
    def state(self) -> Literal["missing", "wrong", "listed"]:
        if self.entry is None:
            return "missing"
        return "listed" if self.entry == self.parts else "wrong"


# Why a layer's method is not what the checkpoint asks for:
# prefix: its prefix is not its path (the site is where the prefix went wrong);
# packed: a fused layer whose ``packed`` entry misses or lists its parts;
# renamed: the checkpoint names it ``name`` and no mapper entry renames it ``to`` its path;
# skipped: vLLM's config decides otherwise for this prefix, nothing else explains it;
# built-as: a ``package``'s module of class ``name``, which no quantization config reaches;
# unthreaded: built without the ``quant_config`` it takes;
# no-method: the method has no quantized method for a module of class ``name``;
# unmatched: no entry of the checkpoint's ignore ``lists`` matches the prefix.
CauseKind = Literal[
    "prefix", "packed", "renamed", "skipped", "built-as", "unthreaded", "no-method", "unmatched"
]


@dataclass(frozen=True)
class Cause:
    kind: CauseKind
    packed: PackedEntry | None = None
    name: str = ""
    to: str = ""
    package: str = ""
    lists: str = ""  # the config's ignore lists as vLLM read them (``QuantBuild.described``)


@dataclass(frozen=True)
class FusedPrecisionRefused:
    """vLLM refused to build a fused layer whose checkpoint parts are quantized
    differently: the model fuses what the checkpoint keeps apart."""

    site: Site
    error: str  # vLLM's refusal, described
    method: str = ""  # the real checkpoint's method; "" under the synthetic ``Fp8Config``
    layout: str = ""  # the checkpoint layout judged, where it is not the reference's


@dataclass(frozen=True)
class UnthreadedLayer:
    """A linear layer built without ``quant_config`` whose checkpoint layers the synthetic
    quantization config covers (``router``: one output per expert of the config)."""

    site: Site
    path: str
    layers: tuple[str, ...]
    router: bool
    layout: str = ""


@dataclass(frozen=True)
class LayerMisquantized:
    """Under the synthetic ``Fp8Config``: a layer quantized although the checkpoint
    ignores its layers (``ignored``), or left unquantized although it quantizes them."""

    site: Site
    path: str
    prefix: str
    layers: tuple[str, ...]
    ignored: bool
    cause: Cause
    layout: str = ""
    # the parts come from the model's own tables (no reference layout): an entry that
    # names other parts may be right, so not verified
    own_tables: bool = False

    @property
    def entry(self) -> str:
        """The cause's ``packed_modules_mapping`` entry state, "" where it is no entry."""
        return self.cause.packed.state if self.cause.packed is not None else ""


@dataclass(frozen=True)
class Stored:
    """What a checkpoint stores for one layer: its values (dtype, name) and the tensors an
    unquantized layer has no parameter for (scales, narrow values)."""

    values: tuple[tuple[str, str], ...]
    extra: tuple[str, ...]


@dataclass(frozen=True)
class MethodMismatch:
    """Under a real checkpoint's config: a layer whose method (``quantized_as``, "" when
    unquantized) is not what the checkpoint stores for its layers (``holds``)."""

    site: Site
    path: str
    prefix: str
    holds: tuple[tuple[str, Stored], ...]  # checkpoint layer -> what it stores
    quantized_as: str
    method: str  # vLLM's name of the checkpoint's method
    unwritten: tuple[str, ...]  # the module's parameters left unwritten
    cause: Cause


@dataclass(frozen=True)
class CastWrite:
    """PFX701: a checkpoint tensor of one kind of dtype written alone into a parameter of
    another (fp8 values cast into a bfloat16 weight)."""

    site: Site
    tensor: str
    dtype: str
    param: str
    param_dtype: str


@dataclass(frozen=True)
class PartlyLoaded:
    """PFX701: only ``loaded`` of the ``held`` elements of a checkpoint tensor reach the
    model's parameters ``into``."""

    site: Site
    tensor: str
    loaded: int
    held: int
    into: tuple[str, ...]
