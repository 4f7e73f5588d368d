"""Values a model's code states it needs, read from the error it raised.

vLLM's config validators and model constructors often say exactly what a checkpoint's
config holds: ``assert config.hidden_act == "gelu"``, ``assert config.__class__.__name__
== "NewConfig"`` (a remote-code config class), ``requires a 'pooling' field in its HF
config (one of 'avg', 'cls', 'last')``, ``output_dim=6144 does not match pixel-shuffle
output 512``. A synthesised config cannot know these; the failing code names them, so
they are read from the raising line (stdlib ``ast``) or message and given, as a real
checkpoint would give them. Nothing here names a model.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import re
import textwrap
import traceback
from typing import Any

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


def _raising_frame(error: BaseException) -> tuple[str, int, Any] | None:
    # the innermost frame outside transformers' config classes (a missing attribute
    # raises inside their ``__getattribute__``; the line that read it is the caller's)
    frames = [
        (frame, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
        if not frame.f_code.co_filename.endswith("configuration_utils.py")
    ]
    if not frames:
        return None
    frame, line = frames[-1]
    return frame.f_code.co_filename, line, frame


def _statement(filename: str, line: int, frame: Any = None) -> ast.stmt | None:
    """The innermost statement that spans ``line`` (a call written over several lines
    raises on one of its argument lines): from the raising function's source when the
    frame is known, else from ``line`` on, continuation lines joined until it parses."""
    if frame is not None:
        first = frame.f_code.co_firstlineno
        try:
            tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
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


def _config_attr(node: ast.AST) -> str | None:
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
        attr = _config_attr(test.operand)
        return {attr: False} if attr else {}
    attr = _config_attr(test)
    if attr is not None:  # ``assert config.mla_use_nope``: a flag the model needs on
        return {attr: True}
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return {}
    left, op, right = test.left, test.ops[0], test.comparators[0]
    ok, value = _literal(right)
    if not ok:
        return {}
    if _class_name_of_config(left) and isinstance(op, ast.Eq) and isinstance(value, str):
        return {CLASS_NAME: value}
    attr = _config_attr(left)
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
    where = _raising_frame(error)
    if not isinstance(error, AssertionError) or where is None:
        return {}
    stmt = _statement(where[0], where[1], where[2])
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
        tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
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
        elif isinstance(value, ast.Attribute) and _config_attr(value):
            out.setdefault(target.id, value.attr)
    return out


_QUOTED = re.compile(r"""['"`](\w[\w.\-]*)['"`]""")


def _function_source(filename: str, frame: Any) -> str:
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
    where = _raising_frame(error)
    if not isinstance(error, ValueError) or where is None:
        return {}
    message = str(error)
    source = _function_source(where[0], where[2])
    for name in dict.fromkeys(re.findall(r"\w+", message)):
        read = rf"getattr\(\s*[\w.]+\s*,\s*[\"']{re.escape(name)}[\"']\s*(?:,\s*None\s*)?\)"
        if not re.search(read, source):
            continue
        after = message.split(name, 1)[1]
        choices = [c for c in _QUOTED.findall(after) if c != name]
        if choices:
            return {name: choices[0]}
    return {}


_STATED = re.compile(r"\b([a-z]\w*)\s*[=(]\s*(-?\d+)\b")
_NUMBER = re.compile(r"(?<![\w.=(])(-?\d+)(?![\w.])")


def mismatch_demands(error: BaseException, configs: list[Any]) -> dict[str, Any]:
    """``output_dim=6144 does not match pixel-shuffle output 512``: a ``ValueError`` that
    names a config attribute with its current value and one other number, the value the
    model derived from the rest of the config: the attribute takes that number."""
    if not isinstance(error, ValueError):
        return {}
    message = str(error)
    if not re.search(r"match|must (?:be|equal)|expected|inconsistent", message):
        return {}
    for name, stated in _STATED.findall(message):
        others = {int(n) for n in _NUMBER.findall(message)} - {int(stated)}
        if len(others) != 1:
            continue
        for config in configs:
            current = vars(config).get(name)
            if isinstance(current, int) and current == int(stated):
                return {name: others.pop()}
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
    where = _raising_frame(error)
    if where is None:
        return None
    stmt = _statement(where[0], where[1], where[2])
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target = _config_attr(stmt.targets[0])
    if target is None or _config_attr(stmt.value) != attr:
        return None
    return getattr(config, target, None)


