"""Out-of-tree models as vLLM loads them: its general plugins, their architectures, and the
config class a plugin's model really gets.

vLLM's engine runs ``load_general_plugins()`` at start-up: every ``vllm.general_plugins``
entry point of an installed distribution is loaded and called, and each ``register()``
calls ``ModelRegistry.register_model`` (and usually ``AutoConfig.register`` or vLLM's config
registry for its own config class). The worker does the same before it resolves a target,
so a plugin's architecture is found by name. For a file target, the folder that holds its
package goes first on ``sys.path`` before that, so the entry point imports the files under
check (a checkout of the plugin); a package that is not installed at all has its entry
point read from the ``pyproject.toml`` beside it and run the same way.

Runs inside the worker process (imports vLLM and transformers lazily).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import json
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.finding import model_code

GROUP = "vllm.general_plugins"  # vLLM's DEFAULT_PLUGINS_GROUP
PLUGIN_GROUP = "plugin"  # the zoo's group of architectures registered by a plugin


@dataclass
class Registration:
    """One entry point run: what it is, where it comes from, and what it did."""

    name: str
    value: str  # "package.module:register"
    distribution: str  # "vllm-iquest-q1 0.1.1" or "source tree path/to/pyproject.toml"
    error: str = ""  # register() raised (vLLM's start-up would end there)
    site: tuple[str, int] = ("", 0)  # the line of the plugin's code that raised


@dataclass
class _State:
    general_loaded: bool = False
    registrations: list[Registration] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)  # pyproject files whose entry point ran


_STATE = _State()


# -- entry points ------------------------------------------------------------------------


def _distribution_name(entry_point: Any) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "an installed distribution"
    return f"{dist.metadata['Name']} {dist.version}"


def _error_site(error: BaseException) -> tuple[str, int]:
    """The innermost frame outside vLLM, transformers and the standard library: the
    plugin's own line."""
    best = ("", 0)
    for frame, line in traceback.walk_tb(error.__traceback__):
        file = frame.f_code.co_filename
        if model_code(file, vllm_models=False):  # the plugin's, not the vLLM model's
            best = (file, line)
    return best


def _run(name: str, value: str, distribution: str, func: Any) -> Registration:
    record = Registration(name, value, distribution)
    try:
        func()
    except Exception as e:
        record.error = f"{type(e).__name__}: {str(e).strip()[:200]}"
        record.site = _error_site(e)
    _STATE.registrations.append(record)
    return record


def load_general_plugins() -> list[Registration]:
    """vLLM's ``load_general_plugins()``: discovered and loaded by vLLM's own
    ``load_plugins_by_group`` (``VLLM_PLUGINS`` respected, an entry point that fails to
    import logged and skipped as vLLM does), each ``register()`` called once. Where vLLM
    would end its start-up on a ``register()`` that raises, the error is kept instead, so
    the plugins beside it still load. Once per process, as in vLLM."""
    if _STATE.general_loaded:
        return _STATE.registrations
    _STATE.general_loaded = True
    import vllm.plugins as vllm_plugins

    by_group = getattr(vllm_plugins, "load_plugins_by_group", None)
    if by_group is None:  # an older layout: vLLM's loader as a whole, unattributed
        vllm_plugins.load_general_plugins()
        return _STATE.registrations
    discovered = {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}
    funcs = by_group(group=getattr(vllm_plugins, "DEFAULT_PLUGINS_GROUP", GROUP))
    # vLLM's own call must not run them a second time in this process
    if hasattr(vllm_plugins, "plugins_loaded"):
        vllm_plugins.plugins_loaded = True
    for name, ep in discovered.items():
        if name not in funcs:
            continue
        _run(name, ep.value, _distribution_name(ep), funcs[name])
    return _STATE.registrations


def _pyproject_entry_points(pyproject: Path) -> dict[str, str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    table = data.get("project", {}).get("entry-points", {}).get(GROUP, {})
    return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}


def _pyproject_for(root: Path) -> Path | None:
    """The ``pyproject.toml`` of the project a package root lies in (``root`` itself, or
    ``src/``'s parent)."""
    for folder in (root, root.parent):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _package_of(spec: str | None) -> tuple[Path | None, str | None]:
    """The folder to put on ``sys.path`` and the top package of a file target."""
    if not spec or not (spec.endswith(".py") or ".py:" in spec):
        return None, None
    from prefixlint.static.index import module_name_for, package_root_for

    path = Path(spec.split(".py:")[0] + ("" if spec.endswith(".py") else ".py"))
    if not path.is_file():
        return None, None
    module, _ = module_name_for(path)
    root = package_root_for(path)
    if not module or root is None:
        return None, None
    return root, module.split(".")[0]


