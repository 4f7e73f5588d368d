"""What prefix each layer construction receives, and what it should receive.

One pass over a file finds every call of a prefix-taking callable (a *site*) and evaluates its
``prefix`` argument symbolically: ``f"{prefix}.layers.{i}"`` becomes
``ROOT ".layers." VAR(i)``, where ROOT is the enclosing scope's own prefix parameter. Where
the call's result is stored on ``self`` (directly, in an ``nn.ModuleList``, through
``make_layers`` or ``.append``), the attribute path gives the expected value. PFX102 and
PFX301-PFX304 are thin rules over these sites.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from prefixlint.static.index import KEYWORD_ONLY, FunctionSig, Param
from prefixlint.static.resolve import DECODER_ATTENTION_LAYERS, LAYER_FACTORIES
from prefixlint.static.walk import children, walk

# -- symbolic prefix values -------------------------------------------------------------

Part = tuple[str, str]  # ("root", param) | ("lit", text) | ("var", name) | ("unk", "")
Value = tuple[Part, ...]
UNKNOWN: Value = (("unk", ""),)

MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})


def lit(text: str) -> Value:
    return (("lit", text),) if text else ()


def concat(*values: Value) -> Value:
    out: list[Part] = []
    for v in values:
        for part in v:
            if part[0] == "lit" and out and out[-1][0] == "lit":
                out[-1] = ("lit", out[-1][1] + part[1])
            elif part[0] == "lit" and not part[1]:
                continue
            else:
                out.append(part)
    return tuple(out)


def is_known(value: Value) -> bool:
    return all(kind != "unk" for kind, _ in value)


def has_root(value: Value) -> bool:
    return any(kind == "root" for kind, _ in value)


def has_variable(value: Value) -> bool:
    return any(kind in ("var", "unk") for kind, _ in value)


def render(value: Value) -> str:
    out = []
    for kind, text in value:
        if kind == "root":
            out.append("{" + text + "}")
        elif kind == "lit":
            out.append(text)
        else:
            out.append("{" + (text or "?") + "}")
    return "".join(out)


def dotted_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def string_value(node: cst.BaseExpression) -> str | None:
    """The value of a string literal (implicitly concatenated or not); None otherwise."""
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:
            return None
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        left, right = string_value(node.left), string_value(node.right)
        return left + right if left is not None and right is not None else None
    return None


# -- sites ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """Where the constructed module is stored, relative to the scope's own prefix."""

    path: str  # "a.b" for ``self.a.b``
    target: cst.CSTNode  # the node to point at
    indexed: bool = False  # an element of a container: the path ends with ".<index>"
    index: str | None = None  # a literal index, when the element position is known
    whole: bool = False  # inside make_layers' layer function: the prefix is the path itself

    def render(self, root: str = "prefix") -> str:
        if self.whole:
            return "{" + root + "}"
        base = "{" + root + "}." + self.path
        if self.indexed:
            return f"{base}.{self.index}" if self.index is not None else base + ".{*}"
        return base


@dataclass
class Scope:
    node: cst.CSTNode  # FunctionDef or Lambda
    roots: frozenset[str]
    env: dict[str, Value]
    class_node: cst.ClassDef | None
    is_method: bool
    # Local names bound to classes: ``attn_cls = EncoderOnlyAttention if ... else Attention``
    # or a parameter ``layer_type=LlamaDecoderLayer``.
    aliases: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Site:
    call: cst.Call
    callee: str
    signature: FunctionSig
    scope: Scope
    prefix_arg: cst.Arg | None
    has_splat: bool
    value: Value | None
    expected: Expected | None
    loop_vars: tuple[frozenset[str], ...]
    passes_quant_config: bool
    in_factory_fn: bool = False
    anchors: tuple[cst.CSTNode, ...] = ()
    item: object = None

    @property
    def in_loop(self) -> bool:
        return bool(self.loop_vars)