def raising_function_source(error: BaseException) -> list[str]:
    """The source of the function that raised ``error`` (outside transformers), as a
    one-element list of texts for ``guess_attribute``: a validator module holds many
    models' checks, and only the raising one says how this config is read."""
    where = _raising_frame(error)
    if where is None:
        return []
    source = _function_source(where[0], where[2])
    return [source] if source else []


def annotated_default(error: BaseException, attr: str) -> tuple[bool, Any]:
    """``def __init__(self, config: Qwen3OmniMoeAudioEncoderConfig)`` reading
    ``config.n_window_infer`` from a stand-in sub-config: the code names the config class
    it expects, so the attribute takes that class's default (shrunk like the rest where
    it is a size). ``(False, None)`` when the raising function annotates no such class."""
    where = _raising_frame(error)
    if where is None:
        return False, None
    filename, _, frame = where
    try:
        tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
    except SyntaxError:
        return False, None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False, None
    for arg in [*func.args.args, *func.args.kwonlyargs]:
        holder = frame.f_locals.get(arg.arg)
        if arg.annotation is None or holder is None or hasattr(holder, attr):
            continue
        cls = _resolve(arg.annotation, frame.f_globals)
        if cls is None:
            continue
        try:
            default = cls()
            value = getattr(default, attr)
        except Exception:
            continue
        from prefixlint.introspect.configs import shrink_kwargs

        with contextlib.suppress(Exception):
            value = shrink_kwargs(default).get(attr, value)
        return True, value
    return False, None


def _resolve(annotation: ast.AST, namespace: dict[str, Any]) -> type | None:
    """The config class an annotation names (``X``, ``mod.X``, ``X | None``)."""
    if isinstance(annotation, ast.BinOp):
        return _resolve(annotation.left, namespace) or _resolve(annotation.right, namespace)
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        with contextlib.suppress(SyntaxError):
            return _resolve(ast.parse(annotation.value, mode="eval").body, namespace)
        return None
    parts: list[str] = []
    node = annotation
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    found: Any = namespace.get(node.id)
    for part in parts:
        found = getattr(found, part, None)
    if isinstance(found, type) and found.__name__.endswith("Config") and hasattr(found, "to_dict"):
        return found
    return None


_BINDING = re.compile(r"unexpected keyword argument|missing \d+ required")


def fit_unpacked(error: BaseException) -> str | None:
    """``Head(**config.head_config)`` with a stand-in sub-config: the callee's signature
    says which keys the checkpoint's dict holds. Keys it does not take are dropped,
    parameters it requires without a default are guessed by name; returns the keys
    changed, or None."""
    where = _raising_frame(error)
    if not isinstance(error, TypeError) or where is None or not _BINDING.search(str(error)):
        return None
    frame = where[2]
    stmt = _statement(where[0], where[1], where[2])
    for node in ast.walk(stmt) if stmt is not None else ():
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            mapping = frame.f_locals.get(getattr(kw.value, "id", ""))
            if kw.arg is None and hasattr(mapping, "to_dict") and hasattr(mapping, "keys"):
                added, dropped = _fit_to(mapping, _callee(node.func, frame))
                if added or dropped:
                    return ", ".join([*added, *([f"{len(dropped)} keys dropped"] * bool(dropped))])
    return None


def _callee(func: ast.AST, frame: Any) -> Any:
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


def _fit_to(mapping: Any, callee: Any) -> tuple[list[str], list[str]]:
    import inspect

    from prefixlint.introspect.configs import guess_attribute

    try:
        params = inspect.signature(callee).parameters
    except (TypeError, ValueError):
        return [], []
    kinds = {p.kind for p in params.values()}
    added: list[str] = []
    dropped: list[str] = []
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        for key in list(mapping.keys()):
            if key not in params and key in vars(mapping):
                delattr(mapping, key)
                dropped.append(key)
    for name, param in params.items():
        required = param.default is inspect.Parameter.empty and param.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in list(mapping.keys()):
            value = guess_attribute(name, mapping)
            if value is None:
                value = _by_annotation(name, param.annotation)
            if value is not None:
                setattr(mapping, name, value)
                added.append(name)
    return added, dropped


def _by_annotation(name: str, annotation: Any) -> Any:
    """A small value of a parameter's declared type: a count of layers, else a width that
    every head count of the grid divides."""
    if annotation in (int, "int"):
        return 2 if "layer" in name.lower() else 128
    if annotation in (bool, "bool"):
        return False
    if annotation in (float, "float"):
        return 0.0
    return None


