"""Which callables take a ``prefix``: a built-in catalog plus what the index finds on disk.

Names are resolved the way Python would resolve them, but by reading files: a local class or
function, else the module an import names (absolute, relative, or re-exported through a
package ``__init__``), found under the checked files' package roots or the installed vLLM.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prefixlint.static.cache import SummaryCache
from prefixlint.static.index import (
    KEYWORD_ONLY,
    ClassSummary,
    FunctionSig,
    ModuleSummary,
    Param,
    find_installed_package,
    module_name_for,
    summarize,
    summary_from_json,
    summary_to_json,
)

# vLLM's attention layers of a decoder (each registers a KV cache under its prefix).
DECODER_ATTENTION_LAYERS: frozenset[str] = frozenset(
    {
        "Attention",
        "EncoderOnlyAttention",
        "CrossAttention",
        "ChunkedLocalAttention",
        "StaticSinkAttention",
        "MLAAttention",
        "MultiHeadLatentAttentionWrapper",
    }
)

# vLLM's layer classes that take ``prefix``, used when vLLM's source cannot be read
# (prefixlint installed without vLLM) or a name cannot be resolved to a file.
BUILTIN_PREFIX_LAYERS: frozenset[str] = DECODER_ATTENTION_LAYERS | frozenset(
    {
        "LinearBase",
        "ColumnParallelLinear",
        "RowParallelLinear",
        "QKVParallelLinear",
        "QKVCrossParallelLinear",
        "MergedColumnParallelLinear",
        "MergedReplicatedLinear",
        "ReplicatedLinear",
        "VocabParallelEmbedding",
        "ParallelLMHead",
        "MMEncoderAttention",
        "FusedMoE",
        "SharedFusedMoE",
        "MambaMixer",
        "MambaMixer2",
        "ShortConv",
        "MiniMaxText01LinearAttention",
    }
)

# Callables that are layer factories: the first parameter of the function they receive
# is the full prefix of the layer it builds.
LAYER_FACTORIES: frozenset[str] = frozenset({"make_layers"})

# Placeholders that take no prefix on purpose.
PREFIXLESS_PLACEHOLDERS: frozenset[str] = frozenset({"PPMissingLayer"})

_BUILTIN_SIG = FunctionSig(
    "__init__", [Param("self", "pos", None), Param("prefix", KEYWORD_ONLY, '""')], 0
)


@dataclass(frozen=True)
class Symbol:
    module: ModuleSummary
    name: str
    cls: ClassSummary | None = None
    function: FunctionSig | None = None


class ModuleLoader:
    """Loads module summaries by dotted name from source roots, memoised per process."""

    def __init__(
        self,
        roots: Iterable[Path] = (),
        summary_cache: SummaryCache | None = None,
        vllm_root: Path | None = None,
    ) -> None:
        # root folder -> the top-level packages read from it. Only these are read: the
        # installed vLLM sits in site-packages beside torch, whose files must stay unread.
        self.roots: dict[Path, set[str]] = {}
        for r in roots:
            self.add_package_root(r)
        vllm = vllm_root or find_installed_package("vllm")
        if vllm is not None:
            self.add_root(vllm.parent, "vllm")
        self._paths: dict[str, Path | None] = {}
        self._by_path: dict[Path, ModuleSummary | None] = {}
        self._summary_cache = summary_cache
        self.touched: set[Path] = set()  # files read since the last reset (cache deps)

    @property
    def summary_cache(self) -> SummaryCache | None:
        """The on-disk summary cache this loader reads and fills (None: memory only)."""
        return self._summary_cache

    def add_root(self, root: Path, package: str) -> None:
        self.roots.setdefault(root.resolve(), set()).add(package)

    def add_package_root(self, package_dir: Path) -> None:
        """Add the top package folder ``package_dir`` (holding ``__init__.py``)."""
        self.add_root(package_dir.parent, package_dir.name)

    @property
    def vllm_available(self) -> bool:
        return any("vllm" in pkgs for pkgs in self.roots.values())

    def path_for(self, module: str) -> Path | None:
        top = module.split(".")[0]
        rel = Path(*module.split("."))
        for root, packages in self.roots.items():
            if top not in packages:
                continue
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if candidate.is_file():
                    return candidate
        return None

    def by_name(self, module: str) -> ModuleSummary | None:
        if module not in self._paths:
            self._paths[module] = self.path_for(module) if module else None
        path = self._paths[module]
        return self.by_path(path) if path is not None else None

    def by_path(self, path: Path) -> ModuleSummary | None:
        # Paths come from resolved roots (or are resolved by ``remember``): no realpath here.
        self.touched.add(path)
        if path not in self._by_path:
            cache, key = self._summary_cache, str(path)
            cached = cache.get(key) if cache is not None else None
            if cached is not None:
                summary: ModuleSummary | None = summary_from_json(cached)
            else:
                summary = summarize_file(path)
                if summary is not None and cache is not None:
                    cache.put(key, summary_to_json(summary))
            self._by_path[path] = summary
        return self._by_path[path]

    def remember(self, summary: ModuleSummary) -> None:
        self._by_path[Path(summary.path).resolve()] = summary


def summarize_file(path: Path) -> ModuleSummary | None:
    try:
        text = path.read_bytes().decode("utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    module, is_package = module_name_for(path)
    return summarize(tree, str(path), module, is_package)


class Resolver:
    """Resolves names used in one module to the classes and functions they denote."""

    def __init__(self, loader: ModuleLoader, extra_prefix_layers: Iterable[str] = ()) -> None:
        self.loader = loader
        self.extra_prefix_layers = frozenset(extra_prefix_layers)
        self._init_cache: dict[tuple[str, str], FunctionSig | None] = {}
        self._function_bodies: dict[Path, dict[str, ast.FunctionDef]] = {}

    # -- name resolution ------------------------------------------------------------------
    def resolve(self, module: ModuleSummary, name: str, depth: int = 0) -> Symbol | None:
        if depth > 12 or not name:
            return None
        head, _, rest = name.partition(".")
        if not rest:
            if head in module.classes:
                return Symbol(module, head, cls=module.classes[head])
            if head in module.functions:
                return Symbol(module, head, function=module.functions[head])
            if head in module.imports:
                target_mod, attr = module.imports[head]
                if attr is None:
                    return None  # a bare module is not callable
                return self._resolve_in_module(target_mod, attr, depth + 1)
            return None
        # ``nn.Linear`` / ``layers.linear.RowParallelLinear``: a module alias, then attributes.
        if head in module.imports:
            target_mod, attr = module.imports[head]
            base = f"{target_mod}.{attr}" if attr else target_mod
            *mods, last = f"{base}.{rest}".split(".")
            return self._resolve_in_module(".".join(mods), last, depth + 1)
        return None

    def _resolve_in_module(self, module_name: str, attr: str, depth: int) -> Symbol | None:
        target = self.loader.by_name(module_name)
        if target is None:
            # ``from pkg import submodule`` then ``submodule.X`` lands here with attr a module.
            return None
        return self.resolve(target, attr, depth)

    def qualified_name(self, module: ModuleSummary, name: str) -> str:
        """Best-effort absolute name (``torch.nn.Linear`` for ``nn.Linear``)."""
        head, _, rest = name.partition(".")
        if head in module.imports:
            target_mod, attr = module.imports[head]
            base = f"{target_mod}.{attr}" if attr else target_mod
            return f"{base}.{rest}" if rest else base
        return name

    # -- prefix signatures ----------------------------------------------------------------
    def init_signature(self, symbol: Symbol, depth: int = 0) -> FunctionSig | None:
        """The ``__init__`` a class runs, looked up along its resolvable bases."""
        if symbol.cls is None:
            return symbol.function
        key = (symbol.module.path, symbol.name)
        if key in self._init_cache:
            return self._init_cache[key]
        self._init_cache[key] = None  # cycle guard
        sig = symbol.cls.methods.get("__init__")
        if sig is None and depth < 12:
            for base in symbol.cls.bases:
                base_sym = self.resolve(symbol.module, base)
                if base_sym is not None and base_sym.cls is not None:
                    sig = self.init_signature(base_sym, depth + 1)
                    if sig is not None:
                        break
        self._init_cache[key] = sig
        return sig

    def prefix_signature(self, module: ModuleSummary, callee: str) -> FunctionSig | None:
        """The signature through which ``callee(...)`` receives ``prefix``, if it takes one."""
        short = callee.rsplit(".", 1)[-1]
        if short in PREFIXLESS_PLACEHOLDERS:
            return None
        if short in self.extra_prefix_layers or callee in self.extra_prefix_layers:
            return _BUILTIN_SIG
        symbol = self.resolve(module, callee)
        if symbol is not None:
            sig = self.init_signature(symbol)
            if sig is None or sig.param("prefix") is None:
                return None
            if symbol.cls is None and self.function_builds_module(symbol) is False:
                return None  # takes a ``prefix`` but builds no module (a name walker)
            return sig
        if short in BUILTIN_PREFIX_LAYERS and self._maybe_vllm(module, callee):
            return _BUILTIN_SIG
        return None

    def function_builds_module(self, symbol: Symbol) -> bool | None:
        """Whether a top-level function builds and returns a module, read from its body:
        False for a generator or one that returns only literals, names or non-class calls;
        None when its source cannot be read or its returns say nothing."""
        path = Path(symbol.module.path)
        if path not in self._function_bodies:
            self._function_bodies[path] = _top_level_functions(path)
        self.loader.touched.add(path)
        fn = self._function_bodies[path].get(symbol.name)
        return _returns_module(fn) if fn is not None else None

    def _maybe_vllm(self, module: ModuleSummary, callee: str) -> bool:
        head = callee.split(".")[0]
        if head not in module.imports:
            return False
        target = module.imports[head][0]
        return (
            target.startswith("vllm")
            or (module.module or "").startswith("vllm")
            or (not self.loader.vllm_available)
        )

    def class_mro(self, symbol: Symbol, depth: int = 0) -> tuple[list[Symbol], bool]:
        """The class and its resolvable bases, depth-first, and whether every base resolved."""
        if symbol.cls is None or depth > 12:
            return [], False
        out = [symbol]
        complete = True
        for base in symbol.cls.bases:
            if base in ("object", "Protocol", "Generic", "nn.Module", "torch.nn.Module", "Module"):
                continue
            base_sym = self.resolve(symbol.module, base)
            if base_sym is None or base_sym.cls is None:
                complete = False
                continue
            sub, sub_complete = self.class_mro(base_sym, depth + 1)
            out.extend(sub)
            complete = complete and sub_complete
        return out, complete

    def class_has(self, symbol: Symbol, member: str) -> bool | None:
        """True/False when a class defines ``member`` (not as a stub); None when unknowable."""
        mro, complete = self.class_mro(symbol)
        for entry in mro:
            assert entry.cls is not None
            sig = entry.cls.methods.get(member)
            if sig is not None and not sig.is_stub:
                return True
            if member in entry.cls.attributes and entry.cls.name not in PROTOCOL_ATTR_ONLY:
                return True
        return False if complete and mro else None

    def inherits(self, module: ModuleSummary, cls: ClassSummary, base_short: str) -> bool:
        """Whether ``cls`` lists ``base_short`` among its bases, directly or via resolvable ones."""
        seen: set[tuple[str, str]] = set()
        stack: list[tuple[ModuleSummary, ClassSummary]] = [(module, cls)]
        while stack:
            mod, c = stack.pop()
            if (mod.path, c.name) in seen:
                continue
            seen.add((mod.path, c.name))
            for base in c.bases:
                if base.rsplit(".", 1)[-1] == base_short:
                    return True
                sym = self.resolve(mod, base)
                if sym is not None and sym.cls is not None:
                    stack.append((sym.module, sym.cls))
        return False


# Interface classes whose annotated attributes are declarations, not implementations.
PROTOCOL_ATTR_ONLY: frozenset[str] = frozenset({"SupportsPP", "_SupportsPPType"})


def _top_level_functions(path: Path) -> dict[str, ast.FunctionDef]:
    try:
        tree = ast.parse(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _returns_module(fn: ast.FunctionDef) -> bool | None:
    """What a function's body says about returning a module (see
    ``Resolver.function_builds_module``)."""
    own = [n for n in ast.walk(fn) if not isinstance(n, ast.Lambda)]
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        return False  # a generator
    annotation = ast.unparse(fn.returns) if fn.returns is not None else ""
    if annotation.rsplit(".", 1)[-1].startswith(("Module", "nn.Module")):
        return True
    built: set[str] = set()  # names bound to a constructed class
    for n in own:
        if isinstance(n, ast.Assign) and _constructs_class(n.value):
            built |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    returns = [n.value for n in own if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return False
    for value in returns:
        if _constructs_class(value) or (isinstance(value, ast.Name) and value.id in built):
            return True
    if all(isinstance(v, (ast.Constant, ast.JoinedStr, ast.Compare, ast.BoolOp)) for v in returns):
        return False
    return None


def _constructs_class(node: ast.expr) -> bool:
    """``Layer(...)`` / ``nn.Sequential(...)``: a call of a capitalised name."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name[:1].isupper()
