"""PFX606, the other direction: a fused layer ``packed_modules_mapping`` does not name.

vLLM's quantization looks a layer up by its prefix; for a fused layer (``qkv_proj``,
``gate_up_proj``) whose checkpoint holds the parts separately (``q_proj``, ``k_proj``,
``v_proj``), it reads the class's ``packed_modules_mapping`` to know which checkpoint
layers to look up instead (``is_layer_skipped(..., fused_mapping=...)``), and LoRA packs
the adapters of the parts by the same table (``get_packed_modules_mapping``). A fused
layer the table lacks is matched under its own name, which no checkpoint and no adapter
uses: its parts' ``ignored_layers`` entries and LoRA weights miss it.

Quantization and LoRA read different tables: LoRA merges the tables of every module
(``get_packed_modules_mapping``), vLLM's quantization set-up reads the top-level class's
(``configure_quant_config``) and those of classes that mix in ``SupportsQuant``. A fused
layer a ``quant_config`` reaches that only a nested class's table names is reported at
the top-level class, once per fused name (issue 40).

Checked on every fused ``QKVParallelLinear`` and ``MergedColumnParallelLinear`` the
tp=1 build made. That the checkpoint holds its parts separately is read from the
checkpoint the dry-run streamed where it fed the layer (which checkpoint layers were
written into it: a reference's fused tensor is the layout, whatever parts the loader would
also take), else from the model's own stacked-params tables (``(".qkv_proj", ".q_proj",
"q")``) and its mapper's stacked entries, except for a leaf a table of the model's classes
declares whole (``"qkv": ["qkv"]``: those entries are what the loader tolerates). A fused
layer whose checkpoint tensor is fused too (Phi-3's ``gate_up_proj``) needs no entry and
is not reported. Fused MoE experts are not checked:
vLLM matches them by their own prefix and by the expert mapping, never by this table.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

from torch import nn

from prefixlint.codes import INTERFACE_INCONSISTENT_CODE
from prefixlint.introspect.coverage.sites import passes_quant_config
from prefixlint.introspect.finding import Finding
from prefixlint.static.stacked import stacked_leaf


def _table(model: nn.Module, cls: type | None) -> dict[str, Any]:
    from prefixlint.introspect.dryrun.tables import packed_table

    return packed_table(model, cls)


def quant_table(model: nn.Module, cls: type | None) -> dict[str, Any]:
    """What vLLM's quantization set-up reads: the top-level class's own table
    (``configure_quant_config`` passes ``model_class.packed_modules_mapping`` to the
    config), and the table of every built module whose class mixes in ``SupportsQuant``
    (its ``__new__`` adds its own to the config's). A nested model's table without
    ``SupportsQuant`` serves LoRA only (``get_packed_modules_mapping`` walks modules)."""
    from prefixlint.introspect import vllm_api

    out = dict(getattr(cls, "packed_modules_mapping", None) or {})
    mixin = vllm_api.supports_quant_class()
    if mixin is None:  # an unknown vLLM: nothing to tell the tables apart by
        return _table(model, cls)
    for module in model.modules():
        table = getattr(module, "packed_modules_mapping", None)
        if isinstance(module, mixin) and isinstance(table, dict):
            out.update(table)
    return out


def _parts_from_tables(model: nn.Module, cls: type | None) -> dict[str, list[str]]:
    """Fused leaf -> its checkpoint parts, as the model's loader tables say (not the
    ``packed_modules_mapping`` under check)."""
    from prefixlint.introspect.dryrun import tables as readers

    out: dict[str, list[str]] = {}
    # a leaf the model's own table declares whole: its loader's stacked entries are what
    # it tolerates, not the checkpoint's layout (``tables.declared_whole``)
    fused = {
        path.rsplit(".", 1)[-1]
        for path, module in model.named_modules()
        if readers.fused_kind(module)
    } - readers.declared_whole(model, cls)
    for file in readers.model_files(model, cls):
        for leaf, part, _ in readers.file_triples(file):
            if leaf in fused and part != leaf and part not in out.get(leaf, []):
                out.setdefault(leaf, []).append(part)
    stacked = getattr(readers.weights_mapper(cls), "orig_to_new_stacked", None) or {}
    for part, target in stacked.items():
        if isinstance(target, tuple) and target and isinstance(part, str):
            # ``".mlp.gate_proj": (".mlp.gate_up_proj", 0)``: the table is by leaf
            leaf, part = stacked_leaf(str(target[0])), stacked_leaf(part)
            if leaf in fused and part != leaf and part not in out.get(leaf, []):
                out.setdefault(leaf, []).append(part)
    return out


def missing_entries(
    cls: type | None, builds: list[Any], mapping: dict[str, str] | None = None
) -> list[Finding]:
    """A finding per construction site of a fused layer whose checkpoint parts are
    separate and that ``packed_modules_mapping`` does not name. ``mapping``: the
    dry-run's checkpoint layer -> module path, when it ran."""
    from prefixlint.introspect.dryrun import tables as readers

    built = [b for b in builds if b.error is None and b.model is not None]
    # the tp=1 build, else any that built (a layout that fails must not hide the table's
    # gaps the others show)
    base = next((b for b in built if b.layout.tp == 1 and b.layout.pp == 1), None)
    base = base or next(iter(built), None)
    if base is None:
        return []
    model = base.model
    table = _table(model, cls)
    fed: dict[str, list[str]] = {}
    for layer, path in (mapping or {}).items():
        leaf = layer.rsplit(".", 1)[-1]
        if leaf not in fed.setdefault(path, []):
            fed[path].append(leaf)
    tables = _parts_from_tables(model, cls)
    quant = quant_table(model, cls)
    lora = bool(getattr(cls, "supports_lora", False))
    out: dict[tuple[str, int], Finding] = {}
    nested: dict[str, Finding] = {}  # by fused leaf: all at the top-level class
    for path, module in model.named_modules():
        if not readers.fused_kind(module):
            continue
        leaf = path.rsplit(".", 1)[-1]
        if leaf in table and leaf in quant:
            continue
        # the checkpoint the dry-run streamed, where it fed the layer (a reference's fused
        # tensor is its layout, whatever parts the loader would also take); else the tables
        streamed = fed.get(path)
        parts = [p for p in streamed if p != leaf] if streamed else tables.get(leaf, [])
        if len(parts) < 2:
            continue  # its checkpoint tensor is fused too, or nothing says otherwise
        record = base.recorder.records.get(id(module))
        if record is None or not record.site_file:
            continue
        site = (record.site_file, record.site_line)
        if site in out or (leaf in table and not passes_quant_config(*site)):
            continue
        if leaf in table:  # a nested class's table: LoRA reads it, quantization does not
            if leaf not in nested:
                nested[leaf] = _nested_only(cls, model, path, leaf, parts)
            continue
        quantized = passes_quant_config(*site)
        out[site] = _missing(cls, path, module, leaf, parts, bool(table), (quantized, lora), site)
    return list(out.values()) + list(nested.values())