_MUST_BE = re.compile(r"`?\b([a-z]\w*)`?\s+must be\s+(True|False|-?\d+)\b")


def must_be(error: BaseException, configs: list[Any]) -> str | None:
    """``use_rope2d must be True``: the model names the value a config attribute must
    hold (real checkpoints hold it); set it where the config has another, once."""
    m = _MUST_BE.search(str(error))
    if m is None or not isinstance(error, (ValueError, AssertionError, NotImplementedError)):
        return None
    attr, value = m.group(1), ast.literal_eval(m.group(2))
    for config in configs:
        if attr in vars(config) and vars(config)[attr] != value:
            setattr(config, attr, value)
            return attr
    return None


def callee_default(error: BaseException, attr: str) -> tuple[bool, Any]:
    """``Encoder(ls_init_value=config.ls_init_value)``: the attribute is passed straight
    to a parameter with a default (``ls_init_value: float | None = None``) of a callee
    the model's own module defines; a checkpoint that omits it means that default.
    ``(False, None)`` when the line is no such call."""
    import inspect

    where = _raising_frame(error)
    if where is None:
        return False, None
    stmt = _statement(where[0], where[1], where[2])
    for node in ast.walk(stmt) if stmt is not None else ():
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg is None or _config_attr(kw.value) != attr:
                continue
            callee = _callee(node.func, where[2])
            if getattr(callee, "__module__", None) != where[2].f_globals.get("__name__"):
                # only the model's own declaration says what an omitted value means
                # (a shared layer's ``bias=True`` default says nothing of the config)
                continue
            try:
                param = inspect.signature(callee).parameters.get(kw.arg)
            except (TypeError, ValueError):
                continue
            if param is not None and param.default is not inspect.Parameter.empty:
                return True, param.default
    return False, None


_SAFE_NODES = (
    ast.Expression, ast.Attribute, ast.Name, ast.Load, ast.BinOp, ast.Constant,
    ast.FloorDiv, ast.Div, ast.Mult, ast.Add, ast.Sub, ast.Mod, ast.Pow,
)  # fmt: skip


def none_source(error: BaseException) -> tuple[str, Any] | None:
    """``self.head_dim = getattr(config, "head_dim", hidden // heads)`` then
    ``self.head_dim ** -0.5``: a value used on a failing line (the innermost frame that
    has one: torch raises for ``nn.Linear(h, self.classify_num)``) was read from a config
    attribute that holds None. Returns that attribute and the fallback the code itself
    spells (evaluated in the frame when it is plain arithmetic on names), else None for
    the value; None when no frame uses such a read."""
    if not isinstance(error, TypeError) or "NoneType" not in str(error):
        return None
    frames = list(traceback.walk_tb(error.__traceback__))
    for frame, line in reversed(frames[-6:]):
        found = _none_read(frame.f_code.co_filename, line, frame)
        if found is not None:
            return found
    return None


def _none_read(filename: str, line: int, frame: Any) -> tuple[str, Any] | None:
    try:
        tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
    except SyntaxError:
        return None
    reads = {}  # target source ("self.head_dim") -> (attribute, fallback expression)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = node.value
            call = value if isinstance(value, ast.Call) else None
            if call is not None and getattr(call.func, "id", "") == "getattr":
                args = call.args
                if len(args) >= 2 and isinstance(args[1], ast.Constant):
                    fallback = args[2] if len(args) > 2 else None
                    reads[ast.unparse(node.targets[0])] = (str(args[1].value), fallback)
            elif _config_attr(value):
                reads[ast.unparse(node.targets[0])] = (_config_attr(value), None)
    stmt = _statement(filename, line, frame)
    used = {ast.unparse(n) for n in ast.walk(stmt)} if stmt is not None else set()
    for target, (attr, fallback) in reads.items():
        if target not in used or not _is_none(target, frame):
            continue
        value = None
        if fallback is not None and all(
            isinstance(n, _SAFE_NODES) for n in ast.walk(ast.Expression(fallback))
        ):
            with contextlib.suppress(Exception):
                code = compile(ast.Expression(fallback), "<fallback>", "eval")
                value = eval(code, dict(frame.f_globals), dict(frame.f_locals))
        return attr, value
    return None


def _is_none(target: str, frame: Any) -> bool:
    """``self.x`` / ``x`` holds None in the frame."""
    head, _, rest = target.partition(".")
    if head not in frame.f_locals:
        return False
    value = frame.f_locals[head]
    for part in rest.split(".") if rest else []:
        value = getattr(value, part, _MISSING_VALUE)
    return value is None


