"""Values a model's code states it needs, read from the error it raised.

vLLM's config validators and model constructors often say exactly what a checkpoint's
config holds: ``assert config.hidden_act == "gelu"``, ``assert config.__class__.__name__
== "NewConfig"`` (a remote-code config class), ``requires a 'pooling' field in its HF
config (one of 'avg', 'cls', 'last')``, ``output_dim=6144 does not match pixel-shuffle
output 512``. A synthesised config cannot know these; the failing code names them, so
they are read from the raising line (stdlib ``ast``) or message and given, as a real
checkpoint would give them. Nothing here names a model.

These are the readers; the repairs that give what they read are in ``repairs/`` (the
build's) and ``modelconfig.py`` (vLLM's ModelConfig validators').
"""

from __future__ import annotations

import ast
import linecache
import re
import textwrap
import traceback
from typing import Any

# ``x must be True``, ``requires `x`=1``: a value the failing code names for an attribute.
_STATED_VALUE = (
    re.compile(r"requires? `?(\w+)`?\s*(?:=|==)\s*(True|False|None|-?\d+)\b"),
    re.compile(r"`?\b([a-z]\w*)`?\s+must be\s+(True|False|None|-?\d+)\b"),
)


def stated_value(error: BaseException) -> tuple[str, Any] | None:
    """``use_rope2d must be True``, ``... requires index_kpool_always_select_tail=True``,
    ``num_kv_shared_layers must be 0, got 2``: a check (a ``ValueError``, an ``assert``, a
    ``NotImplementedError``) names the value a config attribute must hold; real
    checkpoints hold it. The attribute and the value, or None."""
    if not isinstance(error, (ValueError, AssertionError, NotImplementedError)):
        return None
    for pattern in _STATED_VALUE:
        m = pattern.search(str(error))
        if m is not None:
            return m.group(1), ast.literal_eval(m.group(2))
    return None


# The key under which a demanded config class name travels with attribute demands.
CLASS_NAME = "__class__.__name__"


def validation_cause(error: BaseException) -> BaseException:
    """The exception a pydantic ``ValidationError`` wraps (vLLM's ``ModelConfig`` turns an
    ``assert`` or ``ValueError`` of its validators into one, traceback kept in the
    error's context), else ``error`` itself."""
    errors = getattr(error, "errors", None)
    if type(error).__name__ != "ValidationError" or not callable(errors):
        return error
    try:
        items = errors()
    except Exception:
        return error
    for item in items:
        inner = (item.get("ctx") or {}).get("error")
        if isinstance(inner, BaseException):
            return inner
    return error


