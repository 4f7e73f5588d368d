"""What the comparison with transformers found, as typed facts: its status, why it did not
run, the input, the tolerance, and each compared module boundary. Never a finding: the
check unit (``checks/pfx609_output_mismatch.py``) turns these into one."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

# Relative tolerance: max |vLLM - transformers| over max |transformers| at a boundary.
# Both run in float32 on the CPU with the same weights; what differs is only the order of
# sums (fused QKV and gate-up matmuls, a fused residual add, RoPE spelled another way),
# which costs a few float32 ulps per op: ~1e-6 relative after a few layers of the tiny
# config. A planted one-token bug moves outputs by 1e-2 or more (docs/compare.md).
TOLERANCE = 1e-3
# The second, tight tier (docs/compare.md, "fifth round: small systematic differences"):
# where no boundary differs by TOLERANCE, a module whose input agrees to TIGHT_INPUT
# (float32's noise on the tiny config) and whose output differs by more than
# TIGHT_TOLERANCE computes something else. Over the zoo's clean comparisons the largest
# such difference that persists is 8.7e-6; an activation's approximation swapped (exact
# GeLU for the tanh one) moves the MLP by 1.7e-4 to 2.1e-4: 4e-5 is 4.5 times from each.
TIGHT_TOLERANCE = 4e-5
TIGHT_INPUT = 2e-6


class Status(enum.Enum):
    EQUAL = "equal"  # every compared boundary within the tolerance
    DIFFERS = "differs"  # some boundary beyond it
    NOT_RUN = "not run"


class Reason(enum.Enum):
    """Why the comparison did not run: a gap of the tool or the machine, never the model's."""

    DISABLED = "turned off (--no-compare)"
    NO_REFERENCE = "transformers has no class for this architecture"
    REFERENCE_FAILED = "the transformers reference could not be built or run"
    NOT_GENERATIVE = "not a text model this comparison runs (multimodal input, a speculative draft)"
    NO_BUILD = "no tp=1/pp=1 build of the model"
    BUILD_FAILED = "the model could not be built with real weights on the CPU"
    LOAD_FAILED = "the reference weights could not be loaded"
    UNSUPPORTED_LAYER = "a layer the CPU reference cannot run"
    FORWARD_FAILED = "the model's forward could not run on the CPU"
    NOTHING_MATCHED = "no module of the model matches one of transformers by name"
    TOO_LARGE = "the config is too large to run twice on the CPU within the time budget"
    # the CUDA wheel on a CPU machine: a layer whose CPU path only a compiled kernel runs
    NO_KERNEL = "a layer's CPU path needs a compiled kernel this vLLM build does not ship"
    # transformers' conversion reverts some of a module's tensors and not the others
    HALF_CONVERTED = (
        "transformers' conversion reverts some of a module's tensors to the checkpoint's "
        "names and not the others: a layout no real checkpoint has"
    )
    OTHER_CHECKPOINT = (
        "transformers' checkpoint leaves the model's parameters unset (its load_weights "
        "reads another checkpoint format, or it is not transformers' model of this config)"
    )


@dataclass(frozen=True)
class Boundary:
    """One module boundary compared: the vLLM path, transformers' path, and the largest
    absolute and relative difference of its output (and of its input, where both took
    one tensor)."""

    path: str
    reference_path: str
    max_abs: float
    max_rel: float
    input_rel: float | None = None
    site: tuple[str, int] = ("", 0)  # the model's line that built it
    # what differs in words, where it is no tensor (a rotary embedding's size, rotary.py)
    detail: str = ""
    # the logits only: which part of computing them differs, in words (``logits.py``)
    blame: str = ""

    def differs(self, tolerance: float) -> bool:
        return self.max_rel > tolerance

    def input_agrees(self, tolerance: float) -> bool:
        return self.input_rel is None or self.input_rel <= tolerance


@dataclass(frozen=True)
class Refusal:
    """A checkpoint tensor the model's ``load_weights`` raised on: one of transformers'
    checkpoint of a config (``refusal.py``: ``module`` it falls under, ``site`` the line
    that built it), or a name real checkpoints carry and transformers drops, streamed
    with the rest of the checkpoint (``extras.py``: ``site`` the model's line that
    raised, ``module`` ""); ``said``: what the loader raised, in words."""

    tensor: str
    module: str
    site: tuple[str, int]
    said: str
    # when a variant's refusal is the model's (``variants.CompareVariant.served``):
    # ``always``, ``changed`` (where the model's build differs from the config
    # itself's), "" never
    served: str = ""

    @property
    def rotary(self) -> bool:
        return not self.tensor.endswith("lm_head.weight")