_MISSING_VALUE = object()


_FLOAT_SIZE = re.compile(r"float.*(?:int|size)|(?:int|size).*float", re.S)


def integral_sizes(error: BaseException, configs: list[Any]) -> str | None:
    """``empty(): ... must be tuple of ints, but got float``: a size computed from a
    config value that is a whole float (a guessed ``downsample_factor = 1.0``) where the
    checkpoint writes an int. Attributes read on the failing frames' lines that hold a
    whole float become ints; returns their names."""
    if not isinstance(error, TypeError) or not _FLOAT_SIZE.search(str(error)):
        return None
    words: set[str] = set()
    for frame, line in traceback.walk_tb(error.__traceback__):
        filename = frame.f_code.co_filename
        words.update(re.findall(r"\w+", linecache.getline(filename, line)))
        if "/models/" in filename:  # the whole call a multi-line statement makes
            stmt = _statement(filename, line, frame)
            words.update(re.findall(r"\w+", ast.unparse(stmt) if stmt is not None else ""))
    changed = []
    for config in configs:
        for name, value in list(vars(config).items()):
            if name in words and isinstance(value, float) and value.is_integer() and value > 0:
                setattr(config, name, int(value))
                changed.append(name)
    return ", ".join(changed) or None


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


def asserted_reads(error: BaseException) -> list[str]:
    """``pooling = getattr(config, "pooling", None)`` ... ``assert isinstance(pooling,
    str)``: config attributes read into the locals a failing ``assert`` tests (the
    checkpoint holds a value there; which one is for the caller to guess)."""
    where = _raising_frame(error)
    if not isinstance(error, AssertionError) or where is None:
        return []
    filename, line, frame = where
    stmt = _statement(filename, line, frame)
    if not isinstance(stmt, ast.Assert):
        return []
    tested = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
    return _reads_into(tested, filename, frame)


def none_reads(error: BaseException) -> list[str]:
    """``num_experts = getattr_iter(config, names, None)`` ... ``num_experts + 1``
    (TypeError on None): config attributes read, with a None default, into the locals
    the failing statement uses that hold None."""
    where = _raising_frame(error)
    if not isinstance(error, (TypeError, AttributeError)) or where is None:
        return []
    if "NoneType" not in str(error):
        return []
    filename, line, frame = where
    stmt = _statement(filename, line, frame)
    if stmt is None:
        return []
    used = {
        n.id
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and n.id in frame.f_locals and frame.f_locals[n.id] is None
    }
    return _reads_into(used, filename, frame) if used else []


def _reads_into(names: set[str], filename: str, frame: Any) -> list[str]:
    """The config attributes the function assigns to ``names`` (``x = getattr(config,
    "x", None)``, ``getattr_iter(config, [...])``, ``config.x``): for each local, the
    first name it is read under."""
    try:
        tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
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
        elif _config_attr(value) and _config_attr(value) not in out:
            out.append(_config_attr(value))
    return out


def compared_model_type(error: BaseException) -> tuple[Any, str] | None:
    """``model_type = config.model_type`` / ``if model_type == "siglip2_navit": ...`` /
    ``raise ValueError("Unsupported ...")``: the raising function dispatches on a
    config's model type and the (stand-in) config has none it knows. Returns that config
    object and the first model type the code compares with, or None."""
    where = _raising_frame(error)
    if not isinstance(error, (ValueError, NotImplementedError)) or where is None:
        return None
    filename, _, frame = where
    try:
        tree = ast.parse(textwrap.dedent(_function_source(filename, frame)))
    except SyntaxError:
        return None
    holders = {}  # local name or expression -> the name of the config it was read from
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "model_type":
                holders[ast.unparse(node.targets[0])] = ast.unparse(value.value)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
            continue
        left, right = node.left, node.comparators[0]
        if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
            continue
        source = ast.unparse(left)
        owner = holders.get(source)
        if owner is None and isinstance(left, ast.Attribute) and left.attr == "model_type":
            owner = ast.unparse(left.value)
        head, _, rest = (owner or "").partition(".")
        if not owner or head not in frame.f_locals:
            continue
        obj = frame.f_locals[head]
        for part in rest.split(".") if rest else []:
            obj = getattr(obj, part, None)
        if hasattr(obj, "to_dict") and getattr(obj, "model_type", None) != right.value:
            return obj, right.value
    return None