def config_reader_frame(error: BaseException) -> tuple[str, int, Any] | None:
    """The file, line and frame of the innermost frame outside transformers' config
    classes: a missing attribute raises inside their ``__getattribute__``; the line that
    read it is the caller's (``repairs/reading.raising_frame`` is the innermost of all)."""
    frames = [
        (frame, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
        if not frame.f_code.co_filename.endswith("configuration_utils.py")
    ]
    if not frames:
        return None
    frame, line = frames[-1]
    return frame.f_code.co_filename, line, frame


def statement(filename: str, line: int, frame: Any = None) -> ast.stmt | None:
    """The innermost statement that spans ``line`` (a call written over several lines
    raises on one of its argument lines): from the raising function's source when the
    frame is known, else from ``line`` on, continuation lines joined until it parses."""
    if frame is not None:
        first = frame.f_code.co_firstlineno
        try:
            tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
        except SyntaxError:
            tree = None
        spans = [
            node
            for node in (ast.walk(tree) if tree is not None else ())
            if isinstance(node, ast.stmt)
            and node.lineno + first - 1 <= line <= (node.end_lineno or node.lineno) + first - 1
        ]
        if spans:
            return min(spans, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    text = ""
    for n in range(line, line + 8):
        text += linecache.getline(filename, n)
        try:
            tree = ast.parse(text.strip())
        except SyntaxError:
            continue
        return tree.body[0] if tree.body else None
    return None


_ALIASES: dict[str, str] = {}  # while one assertion is read: local -> config attribute


def config_attr(node: ast.AST) -> str | None:
    """``config.x`` / ``self.config.x`` / ``hf_config.x``: ``x`` (or a local the failing
    function read it into, while an assertion is read)."""
    if isinstance(node, ast.Name) and node.id in _ALIASES:
        return _ALIASES[node.id]
    if not isinstance(node, ast.Attribute):
        return None
    base = node.value
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return node.attr if name.endswith(("config", "cfg")) else None


def _class_name_of_config(node: ast.AST) -> bool:
    """``config.__class__.__name__`` or ``type(config).__name__``."""
    if not (isinstance(node, ast.Attribute) and node.attr == "__name__"):
        return False
    inner = node.value
    if isinstance(inner, ast.Attribute) and inner.attr == "__class__":
        return True
    return isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "type"


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _test_demands(test: ast.AST) -> dict[str, Any]:
    """What an assertion's test needs of the config: ``a == lit``, ``a in (lits)``,
    ``a is None``, ``not a`` and conjunctions of these."""
    out: dict[str, Any] = {}
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            out.update(_test_demands(value))
        return out
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        attr = config_attr(test.operand)
        return {attr: False} if attr else {}
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return {}
    left, op, right = test.left, test.ops[0], test.comparators[0]
    ok, value = _literal(right)
    if not ok:
        return {}
    if _class_name_of_config(left) and isinstance(op, ast.Eq) and isinstance(value, str):
        return {CLASS_NAME: value}
    attr = config_attr(left)
    if attr is None:
        return {}
    if isinstance(op, ast.Eq) or (isinstance(op, ast.Is) and value is None):
        return {attr: value}
    if isinstance(op, ast.In) and isinstance(value, (list, tuple, set, frozenset)) and value:
        ordered = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return {attr: ordered[0]}
    return {}


def assertion_demands(error: BaseException) -> dict[str, Any]:
    """The config values the failing ``assert`` statement asks for."""
    where = config_reader_frame(error)
    if not isinstance(error, AssertionError) or where is None:
        return {}
    stmt = statement(where[0], where[1], where[2])
    if not isinstance(stmt, ast.Assert):
        return {}
    # ``x = getattr(config, "x", "silu")`` ... ``assert x in ["silu", ...]``
    _ALIASES.update(_local_reads(where[0], where[2]))
    try:
        return _test_demands(stmt.test)
    finally:
        _ALIASES.clear()


def _local_reads(filename: str, frame: Any) -> dict[str, str]:
    """Locals the function assigns straight from a config attribute."""
    try:
        tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "getattr":
            if len(value.args) >= 2 and isinstance(value.args[1], ast.Constant):
                out.setdefault(target.id, str(value.args[1].value))
        elif isinstance(value, ast.Attribute) and config_attr(value):
            out.setdefault(target.id, value.attr)
    return out


_QUOTED = re.compile(r"""['"`](\w[\w.\-]*)['"`]""")


def function_source(filename: str, frame: Any) -> str:
    first = frame.f_code.co_firstlineno
    lines = []
    for n in range(first, first + 400):
        text = linecache.getline(filename, n)
        if not text or (n > first and re.match(r"\S", text) and not text.startswith("@")):
            break
        lines.append(text)
    return "".join(lines)


def choice_demands(error: BaseException) -> dict[str, Any]:
    """``requires a 'pooling' field ... (one of 'avg', 'cls', 'last')``, ``must declare
    retrieval_attention_contract as 'causal' or 'bidirectional'``: a ``ValueError`` raised
    where the code read ``getattr(config, "name", None)`` and found nothing, whose message
    names that attribute and the values it accepts: the first accepted value."""
    where = config_reader_frame(error)
    if not isinstance(error, ValueError) or where is None:
        return {}
    message = str(error)
    source = function_source(where[0], where[2])
    for name in dict.fromkeys(re.findall(r"\w+", message)):
        read = rf"getattr\(\s*[\w.]+\s*,\s*[\"']{re.escape(name)}[\"']\s*(?:,\s*None\s*)?\)"
        if not re.search(read, source):
            continue
        after = message.split(name, 1)[1]
        choices = [c for c in _QUOTED.findall(after) if c != name]
        if choices:
            return {name: choices[0]}
    return {}


def set_class_name(config: Any, name: str) -> Any:
    """``config`` as an instance of a subclass named ``name`` (a remote-code config class
    vLLM checks by name); its attributes and behaviour unchanged."""
    cls = type(config)
    if cls.__name__ != name:
        config.__class__ = type(name, (cls,), {"__module__": cls.__module__})
    return config


def apply_demands(config: Any, demands: dict[str, Any]) -> None:
    for name, value in demands.items():
        if name == CLASS_NAME:
            set_class_name(config, value)
        else:
            setattr(config, name, value)


def alias_value(error: BaseException, attr: str, config: Any) -> Any:
    """``config.intermediate_size = config.n_inner``: the failing line copies ``attr``
    (a checkpoint's own name, missing from a synthesised config of another shape) onto
    a name the config has; the two mean the same, so ``attr`` takes that value. None when
    the line is no such copy."""
    where = config_reader_frame(error)
    if where is None:
        return None
    stmt = statement(where[0], where[1], where[2])
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target = config_attr(stmt.targets[0])
    if target is None or config_attr(stmt.value) != attr:
        return None
    return getattr(config, target, None)


def raising_function_source(error: BaseException) -> list[str]:
    """The source of the function that raised ``error`` (outside transformers), as a
    one-element list of texts for ``guess_attribute``: a validator module holds many
    models' checks, and only the raising one says how this config is read."""
    where = config_reader_frame(error)
    if where is None:
        return []
    source = function_source(where[0], where[2])
    return [source] if source else []


def callee(func: ast.AST, frame: Any) -> Any:
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.insert(0, func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    found = frame.f_locals.get(func.id, frame.f_globals.get(func.id))
    for part in parts:
        found = getattr(found, part, None)
    return found


def asserted_reads(error: BaseException, came_back_none: bool = False) -> list[str]:
    """``pooling = getattr(config, "pooling", None)`` ... ``assert isinstance(pooling,
    str)``: config attributes read into the locals a failing ``assert`` tests (the
    checkpoint holds a value there; which one is for the caller to guess). With
    ``came_back_none``, only those whose local holds None in the failing frame (an
    ``assert x`` on a False flag is about its value, not a missing one)."""
    where = config_reader_frame(error)
    if not isinstance(error, AssertionError) or where is None:
        return []
    filename, line, frame = where
    stmt = statement(filename, line, frame)
    if not isinstance(stmt, ast.Assert):
        return []
    tested = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
    if came_back_none:
        tested = {name for name in tested if name in frame.f_locals}
        tested = {name for name in tested if frame.f_locals[name] is None}
    return _reads_into(tested, filename, frame)


def none_reads(error: BaseException) -> list[str]:
    """``num_experts = getattr_iter(config, names, None)`` ... ``num_experts + 1``
    (TypeError on None): config attributes read, with a None default, into the locals
    the failing statement uses that hold None."""
    where = config_reader_frame(error)
    if not isinstance(error, (TypeError, AttributeError)) or where is None:
        return []
    if "NoneType" not in str(error):
        return []
    filename, line, frame = where
    stmt = statement(filename, line, frame)
    if stmt is None:
        return []
    used = {
        n.id
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and n.id in frame.f_locals and frame.f_locals[n.id] is None
    }
    return _reads_into(used, filename, frame) if used else []


def read_names(node: ast.AST, function: ast.AST, frame: Any) -> list[str]:
    """The attribute names a ``getattr``/``getattr_iter`` argument stands for: a literal,
    a literal list, a local bound to one (the raising frame holds its value, or the
    function assigns it), or a table lookup (``CONFIG_FIELD_ALIASES["num_experts"]``,
    vLLM 0.33's alias table, through the accessor)."""
    from prefixlint.introspect.vllm_api import alias_lookup

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    if isinstance(node, ast.Name):
        held = getattr(frame, "f_locals", {}).get(node.id)
        if isinstance(held, (list, tuple)) and all(isinstance(v, str) for v in held):
            return list(held)
        for stmt in ast.walk(function):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == node.id
                and stmt.value is not node
            ):
                return read_names(stmt.value, ast.Module(body=[], type_ignores=[]), frame)
        return []
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        table = node.value.attr if isinstance(node.value, ast.Attribute) else ""
        table = node.value.id if isinstance(node.value, ast.Name) else table
        return alias_lookup(table, str(node.slice.value), getattr(frame, "f_globals", {}))
    return []


def _reads_into(names: set[str], filename: str, frame: Any) -> list[str]:
    """The config attributes the function assigns to ``names`` (``x = getattr(config,
    "x", None)``, ``getattr_iter(config, [...])``, ``config.x``): for each local, the
    first name it is read under."""
    try:
        tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
    except SyntaxError:
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id in names):
            continue
        value = node.value
        if isinstance(value, ast.Call) and "getattr" in getattr(value.func, "id", ""):
            # getattr(config, "x", None), getattr_iter(config, ["x", "y"], None),
            # getattr_iter(config, CONFIG_FIELD_ALIASES["top_k"], None) (vLLM 0.33)
            args = value.args
            read = read_names(args[1], tree, frame) if len(args) >= 2 else []
            if read and read[0] not in out:
                out.append(read[0])
        elif config_attr(value) and config_attr(value) not in out:
            out.append(config_attr(value))
    return out
