"""PFX401 direct-collective."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from prefixlint.static.decoder_classes import qualified_callee
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.rule import FileContext, Invalid, LintRule, Where, example
from prefixlint.static.walk import walk


def _names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier in an expression or statement (Name values and attribute names)."""
    out: set[str] = set()
    for sub in walk(node):
        if isinstance(sub, cst.Name):
            out.add(sub.value)
    return out


# -- PFX401 ---------------------------------------------------------------------------------

# ``torch.distributed`` functions that communicate.
_TORCH_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "scatter",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "barrier",
    }
)
# vLLM's functional wrappers (vllm.distributed.communication_op).
_VLLM_COLLECTIVES = frozenset(
    {
        "tensor_model_parallel_all_reduce",
        "tensor_model_parallel_all_gather",
        "tensor_model_parallel_reduce_scatter",
        "tensor_model_parallel_gather",
        "broadcast_tensor_dict",
    }
)
# Methods of vLLM's GroupCoordinator that communicate, called on ``get_*_group()``.
_GROUP_METHODS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gatherv",
        "reduce_scatter",
        "reduce_scatterv",
        "gather",
        "all_to_all",
        "broadcast",
        "broadcast_object",
        "broadcast_tensor_dict",
        "send",
        "recv",
        "send_object",
        "recv_object",
        "send_tensor_dict",
        "recv_tensor_dict",
        "barrier",
    }
)
_GROUP_GETTERS = re.compile(
    r"^(get_(tp|pp|dp|ep|pcp|dcp|world|tensor_model_parallel|pipeline_model_parallel)_group"
    r"|get_(tp|pp|dp|ep)_group)$"
)
# Names that show code is written for the sharded case on purpose (a TP-size test, a
# sequence-parallel flag, the rank): such code manages its own communication knowingly.
_PARALLEL_STATE = re.compile(
    r"(world_size|tp_size|tp_rank|_rank$|^rank$|sequence_parallel|is_sequence_parallel"
    r"|reduce_scatter_for|tp_group|^sp_|_sp$|dp_size|ep_size|num_ranks)"
)


def _is_reduce(kind: str) -> bool:
    return kind.endswith("all_reduce") or kind == "reduce"


@dataclass
class _Collective:
    node: cst.Call
    shown: str
    kind: str  # the short name: all_reduce, all_gather, ...
    raw_torch: bool
    where: Where
    guarded: bool


