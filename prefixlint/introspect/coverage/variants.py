"""Config exploration: build config variants until the model's construction sites are covered.

One synthesised config builds one path through the model's ``__init__``: an all-attention
``layer_types`` never builds the convolution layers beside it, a tied head never builds the
untied one. What guards an unexecuted site is read from the model's source (stdlib ``ast``,
the code is not imported here): config attributes read in ``if`` tests, ternaries,
comparisons and ``getattr`` defaults, followed through local names (``is_attn =
config.layer_types[i] == "full_attention"``). Each guard gives variants: every kind of a
per-layer list (one layer of each), a flag flipped, a MoE/dense schedule moved, an
optional size set or unset. A variant is one attribute changed on the repaired config,
built at the first layout; it is kept when it executes a site no build executed before,
and then built at the other layouts too. Variants that fail to build are ours, not the
model's: they are listed, never reported. Exploration stops when every site ran, when no
candidate is left, or when the per-target time budget is spent.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.coverage.sites import measure, own_files

_NOT_MODEL_CONFIGS = (
    "quant_config",
    "cache_config",
    "lora_config",
    "parallel_config",
    "vllm_config",
    "model_config",
    "scheduler_config",
    "compilation_config",
    "speculative_config",
    "multimodal_config",
    "load_config",
    "device_config",
)
_SKIP_ATTRS = frozenset(
    {"model_type", "architectures", "torch_dtype", "dtype", "num_hidden_layers", "vocab_size"}
)
_SIZE_WORDS = ("rank", "dim", "size", "num_", "window")
_SCHEDULE_WORDS = ("period", "offset", "freq", "step", "interval", "every", "layer", "pattern")
PAIRS = 4  # pairs of variants tried per kept variant and round
PATIENCE = 3  # unguarded variants in a row that add no site before giving up on them
OTHER_KIND = "prefixlint_other_kind"  # a per-layer value equal to none the code names
_MISSING = object()
# vLLM switches the model reads from its ModelConfig, set by an environment variable: a
# guard on ``model_config.use_mla`` is explored with MLA disabled (``$`` marks them).
_SWITCHES = {"use_mla": ("$VLLM_MLA_DISABLE", "1")}


@dataclass
class AttrUse:
    """How the model's files use one config attribute."""

    compared: list[Any] = field(default_factory=list)  # literals it is compared with
    truth: bool = False  # tested for truth (a flag)
    numeric: bool = False  # compared with a number
    schedule: bool = False  # a step (``i % x``) or a bound on a layer index (``i >= x``)
    none: bool = False  # compared with None (an optional size)
    default: Any = _MISSING  # ``getattr(config, name, default)``
    indexed: set[int] = field(default_factory=set)  # lines of ``value[i]``, ``i`` not literal


@dataclass
class FileFacts:
    uses: dict[str, AttrUse]
    guards: dict[int, set[str]]  # line -> attributes read in the tests guarding it
    reads: frozenset[str] = frozenset()  # every attribute read from the model's config


@dataclass
class Variant:
    overrides: dict[str, Any]
    why: str
    status: str = "untried"  # kept | no new site | failed: ... | untried (budget)
    new_sites: int = 0
    guarded: bool = True  # derived from the guards of an unexecuted site
    everywhere: bool = False  # set on every config object (``applied``): a draft's numbering

    def label(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in self.overrides.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "overrides": {k: _short(v) for k, v in self.overrides.items()},
            "why": self.why,
            "status": self.status,
            "new_sites": self.new_sites,
        }


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- reading the source ---------------------------------------------------------------


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _is_model_config(node: ast.AST) -> bool:
    name = _dotted(node).rsplit(".", 1)[-1]
    return name.endswith("config") and name not in _NOT_MODEL_CONFIGS


def _literal(node: ast.AST) -> list[Any] | None:
    if isinstance(node, ast.Constant) and not isinstance(node.value, bytes):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [_literal(e) for e in node.elts]
        if all(v is not None and len(v) == 1 for v in values):
            return [v[0] for v in values]  # type: ignore[index]
    return None


def _layer_index(node: ast.AST) -> bool:
    """An index that names a layer (``layer_idx``, ``self.layer_id - offset``, ``i``)."""
    names = [_dotted(n) for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]
    words = ("layer", "idx", "index")
    return any(n == "i" or any(w in n.lower() for w in words) for n in names)


