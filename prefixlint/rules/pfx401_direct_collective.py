"""PFX401 direct-collective."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.decoder_classes import qualified_callee
from prefixlint.static.model_classes import ARCHITECTURE_NAME
from prefixlint.static.prefix_sites import dotted_name, target_names
from prefixlint.static.rule import FileContext, Invalid, LintRule, Where, example
from prefixlint.static.vllm_facts import Reduction, reduction
from prefixlint.static.walk import walk


def _names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier in an expression or statement (Name values and attribute names)."""
    out: set[str] = set()
    for sub in walk(node):
        if isinstance(sub, cst.Name):
            out.add(sub.value)
    return out


# -- PFX401 ---------------------------------------------------------------------------------

# ``torch.distributed`` functions that communicate -> the position of their ``group``.
_TORCH_COLLECTIVES: dict[str, int] = {
    "all_reduce": 2,
    "all_gather": 2,
    "all_gather_into_tensor": 2,
    "_all_gather_base": 2,
    "all_gather_object": 2,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 3,
    "_reduce_scatter_base": 3,
    "all_to_all": 2,
    "all_to_all_single": 4,
    "broadcast": 2,
    "broadcast_object_list": 2,
    "reduce": 3,
    "gather": 3,
    "scatter": 3,
    "send": 2,
    "recv": 2,
    "isend": 2,
    "irecv": 2,
    "barrier": 0,
}
# What a TP guard compares: the TP world size, however the variable holding it is named.
_TP_SIZE_CALLS = re.compile(
    r"^(get_tensor_model_parallel_world_size|get_tp_world_size|get_tensor_model_parallel_rank)$"
)
_TP_SIZE_ATTRS = frozenset({"world_size", "rank_in_group"})
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
    function: cst.FunctionDef | None  # the function it is written in
    class_node: cst.ClassDef | None  # the top-level class it is written in