@dataclass
class Comparison:
    status: Status
    reason: Reason | None = None
    detail: str = ""  # what failed, in words, for a NOT_RUN
    reference: str = ""  # the transformers class
    input_ids: tuple[int, ...] = ()
    tolerance: float = TOLERANCE
    boundaries: list[Boundary] = field(default_factory=list)  # in completion order
    first: Boundary | None = None  # the first boundary that diverges with agreeing input
    # what the loader raised on the first kind of names real checkpoints add that it
    # refused (``refusals``, reference._extras); "" when it took them
    extras_refused: str = ""
    # the comparison's own smaller sizes (``compare/smaller.py``), {} on the config itself
    smaller: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # values it ran with for attributes a synthesised config guessed and transformers'
    # class never reads (``guesses.py``): other values of them are not verified
    assumed: dict[str, Any] = field(default_factory=dict)
    variant: str = ""  # the config variant it ran on ("": the config itself; variants.py)
    attention: str = "eager"  # the reference's attention path (sdpa: see compare())
    # per-layer lists of a synthesised config only transformers reads, as its config
    # class derives them for the layer count (``layerlists.py``), set while it ran
    derived: dict[str, Any] = field(default_factory=dict)
    # every CustomOp ran vLLM's torch implementation (``forward_native``), the fused MoE
    # experts torch's (``experts.py``): this vLLM build has no compiled CPU kernels (the
    # CUDA wheel on a CPU machine; compare.native_ops)
    native_ops: bool = False
    # a plugin pooling model's modules transformers' class lacks (``pooling.own_heads``):
    # its forward's output, which they may change, was not compared
    own_heads: list[str] = field(default_factory=list)
    # guessed sizes transformers' class never reads, set to the size it builds the same
    # tensors with (``widths.py``) while it ran
    aligned: dict[str, int] = field(default_factory=dict)
    # what the loader raised on the checkpoint's names as ``save_pretrained`` writes them,
    # where it then took the names transformers' conversion renames as the model holds
    # them (``reference._own_names``); "" otherwise. A fact, not a finding: real
    # checkpoints of a family may carry either (docs/compare.md)
    names_refused: str = ""
    # ran on a variant of values moved off the constants a model could write
    # (``CompareVariant.latent``)
    latent: bool = False
    # where the model's loader refused transformers' checkpoint of this config, for a
    # LOAD_FAILED (``refusal.py``): the tensor, the module, the line that built it
    refusal: Refusal | None = None
    # KV head counts the comparison's own config set apart from the query heads
    # (``kvheads.py``), {} where none was or transformers' class refused it
    grouped: dict[str, int] = field(default_factory=dict)
    # the parameter names and shapes of the model it built (not in the JSON): a variant
    # whose build has others than the config itself's reads what the variant changed
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    # the names real checkpoints add that the loader refused, one per kind (``extras.py``)
    refusals: list[Refusal] = field(default_factory=list)

    @classmethod
    def not_run(cls, reason: Reason, detail: str = "") -> Comparison:
        return cls(Status.NOT_RUN, reason, detail)

    def to_json(self) -> dict:
        out: dict = {"status": self.status.value, "seconds": round(self.seconds, 3)}
        if self.reason is not None:
            out["reason"] = self.reason.name.lower()
            out["detail"] = self.detail
        if self.status is not Status.NOT_RUN:
            out["compared"] = len(self.boundaries)
            out["tolerance"] = self.tolerance
        if self.extras_refused:
            out["extras_refused"] = self.extras_refused
        if self.refusals:
            out["refused"] = [r.tensor for r in self.refusals]
        if self.assumed:
            out["assumed"] = {k: repr(v) for k, v in self.assumed.items()}
        if self.variant:
            out["variant"] = self.variant
        if self.latent:
            out["latent"] = True
        if self.attention != "eager":
            out["reference_attention"] = self.attention
        if self.smaller:
            out["smaller"] = dict(self.smaller)
        if self.native_ops:
            out["custom_ops"] = "native"
        if self.derived:
            out["derived"] = {k: repr(v) for k, v in self.derived.items()}
        if self.own_heads:
            out["own_heads"] = list(self.own_heads)
        if self.aligned:
            out["aligned"] = dict(self.aligned)
        if self.names_refused:
            out["names_refused"] = self.names_refused
        if self.refusal is not None:
            refused = self.refusal
            out["refused_at"] = {"tensor": refused.tensor, "module": refused.module}
            out["refused_at"]["served"] = refused.served
        if self.grouped:
            out["grouped"] = dict(self.grouped)
        if self.first is not None:
            out["first"] = self.first.path
            out["max_abs"] = self.first.max_abs
            out["max_rel"] = self.first.max_rel
        return out