def _missing(
    cls: type | None,
    path: str,
    module: nn.Module,
    leaf: str,
    parts: list[str],
    has_table: bool,
    consumers: tuple[bool, bool],
    site: tuple[str, int],
) -> Finding:
    """The finding of a fused layer the table lacks; ``consumers``: whether quantization
    and LoRA look its parts up (an error), else a note."""
    quantized, lora = consumers
    users = [u for u, yes in (("quantization", quantized), ("LoRA", lora)) if yes]
    name = getattr(cls, "__name__", "the model")
    entry = f"`{leaf!r}: {parts!r}`"
    # no table at all (issue 30): the same miss, for every fused layer of the model
    gap = (
        f"`{name}.packed_modules_mapping` has no entry for `{leaf}`"
        if has_table
        else f"`{name}` has no `packed_modules_mapping` at all"
    )
    message = (
        f"`{path}` is a fused `{type(module).__name__}` whose checkpoint holds "
        f"{', '.join(f'`{p}`' for p in parts)} separately, and {gap}: "
    )
    if users:
        misses = " or ".join(
            {"quantization": "an `ignored_layers` entry", "LoRA": "a LoRA adapter"}[u]
            for u in users
        )
        verb = "look" if len(users) > 1 else "looks"
        message += (
            f"{' and '.join(users)} {verb} the parts up through it, so {misses} of a "
            f"part misses this layer; add {entry}"
        )
        severity = "error"
    else:
        message += (
            f"add {entry} (a note: no `quant_config` reaches it and `{name}` does not "
            "support LoRA, so nothing looks the parts up yet)"
        )
        severity = "note"  # no consumer today (issue 20's severity)
    from prefixlint.introspect.dryrun.sites import table_site

    file, line = table_site(cls)
    if file:
        message += f" (the table is at {file.rsplit('/', 1)[-1]}:{line})"
    return Finding(INTERFACE_INCONSISTENT_CODE, severity, message, *site, group=f"packed:{leaf}")