class DirectCollective(LintRule):
    """
    ## What it does
    Checks for collective communication written in model classes: `torch.distributed`
    collectives, vLLM's `tensor_model_parallel_all_reduce` / `_all_gather` /
    `_reduce_scatter`, and `get_tp_group().all_reduce(...)`-style calls on a process group.

    A reduction of a value that flows from a call of a layer that already reduces is an
    error, under a TP guard or not: the guard only hides it at TP = 1. Which layers reduce
    is read from vLLM's code: a vLLM layer, or a class built on one, whose constructor
    takes `reduce_results` (`RowParallelLinear`, `FusedMoE`, `SharedFusedMoE`), and a vLLM
    factory that takes it (`FusedMoEFactory`), unless built with `reduce_results=False`
    (the signature's default when it is not passed, the parameter's default when the flag
    is a parameter); a vLLM layer whose `forward` always all-reduces
    (`VocabParallelEmbedding`).

    Other collectives are reported, as warnings, only in model files (under a `models`
    package, or building on vLLM's model layers; never compiler passes, loaders, workers or
    distributed utilities), vLLM's own collectives only inside `nn.Module` classes, and
    not when plainly deliberate: `torch.distributed` calls given a group (by
    keyword or position); an all-reduce in a file that defers a layer's reduction
    (`reduce_results=False`); code written for the sharded case (under an `if` that compares
    the TP world size, however the variable is named, or a sequence-parallel flag, or in a
    function that reads the TP size or rank).

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
    if self.tp_size > 1:
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
    def __init__(self, reduce_results: bool = False, prefix: str = ""):
        super().__init__()
        self.down = RowParallelLinear(
            8, 8, reduce_results=reduce_results, prefix=f"{prefix}.down"
        )

    def forward(self, x):
        out, _ = self.down(x)
        return tensor_model_parallel_all_reduce(out)
"""
        ),
        example(
            """
from vllm.model_executor.layers.fused_moe import FusedMoEFactory

class MoE(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.experts = FusedMoEFactory(
            8, 2, 16, 32, reduce_results=False, prefix=f"{prefix}.experts"
        )

    def forward(self, x, router_logits):
        out = self.experts(hidden_states=x, router_logits=router_logits)
        return tensor_model_parallel_all_reduce(out)
"""
        ),
        example(
            """
class Block(nn.Module):
    def forward(self, x):
        if self.is_sequence_parallel:
            x = get_tp_group().all_gather(x, 0)
        dist.all_gather([x, x], x, get_tp_group().device_group)
        return x
"""
        ),
        example(
            """
class Block(nn.Module):
    def forward(self, x):
        tp_world = get_tensor_model_parallel_world_size()
        if tp_world > 1:
            x = get_tp_group().all_gather(x, 0)
        return x
"""
        ),
        example(
            """
def all_gather_pass(graph, x):
    # a compiler pass: not model code
    return tensor_model_parallel_all_gather(x, 0)
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
        self.tp_size = 2

    def forward(self, x):
        out, _ = self.o_proj(x)
        if self.tp_size > 1:
            out = tensor_model_parallel_all_reduce(out)
        return out
"""
            ),
            line=11,
            contains="`self.o_proj`",
        ),
        Invalid(
            example(
                """
from vllm.model_executor.layers.fused_moe import FusedMoEFactory

class MoE(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.experts = FusedMoEFactory(8, 2, 16, 32, prefix=f"{prefix}.experts")

    def forward(self, x, router_logits):
        out = self.experts(hidden_states=x, router_logits=router_logits)
        return tensor_model_parallel_all_reduce(out)
"""
            ),
            line=11,
            contains="`FusedMoEFactory`",
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
        if raw and _passes_group(node, kind):
            return  # an explicit group: deliberate
        walk_state = self.ctx.prefixes
        self._found.append(
            _Collective(
                node,
                shown,
                kind,
                raw,
                self.here(),
                self._guarded(node, raw),
                walk_state.function_stack[-1] if walk_state.function_stack else None,
                walk_state.class_stack[0] if walk_state.class_stack else None,
            )
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
        functions = self.ctx.prefixes.function_stack
        classes = self.ctx.prefixes.class_stack
        owner = classes[-1] if classes else None
        tp_names = _tp_size_names(owner, functions[-1]) if functions else set()
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, (cst.If, cst.While)) and _tests_parallel_state(
                anchor.test, tp_names
            ):
                return True
        if raw:
            return False  # a raw call without a group is wrong whatever the context
        if functions:
            names = _names_in(functions[-1].body) - own
            if names & tp_names or any(_PARALLEL_STATE.search(n) for n in names):
                return True
        return False

    def leave_Module(self) -> None:
        reducing = _reducing_layers(self.ctx, self.ctx.prefixes.sites)
        flows: dict[int, dict[str, set[str]]] = {}
        model_file = _is_model_file(self.ctx)
        for c in self._found:
            if _is_reduce(c.kind) and c.function is not None and c.class_node is not None:
                layers = reducing.get(c.class_node.name.value, {})
                flow = flows.setdefault(id(c.function), _dataflow(c.function))
                source = next(
                    (s for s in _sources(_reduced_arg(c.node), flow) if s in layers), None
                )
                if source is not None:
                    if layers[source].startswith(_UNKNOWN):
                        self._undecided(c, source, layers[source].removeprefix(_UNKNOWN))
                    else:
                        self._double_reduction(c, source, layers[source])
                    continue
            if not model_file or c.guarded:
                continue
            # The world group is wrong anywhere in a model file; vLLM's collectives only
            # inside its module classes (helpers around them communicate by design).
            in_module = c.class_node is not None and self.ctx.is_module_class(c.class_node)
            if c.raw_torch or in_module:
                self._direct(c)

    def _double_reduction(self, c: _Collective, attr: str, layer: str) -> None:
        self.report(
            c.node,
            f"`{c.shown}` reduces the output of `self.{attr}`, a `{layer}` built without "
            "`reduce_results=False`, which has already all-reduced it: a double reduction, "
            "wrong at TP > 1 whether or not a TP guard runs it; drop the call, or build the "
            "layer with `reduce_results=False`",
            severity=Severity.ERROR,
            site=c.where,
        )

    def _undecided(self, c: _Collective, attr: str, missing: str) -> None:
        source = self.ctx.resolver.loader.vllm
        read = source.origin if source is not None else "the vLLM prefixlint reads"
        self.report(
            c.node,
            f"not verified: `{c.shown}` reduces the output of `self.{attr}`, built by "
            f"`{missing}`, which {read} does not define, so whether it already all-reduces "
            "(a double reduction) cannot be read from vLLM's code",
            site=c.where,
            not_verified=True,
        )

    def _direct(self, c: _Collective) -> None:
        # Code another loader runs (outside vLLM's model contract) keeps its own
        # communication: a note. A double reduction stays a finding there (the layer
        # reduces whoever builds it).
        foreign = self.ctx.outside_contract(c.class_node.name.value) if c.class_node else None
        if foreign is None and not c.raw_torch and not _builds_vllm_layers(self.ctx):
            # No vLLM layer is built here: the model shards by hand (a shape test, its own
            # split) and no layer owns this communication, so "leave it to the layer"
            # has nothing to stand on (third blind corpus). A note, not silence.
            foreign = "no vLLM layer is built in this file: the model shards by hand"
        severity = Severity.NOTE if foreign else None
        suffix = f" ({foreign})" if foreign else ""
        if c.raw_torch:
            self.report(
                c.node,
                f"`{c.shown}` is given no process group, so it runs over the default (world) "
                "group, which spans pipeline and data-parallel ranks too; the parallel "
                "layers own communication (pass vLLM's group explicitly if this is really "
                f"needed){suffix}",
                severity=severity,
                site=c.where,
            )
            return
        if _is_reduce(c.kind) and self._defers_reduction:
            return
        why = (
            "parallel layers already reduce their outputs (`RowParallelLinear`, "
            "`FusedMoE`), so a second all-reduce sums complete results"
            if _is_reduce(c.kind)
            else "the parallel layers own communication"
        )
        self.report(
            c.node,
            f"`{c.shown}` in model code: {why}; leave it to the layer, or build the "
            f"layer with `reduce_results=False` when the reduction is deferred on purpose"
            f"{suffix}",
            severity=severity,
            site=c.where,
        )


def _passes_group(node: cst.Call, kind: str) -> bool:
    """A ``torch.distributed`` call given a group, by keyword or at its position."""
    positional = [a for a in node.args if a.keyword is None]
    if any(a.star for a in positional):
        return True  # ``*args`` may carry it
    if any(a.keyword is not None and a.keyword.value == "group" for a in node.args):
        return True
    index = _TORCH_COLLECTIVES.get(kind)
    return index is not None and len(positional) > index


def _builds_vllm_layers(ctx: FileContext) -> bool:
    """Whether the file builds one of vLLM's layers (a prefix site whose callee is defined
    under ``vllm.model_executor.layers``), or one prefixlint cannot read (another release's:
    counted as built)."""
    for site in ctx.prefixes.sites:
        symbol = ctx.resolver.resolve(ctx.summary, site.callee) or ctx.resolver.vllm_layer(
            ctx.summary, site.callee
        )
        if symbol is not None and (symbol.module.module or "").startswith(_LAYERS):
            return True
        if symbol is None and ctx.resolver.unresolved_vllm(ctx.summary, site.callee):
            return True
    return False


_LAYERS = "vllm.model_executor.layers"


def _is_model_file(ctx: FileContext) -> bool:
    """A model file: under a ``models`` package, defining an architecture class, or building
    on vLLM's model layers."""
    parts = ctx.path.replace("\\", "/").split("/")
    if "models" in parts[:-1]:
        return True
    if any(module.startswith(_MODEL_PACKAGES) for module, _ in ctx.summary.imports.values()):
        return True
    return any(ARCHITECTURE_NAME.search(name) for name in ctx.summary.classes)


_MODEL_PACKAGES = ("vllm.model_executor.layers", "vllm.model_executor.models")


def _is_tp_size(node: cst.BaseExpression, known: set[str]) -> bool:
    """``get_tensor_model_parallel_world_size()``, ``get_tp_group().world_size``, or a name
    bound to one of them."""
    for sub in walk(node):
        if isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if name and _TP_SIZE_CALLS.match(name.rsplit(".", 1)[-1]):
                return True
        if isinstance(sub, cst.Attribute) and sub.attr.value in _TP_SIZE_ATTRS:
            base = sub.value
            if isinstance(base, cst.Call):
                getter = dotted_name(base.func)
                if getter and getter.rsplit(".", 1)[-1] in ("get_tp_group", _TP_GROUP):
                    return True
        name = dotted_name(sub) if isinstance(sub, (cst.Name, cst.Attribute)) else None
        if name is not None and name in known:
            return True
    return False


_TP_GROUP = "get_tensor_model_parallel_group"


def _tp_size_names(class_node: cst.ClassDef | None, function: cst.FunctionDef) -> set[str]:
    """Names the function binds to the TP world size (``tp_world``), and attributes any
    method of its class does (``self.degree = get_tensor_model_parallel_world_size()``)."""
    known: set[str] = set()
    for scope, attributes_only in ((class_node, True), (function, False)):
        if scope is None:
            continue
        for sub in walk(scope.body):
            if isinstance(sub, cst.Assign) and _is_tp_size(sub.value, known):
                for t in sub.targets:
                    name = dotted_name(t.target)
                    if name is not None and (name.startswith("self.") or not attributes_only):
                        known.add(name)
    return known


def _tests_parallel_state(test: cst.BaseExpression, tp_names: set[str]) -> bool:
    if _is_tp_size(test, tp_names):
        return True
    return any(_PARALLEL_STATE.search(n) for n in _names_in(test))


def _reducing_layers(ctx: FileContext, sites: list) -> dict[str, dict[str, str]]:
    """Top-level class -> attribute -> layer, for the layers that reduce their output, as
    vLLM's code says (``vllm_facts.reduction``): ``RowParallelLinear`` and ``FusedMoE``
    and what builds on them, factories such as ``FusedMoEFactory``, unless built with
    ``reduce_results=False``; ``VocabParallelEmbedding``, whose forward always reduces."""
    out: dict[str, dict[str, str]] = {}
    for site in sites:
        exp = site.expected
        if exp is None or exp.whole or exp.indexed or site.scope.class_node is None:
            continue
        symbol = ctx.resolver.resolve(ctx.summary, site.callee)
        if symbol is None:
            symbol = ctx.resolver.vllm_layer(ctx.summary, site.callee)
        layers = out.setdefault(site.scope.class_node.name.value, {})
        if symbol is None:
            missing = ctx.resolver.unresolved_vllm(ctx.summary, site.callee)
            if missing is not None:  # a vLLM name of another release: cannot tell
                layers[exp.path] = _UNKNOWN + missing
            continue
        how = reduction(ctx.resolver, symbol)
        if how is not None and _reduces(site, how):
            layers[exp.path] = site.callee.rsplit(".", 1)[-1]
    return out


_UNKNOWN = "?"  # marks a layer whose reduction cannot be read from vLLM's code


def _reduces(site, how: Reduction) -> bool:
    """The flag left out (the signature's default) or true; a parameter's default when
    it is one; always when the layer has no flag."""
    if how.flag is None:
        return True
    arg = next((a for a in site.call.args if a.keyword and a.keyword.value == how.flag), None)
    if arg is None:
        return how.default
    value = arg.value
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return value.value == "True"
    if isinstance(value, cst.Name) and isinstance(site.scope.node, cst.FunctionDef):
        for param in _all_params(site.scope.node):
            if param.name.value == value.value:
                default = param.default
                return isinstance(default, cst.Name) and default.value == "True"
    return False  # computed: not known to reduce


def _all_params(fn: cst.FunctionDef) -> list[cst.Param]:
    p = fn.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def _reduced_arg(node: cst.Call) -> cst.BaseExpression | None:
    for a in node.args:
        if a.keyword is None and not a.star:
            return a.value
    for a in node.args:
        if a.keyword is not None and a.keyword.value in ("input_", "tensor", "x", "input"):
            return a.value
    return None


def _self_calls(node: cst.CSTNode) -> set[str]:
    """``self.o_proj`` of each ``self.o_proj(...)`` in ``node``: the layers it calls."""
    out: set[str] = set()
    for sub in walk(node):
        if isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if name and name.startswith("self.") and name.count(".") == 1:
                out.add(name[5:])
    return out


def _sources(node: cst.BaseExpression | None, flow: dict[str, set[str]]) -> set[str]:
    if node is None:
        return set()
    out = _self_calls(node)
    for sub in walk(node):
        if isinstance(sub, cst.Name):
            out |= flow.get(sub.value, set())
    return out


def _dataflow(function: cst.FunctionDef) -> dict[str, set[str]]:
    """Local name -> the layers (``self.<attr>``) whose output flows into it, by the
    function's assignments (flow-insensitive: a union over every assignment)."""
    flow: dict[str, set[str]] = {}
    for _ in range(2):  # twice: a loop may feed a name back into an earlier assignment
        for sub in walk(function.body):
            if isinstance(sub, cst.Assign):
                targets = [t.target for t in sub.targets]
            elif isinstance(sub, (cst.AugAssign, cst.AnnAssign)) and sub.value is not None:
                targets = [sub.target]
            else:
                continue
            sources = _sources(sub.value, flow)
            if not sources:
                continue
            for target in targets:
                for name in target_names(target):
                    flow.setdefault(name, set()).update(sources)
    return flow