def prepare(spec: str | None) -> None:
    """What vLLM's start-up would have done before ``spec`` is resolved: the general plugins
    loaded, and for a file target its own package's entry point run (see the module's
    docstring)."""
    root, top = _package_of(spec)
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    load_general_plugins()
    if root is None or top is None:
        return
    installed = {
        ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group=GROUP)
    }
    if top in installed:
        return  # its distribution's entry point ran above, from these files
    pyproject = _pyproject_for(root)
    if pyproject is None or str(pyproject) in _STATE.sources:
        return
    _STATE.sources.add(str(pyproject))
    for name, value in _pyproject_entry_points(pyproject).items():
        module, _, attr = value.partition(":")
        if module.split(".")[0] != top:
            continue
        where = f"source tree {pyproject}"

        def call(module: str = module, attr: str = attr) -> None:
            func = importlib.import_module(module)
            for part in filter(None, attr.split(".")):
                func = getattr(func, part)
            func()

        _run(name, value, where, call)


def failed_registrations() -> list[Registration]:
    return [r for r in _STATE.registrations if r.error]


def registration_failure(file: str) -> Registration | None:
    """The failed registration of the package ``file`` belongs to, if any."""
    top = _top_package_of_file(file)
    for record in failed_registrations():
        if top and record.value.split(":")[0].split(".")[0] == top:
            return record
    return None


def _top_package_of_file(file: str) -> str | None:
    from prefixlint.static.index import module_name_for

    try:
        module, _ = module_name_for(Path(file))
    except OSError:
        return None
    return module.split(".")[0] if module else None


# -- architectures ---------------------------------------------------------------------------


def _entry_module(entry: Any) -> str:
    """The module a registry entry's class lives in, without importing a lazy one."""
    module = getattr(entry, "module_name", None)
    if isinstance(module, str):
        return module
    cls = getattr(entry, "model_cls", None)
    return getattr(cls, "__module__", "") or ""


def entry_location(arch: str) -> dict[str, Any]:
    """The file and class line of a registry architecture, found without importing its
    module (a lazily registered one may hang or crash on import): ``{"file", "line"}``,
    empty when unknown."""
    import importlib.util

    from vllm.model_executor.models.registry import ModelRegistry

    entry = getattr(ModelRegistry, "models", {}).get(arch)
    module = _entry_module(entry) if entry is not None else ""
    if not module:
        return {}
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return {}
    file = getattr(spec, "origin", None) or ""
    if not file.endswith(".py"):
        return {}
    name = getattr(entry, "class_name", None) or getattr(
        getattr(entry, "model_cls", None), "__name__", arch
    )
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {"file": file, "line": 1}
    m = re.search(rf"^class {re.escape(name)}\b", text, re.M)
    return {"file": file, "line": text.count("\n", 0, m.start()) + 1 if m else 1}


def plugin_architectures() -> dict[str, str]:
    """Architecture -> the distribution whose code it runs, for registry entries outside
    vLLM's own package (a plugin's, or one that replaces an in-tree class)."""
    from vllm.model_executor.models.registry import ModelRegistry

    packages = importlib.metadata.packages_distributions()
    out = {}
    for arch, entry in getattr(ModelRegistry, "models", {}).items():
        top = _entry_module(entry).split(".")[0]
        if top and top != "vllm":
            names = packages.get(top) or [f"{top} (not installed)"]
            out[arch] = names[0]
    return out


def unknown_architecture_hint() -> str:
    """What to add to "not an architecture": the plugins that failed to register."""
    failed = failed_registrations()
    if not failed:
        return ""
    said = "; ".join(f"`{r.value}` ({r.distribution}) raised {r.error}" for r in failed)
    return f" (a vLLM plugin failed to register: {said})"


# -- the plugin's config class ---------------------------------------------------------------


def _top(obj: Any) -> str:
    return (getattr(obj, "__module__", "") or "").split(".")[0]


