"""PFX501-PFX504: capability interfaces and plugin registration.

Capabilities (pipeline parallelism, multimodal input) are declared by inheriting marker
interfaces; vLLM trusts the declaration and calls what it promises. Plugins register
architectures by name, lazily, in every process. These rules check that what is declared
or registered is actually there.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from prefixlint.catalog import Symbol
from prefixlint.diagnostic import Severity
from prefixlint.index import ClassSummary, FunctionSig
from prefixlint.rules.base import FileContext, Invalid, LintRule, Where
from prefixlint.rules.prefixes import dotted_name
from prefixlint.rules.walk import walk

_HEADER = """
import torch
from torch import nn
from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsPP
from vllm.model_executor.models.utils import PPMissingLayer, make_layers
from vllm.distributed import get_pp_group
from vllm.multimodal import MULTIMODAL_REGISTRY
"""


def _example(body: str) -> str:
    return _HEADER + body


def _top_level_class(rule: LintRule, node: cst.ClassDef) -> ClassSummary | None:
    """The summary of ``node`` when it is a top-level class (nested names may collide)."""
    stack = rule.ctx.prefixes.class_stack
    if len(stack) != 1 or stack[0] is not node or rule.ctx.prefixes.function_stack:
        return None
    return rule.ctx.class_summary(node)


def _is_protocol(cls: ClassSummary) -> bool:
    return any(b.rsplit(".", 1)[-1] == "Protocol" for b in cls.bases)


def _method_node(node: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
    found = None
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            found = stmt  # the last definition wins, as in Python
    return found


def _accepts(sig: FunctionSig, name: str) -> bool:
    return sig.param(name) is not None or sig.has_var_keyword


def _mro(rule: LintRule, cls: ClassSummary) -> tuple[list[Symbol], bool]:
    """The class and its resolvable bases, and whether every base could be read."""
    return rule.ctx.resolver.class_mro(Symbol(rule.ctx.summary, cls.name, cls=cls))


def _forward(rule: LintRule, cls: ClassSummary) -> FunctionSig | None:
    """The ``forward`` the class runs: its own, else the first one along resolvable bases."""
    own = cls.methods.get("forward")
    if own is not None:
        return own
    mro, _ = _mro(rule, cls)
    for entry in mro[1:]:
        if entry.cls is None or _is_protocol(entry.cls):
            continue
        sig = entry.cls.methods.get("forward")
        if sig is not None and not sig.is_stub:
            return sig
    return None


_DRAFTER_NAME = re.compile(r"(MTP|Mtp|Eagle|DFlash|DSpark|Medusa|Speculator|Draft)")


def _is_drafter(rule: LintRule, cls: ClassSummary) -> bool:
    """A speculative-decoding drafter: its forward consumes the target's hidden states."""
    if _DRAFTER_NAME.search(cls.name):
        return True
    sig = _forward(rule, cls)
    return sig is not None and any(
        sig.param(p) is not None for p in ("hidden_states", "previous_hidden_states")
    )


# -- PFX501 ---------------------------------------------------------------------------------