class _Reader:
    """Config reads of one file, followed through assignments to names and ``self.x``."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.uses: dict[str, AttrUse] = {}
        self.taint: dict[str, set[str]] = {}  # local or self.x name -> attributes
        self.dicts: dict[str, list[Any]] = {}  # module-level dict -> its literal keys
        functions = {
            n.name: [a.arg for a in n.args.args]
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.functions = functions
        self._settled: dict[int, set[str]] | None = None  # attrs() per node, once taint is final
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                for target in node.targets:
                    if isinstance(target, ast.Name) and keys:
                        self.dicts[target.id] = keys
        for _ in range(2):  # names assigned from names assigned from the config
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and _dotted(node.func) in functions:
                    # ``is_linear(i, config.layer_group_size)``: positional parameters
                    for name, arg in zip(functions[_dotted(node.func)], node.args, strict=False):
                        attrs = self.attrs(arg)
                        if attrs:
                            self.taint.setdefault(name, set()).update(attrs)
                if isinstance(node, ast.keyword) and node.arg:
                    # ``Attn(q_lora_rank=config.q_lora_rank)``: the parameter of that name
                    attrs = self.attrs(node.value)
                    if attrs:
                        self.taint.setdefault(node.arg, set()).update(attrs)
                        self.taint.setdefault(f"self.{node.arg}", set()).update(attrs)
                assigns = (ast.Assign, ast.AnnAssign, ast.NamedExpr)
                if isinstance(node, assigns) and node.value is not None:
                    attrs = self.attrs(node.value)
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        name = _dotted(target)
                        if name and attrs:
                            self.taint.setdefault(name, set()).update(attrs)
                        if name and isinstance(node.value, (ast.Name, ast.BoolOp)):
                            for sub in ast.walk(node.value):
                                if isinstance(sub, ast.Name) and sub.id in self.dicts:
                                    self.dicts.setdefault(name, self.dicts[sub.id])
        # The taint is final: a node's attributes no longer change. ``read`` and the guards
        # ask again for the same nodes (every call under an ``if`` asks for its test).
        self._settled = {}

    def use(self, attr: str) -> AttrUse:
        return self.uses.setdefault(attr, AttrUse())

    def direct(self, node: ast.AST) -> str | None:
        """The attribute ``node`` reads from the model's config, if it is such a read."""
        if isinstance(node, ast.Attribute) and _is_model_config(node.value):
            return node.attr
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _SWITCHES
            and _dotted(node.value).endswith("model_config")
        ):
            return _SWITCHES[node.attr][0]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and _is_model_config(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            return node.args[1].value
        return None

    def attrs(self, node: ast.AST) -> set[str]:
        if self._settled is None:
            return self._attrs(node)
        found = self._settled.get(id(node))
        if found is None:
            found = self._settled[id(node)] = self._attrs(node)
        return set(found)

    def _attrs(self, node: ast.AST) -> set[str]:
        out: set[str] = set()
        for sub in ast.walk(node):
            attr = self.direct(sub)
            if attr is not None:
                out.add(attr)
            elif isinstance(sub, (ast.Name, ast.Attribute)):
                out.update(self.taint.get(_dotted(sub), ()))
        return out - _SKIP_ATTRS

    def read(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare):
                self._compare(node)
            elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
                self._truth(node.test)
            elif isinstance(node, ast.BoolOp):
                for value in node.values:
                    self._truth(value)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                self._truth(node.operand)
            elif isinstance(node, ast.Subscript) and _dotted(node.value) in self.dicts:
                for attr in self.attrs(node.slice):
                    self._add(attr, self.dicts[_dotted(node.value)])
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                for attr in self.attrs(node.right):
                    self.use(attr).schedule = True
            if isinstance(node, ast.Subscript) and _layer_index(node.slice):
                # ``config.layer_types[layer_idx]``: a per-layer list read by a layer index
                for attr in self.attrs(node.value):
                    self.use(attr).indexed.add(node.lineno)
            attr = self.direct(node)
            if attr is not None and isinstance(node, ast.Call) and len(node.args) == 3:
                value = _literal(node.args[2])
                if value is not None and len(value) == 1 and attr not in _SKIP_ATTRS:
                    self.use(attr).default = value[0]

    def _add(self, attr: str, values: list[Any]) -> None:
        use = self.use(attr)
        for v in values:
            if v not in use.compared:
                use.compared.append(v)

    def _truth(self, test: ast.AST) -> None:
        attr = self.direct(test)
        if attr is None and isinstance(test, (ast.Name, ast.Attribute)):
            names = self.taint.get(_dotted(test), set())
            attr = next(iter(names)) if len(names) == 1 else None
        if attr is not None and attr not in _SKIP_ATTRS:
            self.use(attr).truth = True

    def _compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        literals = [x for s in sides for x in (_literal(s) or [])]
        attrs = set().union(*(self.attrs(s) for s in sides if _literal(s) is None))
        ordered = any(isinstance(op, (ast.Lt, ast.GtE, ast.Gt, ast.LtE)) for op in node.ops)
        indexed = any(
            any(w in _dotted(s).lower() for w in ("layer", "idx", "index")) for s in sides
        )
        for attr in attrs:
            use = self.use(attr)
            self._add(attr, [v for v in literals if v is not None])
            use.none |= any(v is None for v in literals)
            use.numeric |= any(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in literals
            )
            use.schedule |= ordered and indexed


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _guards(reader: _Reader, tree: ast.Module) -> dict[int, set[str]]:
    """line -> config attributes read by the tests that decide whether the line runs,
    through one level of indirection: a class or function whose uses are guarded."""
    parents = _parents(tree)

    def guarding(node: ast.AST) -> set[str]:
        out: set[str] = set()
        child, node = node, parents.get(node)
        while node is not None:
            if isinstance(node, (ast.If, ast.While, ast.IfExp)) and child is not node.test:
                out |= reader.attrs(node.test)
            elif isinstance(node, ast.comprehension):
                for test in node.ifs:
                    out |= reader.attrs(test)
            elif isinstance(node, ast.BoolOp):
                for value in node.values:
                    if value is child:
                        break
                    out |= reader.attrs(value)
            child, node = node, parents.get(node)
        return out

    owners: dict[str, set[str]] = {}  # class/function name -> guards of its references
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    # a class chosen from a table (``LAYER_TYPES[config.layers_block_type[i]]``): the
    # table's subscripts guard it
    chosen_by: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _dotted(node.value) in reader.dicts:
            chosen_by.setdefault(_dotted(node.value), set()).update(reader.attrs(node.slice))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in defined:
            owners.setdefault(node.id, set()).update(guarding(node))
            table = parents.get(node)
            if isinstance(table, ast.Dict) and isinstance(parents.get(table), ast.Assign):
                for target in parents[table].targets:  # type: ignore[attr-defined]
                    for name, attrs in chosen_by.items():
                        if name == _dotted(target) or reader.dicts.get(name) is reader.dicts.get(
                            _dotted(target)
                        ):
                            owners[node.id] |= attrs
    out: dict[int, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            attrs = guarding(node)
            for outer in _enclosing_defs(node, parents):
                attrs |= owners.get(outer, set())
            out.setdefault(node.lineno, set()).update(attrs)
    return out


def _enclosing_defs(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[str]:
    out = []
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            out.append(node.name)
    return out


@functools.lru_cache(maxsize=256)
def file_facts(path: str) -> FileFacts:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return FileFacts({}, {})
    reader = _Reader(tree)
    reader.read()
    reads = frozenset(a for n in ast.walk(tree) if (a := reader.direct(n)) is not None)
    return FileFacts(reader.uses, _guards(reader, tree), reads)


# -- variants -------------------------------------------------------------------------


def config_objects(model_config: Any) -> list[Any]:
    """The text config first (what decoder code reads), then the top config and nested ones."""
    out: list[Any] = []
    for config in (getattr(model_config, "hf_text_config", None), model_config.hf_config):
        if config is not None and all(config is not c for c in out):
            out.append(config)
    for config in list(out):
        for value in vars(config).values():
            nested = hasattr(value, "to_dict") and hasattr(value, "model_type")
            if nested and all(value is not c for c in out):
                out.append(value)
    return out


def _current(configs: list[Any], attr: str) -> Any:
    for config in configs:
        with contextlib.suppress(Exception):
            if attr in vars(config) or hasattr(type(config), attr):
                return getattr(config, attr)
    return _MISSING


def _default_value(configs: list[Any], attr: str) -> Any:
    """The attribute in the config class's own default (unshrunk): its per-layer kinds."""
    for config in configs:
        try:
            return getattr(type(config)(), attr)
        except Exception:
            continue
    return _MISSING


def _kinds(values: list[Any], element: type) -> list[Any]:
    out: list[Any] = []
    for v in values:
        short = element is not str or len(v) < 64 if isinstance(v, element) else False
        if isinstance(v, element) and not isinstance(v, bool) and v not in out and short:
            out.append(v)
    return out


def _per_layer(attr: str, cur: Any, use: AttrUse, configs: list[Any], n: int) -> list[Variant]:
    """One layer of each kind: the kinds in the list, in the config class's default, those
    the code compares with, and one the code names nowhere (the ``else`` branch)."""
    is_text = isinstance(cur, str)
    element: type = str if is_text else type(next((v for v in cur if v is not None), ""))
    default = _default_value(configs, attr)
    seen = list(cur)
    known = _kinds(seen + (list(default) if isinstance(default, (list, str)) else []), element)
    compared = [v for v in _kinds(use.compared, element) if not is_text or len(v) == 1]
    kinds = _kinds(known + compared, element)
    if element is str and not is_text and len(kinds) <= 1:
        kinds.append(OTHER_KIND)
    fresh = [k for k in kinds if k not in seen]
    if not fresh:
        return []
    out = []
    rest = [k for k in kinds if k not in fresh]
    order = fresh + rest
    for i in range(0, len(fresh), max(n - 1, 1)):
        chunk = order[i : i + max(n - 1, 1)] + rest[:1]
        layers = [chunk[j % len(chunk)] for j in range(n)]
        value: Any = "".join(layers) if is_text else layers
        out.append(Variant({attr: value}, f"`{attr}`: one layer of each kind"))
    return out


def _property_sources(configs: list[Any], attr: str) -> list[str]:
    """Attributes a config property is computed from (Jamba's ``layers_block_type`` from
    ``attn_layer_period``/``attn_layer_offset``): the property cannot be set, they can."""
    import inspect
    import re

    for config in configs:
        prop = getattr(type(config), attr, None)
        if isinstance(prop, property) and prop.fget is not None:
            try:
                text = inspect.getsource(prop.fget)
            except (OSError, TypeError):
                return []
            names = dict.fromkeys(re.findall(r"self\.(\w+)", text))
            return [
                n
                for n in names
                if n != attr
                and n not in _SKIP_ATTRS
                and isinstance(vars(config).get(n), int)
                and any(w in n for w in _SCHEDULE_WORDS)
            ]
    return []


def _numbers(attr: str, cur: Any, use: AttrUse, n: int) -> list[Any]:
    from prefixlint.introspect.configs import SHRINK

    values: list[Any] = []
    literals = [v for v in use.compared if isinstance(v, int) and not isinstance(v, bool)]
    if attr not in SHRINK:  # a head count or a width compared with 0 is a sanity check
        for v in literals:
            values += [v, v + 1]
    if use.schedule:
        values += [1, 2, 0, n]
    if use.none or (use.default is None and attr not in SHRINK):
        values.append(None)
    return values


def _candidates(attr: str, use: AttrUse, configs: list[Any], n: int, guard: bool) -> list[Variant]:
    if attr.startswith("$"):
        value = next(v for k, v in _SWITCHES.values() if k == attr)
        return [Variant({attr: value}, f"`{attr[1:]}={value}`")] if guard else []
    cur = _current(configs, attr)
    if cur is _MISSING:
        cur = use.default
    if isinstance(cur, (list, str)) and len(cur) == n and n > 1 and (guard or use.compared):
        if any(isinstance(getattr(type(c), attr, None), property) for c in configs):
            return _from_property(attr, configs)
        return _per_layer(attr, cur, use, configs, n)
    if isinstance(cur, bool):
        return [Variant({attr: not cur}, f"`{attr}` flipped")]
    if not guard:
        return []
    if any(isinstance(getattr(type(c), attr, None), property) for c in configs):
        return _from_property(attr, configs)
    if isinstance(cur, list) and all(isinstance(x, int) for x in cur) and "layer" in attr:
        return [Variant({attr: [] if cur else [0]}, f"`{attr}`: other layers")]
    values: list[Any] = []
    if cur is None or cur is _MISSING:
        values += [v for v in use.compared if v is not None and not isinstance(v, bool)]
        if not values and any(w in attr for w in _SIZE_WORDS):
            values.append(16)
        elif not values and use.truth:
            values.append(True)
    elif isinstance(cur, (int, float)):
        values += _numbers(attr, cur, use, n)
    elif isinstance(cur, str):
        values += [v for v in use.compared if isinstance(v, str)]
    out: list[Variant] = []
    for value in values:
        if value != cur and all(v.overrides[attr] != value for v in out):
            out.append(Variant({attr: value}, f"`{attr}` guards an unexecuted site"))
    return out


def _from_property(attr: str, configs: list[Any]) -> list[Variant]:
    out = []
    for name in _property_sources(configs, attr):
        cur = _current(configs, name)
        for value in (0, 1, 2) if "offset" in name else (1, 2):
            if value != cur:
                out.append(Variant({name: value}, f"`{name}` (computes `{attr}`)"))
    return out


def variants_for(model_config: Any, files: list[str], missing: list[str]) -> list[Variant]:
    """Variants for the attributes guarding the ``missing`` sites (``file:line``) first,
    then per-layer lists and flags read anywhere in the model's files."""
    configs = config_objects(model_config)
    n = getattr(configs[0], "num_hidden_layers", None)
    n = n if isinstance(n, int) and n > 0 else 4
    uses: dict[str, AttrUse] = {}
    guarding: list[str] = []
    for f in files:
        facts = file_facts(f)
        for attr, use in facts.uses.items():
            merged = uses.setdefault(attr, AttrUse())
            merged.compared += [v for v in use.compared if v not in merged.compared]
            merged.truth |= use.truth
            merged.numeric |= use.numeric
            merged.schedule |= use.schedule
            merged.none |= use.none
            if merged.default is _MISSING:
                merged.default = use.default
    for site in missing:
        file, _, line = site.rpartition(":")
        for attr in sorted(file_facts(file).guards.get(int(line), set())):
            if attr not in guarding:
                guarding.append(attr)
    out: list[Variant] = []
    for attr in guarding:
        out += _candidates(attr, uses.get(attr, AttrUse()), configs, n, guard=True)
    for attr in sorted(set(uses) - set(guarding)):
        for variant in _candidates(attr, uses[attr], configs, n, guard=False):
            variant.guarded = False
            out.append(variant)
    return out


@contextlib.contextmanager
def applied(
    model_config: Any, overrides: dict[str, Any], everywhere: bool = False
) -> Iterator[bool]:
    """The overrides set on the config objects that hold each attribute (the text config
    when none does; ``everywhere``: every config object, for a draft whose class reads
    another of them than the text config). Everything is restored afterwards, attributes
    a repair of the variant added included. Yields False when a value cannot be set."""
    import os

    configs = config_objects(model_config)
    saved = [(c, dict(vars(c))) for c in configs]
    environ = {k[1:]: os.environ.get(k[1:]) for k in overrides if k.startswith("$")}
    ok = True
    for attr, value in overrides.items():
        if attr.startswith("$"):
            os.environ[attr[1:]] = str(value)
            continue
        for config in [c for c in configs if attr in vars(c)] or configs[
            : None if everywhere else 1
        ]:
            try:
                setattr(config, attr, value)
            except Exception:
                # a strict config class validates on assignment; a checkpoint's
                # config.json may still carry the value (None for an optional rank)
                if isinstance(getattr(type(config), attr, None), property):
                    ok = False
                else:
                    vars(config)[attr] = value
    try:
        yield ok
    finally:
        for config, state in saved:
            vars(config).clear()
            vars(config).update(state)
        for name, old in environ.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def repaired_build(build: Callable[[Any, Any], Any], files: list[str], attempts: int = 3):
    """``build`` that first gives a variant the attributes its new path reads and the
    config lacks (``conv_dim`` once ``layer_types`` names a convolution layer)."""
    from prefixlint.introspect.configs import repair

    def run(model_config: Any, layout: Any) -> Any:
        result = build(model_config, layout)
        for _ in range(attempts):
            if result.error is None:
                break
            if repair(result.error, config_objects(model_config), files) is None:
                break
            result = build(model_config, layout)
        return result

    return run


@dataclass
class Exploration:
    builds: list[Any] = field(default_factory=list)  # the kept variants' builds
    variants: list[Variant] = field(default_factory=list)
    stopped: str = ""  # why it stopped: covered | exhausted | budget


def explore(
    cls: type | None,
    model_config: Any,
    layouts: list[Any],
    builds: list[Any],
    build: Callable[[Any, Any], Any],
    budget: float,
) -> Exploration:
    """Variants built until every site ran, none is left or ``budget`` seconds are spent."""
    result = Exploration()
    if budget <= 0 or not layouts or not any(b.error is None for b in builds):
        return result
    started = time.perf_counter()
    coverage = measure(cls, builds)
    files = own_files(cls, builds[0].recorder.external)
    build = repaired_build(build, files)
    tried: set[str] = set()
    for _ in range(3):  # a kept variant can reveal the guards of the next sites
        if not coverage["not_executed"]:
            result.stopped = "covered"
            return result
        singles = variants_for(model_config, files, coverage["not_executed"])
        kept = [v for v in result.variants if v.status == "kept"]
        pairs = _pairs(kept, singles, {v.label(): v.status for v in result.variants})
        ordered = [v for v in singles if v.guarded] + pairs + [v for v in singles if not v.guarded]
        fresh = [v for v in ordered if v.label() not in tried]
        if not fresh:
            break
        misses, before = 0, len(kept)
        for variant in fresh:
            if not variant.guarded and misses >= PATIENCE:
                break  # flags read elsewhere: stop once they stop helping
            tried.add(variant.label())
            result.variants.append(variant)
            if time.perf_counter() - started > budget:
                result.stopped = "budget"
                return result
            coverage = _try(variant, cls, model_config, layouts, builds, result, build, coverage)
            misses = 0 if variant.status == "kept" else misses + (not variant.guarded)
            if not coverage["not_executed"]:
                result.stopped = "covered"
                return result
        if sum(v.status == "kept" for v in result.variants) == before:
            break  # coverage stopped rising
    result.stopped = "exhausted"
    return result


def _pairs(kept: list[Variant], singles: list[Variant], status: dict[str, str]) -> list[Variant]:
    """A site under two guards (MLA disabled and no ``q_lora_rank``) needs both changed:
    two kept variants together, then a kept one with a few that built but added nothing."""
    tried_alone = [v for v in singles if v.guarded and status.get(v.label()) == "no new site"]
    others = [v for i, k in enumerate(kept) for v in kept[i + 1 :]] + tried_alone[:PAIRS]
    return [
        Variant({**k.overrides, **v.overrides}, f"{k.why}; {v.why}")
        for k in kept
        for v in others
        if k is not v and not set(k.overrides) & set(v.overrides)
    ][: PAIRS * max(len(kept), 1)]


def _try(variant, cls, model_config, layouts, builds, result, build, coverage) -> dict:
    with applied(model_config, variant.overrides) as ok:
        if not ok:
            variant.status = "failed: the config refuses the value"
            return coverage
        first = build(model_config, layouts[0])
        if first.error is not None:
            text = str(first.error).strip().splitlines()
            variant.status = (
                f"failed: {type(first.error).__name__}: {text[0][:120] if text else ''}"
            )
            return coverage
        after = measure(cls, [*builds, *result.builds, first])
        variant.new_sites = after["executed"] - coverage["executed"]
        if variant.new_sites <= 0:
            variant.status = "no new site"
            return coverage
        variant.status = "kept"
        first.variant = variant.label()
        result.builds.append(first)
        for layout in layouts[1:]:
            more = build(model_config, layout)
            if more.error is None:  # a layout the variant cannot build is not a finding
                more.variant = variant.label()
                result.builds.append(more)
        return after