def registered_config_classes() -> dict[str, type]:
    """model type -> config class, for the classes registered outside transformers and
    vLLM (``AutoConfig.register`` or vLLM's config registry, as a plugin's ``register()``
    does). Read through transformers' public mapping API and vLLM's table without
    importing the classes either ships."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    from prefixlint.introspect.configs import vllm_config_registry

    out: dict[str, type] = {}
    for model_type in CONFIG_MAPPING.keys():  # noqa: SIM118 (a mapping without __iter__ order)
        if model_type in CONFIG_MAPPING_NAMES:
            continue
        try:
            value = CONFIG_MAPPING[model_type]
        except Exception:
            continue
        if isinstance(value, type) and _top(value) not in ("transformers", "vllm"):
            out[model_type] = value
    registry = vllm_config_registry()
    for model_type, value in dict.items(registry) if isinstance(registry, dict) else ():
        if isinstance(value, type) and _top(value) not in ("transformers", "vllm"):
            out.setdefault(model_type, value)
    return out


def _defined_config_classes(top: str) -> dict[str, type]:
    """model type -> config class, for ``PretrainedConfig`` subclasses the package's
    imported modules define (with a ``model_type`` of their own)."""
    try:
        from transformers import PretrainedConfig
    except ImportError:
        return {}
    out: dict[str, type] = {}
    for name, module in list(sys.modules.items()):
        if name != top and not name.startswith(f"{top}."):
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and issubclass(value, PretrainedConfig)
                and value.__module__ == name
                and isinstance(value.__dict__.get("model_type"), str)
                and value.__dict__["model_type"]
            ):
                out.setdefault(value.__dict__["model_type"], value)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _referenced(cls: type, candidates: dict[str, type]) -> list[str]:
    """The model types whose config class the model's own module names (an import, an
    annotation, an ``isinstance``): the model's code says which config it reads."""
    module = sys.modules.get(cls.__module__)
    names = set(vars(module)) if module is not None else set()
    try:
        import inspect

        text = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        text = ""
    out = []
    for model_type, config_cls in candidates.items():
        name = config_cls.__name__
        if name in names or re.search(rf"\b{re.escape(name)}\b", text):
            out.append(model_type)
    return out


def _pick(arch: str, cls: type, candidates: dict[str, type]) -> str | None:
    if not candidates:
        return None
    referenced = _referenced(cls, candidates)
    if len(referenced) == 1:
        return referenced[0]
    pool = referenced or list(candidates)
    stem = _norm(re.sub(r"(For[A-Z]\w*|Model|LMHeadModel)$", "", arch))
    named = [
        mt
        for mt in pool
        if stem.startswith(_norm(candidates[mt].__name__.removesuffix("Config")))
        or _norm(mt) == stem
    ]
    if named:
        # the longest name that starts the architecture's: IQuestQ1MTP... over IQuestQ1
        return max(named, key=lambda mt: len(_norm(candidates[mt].__name__)))
    return pool[0] if len(pool) == 1 else None