class PPInterfaceIncomplete(LintRule):
    """
    ## What it does
    Checks that a class declaring `SupportsPP` (directly or through a base) provides
    `make_empty_intermediate_tensors` (a method, a class attribute, or a `self.` attribute
    set in `__init__`, on the class or a resolvable base) and that its `forward` accepts
    `intermediate_tensors`. When a base cannot be read, the attribute is not reported.

    ## Why is this bad?
    vLLM trusts the declaration. With pipeline parallelism, a stage after the first calls
    `make_empty_intermediate_tensors` while profiling and capturing CUDA graphs, and passes
    the previous stage's activations as `forward(..., intermediate_tensors=...)`. Without
    the attribute the start-up fails with an `AttributeError`; without the parameter vLLM
    logs a warning and treats the model as not supporting PP at all. For speculative
    drafters (MTP, EAGLE), which inherit the declaration from their target model and never
    run as a pipeline stage, the finding is a warning.

    ## Example
    ```python
    class MyForCausalLM(nn.Module, SupportsPP):
        def forward(self, input_ids, positions):
            return self.model(input_ids, positions)
    ```

    Use instead:
    ```python
    class MyForCausalLM(nn.Module, SupportsPP):
        def __init__(self, *, vllm_config, prefix=""):
            ...
            self.make_empty_intermediate_tensors = (
                self.model.make_empty_intermediate_tensors
            )

        def forward(self, input_ids, positions, intermediate_tensors=None,
                    inputs_embeds=None):
            return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
    ```
    """

    code = "PFX501"
    name = "pp-interface-incomplete"
    severity = Severity.ERROR
    summary = "A `SupportsPP` class lacks `make_empty_intermediate_tensors` or the PP forward"

    VALID = [
        _example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
        ),
        _example(
            """
from vllm.model_executor.models.llama import LlamaForCausalLM

class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, **kwargs):
        return super().forward(input_ids, positions, **kwargs)
"""
        ),
        _example(
            """
from somewhere_unknown import Base

class MyForCausalLM(Base, SupportsPP):
    def forward(self, input_ids, positions, intermediate_tensors=None):
        return self.model(input_ids, positions, intermediate_tensors)
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=9,
            contains="make_empty_intermediate_tensors",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device):
        return None

    def forward(self, input_ids, positions, inputs_embeds=None):
        return self.model(input_ids, positions)
"""
            ),
            line=13,
            contains="intermediate_tensors",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        cls = _top_level_class(self, node)
        if cls is None or _is_protocol(cls) or not self.ctx.declares(node, "SupportsPP"):
            return
        symbol = Symbol(self.ctx.summary, cls.name, cls=cls)
        name = cls.name
        # A speculative drafter runs beside the target's last stage, never as a PP stage:
        # the inconsistency is real (vLLM's registry warns about it) but not an error.
        severity = Severity.WARNING if _is_drafter(self, cls) else None
        if self.ctx.resolver.class_has(symbol, "make_empty_intermediate_tensors") is False:
            self.report(
                node.name,
                f"`{name}` declares `SupportsPP` but has no `make_empty_intermediate_tensors` "
                "(method, class attribute or `self.` attribute set in `__init__`); later "
                "pipeline stages call it at start-up",
                severity=severity,
                site=self.here(node),
            )
        self._check_forward(node, cls, severity)

    def _check_forward(
        self, node: cst.ClassDef, cls: ClassSummary, severity: Severity | None
    ) -> None:
        own = cls.methods.get("forward")
        if own is not None:
            if not own.is_stub and not _accepts(own, "intermediate_tensors"):
                fn = _method_node(node, "forward")
                self.report(
                    fn.name if fn is not None else node.name,
                    f"`{cls.name}.forward` takes no `intermediate_tensors`, but the class "
                    "declares `SupportsPP`: later stages receive the previous stage's "
                    "activations through it (vLLM then treats the model as not supporting PP)",
                    severity=severity,
                    site=self.here(node, *([fn] if fn is not None else [])),
                )
            return
        mro, complete = _mro(self, cls)
        if not complete:
            return
        for entry in mro[1:]:
            assert entry.cls is not None
            if _is_protocol(entry.cls):
                continue
            sig = entry.cls.methods.get("forward")
            if sig is None or sig.is_stub:
                continue
            if self.ctx.resolver.inherits(entry.module, entry.cls, "SupportsPP"):
                return  # reported on that base, where the declaration is
            if not _accepts(sig, "intermediate_tensors"):
                self.report(
                    node.name,
                    f"`{cls.name}` declares `SupportsPP` but inherits `forward` from "
                    f"`{entry.name}`, which takes no `intermediate_tensors`",
                    severity=severity,
                    site=self.here(node),
                )
            return


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
    name = "pp-undeclared"
    severity = Severity.WARNING
    summary = "An architecture built on pipeline-stage logic does not declare `SupportsPP`"

    VALID = [
        _example(
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
        _example(
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
            _example(
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
            line=14,
            contains="MyModel",
        ),
        Invalid(
            _example(
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
            line=9,
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
        if _top_level_class(self, node) is not None:
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
            forward = _forward(self, cls)
            ready = (
                self.ctx.resolver.class_has(symbol, "make_empty_intermediate_tensors") is True
                and forward is not None
                and _accepts(forward, "intermediate_tensors")
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


# -- PFX503 ---------------------------------------------------------------------------------

_EMBED_METHODS = ("embed_multimodal", "get_multimodal_embeddings")


class MultiModalInterfaceIncomplete(LintRule):
    """
    ## What it does
    Checks that a class declaring `SupportsMultiModal` implements `embed_multimodal` (or
    `get_multimodal_embeddings`, its name in older vLLM), on itself or a resolvable base,
    and that an architecture class has a multimodal processor registered with
    `@MULTIMODAL_REGISTRY.register_processor(...)` on itself or on a resolvable base (vLLM
    looks the processor up with `hasattr(model_cls, "_processor_factory")`, so a base's
    registration is inherited). Nothing is reported when a base cannot be read.

    Two kinds of classes need no `embed_multimodal`: models that set
    `supports_multimodal_raw_input_only` (media reach `forward` raw), and speculative
    drafters (MTP, EAGLE: their `forward` takes the target's `hidden_states`), which declare
    the interface to receive the target's multimodal embeddings.

    ## Why is this bad?
    The interface's `embed_multimodal` is a stub returning `None`: media inputs are
    silently dropped, or the runner fails on the missing embeddings. Without a registered
    processor vLLM raises "has no registered multimodal processor" for the first request
    (and at start-up, while profiling), because it cannot count placeholder tokens.

    ## Example
    ```python
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
        def forward(self, input_ids, positions, intermediate_tensors=None,
                    inputs_embeds=None):
            ...
    ```

    Use instead:
    ```python
    @MULTIMODAL_REGISTRY.register_processor(
        MyMultiModalProcessor, info=MyProcessingInfo, dummy_inputs=MyDummyInputsBuilder
    )
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
        def embed_multimodal(self, **kwargs):
            ...
    ```
    """

    code = "PFX503"
    name = "multimodal-interface-incomplete"
    severity = Severity.ERROR
    summary = "A `SupportsMultiModal` class lacks `embed_multimodal` or a registered processor"

    VALID = [
        _example(
            """
@MULTIMODAL_REGISTRY.register_processor(Proc, info=Info, dummy_inputs=Dummy)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        return self.vision(kwargs["pixel_values"])
"""
        ),
        _example(
            """
from vllm.model_executor.models.llava import LlavaForConditionalGeneration

class MyForConditionalGeneration(LlavaForConditionalGeneration):
    pass
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
@MULTIMODAL_REGISTRY.register_processor(Proc, info=Info, dummy_inputs=Dummy)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.language_model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=10,
            contains="embed_multimodal",
        ),
        Invalid(
            _example(
                """
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        return self.vision(kwargs["pixel_values"])
"""
            ),
            line=9,
            contains="register_processor",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        cls = _top_level_class(self, node)
        if cls is None or _is_protocol(cls):
            return
        if not self.ctx.declares(node, "SupportsMultiModal"):
            return
        symbol = Symbol(self.ctx.summary, cls.name, cls=cls)
        has = [self.ctx.resolver.class_has(symbol, m) for m in _EMBED_METHODS]
        if all(h is False for h in has) and not self._embeds_elsewhere(cls):
            self.report(
                node.name,
                f"`{cls.name}` declares `SupportsMultiModal` but implements no "
                "`embed_multimodal`: the interface's stub returns nothing, so media inputs "
                "never reach the model",
                site=self.here(node),
            )
        if self.ctx.is_architecture(node) and self._registered(cls) is False:
            self.report(
                node.name,
                f"`{cls.name}` declares `SupportsMultiModal` but neither it nor a base is "
                "decorated with `@MULTIMODAL_REGISTRY.register_processor(...)`: vLLM finds "
                "no processor for its inputs",
                site=self.here(node),
            )

    def _embeds_elsewhere(self, cls: ClassSummary) -> bool:
        """Raw-input models take media in ``forward``; drafters get the target's embeddings."""
        for entry in _mro(self, cls)[0]:
            if entry.cls is None or entry.cls.name == "SupportsMultiModal":
                continue
            if "supports_multimodal_raw_input_only" in entry.cls.attributes:
                return True
        return _is_drafter(self, cls)

    def _registered(self, cls: ClassSummary) -> bool | None:
        mro, complete = _mro(self, cls)
        for entry in mro:
            if entry.cls is None:
                continue
            if any(d.rsplit(".", 1)[-1] == "register_processor" for d in entry.cls.decorators):
                return True
            if "_processor_factory" in entry.cls.attributes:
                return True
        return False if complete else None


# -- PFX504 ---------------------------------------------------------------------------------

_BLANK = cst.Module(body=[])


def _code(node: cst.CSTNode) -> str:
    return _BLANK.code_for_node(node).strip()


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _argument(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    return positional[index].value if index < len(positional) else None


def _is_supported_archs(node: cst.CSTNode) -> bool:
    for sub in walk(node):
        if isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if name and name.rsplit(".", 1)[-1] == "get_supported_archs":
                return True
    return False


def _guard_for(test: cst.CSTNode, arch: str, negated: bool) -> bool:
    """``arch not in ModelRegistry.get_supported_archs()`` (``in`` when not ``negated``)."""
    for sub in walk(test):
        if not isinstance(sub, cst.Comparison) or _code(sub.left) != arch:
            continue
        for target in sub.comparisons:
            op = target.operator
            wanted = cst.NotIn if negated else cst.In
            if isinstance(op, wanted) and _is_supported_archs(target.comparator):
                return True
    return False


def _exits(block: cst.BaseSuite) -> bool:
    stmts = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for stmt in stmts:
        for sub in walk(stmt):
            if isinstance(sub, (cst.Return, cst.Continue, cst.Raise)):
                return True
    return False


_MODULE_CACHE: dict[Path, frozenset[str] | None] = {}


def _module_names(path: Path) -> frozenset[str] | None:
    """Names bound at the top level of a module file; None when they cannot be known."""
    if path in _MODULE_CACHE:
        return _MODULE_CACHE[path]
    names: set[str] | None = set()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        tree = None
        names = None

    def visit(stmts: list[ast.stmt]) -> bool:
        assert names is not None
        for stmt in stmts:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(stmt.name)
                if stmt.name == "__getattr__":
                    return False  # lazy attributes: anything may exist
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    if alias.name == "*":
                        return False
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                blocks = [stmt.body, getattr(stmt, "orelse", [])]
                blocks += [h.body for h in getattr(stmt, "handlers", [])]
                blocks.append(getattr(stmt, "finalbody", []))
                if not all(visit(b) for b in blocks):
                    return False
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = stmt.value.func
                if isinstance(func, ast.Attribute) and func.attr == "update":
                    return False  # globals().update(...)
        return True

    if tree is not None and not visit(tree.body):
        names = None
    result = frozenset(names) if names is not None else None
    _MODULE_CACHE[path] = result
    return result


class PluginRegistration(LintRule):
    """
    ## What it does
    Checks a plugin's top-level `register()` function: every
    `ModelRegistry.register_model("Arch", ...)` must be guarded by
    `if "Arch" not in ModelRegistry.get_supported_archs():` (or follow an early
    `if "Arch" in ModelRegistry.get_supported_archs(): return`), and a lazy
    `"package.module:Class"` target must name a class that the module defines. The module
    is looked up on disk under the checked package's root and the installed vLLM; when it
    cannot be found, or its names cannot be known statically, nothing is reported.

    ## Why is this bad?
    vLLM calls `register()` in every process it starts (engine, workers, API server).
    Unguarded, a plugin silently replaces an architecture vLLM already serves (registering
    an existing name only logs at debug level), and re-registers it in every process. A
    wrong `module:Class` is imported only when the model is first loaded: the plugin
    installs cleanly and the server fails later, on the worker, with an import error.

    ## Example
    ```python
    def register():
        from vllm import ModelRegistry
        ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
    ```

    Use instead:
    ```python
    def register():
        from vllm import ModelRegistry
        if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
    ```
    """

    code = "PFX504"
    name = "plugin-registration"
    severity = Severity.WARNING
    summary = "A plugin registers a model without the registry guard, or names a missing class"

    VALID = [
        """
def register():
    from vllm import ModelRegistry

    if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(
            "MyForCausalLM", "vllm.model_executor.models.llama:LlamaForCausalLM"
        )
""",
        """
MODELS = {"A": "my_pkg.a:A", "B": "my_pkg.b:B"}

def register():
    from vllm import ModelRegistry

    for arch, target in MODELS.items():
        if arch in ModelRegistry.get_supported_archs():
            continue
        ModelRegistry.register_model(arch, target)
""",
    ]
    INVALID = [
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    ModelRegistry.register_model("MyForCausalLM", "my_pkg.model:MyForCausalLM")
""",
            line=5,
            contains="get_supported_archs",
        ),
        Invalid(
            """
def register():
    from vllm import ModelRegistry

    if "MyForCausalLM" not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(
            "MyForCausalLM", "vllm.model_executor.models.llama:MyForCausalLM"
        )
""",
            line=7,
            contains="MyForCausalLM",
        ),
    ]

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        if callee is None or not callee.endswith("register_model"):
            return
        if not (callee.endswith("ModelRegistry.register_model") or callee == "register_model"):
            return
        functions = self.ctx.prefixes.function_stack
        if self.ctx.prefixes.class_stack or not functions or functions[0].name.value != "register":
            return
        arch = _argument(node, 0, "model_arch")
        target = _argument(node, 1, "model_cls")
        if arch is not None and not self._guarded(_code(arch), functions[0]):
            shown = _code(arch)
            self.report(
                node,
                f"`register_model({shown}, ...)` is not guarded by `if {shown} not in "
                "ModelRegistry.get_supported_archs()`: the plugin silently overrides an "
                "architecture of that name that vLLM or another plugin already provides, "
                "in every process",
                site=self.here(),
            )
        if target is not None:
            self._check_target(target)

    def _guarded(self, arch: str, function: cst.FunctionDef) -> bool:
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, cst.If) and _guard_for(anchor.test, arch, negated=True):
                return True
        # ``if arch in ModelRegistry.get_supported_archs(): return`` earlier on
        for sub in walk(function.body):
            if (
                isinstance(sub, cst.If)
                and _guard_for(sub.test, arch, negated=False)
                and _exits(sub.body)
            ):
                return True
        return False

    def _check_target(self, target: cst.BaseExpression) -> None:
        value = _string(target)
        if value is None:
            return
        if value.count(":") != 1:
            self.report(
                target,
                f"`{value}` is not of the form `module:Class`; `register_model` raises "
                "`ValueError` for it",
                site=self.here(),
            )
            return
        module, _, cls = value.partition(":")
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module) or not cls.isidentifier():
            return
        path = self.ctx.resolver.loader.path_for(module)
        if path is None:
            return  # not on disk where we look: say nothing rather than guess
        names = _module_names(path)
        if names is None or cls in names:
            return
        self.report(
            target,
            f"`{module}` ({path.name}) defines no `{cls}`: the plugin installs, and the "
            "import fails on the worker when the model is first loaded",
            site=self.here(),
        )
