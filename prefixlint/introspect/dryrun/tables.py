"""What a model's own tables say its checkpoint holds: the ``(fused, checkpoint, shard)``
entries of the stacked-params tables in its files, the stacked entries of its
``hf_to_vllm_mapper`` (and of the classes built inside it), ``packed_modules_mapping``.
The self-derived layout (``selflayout.py``) derives a checkpoint from them; the
checkpoint dry-run asks them whether a name a loader refused is one the model declares
(``weights.declared_refusals``); PFX606 and the LoRA dry-run read them too."""

from __future__ import annotations

import ast
import functools
from typing import Any

from torch import nn

from prefixlint.introspect.dryrun.sites import source_file
from prefixlint.introspect.finding import model_code
from prefixlint.static.stacked import mapper_rows, stacked_leaf, stacked_rows  # PFX407's own

_QKV = {"q": 0, "k": 1, "v": 2}


def model_files(model: nn.Module, cls: type | None) -> list[str]:
    out = []
    for klass in {type(m) for m in model.modules()} | ({cls} if cls else set()):
        for base in getattr(klass, "__mro__", ()):
            f = source_file(base)
            if f and f not in out and model_code(f):
                out.append(f)
    return out


@functools.lru_cache(maxsize=256)
def file_triples(file: str) -> tuple[tuple[str, str, Any], ...]:
    """``(str, str, shard)`` tuples in tables (a list or tuple of at least two of them) in
    ``file``: the stacked-params entries a ``load_weights`` loops over."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    return stacked_rows(tree)


def fused_kind(module: nn.Module) -> str | None:
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear

    sizes = getattr(module, "output_sizes", None)
    if isinstance(module, QKVParallelLinear):
        return "qkv"
    if isinstance(module, MergedColumnParallelLinear) and isinstance(sizes, (list, tuple)):
        return "merged" if len(sizes) >= 2 else None
    return None


def _shard_index(kind: str, shard: Any, count: int) -> int | None:
    if kind == "qkv":
        return _QKV.get(shard) if isinstance(shard, str) else None
    if isinstance(shard, int) and 0 <= shard < count:
        return shard
    return None


def shard_sources(model: nn.Module, cls: type | None) -> dict[str, list[tuple[str, int]]]:
    """Fused module leaf -> [(checkpoint leaf, shard index)], from the stacked-params
    tables of the model's files that fit the modules built (a fused module of that leaf
    exists, the shard ids are the ones its weight loader takes), else from
    ``packed_modules_mapping`` (QKV parts are q, k, v; merged parts in order)."""
    fused = {}
    whole = declared_whole(model, cls)
    for path, module in model.named_modules():
        kind = fused_kind(module)
        leaf = path.rsplit(".", 1)[-1]
        if kind is not None and leaf not in whole:
            fused.setdefault(leaf, (kind, len(module.output_sizes)))
    out: dict[str, list[tuple[str, int]]] = {}
    for file in model_files(model, cls):
        for leaf, part, shard in file_triples(file):
            if leaf not in fused or part == leaf:
                continue
            index = _shard_index(*fused[leaf][:1], shard, fused[leaf][1])
            if index is not None and (part, index) not in out.get(leaf, []):
                out.setdefault(leaf, []).append((part, index))
    for part, target in _stacked_entries(model, cls):  # mappers' (checkpoint -> fused, shard)
        if not (isinstance(target, tuple) and len(target) == 2 and isinstance(part, str)):
            continue
        leaf, shard, part = stacked_leaf(str(target[0])), target[1], stacked_leaf(part)
        if leaf in fused:
            index = _shard_index(fused[leaf][0], shard, fused[leaf][1])
            if index is not None and (part, index) not in out.get(leaf, []):
                out.setdefault(leaf, []).append((part, index))
    packed = packed_table(model, cls)
    for leaf, sources in out.items():
        out[leaf] = _one_layout(sources, packed.get(leaf))
    for leaf, (_, count) in fused.items():
        parts = packed.get(leaf)
        if leaf in out or not isinstance(parts, (list, tuple)) or len(parts) != count:
            continue
        if list(parts) == [leaf]:
            continue
        out[leaf] = [(p, i) for i, p in enumerate(parts)]
    return out


def _one_layout(sources: list[tuple[str, int]], listed: Any) -> list[tuple[str, int]]:
    """One checkpoint's parts of a fused leaf. The tables of a model's files are read by
    leaf, so tables for other loaders of the same leaf add alternatives: Voxtral's file
    stacks its causal audio encoder's ``.mlp.fc1``/``.mlp.fc3`` into ``gate_up_proj``,
    Llama's loader ``gate_proj``/``up_proj``. Where a shard has more than one part and
    ``packed_modules_mapping`` lists one set of them, that set is the layout (no
    checkpoint holds two tensors for one shard)."""
    shards = [index for _, index in sources]
    if len(set(shards)) == len(shards) or not isinstance(listed, (list, tuple)):
        return sources
    chosen = [(part, index) for part, index in sources if part in listed]
    return chosen if {i for _, i in chosen} == set(shards) else sources


def declared_whole(model: nn.Module, cls: type | None) -> set[str]:
    """Fused leaves a ``packed_modules_mapping`` maps to themselves, for every fused module
    of that leaf: the model's word that its checkpoint holds the layer whole (Qwen2.5-VL's
    ``"qkv": ["qkv"]  # For vision tower's already-packed QKV``, which OpenCUA inherits the
    tower and loader of). A table speaks for the modules inside the one whose class (any
    class in its MRO) holds it, the top-level class's for the whole model: Phi-4-V's
    language model (Phi-3) declares its ``qkv_proj`` whole, its SigLIP tower's
    ``qkv_proj`` is stored split. A stacked entry for the same layer (the tower's mapper
    also stacks ``.attn.q.``, for Qwen2.5-Omni's checkpoint) only says the loader takes
    the parts too: a loader stacks a part where one occurs and loads the fused tensor by
    its own name otherwise."""
    scopes: dict[str, list[str]] = {leaf: [""] for leaf in _whole_in_tables(cls)}
    fused: dict[str, list[str]] = {}
    for path, module in model.named_modules():
        for leaf in _whole_in_tables(type(module)):
            scopes.setdefault(leaf, []).append(path)
        if fused_kind(module) is not None:
            fused.setdefault(path.rsplit(".", 1)[-1], []).append(path)

    def covered(leaf: str, path: str) -> bool:
        return any(s == "" or path.startswith(s + ".") for s in scopes.get(leaf, []))

    return {leaf for leaf, paths in fused.items() if all(covered(leaf, p) for p in paths)}


def _whole_in_tables(klass: type | None) -> set[str]:
    """The leaves a ``packed_modules_mapping`` in ``klass``'s MRO maps to themselves."""
    out: set[str] = set()
    for base in getattr(klass, "__mro__", ()):
        table = vars(base).get("packed_modules_mapping")
        for leaf, parts in table.items() if isinstance(table, dict) else ():
            if isinstance(parts, (list, tuple)) and list(parts) == [leaf]:
                out.add(leaf)
    return out


def _stacked_entries(model: nn.Module, cls: type | None) -> list[tuple[Any, Any]]:
    """The ``orig_to_new_stacked`` entries of the class's mapper, then of the mappers of
    the classes built inside it (a ColBERT wrapper's Lfm2 backbone keeps its ``.w1`` ->
    ``.w13`` entries on ``Lfm2Model``)."""
    mappers = [weights_mapper(cls)] + [weights_mapper(type(m)) for m in model.modules()]
    out: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    for mapper in mappers:
        if mapper is None or id(mapper) in seen:
            continue
        seen.add(id(mapper))
        stacked = getattr(mapper, "orig_to_new_stacked", None) or {}
        out += [item for item in stacked.items() if item not in out]
    return out


def packed_table(model: nn.Module, cls: type | None) -> dict[str, Any]:
    """What LoRA reads (vLLM's ``get_packed_modules_mapping``), else the class's own."""
    try:
        from vllm.model_executor.utils import get_packed_modules_mapping

        return dict(get_packed_modules_mapping(model))
    except Exception:
        mapping = getattr(cls, "packed_modules_mapping", None)
        return dict(mapping) if isinstance(mapping, dict) else {}


def weights_mapper(cls: type | None) -> Any:
    mapper = getattr(cls, "hf_to_vllm_mapper", None)
    forward = getattr(mapper, "map_name", None) or getattr(mapper, "_map_name", None)
    return mapper if callable(forward) else None


def _forward(mapper: Any, name: str) -> str | None:
    fn = getattr(mapper, "map_name", None) or mapper._map_name
    try:
        return fn(name)
    except Exception:
        return None


@functools.lru_cache(maxsize=256)
def file_stacked_entries(file: str) -> tuple[tuple[str, str], ...]:
    """``(checkpoint part, fused)`` of every ``orig_to_new_stacked={".q_proj": (".qkv_proj",
    "q")}`` written in ``file``: a mapper assigned twice in a class body still says, in
    the assignment the second one hides, what the checkpoint holds."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    return tuple(dict.fromkeys((part, fused) for fused, part, _ in mapper_rows(tree)))


def declared_parts(model: nn.Module, cls: type | None) -> dict[str, dict[str, list[str]]]:
    """Checkpoint module leaf -> {fused module leaf built in ``model``: the tables that
    say the checkpoint holds the leaf apart, to be stacked into the fused one}. Every
    table counts (a stacked-params table, a mapper's stacked entries, written or built,
    ``packed_modules_mapping``): each is the model's own word on its checkpoint."""
    fused = {
        path.rsplit(".", 1)[-1] for path, module in model.named_modules() if fused_kind(module)
    }
    out: dict[str, dict[str, list[str]]] = {}

    def add(part: Any, leaf: Any, table: str) -> None:
        if isinstance(part, str) and isinstance(leaf, str):
            part, leaf = stacked_leaf(part), stacked_leaf(leaf)
            if leaf in fused and part and part != leaf:
                tables = out.setdefault(part, {}).setdefault(leaf, [])
                if table not in tables:
                    tables.append(table)

    for part, target in _stacked_entries(model, cls):
        if isinstance(target, tuple) and target:
            add(part, target[0], "`hf_to_vllm_mapper`")
    files = model_files(model, cls)
    for file in files:
        for leaf, part, _ in file_triples(file):
            add(part, leaf, "its stacked-params table")
    for leaf, parts in packed_table(model, cls).items():
        for part in parts if isinstance(parts, (list, tuple)) else ():
            add(part, leaf, "`packed_modules_mapping`")
    for file in files:
        for part, leaf in file_stacked_entries(file):
            add(part, leaf, "an `orig_to_new_stacked` entry of its files")
    return out