class MalformedConfig(ValueError):
    """A ``config.json`` the package ships is not JSON: the user's file, reported at the
    line of the error (``checks/pfx608_engine_start.malformed_config``), never replaced by
    a guessed config."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


def _shipped_config(top: str, arch: str) -> Path | None:
    """A ``config.json`` the package ships whose ``architectures`` names ``arch``. Raises
    ``MalformedConfig`` for a ``config.json`` of the package that does not parse (whose
    architectures cannot be read: it may be this one's)."""
    module = sys.modules.get(top)
    if module is None or not getattr(module, "__path__", None) or not module.__file__:
        return None  # a loose file ships nothing beside it
    folder = Path(module.__file__).parent
    for path in sorted(folder.rglob("*.json"))[:200]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            if path.name == "config.json":
                raise MalformedConfig(path, e.lineno, f"{e.msg} (column {e.colno})") from None
            continue
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(data, dict) and arch in (data.get("architectures") or []):
            return path
    return None


def _accepted(config_cls: type, kw: dict[str, Any], depth: int = 2) -> tuple[Any, list[str]]:
    """The class built from ``kw``, or from ``kw`` less the fewest shrunk sizes its own
    validation refuses (``rotary_dim must be ... at most head_dim``: the shrunk
    ``head_dim`` under the default ``rotary_dim``), and the sizes left at their default.
    A size whose removal changes the class's complaint is followed (``depth`` deep)."""
    try:
        return config_cls(**kw), []
    except Exception as e:
        if depth == 0:
            raise
        first = e
    sizes = [k for k, v in kw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    moved = []
    for key in sizes:
        rest = {k: v for k, v in kw.items() if k != key}
        try:
            return config_cls(**rest), [key]
        except Exception as e:
            if str(e) != str(first):
                moved.append(key)
    for key in moved:
        rest = {k: v for k, v in kw.items() if k != key}
        try:
            cfg, more = _accepted(config_cls, rest, depth - 1)
        except Exception:
            continue
        return cfg, [key, *more]
    raise first


def _construct(config_cls: type, num_layers: int) -> tuple[Any, str]:
    """A small instance of the class, shrunk as every synthesised config is, and what was
    kept unshrunk: the sizes its own validation refuses shrunk, and the layer count of
    a class that derives its layer pattern from other fields and checks it against the
    count (IQuestQ1's hybrid blocks: "pattern has 88 layers, expected 4")."""
    from prefixlint.introspect import configs

    default = config_cls()
    count = getattr(default, "num_hidden_layers", None)
    counts = [num_layers] + ([count] if isinstance(count, int) and count > num_layers else [])
    first: Exception | None = None
    for n in counts:
        try:
            cfg, kept = _accepted(config_cls, configs.shrink_kwargs(default, n))
        except Exception as e:
            first = first or e
            continue
        said = [f"{', '.join(kept)} left at the class's default"] if kept else []
        if n != num_layers:
            said.append(
                f"{n} layers kept (the class refuses fewer: {type(first).__name__}: "
                f"{str(first).strip()[:120]})"
            )
        return cfg, "; ".join(said)
    assert first is not None
    raise first


def config_source(arch: str, cls: type | None, num_layers: int = 4) -> Any:
    """The ``ConfigSource`` for a plugin's architecture: synthesised from the config class
    registered for the model's model type by its package (``AutoConfig.register`` or
    vLLM's config registry), else a ``PretrainedConfig`` subclass the package defines,
    else a ``config.json`` the package ships. None for a class of vLLM's own (or a
    package that has none of these): synthesis as for any architecture."""
    from prefixlint.introspect.configs import ConfigSource

    top = _top(cls)
    if cls is None or top in ("", "vllm", "transformers", "prefixlint"):
        return None
    name = arch
    registered = {mt: c for mt, c in registered_config_classes().items() if _top(c) == top}
    chosen = _choose(arch.removesuffix("__prefixlint"), cls, registered)
    how = "registered by its package"
    if chosen is None:
        defined = _defined_config_classes(top)
        chosen = _choose(arch.removesuffix("__prefixlint"), cls, defined)
        if chosen is not None:
            # vLLM loads a config.json of this model type only once someone registers the
            # class; the build registers it, and says so
            from transformers import AutoConfig

            AutoConfig.register(chosen, defined[chosen], exist_ok=True)
            registered = defined
            how = "defined by its package, not registered by it (registered for the build)"
    if chosen is None:
        shipped = _shipped_config(top, arch.removesuffix("__prefixlint"))
        if shipped is None:
            return None
        data = json.loads(shipped.read_text(encoding="utf-8"))
        data["architectures"] = [name]
        folder = tempfile.mkdtemp(prefix="prefixlint-config-")
        Path(folder, "config.json").write_text(json.dumps(data), encoding="utf-8")
        return ConfigSource(folder, f"file {shipped} (shipped with the package)")
    config_cls = registered[chosen]
    cfg, kept = _construct(config_cls, num_layers)
    cfg.architectures = [name]
    folder = tempfile.mkdtemp(prefix="prefixlint-config-")
    cfg.save_pretrained(folder)
    where = f"{config_cls.__module__}.{config_cls.__qualname__}"
    kept = f"; {kept}" if kept else ""
    return ConfigSource(folder, f"synthesised ({chosen}: `{where}`, {how}{kept})", True)


# -- which of the package's config classes is the model's own ----------------------------------

_TYING_CALLS = ("isinstance", "cast", "get_hf_config")  # calls that name the config's class


@dataclass
class _ConfigReads:
    """What the model's code says about the config vLLM hands it
    (``vllm_config.model_config.hf_config``): the classes it ties to it (an annotation, an
    ``isinstance``, a ``cast``, ``ctx.get_hf_config(C)``) and the attributes it reads."""

    named: set[str] = field(default_factory=set)
    attrs: set[str] = field(default_factory=set)


def _is_hf_config(node: ast.AST, holders: set[str]) -> bool:
    """``...hf_config``, ``ctx.get_hf_config(...)``, ``cast(C, ...hf_config)``, or a name
    (or ``self.`` attribute) assigned one of those."""
    if isinstance(node, ast.Attribute) and node.attr == "hf_config":
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "get_hf_config":
            return True
        if name == "cast" and len(node.args) == 2:
            return _is_hf_config(node.args[1], holders)
    return _holder_key(node) in holders


def _holder_key(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}" if node.value.id == "self" else ""
    return ""


def _class_names(node: ast.AST | None) -> set[str]:
    """The class names an annotation or ``isinstance``'s second argument says
    (``C``, ``mod.C``, ``(C, D)``, ``"C"``, ``C | None``)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _class_names(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return set()
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _read_function(func: ast.AST, self_holders: set[str], reads: _ConfigReads) -> None:
    """One function's ties and reads; ``self.x`` holders are shared by the module's
    methods, plain names only inside the function that assigns them."""
    holders = set(self_holders)
    nodes = sorted(
        (n for n in ast.walk(func) if hasattr(n, "lineno")),
        key=lambda n: (n.lineno, n.col_offset),  # type: ignore[attr-defined]
    )
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if not _is_hf_config(node.value, holders):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                key = _holder_key(target)
                if key:
                    holders.add(key)
                    if key.startswith("self."):
                        self_holders.add(key)
            if isinstance(node, ast.AnnAssign):
                reads.named |= _class_names(node.annotation)
        elif isinstance(node, ast.Call):
            func_name = getattr(node.func, "attr", None) or getattr(node.func, "id", "")
            if func_name not in _TYING_CALLS or not node.args:
                continue
            if func_name == "isinstance" and len(node.args) == 2:
                if _is_hf_config(node.args[0], holders):
                    reads.named |= _class_names(node.args[1])
            elif func_name == "get_hf_config" or (
                func_name == "cast" and len(node.args) == 2 and _is_hf_config(node.args[1], holders)
            ):
                reads.named |= _class_names(node.args[0])
        elif (
            isinstance(node, ast.Attribute)
            and _holder_key(node.value) in holders
            and not isinstance(node.ctx, ast.Store)
        ):
            reads.attrs.add(node.attr)


def _config_reads(cls: type) -> _ConfigReads:
    """What the modules of ``cls`` and of its package's base classes say of the config."""
    reads = _ConfigReads()
    top = _top(cls)
    modules = {c.__module__ for c in cls.__mro__ if _top(c) == top}
    for name in sorted(modules):
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) or ""
        try:
            tree = ast.parse(Path(file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        self_holders: set[str] = set()
        functions = [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for _ in range(2):  # a ``self.config`` assigned in a method read before it
            for func in functions:
                _read_function(func, self_holders, reads)
    return reads


@functools.lru_cache(maxsize=256)
def _default(config_cls: type) -> Any:
    """The class's default instance, once (read only: compared, never given to a build)."""
    try:
        return config_cls()
    except Exception:
        return None


def _lacking(config_cls: type, attrs: set[str]) -> int | None:
    """How many of ``attrs`` the class's default instance lacks; None when it cannot be
    built without arguments (unknown)."""
    default = _default(config_cls)
    if default is None:
        return None
    missing = 0
    for attr in attrs:
        try:
            getattr(default, attr)
        except Exception:  # AttributeError, or a property that needs more
            missing += 1
    return missing


def _holds(outer: type, inner: type) -> bool:
    """``outer``'s default instance (or its ``sub_configs``) holds an ``inner``: ``inner``
    is a tower's config inside the model's."""
    subs = getattr(outer, "sub_configs", None) or {}
    if isinstance(subs, dict) and any(v is inner for v in subs.values()):
        return True
    default = _default(outer)
    return default is not None and any(isinstance(v, inner) for v in vars(default).values())


def _shipped_model_type(top: str, arch: str) -> str | None:
    shipped = _shipped_config(top, arch)
    try:
        data = json.loads(shipped.read_text(encoding="utf-8")) if shipped else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    return model_type if isinstance(model_type, str) else None


def _choose(arch: str, cls: type, candidates: dict[str, type]) -> str | None:
    """The model's own config class among several its package registers or defines (a
    tower's config beside the model's). The evidence, strongest first: the model type of a
    ``config.json`` the package ships for ``arch``; the class the model's code ties to
    ``hf_config``; the classes that have every attribute the code reads on it; then not a
    tower's config held inside another candidate; then ``_pick``'s names."""
    if len(candidates) < 2:
        return _pick(arch, cls, candidates)
    shipped = _shipped_model_type(_top(cls), arch)
    if shipped in candidates:
        return shipped
    reads = _config_reads(cls)
    named = [mt for mt, c in candidates.items() if c.__name__ in reads.named]
    if len(named) == 1:
        return named[0]
    pool = named or list(candidates)
    if reads.attrs:
        lacking = {mt: _lacking(candidates[mt], reads.attrs) for mt in pool}
        known = [n for n in lacking.values() if n is not None]
        if known:
            fewest = min(known)
            pool = [mt for mt in pool if lacking[mt] in (fewest, None)]
    outer = [
        mt
        for mt in pool
        if not any(o != mt and _holds(candidates[o], candidates[mt]) for o in pool)
    ]
    pool = outer or pool
    if len(pool) == 1:
        return pool[0]
    return _pick(arch, cls, {mt: candidates[mt] for mt in pool})