class DirectCollective(LintRule):
    """
    ## What it does
    Checks for collective communication written in the model: `torch.distributed`
    collectives, vLLM's `tensor_model_parallel_all_reduce` / `_all_gather` /
    `_reduce_scatter`, and `get_tp_group().all_reduce(...)`-style calls on a process group.

    Calls that are plainly deliberate are not reported: `torch.distributed` calls given an
    explicit `group=`; an all-reduce in a file that defers a layer's reduction
    (`reduce_results=False`, the usual fused-MoE and parallel-residual pattern); and calls
    in code written for the sharded case (under an `if` on the TP size or a
    sequence-parallel flag, or in a function that reads the TP size or rank).

    ## Why is this bad?
    The parallel layers own communication: `RowParallelLinear` all-reduces its output,
    `ColumnParallelLinear(gather_output=True)` gathers, `VocabParallelEmbedding` reduces. An
    extra all-reduce after them sums already-complete results (wrong output at TP > 1, right
    output at TP = 1, so tests on one GPU pass). A `torch.distributed` call without a group
    runs over the *world* group, which also spans pipeline and data-parallel ranks: it
    mixes unrelated tensors or hangs.

    ## Example
    ```python
    out, _ = self.o_proj(attn_output)  # RowParallelLinear: already reduced
    out = tensor_model_parallel_all_reduce(out)
    ```

    Use instead:
    ```python
    out, _ = self.o_proj(attn_output)
    ```
    """

    code = "PFX401"
    triggers = (
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast(",
        "torch.distributed",
        "dist.",
        "get_tp_group",
    )

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")

    def forward(self, x):
        out, _ = self.o_proj(x)
        return out
"""
        ),
        example(
            """
class MoE(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.down = RowParallelLinear(8, 8, reduce_results=False, prefix=f"{prefix}.down")

    def forward(self, x):
        out, _ = self.down(x)
        return tensor_model_parallel_all_reduce(out)
"""
        ),
        example(
            """
class Block(nn.Module):
    def forward(self, x):
        if self.is_sequence_parallel:
            x = get_tp_group().all_gather(x, 0)
        dist.all_gather([x, x], x, group=get_tp_group().device_group)
        return x
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")

    def forward(self, x):
        out, _ = self.o_proj(x)
        return tensor_model_parallel_all_reduce(out)
"""
            ),
            line=9,
            contains="tensor_model_parallel_all_reduce",
        ),
        Invalid(
            example(
                """
class MLP(nn.Module):
    def forward(self, x):
        y = self.fc(x)
        torch.distributed.all_reduce(y)
        return y
"""
            ),
            line=5,
            contains="world",
        ),
        Invalid(
            example(
                """
class MLP(nn.Module):
    def forward(self, x):
        return get_tp_group().all_reduce(self.fc(x))
"""
            ),
            line=4,
            contains="get_tp_group().all_reduce",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._found: list[_Collective] = []
        self._defers_reduction = False

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        for arg in node.args:
            kw = arg.keyword.value if arg.keyword is not None else ""
            if "reduce" in kw and not (
                isinstance(arg.value, cst.Name) and arg.value.value == "True"
            ):
                self._defers_reduction = True  # reduce_results=False / a computed flag
        found = self._classify(node, callee)
        if found is None:
            return
        shown, kind, raw = found
        if raw and any(a.keyword is not None and a.keyword.value == "group" for a in node.args):
            return  # an explicit group: deliberate
        self._found.append(
            _Collective(node, shown, kind, raw, self.here(), self._guarded(node, raw))
        )

    def _classify(self, node: cst.Call, callee: str | None) -> tuple[str, str, bool] | None:
        func = node.func
        if callee is None:
            # ``get_tp_group().all_reduce(x)``
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Call)
                and func.attr.value in _GROUP_METHODS
            ):
                getter = dotted_name(func.value.func)
                if getter and _GROUP_GETTERS.match(getter.rsplit(".", 1)[-1]):
                    short = getter.rsplit(".", 1)[-1]
                    return f"{short}().{func.attr.value}", func.attr.value, False
            return None
        short = callee.rsplit(".", 1)[-1]
        if short not in _TORCH_COLLECTIVES and short not in _VLLM_COLLECTIVES:
            return None
        head = callee.split(".")[0]
        if head in self.ctx.summary.functions or head in self.ctx.summary.classes:
            return None  # a local helper of that name
        qualified = qualified_callee(self, callee) or callee
        if short in _TORCH_COLLECTIVES and (
            qualified.startswith("torch.distributed.") and qualified.count(".") == 2
        ):
            return callee, short, True
        if short in _TORCH_COLLECTIVES and qualified.startswith("torch.ops.vllm."):
            return callee, short, False
        if short in _VLLM_COLLECTIVES and (
            qualified.startswith("vllm.")
            or ("." not in callee and head not in self.ctx.summary.imports)
        ):
            return callee, short.replace("tensor_model_parallel_", ""), False
        return None

    def _guarded(self, node: cst.Call, raw: bool) -> bool:
        """Under an ``if`` on parallel state, or in a function that reads it."""
        own = _names_in(node)
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, (cst.If, cst.While)) and any(
                _PARALLEL_STATE.search(n) for n in _names_in(anchor.test)
            ):
                return True
        if raw:
            return False  # a raw call without a group is wrong whatever the context
        functions = self.ctx.prefixes.function_stack
        if functions:
            names = _names_in(functions[-1].body) - own
            if any(_PARALLEL_STATE.search(n) for n in names):
                return True
        return False

    def leave_Module(self) -> None:
        for c in self._found:
            if c.guarded:
                continue
            if c.raw_torch:
                self.report(
                    c.node,
                    f"`{c.shown}` runs over the default (world) process group, which spans "
                    "pipeline and data-parallel ranks too; the parallel layers own "
                    "communication (pass vLLM's group explicitly if this is really needed)",
                    site=c.where,
                )
                continue
            if _is_reduce(c.kind) and self._defers_reduction:
                continue
            why = (
                "parallel layers already reduce their outputs (`RowParallelLinear`, "
                "`FusedMoE`), so a second all-reduce sums complete results"
                if _is_reduce(c.kind)
                else "the parallel layers own communication"
            )
            self.report(
                c.node,
                f"`{c.shown}` in model code: {why}; leave it to the layer, or build the "
                "layer with `reduce_results=False` when the reduction is deferred on purpose",
                site=c.where,
            )