def _nested_only(
    cls: type | None, model: nn.Module, path: str, leaf: str, parts: list[str]
) -> Finding:
    """A fused layer a quantization config reaches, named only by the table of a nested
    class vLLM's quantization set-up does not read: at the top-level class, once per
    leaf (the table to add is its)."""
    from prefixlint.introspect.finding import class_site

    name = getattr(cls, "__name__", "the model")
    module = model.get_submodule(path)
    owner = next(
        (
            type(model.get_submodule(p)).__name__
            for p in _ancestors(path)
            if leaf in (getattr(model.get_submodule(p), "packed_modules_mapping", None) or {})
        ),
        "a nested model",
    )
    message = (
        f"`{path}` is a fused `{type(module).__name__}` whose checkpoint holds "
        f"{', '.join(f'`{p}`' for p in parts)} separately; `{owner}.packed_modules_mapping` "
        f"names `{leaf}`, but vLLM's quantization set-up reads only "
        f"the top-level class's (`{name}`) and those of classes that mix in `SupportsQuant`, "
        f"so an `ignored_layers` entry of a part misses this layer; add `{leaf!r}: "
        f"{parts!r}` to `{name}.packed_modules_mapping` (or mix `SupportsQuant` into the "
        "nested class)"
    )
    file, line = class_site(cls)
    return Finding(
        INTERFACE_INCONSISTENT_CODE, "error", message, file, line, group=f"packed:{leaf}"
    )


def _ancestors(path: str) -> list[str]:
    """``a.b.c`` -> ``a.b``, ``a``, and the root ``""``."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, -1, -1)]


@functools.lru_cache(maxsize=256)
def _built_names(file: str) -> dict[str, int]:
    """Module names ``file`` builds, each at its first line: ``self.name = ...`` targets
    and the last part of a ``prefix=`` string. Parsed once per file (one call per
    unbuilt key would parse it again)."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    out.setdefault(target.attr, node.lineno)
        if isinstance(node, ast.keyword) and node.arg == "prefix":
            text = "".join(
                part.value
                for part in ast.walk(node.value)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            if text:
                out.setdefault(text.rsplit(".", 1)[-1], node.value.lineno)
    return out


def unbuilt_key_reason(key: str, built: list[Any], cls: type | None) -> str:
    """Why a ``packed_modules_mapping`` key that no build made may still pack modules of
    this class, "" where nothing says so (the key is stale: a maintainer removes it).

    - the class wraps a model its config chooses (a registered vLLM architecture built by
      ``init_vllm_registered_model``, or transformers' own modules): one table serves
      every model it can wrap;
    - the model's own code builds a module of that name, in a branch none of the
      explored configs took."""
    from prefixlint.introspect.dryrun import tables as readers

    for build in built:
        chosen = _chosen_architectures(build)
        for path, module in build.model.named_modules():
            kind = type(module)
            if path and kind.__name__ in chosen:
                return (
                    f"`{path}` is a `{kind.__name__}`, the architecture its sub-config "
                    "names: the table serves every model the class can wrap"
                )
            if path and _is_transformers_model(module):
                return (
                    f"`{path}` is transformers' `{kind.__name__}`: the table serves every "
                    "model the class can wrap"
                )
    leaf = key.strip(".").rsplit(".", 1)[-1]
    for file in readers.model_files(built[0].model, cls):
        line = _built_names(file).get(leaf)
        if line:
            return (
                f"{file.rsplit('/', 1)[-1]}:{line} builds a `{leaf}` in a branch no "
                "explored config took"
            )
    return ""


def _chosen_architectures(build: Any) -> set[str]:
    """The architectures the config's sub-configs name (``text_config.architectures``):
    the classes ``init_vllm_registered_model`` builds for a wrapper, chosen by config."""
    hf = getattr(getattr(build.vllm_config, "model_config", None), "hf_config", None)
    own = set(getattr(hf, "architectures", None) or [])
    out: set[str] = set()
    for value in vars(hf).values() if hf is not None else ():
        archs = getattr(value, "architectures", None)
        if isinstance(archs, (list, tuple)):
            out.update(a for a in archs if isinstance(a, str))
    return out - own


def _is_transformers_model(module: nn.Module) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(module, PreTrainedModel)


def without_duplicates(findings: list[Finding], packed: list[Finding]) -> list[Finding]:
    """The quantization dry-run reports the same missing entry as a PFX702 at the table
    (a fused layer quantized although its parts are ignored): one defect, reported once,
    at the line that built the layer, naming the dry-run's confirmation."""
    leaves = {f.group.removeprefix("packed:"): f for f in packed}
    out = []
    for f in findings:
        hit = next(
            (
                leaf
                for leaf in leaves
                if f.code == "PFX702"
                and f.facts.get("entry") == "missing"
                and f.facts.get("leaf") == leaf
            ),
            None,
        )
        if hit is None:
            out.append(f)
            continue
        confirmed = leaves[hit]
        if not confirmed.facts.get("confirmed"):
            confirmed.facts["confirmed"] = True  # said once, however many leaves confirm it
            confirmed.message += (
                "; the quantization dry-run confirms it: built under `Fp8Config` with the "
                "parts ignored, the layer is quantized"
            )
            confirmed.severity = "error"
    return out
