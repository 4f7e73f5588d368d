"""PFX502 pp-undeclared."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from prefixlint.static.index import ClassSummary
from prefixlint.static.model_classes import accepts_param, forward_of, top_level_class
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import INTERFACE, FileContext, Invalid, LintRule, Where, example
from prefixlint.static.walk import walk

# -- PFX502 ---------------------------------------------------------------------------------


_STAGE_ATTRIBUTES = frozenset(
    {"is_first_rank", "is_last_rank", "rank_in_group", "first_rank", "last_rank"}
)


@dataclass
class _Facts:
    builds: set[str] = field(default_factory=set)
    stage_logic: str | None = None  # what shows it: "PPMissingLayer()" / "get_pp_group()"


class PPUndeclared(LintRule):
    """
    ## What it does
    Checks the top-level (architecture) classes of a file, such as `...ForCausalLM`: when
    the class, a class of the same file it builds (directly or through other classes), or a
    local base has pipeline-stage logic (it constructs `PPMissingLayer()` or asks
    `get_pp_group()` which stage it is), the architecture class must declare `SupportsPP`.

    Inner classes (`...Model`, decoder layers) are not expected to declare it: they use
    `PPMissingLayer` and `get_pp_group()` legitimately, and vLLM only asks the class the
    registry instantiates. Classes of other files are not followed.

    ## Why is this bad?
    The work for pipeline parallelism was done but not declared. vLLM checks the
    declaration, not the code: with `--pipeline-parallel-size > 1` start-up stops with
    "does not support pipeline parallelism", although the model would run.

    ## Example
    ```python
    class MyModel(nn.Module):
        def __init__(self, *, vllm_config, prefix=""):
            ...
            self.norm = RMSNorm(...) if get_pp_group().is_last_rank else PPMissingLayer()

    class MyForCausalLM(nn.Module):
        def __init__(self, *, vllm_config, prefix=""):
            self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
    ```

    Use instead:
    ```python
    class MyForCausalLM(nn.Module, SupportsPP):
        ...
    ```
    """

    code = "PFX502"
    applies_to = INTERFACE
    triggers = ("get_pp_group", "PPMissingLayer", "make_layers", "SupportsPP")

    VALID = [
        example(
            """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.norm = nn.LayerNorm(8) if get_pp_group().is_last_rank else PPMissingLayer()

class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
"""
        ),
        example(
            """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.norm = nn.LayerNorm(8)

class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.norm = nn.LayerNorm(8) if get_pp_group().is_last_rank else PPMissingLayer()

class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
"""
            ),
            line=7,
            contains="MyModel",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        if get_pp_group().is_last_rank:
            self.lm_head = nn.Linear(8, 8)
        else:
            self.lm_head = PPMissingLayer()
"""
            ),
            line=2,
            contains="SupportsPP",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._facts: dict[str, _Facts] = {}
        self._nodes: dict[str, tuple[cst.ClassDef, Where]] = {}

    def _top(self) -> str | None:
        stack = self.ctx.prefixes.class_stack
        return stack[0].name.value if stack else None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if top_level_class(self, node) is not None:
            self._nodes[node.name.value] = (node, self.here(node))

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        p = node.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.default is not None:
                name = dotted_name(param.default)
                if name:
                    self._note_name(name)

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._note_name(name)
        # ``pp_group = get_pp_group()`` ... ``pp_group.is_last_rank``
        if "." in name and name.rsplit(".", 1)[-1] in _STAGE_ATTRIBUTES:
            top = self._top()
            if top is not None:
                facts = self._facts.setdefault(top, _Facts())
                facts.stage_logic = facts.stage_logic or name.rsplit(".", 1)[-1]

    def _note_name(self, name: str) -> None:
        top = self._top()
        if top is not None and name in self.ctx.summary.classes and name != top:
            self._facts.setdefault(top, _Facts()).builds.add(name)

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        top = self._top()
        if top is None or callee is None:
            return
        short = callee.rsplit(".", 1)[-1]
        facts = self._facts.setdefault(top, _Facts())
        if short == "PPMissingLayer":
            facts.stage_logic = facts.stage_logic or "PPMissingLayer()"
        elif short == "get_pp_group":
            # Stage logic asks which stage this is; ``world_size == 1`` asserts refuse PP.
            anchors = self.ctx.prefixes.anchors
            for sub in walk(anchors[-1]) if anchors else ():
                if (
                    isinstance(sub, cst.Attribute)
                    and sub.value is node
                    and sub.attr.value in _STAGE_ATTRIBUTES
                ):
                    facts.stage_logic = facts.stage_logic or f"get_pp_group().{sub.attr.value}"
                    break
        elif callee in self.ctx.summary.classes and callee != top:
            facts.builds.add(callee)

    def leave_Module(self) -> None:
        classes = self.ctx.summary.classes
        for name, (node, where) in self._nodes.items():
            if not self.ctx.is_architecture(node) or self.ctx.declares(node, "SupportsPP"):
                continue
            witness = self._stage_logic_under(name, classes)
            if witness is None:
                continue
            holder, how = witness
            via = "it" if holder == name else f"`{holder}`, which it builds,"
            cls = classes[name]
            symbol = Symbol(self.ctx.summary, name, cls=cls)
            forward = forward_of(self, cls)
            ready = (
                self.ctx.resolver.class_has(symbol, "make_empty_intermediate_tensors") is True
                and forward is not None
                and accepts_param(forward, "intermediate_tensors")
            )
            todo = (
                "it already has `make_empty_intermediate_tensors` and a forward taking "
                "`intermediate_tensors`, so only the declaration is missing"
                if ready
                else "declare the interface (with `make_empty_intermediate_tensors` and "
                "`intermediate_tensors` in `forward`)"
            )
            self.report(
                node.name,
                f"`{name}` does not declare `SupportsPP`, but {via} has pipeline-stage "
                f"logic (`{how}`): vLLM refuses pipeline parallelism for it; {todo}",
                site=where,
            )

    def _stage_logic_under(
        self, start: str, classes: dict[str, ClassSummary]
    ) -> tuple[str, str] | None:
        seen: set[str] = set()
        todo = [start]
        while todo:
            name = todo.pop(0)
            if name in seen:
                continue
            seen.add(name)
            facts = self._facts.get(name)
            if facts is not None and facts.stage_logic:
                return name, facts.stage_logic
            if facts is not None:
                todo.extend(sorted(facts.builds))
            cls = classes.get(name)
            if cls is not None:
                todo.extend(b for b in cls.bases if b in classes)
        return None