@dataclass
class PrefixParam:
    """A function that takes ``prefix``, and whether its body ever reads it."""

    function: cst.FunctionDef
    param: cst.Param
    referenced: bool
    class_node: cst.ClassDef | None
    sites: list[Site] = field(default_factory=list)


def _is_prefix_param(name: str) -> bool:
    return name == "prefix" or name.endswith("_prefix")


def _params(node: cst.FunctionDef | cst.Lambda) -> list[cst.Param]:
    p = node.params
    out = list(p.posonly_params) + list(p.params) + list(p.kwonly_params)
    if isinstance(p.star_arg, cst.Param):
        out.append(p.star_arg)
    if p.star_kwarg is not None:
        out.append(p.star_kwarg)
    return out


class Hooks:
    """What the walk tells the rules: override any of these."""

    def on_class(self, node: cst.ClassDef) -> None: ...

    def on_function(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None: ...

    def on_call(self, node: cst.Call, callee: str | None) -> None: ...

    def on_name(self, node: cst.Name | cst.Attribute, name: str) -> None: ...


class PrefixAnalysis:
    """The one walk over a file's items: collects prefix sites and tells the rules the rest.

    While it walks, ``item``, ``class_stack``, ``function_stack`` and ``anchors`` say where
    it is; rules read them from their hooks.
    """

    def __init__(self, prefix_signature, hooks: Hooks | None = None) -> None:
        self._prefix_signature = prefix_signature  # callee dotted name -> FunctionSig | None
        # Names bound to ``maybe_prefix``: its own, import aliases (read from the file's
        # summary when the signature lookup is a ``FileContext``'s) and ``mp = maybe_prefix``.
        self.prefix_helpers: set[str] = {"maybe_prefix"}
        summary = getattr(getattr(prefix_signature, "__self__", None), "summary", None)
        for local, (_, attr) in getattr(summary, "imports", {}).items():
            if attr == "maybe_prefix":
                self.prefix_helpers.add(local)
        self.hooks = hooks or Hooks()
        self.sites: list[Site] = []
        self.prefix_params: list[PrefixParam] = []
        self.item: object = None
        self.class_stack: list[cst.ClassDef] = []
        self.function_stack: list[cst.FunctionDef] = []
        self.anchors: list[cst.CSTNode] = []
        self._referenced: list[set[str]] = []

    def run(self, item: object, module: cst.Module) -> None:
        self.item = item
        for stmt in module.body:
            # A function pushes itself as an anchor (so that hooks see it); others here.
            own = not isinstance(stmt, cst.FunctionDef)
            if own:
                self.anchors.append(stmt)
            self._top_level(stmt)
            if own:
                self.anchors.pop()

    def _is_prefix_helper(self, value: cst.BaseExpression) -> bool:
        name = dotted_name(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
        return name is not None and (
            name in self.prefix_helpers or name.rsplit(".", 1)[-1] == "maybe_prefix"
        )

    # -- traversal --------------------------------------------------------------------
    def _top_level(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:  # ``mp = maybe_prefix`` at module level
                if isinstance(small, cst.Assign) and self._is_prefix_helper(small.value):
                    for t in small.targets:
                        if isinstance(t.target, cst.Name):
                            self.prefix_helpers.add(t.target.value)
            # Calls made at import time (a registration): the rules see them, no site.
            for sub in walk(stmt):
                if isinstance(sub, cst.Call):
                    self.hooks.on_call(sub, dotted_name(sub.func))
        if isinstance(stmt, cst.ClassDef):
            self._class(stmt)
        elif isinstance(stmt, cst.FunctionDef):
            self._function(stmt, {}, None)
        elif isinstance(stmt, (cst.If, cst.Try, cst.With)):
            for child in _child_statements(stmt):
                self._top_level(child)

    def _class(self, node: cst.ClassDef) -> None:
        self.class_stack.append(node)
        try:
            self._class_body(node)
        finally:
            self.class_stack.pop()

    def _class_body(self, node: cst.ClassDef) -> None:
        self.hooks.on_class(node)
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
        methods = [s for s in body if isinstance(s, cst.FunctionDef)]
        init = next((m for m in methods if m.name.value == "__init__"), None)
        class_env: dict[str, Value] = {}
        if init is not None:
            init_scope = self._function(init, {}, node)
            # ``self.prefix = prefix`` in __init__ lets other methods build on it.
            class_env = {k: v for k, v in init_scope.env.items() if k.startswith("self.")}
        for m in methods:
            if m is not init:
                self._function(m, dict(class_env), node)
        for stmt in body:
            if isinstance(stmt, cst.ClassDef):
                self._class(stmt)

    def _function(
        self, node: cst.FunctionDef, env: dict[str, Value], class_node: cst.ClassDef | None
    ) -> Scope:
        params = _params(node)
        roots = frozenset(p.name.value for p in params if _is_prefix_param(p.name.value))
        env = dict(env)
        for p in params:
            env.pop(p.name.value, None)
            if p.name.value in roots:
                env[p.name.value] = (("root", p.name.value),)
        scope = Scope(node, roots, env, class_node, is_method=class_node is not None)
        for p in params:
            if p.default is not None and (names := _class_names(p.default)):
                scope.aliases[p.name.value] = names
        before = len(self.sites)
        self.function_stack.append(node)
        self.anchors.append(node)  # before the hook: reports on the header land in ``node``
        self.hooks.on_function(node, class_node)
        self._referenced.append(set())
        try:
            self._block(node.body, scope, ())
        finally:
            referenced = self._referenced.pop()
            if self._referenced:
                self._referenced[-1] |= referenced  # closures read the outer names
            self.anchors.pop()
            self.function_stack.pop()
        prefix_param = next((p for p in params if p.name.value == "prefix"), None)
        if prefix_param is not None:
            self.prefix_params.append(
                PrefixParam(
                    node, prefix_param, "prefix" in referenced, class_node, self.sites[before:]
                )
            )
        return scope

    def _block(self, block: cst.CSTNode, scope: Scope, loops: tuple[frozenset[str], ...]) -> None:
        for stmt in _statements(block):
            self.anchors.append(stmt)
            self._statement(stmt, scope, loops)
            self.anchors.pop()

    def _statement(
        self, stmt: cst.CSTNode, scope: Scope, loops: tuple[frozenset[str], ...]
    ) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self._small(small, scope, loops)
        elif isinstance(stmt, cst.FunctionDef):
            self._function(stmt, scope.env, scope.class_node)
        elif isinstance(stmt, cst.ClassDef):
            self._class(stmt)
        elif isinstance(stmt, cst.For):
            self._expr(stmt.iter, scope, loops, None)
            inner = (*loops, frozenset(_target_names(stmt.target)))
            self._block(stmt.body, scope, inner)
            if stmt.orelse:
                self._block(stmt.orelse.body, scope, loops)
        elif isinstance(stmt, cst.While):
            self._expr(stmt.test, scope, loops, None)
            self._block(stmt.body, scope, (*loops, frozenset({"<while>"})))
        elif isinstance(stmt, cst.If):
            self._expr(stmt.test, scope, loops, None)
            self._block(stmt.body, scope, loops)
            orelse = stmt.orelse
            while orelse is not None:
                if isinstance(orelse, cst.If):
                    self._expr(orelse.test, scope, loops, None)
                    self._block(orelse.body, scope, loops)
                    orelse = orelse.orelse
                else:
                    self._block(orelse.body, scope, loops)
                    orelse = None
        elif isinstance(stmt, (cst.With, cst.Try, cst.TryStar)):
            for child in _child_statements(stmt):
                self._statement(child, scope, loops)
        elif isinstance(stmt, cst.Match):
            for case in stmt.cases:
                self._block(case.body, scope, loops)

    def _small(self, small: cst.CSTNode, scope: Scope, loops: tuple[frozenset[str], ...]) -> None:
        if isinstance(small, cst.Assign):
            value = small.value
            for t in small.targets:
                self._bind(t.target, value, scope)
            expected = self._expected_for_targets([t.target for t in small.targets], value, scope)
            self._expr(value, scope, loops, expected)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self._bind(small.target, small.value, scope)
            expected = self._expected_for_targets([small.target], small.value, scope)
            self._expr(small.value, scope, loops, expected)
        elif isinstance(small, (cst.Expr, cst.Return, cst.AugAssign, cst.AnnAssign)):
            value = small.value
            if value is not None:
                self._expr(value, scope, loops, None)
        elif isinstance(small, (cst.Assert, cst.Raise, cst.Del)):
            for child in children(small):
                self._expr(child, scope, loops, None)

    # -- expectations -----------------------------------------------------------------
    def _self_path(self, target: cst.BaseExpression, scope: Scope) -> str | None:
        if not scope.is_method:
            return None
        name = dotted_name(target)
        if name and name.startswith("self.") and name.count(".") >= 1:
            return name[len("self.") :]
        return None

    def _expected_for_targets(
        self, targets: list[cst.BaseExpression], value: cst.BaseExpression, scope: Scope
    ) -> Expected | None:
        if len(targets) != 1:
            return None
        target = targets[0]
        if isinstance(target, cst.Tuple):
            # ``self.start_layer, self.end_layer, self.layers = make_layers(...)``
            callee = dotted_name(value.func) if isinstance(value, cst.Call) else None
            if callee and callee.rsplit(".", 1)[-1] in LAYER_FACTORIES and target.elements:
                target = target.elements[-1].value
            else:
                return None
        path = self._self_path(target, scope)
        if path is None:
            return None
        return Expected(path=path, target=target)

    # -- expressions ------------------------------------------------------------------
    def _expr(
        self,
        node: cst.CSTNode,
        scope: Scope,
        loops: tuple[frozenset[str], ...],
        expected: Expected | None,
    ) -> None:
        if isinstance(node, cst.Call):
            self._call(node, scope, loops, expected)
        elif isinstance(node, cst.IfExp):
            self._expr(node.test, scope, loops, None)
            self._expr(node.body, scope, loops, expected)
            self._expr(node.orelse, scope, loops, expected)
        elif isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            names: set[str] = set()
            comp: cst.CompFor | None = node.for_in
            while comp is not None:
                names |= set(_target_names(comp.target))
                self._expr(comp.iter, scope, loops, None)
                comp = comp.inner_for_in
            inner = (*loops, frozenset(names))
            elt = node.value if isinstance(node, cst.DictComp) else node.elt
            self._expr(elt, scope, inner, expected)
        elif isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            for i, el in enumerate(node.elements):
                sub = expected
                if expected is not None and expected.indexed and expected.index is None:
                    sub = Expected(expected.path, expected.target, True, str(i))
                self._expr(
                    el.value, scope, loops, sub if not isinstance(el, cst.StarredElement) else None
                )
        elif isinstance(node, cst.Lambda):
            self._lambda(node, scope, loops, None)
        elif isinstance(node, cst.Name):
            if self._referenced:
                self._referenced[-1].add(node.value)
            self.hooks.on_name(node, node.value)
        elif isinstance(node, cst.Attribute):
            name = dotted_name(node)
            if name is not None:
                self.hooks.on_name(node, name)
                root = node
                while isinstance(root, cst.Attribute):
                    root = root.value
                if isinstance(root, cst.Name) and self._referenced:
                    self._referenced[-1].add(root.value)
            else:
                self._expr(node.value, scope, loops, None)
        else:
            for child in children(node):
                self._expr(child, scope, loops, None)

    def _lambda(
        self,
        node: cst.Lambda,
        scope: Scope,
        loops: tuple[frozenset[str], ...],
        whole: Expected | None,
    ) -> None:
        params = _params(node)
        env = dict(scope.env)
        roots = set()
        for i, p in enumerate(params):
            env.pop(p.name.value, None)
            # make_layers' layer function gets the layer's full path as its first argument.
            if _is_prefix_param(p.name.value) or (whole is not None and i == 0):
                env[p.name.value] = (("root", p.name.value),)
                roots.add(p.name.value)
        inner = Scope(
            node, frozenset(roots), env, scope.class_node, scope.is_method, dict(scope.aliases)
        )
        self._referenced.append(set())
        try:
            self._expr(node.body, inner, (), whole)
        finally:
            referenced = self._referenced.pop() - set(p.name.value for p in params)
            if self._referenced:
                self._referenced[-1] |= referenced

    def _call(
        self,
        node: cst.Call,
        scope: Scope,
        loops: tuple[frozenset[str], ...],
        expected: Expected | None,
    ) -> None:
        callee = dotted_name(node.func)
        short = callee.rsplit(".", 1)[-1] if callee else None
        self.hooks.on_call(node, callee)
        if short == "tie_weights":
            self._expr(node.func, scope, loops, None)
            for arg in node.args:
                self._expr(arg.value, scope, loops, None)
            return
        if short in MODULE_CONTAINERS:
            inner = Expected(expected.path, expected.target, indexed=True) if expected else None
            for arg in node.args:
                self._expr(arg.value, scope, loops, inner if arg.keyword is None else None)
            return
        if short == "append" and callee and isinstance(node.func, cst.Attribute):
            path = self._self_path(node.func.value, scope)
            inner = Expected(path, node.func.value, indexed=True) if path else None
            for arg in node.args:
                self._expr(arg.value, scope, loops, inner)
            return
        computes_name = callee in self.prefix_helpers
        signature = self._prefix_signature(callee) if callee and not computes_name else None
        if signature is None and callee in scope.aliases:
            for target in scope.aliases[callee]:
                signature = self._prefix_signature(target)
                if signature is not None:
                    break
        keywords = {a.keyword.value for a in node.args if a.keyword is not None}
        if signature is None and "prefix" in keywords:
            if expected is not None and expected.whole:
                # make_layers' layer function builds the layer, whatever its callee is called.
                signature = _ANY_LAYER
            elif "vllm_config" in keywords:
                # ``self.model_cls(vllm_config=..., prefix=...)``: a model constructor,
                # however the callee is spelled.
                signature = _ANY_LAYER
        if signature is not None:
            self._site(node, callee or "", signature, scope, loops, expected)
        # arguments: nested constructions are not the stored module
        for arg in node.args:
            if isinstance(arg.value, cst.Lambda):
                whole = None
                if short in LAYER_FACTORIES:
                    whole = Expected("", arg.value, whole=True)
                self._lambda(arg.value, scope, loops, whole)
            else:
                self._expr(arg.value, scope, loops, None)
        self._expr(node.func, scope, loops, None)

    def _site(
        self,
        node: cst.Call,
        callee: str,
        signature: FunctionSig,
        scope: Scope,
        loops: tuple[frozenset[str], ...],
        expected: Expected | None,
    ) -> None:
        prefix_arg: cst.Arg | None = None
        has_splat = False
        positional = 0
        index = signature.positional_index("prefix")
        quant = False
        for arg in node.args:
            if arg.star == "**":
                has_splat = True
            elif arg.star == "*":
                has_splat = True  # positional splat may carry it
            elif arg.keyword is not None:
                if arg.keyword.value == "prefix":
                    prefix_arg = arg
                elif arg.keyword.value == "quant_config":
                    quant = not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
            else:
                if index is not None and positional == index:
                    prefix_arg = arg
                positional += 1
        if not quant:
            qi = signature.positional_index("quant_config")
            if qi is not None and qi < positional:
                quant = True
        value = self.evaluate(prefix_arg.value, scope) if prefix_arg is not None else None
        in_factory = isinstance(scope.node, cst.Lambda) and expected is not None and expected.whole
        self.sites.append(
            Site(
                call=node,
                callee=callee,
                signature=signature,
                scope=scope,
                prefix_arg=prefix_arg,
                has_splat=has_splat,
                value=value,
                expected=expected,
                loop_vars=loops,
                passes_quant_config=quant,
                in_factory_fn=in_factory,
                anchors=tuple(self.anchors),
                item=self.item,
            )
        )

    # -- environment ------------------------------------------------------------------
    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, scope: Scope) -> None:
        name = dotted_name(target)
        if name is not None and self._is_prefix_helper(value):
            self.prefix_helpers.add(name)  # ``mp = maybe_prefix``
            return
        if name is not None and (names := _class_names(value)):
            scope.aliases[name] = names
        elif name is not None:
            scope.aliases.pop(name, None)
        if name is None:
            for n in _target_names(target):
                scope.env.pop(n, None)
            return
        v = self.evaluate(value, scope)
        if v == UNKNOWN or not (has_root(v) or all(k == "lit" for k, _ in v)):
            scope.env.pop(name, None)
            return
        scope.env[name] = v

    def evaluate(self, node: cst.BaseExpression, scope: Scope) -> Value:
        s = string_value(node)
        if s is not None:
            return lit(s)
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None and name in scope.env:
                return scope.env[name]
            return (("var", name or "?"),)
        if isinstance(node, cst.FormattedString):
            parts: list[Value] = []
            for p in node.parts:
                if isinstance(p, cst.FormattedStringText):
                    parts.append(lit(p.value))
                elif isinstance(p, cst.FormattedStringExpression):
                    if p.format_spec or p.conversion:
                        parts.append((("var", "?"),))
                    else:
                        parts.append(self.evaluate(p.expression, scope))
            return concat(*parts)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            left, right = self.evaluate(node.left, scope), self.evaluate(node.right, scope)
            if _stringish(node.left) or _stringish(node.right) or has_root(left) or has_root(right):
                return concat(left, right)
            return (("var", "?"),)  # arithmetic: ``i + start_layer_id`` is one index
        if isinstance(node, cst.IfExp):
            a, b = self.evaluate(node.body, scope), self.evaluate(node.orelse, scope)
            return a if a == b else UNKNOWN
        if isinstance(node, cst.Call):
            return self._evaluate_call(node, scope)
        return UNKNOWN

    def _evaluate_call(self, node: cst.Call, scope: Scope) -> Value:
        callee = dotted_name(node.func)
        args = [a for a in node.args if a.keyword is None and not a.star]
        helper = callee is not None and (
            callee in self.prefix_helpers or callee.rsplit(".", 1)[-1] == "maybe_prefix"
        )
        if helper and len(args) == 2:
            base = self.evaluate(args[0].value, scope)
            name = self.evaluate(args[1].value, scope)
            if base == ():
                return name
            return concat(base, lit("."), name)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
            template = string_value(node.func.value)
            if template is not None and "{}" in template and "{{" not in template:
                pieces = template.split("{}")
                if len(pieces) - 1 == len(args):
                    out: list[Value] = [lit(pieces[0])]
                    for arg, piece in zip(args, pieces[1:], strict=True):
                        out += [self.evaluate(arg.value, scope), lit(piece)]
                    return concat(*out)
            return UNKNOWN
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "join":
            sep = string_value(node.func.value)
            if (
                sep is not None
                and len(args) == 1
                and isinstance(args[0].value, (cst.List, cst.Tuple))
            ):
                out = []
                for i, el in enumerate(args[0].value.elements):
                    if i:
                        out.append(lit(sep))
                    out.append(self.evaluate(el.value, scope))
                return concat(*out)
        if callee == "str" and len(args) == 1:
            v = self.evaluate(args[0].value, scope)
            return v if v != UNKNOWN else (("var", "?"),)
        return UNKNOWN


_ANY_LAYER = FunctionSig(
    "__init__", [Param("self", "pos", None), Param("prefix", KEYWORD_ONLY, '""')], 0
)


def _class_names(node: cst.BaseExpression) -> list[str]:
    """``Attention`` / ``a.B`` / ``A if c else B``: names that look like classes."""
    if isinstance(node, cst.IfExp):
        return _class_names(node.body) + _class_names(node.orelse)
    name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    if name and name.rsplit(".", 1)[-1][:1].isupper():
        return [name]
    return []


def _stringish(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))


def _statements(block: cst.CSTNode) -> Iterator[cst.CSTNode]:
    if isinstance(block, cst.IndentedBlock):
        yield from block.body
    elif isinstance(block, cst.SimpleStatementSuite):
        yield cst.SimpleStatementLine(body=block.body)


def _child_statements(stmt: cst.CSTNode) -> Iterator[cst.CSTNode]:
    if isinstance(stmt, cst.If):
        yield from _statements(stmt.body)
        orelse = stmt.orelse
        while orelse is not None:
            if isinstance(orelse, cst.If):
                yield from _statements(orelse.body)
                orelse = orelse.orelse
            else:
                yield from _statements(orelse.body)
                orelse = None
    elif isinstance(stmt, cst.With):
        yield from _statements(stmt.body)
    elif isinstance(stmt, (cst.Try, cst.TryStar)):
        yield from _statements(stmt.body)
        for h in stmt.handlers:
            yield from _statements(h.body)
        if stmt.orelse:
            yield from _statements(stmt.orelse.body)
        if stmt.finalbody:
            yield from _statements(stmt.finalbody.body)


def target_names(target: cst.CSTNode) -> Iterator[str]:
    """Names an assignment or loop target binds (``a``, ``a, *b``; not ``self.a``)."""
    return _target_names(target)


def _target_names(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _target_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


CLASS_VARIABLE = re.compile(r"(_cls|_class|_type)$")
MODULE_FACTORY = re.compile(r"(^|_)(init|build|make|create|get)_|model|layer|Model|Layer")


def builds_module(site: Site) -> bool:
    """Classes build modules; functions only when their name says they build one."""
    short = site.callee.rsplit(".", 1)[-1]
    if short[:1].isupper() or site.callee in site.scope.aliases or CLASS_VARIABLE.search(short):
        return True  # a class, or a name bound to one (``attn_cls``, ``layer_type``)
    return bool(MODULE_FACTORY.search(short)) and not short.startswith(
        ("is_", "resolve_", "iter", "_iter")
    )


def is_root_construction(site: Site) -> bool:
    """The call that creates the whole model (``get_model(vllm_config=...)`` in a worker):
    it passes ``vllm_config`` from a scope that has no prefix to build one from, and the
    root's prefix is rightly empty."""
    return not site.scope.roots and any(
        a.keyword is not None and a.keyword.value == "vllm_config" for a in site.call.args
    )


def is_layer_site(site: Site) -> bool:
    """A site that builds a layer the prefix rules judge: a module class, or a function
    that builds one; not the root construction of the model."""
    return builds_module(site) and not is_root_construction(site)


def quant_reaches(site: Site) -> bool:
    """A quantization config reaches the module: passed itself, inside ``vllm_config``, or
    possibly through ``**kwargs``."""
    if site.passes_quant_config or site.has_splat:
        return True
    return any(a.keyword is not None and a.keyword.value == "vllm_config" for a in site.call.args)


def name_has_consumer(site: Site) -> bool:
    """Someone looks the layer up by its prefix: a quantization config reaches it, or it
    is an attention layer (the KV cache is registered under its name)."""
    return quant_reaches(site) or site.callee.rsplit(".", 1)[-1] in DECODER_ATTENTION_LAYERS
