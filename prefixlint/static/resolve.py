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
    module_name_for,
    summarize,
    summary_from_json,
    summary_to_json,
)
from prefixlint.static.vllm_source import VllmSource, find_vllm, in_scope, is_vllm

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
    """Loads module summaries by dotted name, memoised per process: from the checked
    files' package roots (every module), and from vLLM (``vllm_source``: the modules of
    ``VLLM_SCOPE``, from the installed package or, without one, a shipped summary)."""

    def __init__(
        self,
        roots: Iterable[Path] = (),
        summary_cache: SummaryCache | None = None,
        vllm_root: Path | None = None,
        vllm: VllmSource | None = None,
    ) -> None:
        # root folder -> the top-level packages read from it. Only these are read: a
        # package beside them in site-packages (torch) stays unread.
        self.roots: dict[Path, set[str]] = {}
        for r in roots:
            self.add_package_root(r)
        self.vllm: VllmSource | None = vllm if vllm is not None else find_vllm(vllm_root)
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
        """vLLM's code can be read: installed, or a shipped summary."""
        return self.vllm is not None

    def path_for(self, module: str) -> Path | None:
        top = module.split(".")[0]
        rel = Path(*module.split("."))
        for root, packages in self.roots.items():
            if top not in packages:
                continue
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if candidate.is_file():
                    return candidate
        if top == "vllm" and self.vllm is not None:
            return self.vllm.path_for(module)
        return None

    def by_name(self, module: str) -> ModuleSummary | None:
        if module not in self._paths:
            self._paths[module] = self.path_for(module) if module else None
        path = self._paths[module]
        if path is not None:
            return self.by_path(path)
        if module.startswith("vllm.") and self.vllm is not None and in_scope(module):
            return self.vllm.summary(module)  # not on disk: the shipped summary's
        return None

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
        self._vllm_layers: dict[str, Symbol | None] = {}

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
        fallback = self.vllm_layer(module, callee)
        if fallback is not None:  # an import of another vLLM release: vLLM's layer of that name
            sig = self.init_signature(fallback)
            return sig if sig is not None and sig.param("prefix") is not None else None
        return None

    def vllm_layer(self, module: ModuleSummary, callee: str) -> Symbol | None:
        """The vLLM layer a name denotes when its import cannot be followed in the vLLM
        being read (a path of another release), by its name among vLLM's layers."""
        head = callee.split(".")[0]
        source = self.loader.vllm
        if source is None or head not in module.imports or not self._maybe_vllm(module, callee):
            return None
        short = callee.rsplit(".", 1)[-1]
        if short.startswith("_"):
            return None
        if short not in self._vllm_layers:
            found = None
            for name in source.defining(LAYERS_PACKAGE, short):
                summary = self.loader.by_name(name)
                if summary is None:
                    continue
                if short in summary.classes:
                    found = Symbol(summary, short, cls=summary.classes[short])
                elif short in summary.functions:
                    found = Symbol(summary, short, function=summary.functions[short])
                if found is not None:
                    break
            self._vllm_layers[short] = found
        return self._vllm_layers[short]

    def unresolved_vllm(self, module: ModuleSummary, callee: str) -> str | None:
        """``callee``'s qualified name when it is imported from vLLM and the vLLM being
        read defines nothing of that name (an import of another release): what a rule
        cannot decide about. None when it resolves, or is not vLLM's."""
        head = callee.split(".")[0]
        if head not in module.imports or not is_vllm(module.imports[head][0]):
            return None
        if self.resolve(module, callee) is not None or self.vllm_layer(module, callee):
            return None
        if self.loader.vllm is None:
            return self.qualified_name(module, callee)
        qualified = self.qualified_name(module, callee)
        target = qualified.rsplit(".", 1)[0]
        return qualified if in_scope(target) or target == "vllm" else None

    def function_builds_module(self, symbol: Symbol) -> bool | None:
        """Whether a top-level function builds and returns a module, read from its body
        when it was summarised (``index.returns_module``)."""
        return symbol.function.returns_module if symbol.function is not None else None

    def imported_from_elsewhere(self, module: ModuleSummary, callee: str) -> bool:
        """``callee`` is imported from a package that is neither vLLM nor the file's own
        (``diffusers``' ``Attention``, transformers' layers): a name shared with a vLLM layer
        says nothing about what it builds."""
        head = callee.split(".")[0]
        if head not in module.imports:
            return False
        top = module.imports[head][0].split(".")[0]
        own = (module.module or "").split(".")[0]
        return bool(top) and top != "vllm" and top != own

    def _maybe_vllm(self, module: ModuleSummary, callee: str) -> bool:
        head = callee.split(".")[0]
        if head not in module.imports:
            return False
        target = module.imports[head][0]
        return is_vllm(target) or is_vllm(module.module or "")

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

    def unreadable_bases(self, symbol: Symbol, depth: int = 0) -> list[str]:
        """The bases along the class's MRO that cannot be read (``module.Name``)."""
        if symbol.cls is None or depth > 12:
            return []
        out: list[str] = []
        for base in symbol.cls.bases:
            if base in ("object", "Protocol", "Generic", "nn.Module", "torch.nn.Module", "Module"):
                continue
            base_sym = self.resolve(symbol.module, base)
            if base_sym is None or base_sym.cls is None:
                out.append(self.qualified_name(symbol.module, base))
            else:
                out += self.unreadable_bases(base_sym, depth + 1)
        return list(dict.fromkeys(out))

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


# Interface classes whose annotated attributes are declarations, not implementations
# (``SupportsLoRA.packed_modules_mapping = {}`` is an empty default, no table).
PROTOCOL_ATTR_ONLY: frozenset[str] = frozenset(
    {"SupportsPP", "_SupportsPPType", "SupportsLoRA", "_SupportsLoRAType"}
)


LAYERS_PACKAGE = "vllm.model_executor.layers"
