"""PFX601-PFX606: what the built model says about its prefixes, heads, stages, interfaces.

The checks run over the union of builds (layouts x config variants) and report one
finding per construction site: the same wrong prefix in layers 0..N and in every layout is
one finding that says where else it occurs. Severity follows the consequence: a name that
a consumer looks up (a ``quant_config`` reaches the module, or the layer registers itself
by name for the KV cache and the forward context) is an error; a name nothing reads today
is a warning that says so.
"""

from __future__ import annotations

import inspect
import re
import traceback
from collections import Counter
from typing import Any

from torch import nn

from prefixlint.introspect.coverage import passes_quant_config
from prefixlint.introspect.finding import Finding
from prefixlint.introspect.packed import unbuilt_key_reason

TP_CANDIDATES = tuple(range(1, 17))
# vLLM conventions that are not path mismatches: a draft model's weights live under its
# own namespace (``mtp.``, ``draft_model.``) whatever attribute holds it.
_DRAFT_NAMESPACES = ("mtp", "draft_model")
_SHOWN = 3  # repeats named in a message


class Findings:
    """Findings merged per construction site, with where each repeats."""

    def __init__(self) -> None:
        self.found: dict[tuple, Finding] = {}
        self.messages: dict[tuple, dict[str, str]] = {}  # key -> path -> its message

    def add(self, finding: Finding, build: Any, path: str = "") -> None:
        key = finding.key()
        known = self.found.setdefault(key, finding)
        if finding.severity == "error":
            known.severity = "error"
        if build.layout.name not in known.layouts:
            known.layouts.append(build.layout.name)
        variant = getattr(build, "variant", "") or "base config"
        if variant not in known.variants:
            known.variants.append(variant)
        if path:
            if path not in known.paths:
                known.paths.append(path)
            self.messages.setdefault(key, {}).setdefault(path, finding.message)

    def finish(self) -> list[Finding]:
        for key, f in self.found.items():
            f.paths.sort(key=_natural)
            if f.paths:
                f.message = self.messages[key][f.paths[0]]  # the first layer's words
            extra = []
            if len(f.paths) > 1:
                more = ", ".join(f"`{p}`" for p in f.paths[1 : 1 + _SHOWN])
                rest = len(f.paths) - 1 - _SHOWN
                extra.append(f"the same at {more}" + (f" and {rest} more" if rest > 0 else ""))
            if len(f.layouts) > 1:
                extra.append(f"in layouts {', '.join(f.layouts)}")
            if "base config" not in f.variants:
                extra.append(f"built with config variant {'; '.join(f.variants)}")
            if extra:
                f.message += f" ({'; '.join(extra)})"
        return sorted(self.found.values(), key=lambda f: (f.file, f.line, f.code, f.group))


def _natural(path: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def _class_site(cls: type | None) -> tuple[str, int]:
    try:
        return inspect.getsourcefile(cls) or "", inspect.getsourcelines(cls)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return "", 0


def _model_frame(tb: Any, external: Any) -> tuple[str, int]:
    """The innermost traceback frame in the model's own code (not vLLM's layers, torch
    or prefixlint): where the model did what failed."""
    best = ("", 0)
    for frame, line in traceback.walk_tb(tb):
        if external(frame.f_code.co_filename):
            best = (frame.f_code.co_filename, line)
    return best


def _duplicate_frame(build: Any, external: Any) -> tuple[str, int]:
    """Where a duplicate layer name was made: walking out from the failing construction,
    each model-code frame that itself received a name another module already has only
    passes the duplicate on; the first frame whose own name is unique made it (a literal
    prefix, or a call in a loop that leaves out the index)."""
    records = [r for r in build.recorder.records.values() if r.prefix is not None]
    by_class = Counter((type(r.module), r.prefix) for r in records)
    by_name = Counter(r.prefix for r in records)
    frames = [(f, line) for f, line in traceback.walk_tb(build.error_tb)]
    for frame, line in reversed(frames):
        file = frame.f_code.co_filename
        if not external(file):
            continue
        prefix = frame.f_locals.get("prefix")
        if not isinstance(prefix, str):
            continue
        owner = frame.f_locals.get("self")
        repeated = by_class[(type(owner), prefix)] if owner is not None else by_name[prefix]
        if repeated < 2:
            return file, line
    return _model_frame(build.error_tb, external)


def check_build(
    cls: type | None, model_config: Any, builds: list[Any], complete: bool = True
) -> list[Finding]:
    """``complete``: every construction site ran in some build (a packed key no build made
    is then a finding; otherwise it is not verified)."""
    out = Findings()
    class_site = _class_site(cls)
    hf = getattr(model_config, "hf_text_config", None) or model_config.hf_config
    heads = config_value(hf, "num_attention_heads")
    kv_heads = config_value(hf, "num_key_value_heads") or heads
    built = [b for b in builds if b.error is None]
    for build in builds:
        if build.error is not None:
            _check_error(build, heads, kv_heads, class_site, out, hf)
            continue
        view = _View(build)
        _check_prefixes(view, out)
        _check_duplicates(view, out)
        _check_stages(view, cls, hf, out)
        _check_heads(view, out)
    _check_pp_interface(built, cls, class_site, out)
    _check_packed(built, cls, class_site, out, complete)
    return out.finish()


def config_value(config: Any, name: str) -> Any:
    """``config.name``, or None. A heterogeneous config (per-layer values, transformers'
    ``per_layer_config``) refuses a global read of a per-layer attribute with its own
    error, not an AttributeError: that value is then unknown here, not a crash."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None


def working_tp_sizes(heads: int | None, kv_heads: int | None) -> list[int]:
    if not heads:
        return []
    kv = kv_heads or heads
    return [tp for tp in TP_CANDIDATES if heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)]


def _check_error(
    build: Any, heads: Any, kv_heads: Any, class_site: tuple, out: Findings, hf: Any = None
) -> None:
    error, layout = build.error, build.layout
    text = str(error)
    external = build.recorder.external
    if "Duplicate layer name" in text:
        file, line = _duplicate_frame(build, external)
        message = f"two layers register under one name; vLLM: {text.strip()[:200]}"
        out.add(Finding("PFX602", "error", message, *((file, line) if file else class_site)), build)
        return
    divisible = "divisible" in text or (
        heads
        and (heads % layout.tp or (kv_heads and kv_heads % layout.tp and layout.tp % kv_heads))
    )
    if divisible and layout.tp > 1:
        ok = ", ".join(map(str, working_tp_sizes(heads, kv_heads)))
        message = (
            f"{heads} query / {kv_heads} KV heads do not divide for tensor parallel size "
            f"{layout.tp}; sizes that work: {ok}"
        )
        out.add(Finding("PFX603", "warning", message, *class_site, group=str(layout.tp)), build)
        return
    file, line = _model_frame(build.error_tb, external)
    first = text.strip().splitlines()[0][:200] if text.strip() else ""
    message = f"building the model failed for {layout.name}: {type(error).__name__}: {first}"
    site = (file, line) if file else class_site
    n_layers = config_value(hf, "num_hidden_layers") or 0
    if layout.pp > 1 and isinstance(n_layers, int) and n_layers // layout.pp < 2:
        # one layer per stage: a stage of a small config may lack a kind of layer a real
        # checkpoint's stages all hold (a MoE model whose stage 0 is the dense layer)
        message = (
            f"not verified at {layout.name}: the config's {n_layers} layers leave one per "
            f"stage, and the build failed ({type(error).__name__}: {first}); a config with "
            "more layers (`--config`) would tell"
        )
        out.add(Finding("PFX600", "note", message, *site, group=message), build)
        return
    out.add(Finding("PFX604", "error", message, *site, group=message), build)


class _View:
    """One build's modules by path, with what the recorder saw at their construction."""

    def __init__(self, build: Any) -> None:
        self.build = build
        self.model = build.model
        self.layout = build.layout
        self.paths: dict[int, list[str]] = {}
        for name, module in self.model.named_modules(remove_duplicate=False):
            self.paths.setdefault(id(module), []).append(name)
        self.by_path = {
            self.paths[id(r.module)][0]: r
            for r in build.recorder.records.values()
            if id(r.module) in self.paths and r.prefix is not None and not r.by_library
        }
        self.delegating = self._delegating()
        # layers that registered themselves by name (attention, MoE, Mamba state): the
        # forward context and the KV cache find them under their prefix
        context = getattr(
            getattr(build.vllm_config, "compilation_config", None), "static_forward_context", {}
        )
        self.registered = {id(m) for m in (context or {}).values()}

    def _delegating(self) -> set[str]:
        """Modules that hand their own name down on purpose (vLLM's MLA and MTP wrappers
        receive their parent's prefix); names beneath them are relative to the wrapper."""
        out = set()
        for path, r in self.by_path.items():
            parent, _, name = path.rpartition(".")
            # An element of a container (`layers.3`) given the container's name is a loop
            # that left out the index, never a wrapper's convention.
            # The name the parent received counts as its name: a draft's layers are
            # numbered on from the target's, and a wrapper there hands that number down.
            received = self.by_path[parent].prefix if parent in self.by_path else None
            handed = r.prefix == parent or (received is not None and r.prefix == received)
            if handed and parent and not r.defaulted and not name.isdigit():
                out.add(path)
        return out

    def wrong(self, path: str) -> bool:
        return self.by_path[path].prefix not in self.paths[id(self.by_path[path].module)]


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _convention(view: _View, path: str) -> bool:
    """vLLM's own naming conventions, which consumers expect: not findings."""
    r = view.by_path[path]
    prefix, parent = r.prefix or "", path.rsplit(".", 1)[0] if "." in path else ""
    # MLA: ``self.mla_attn = MLAAttention(prefix=f"{prefix}.attn")``; the checkpoint and the
    # KV cache use ``.attn``.
    if path.endswith(".mla_attn") and prefix == f"{parent}.attn" and "MLA" in r.cls:
        return True
    # A draft model's namespace (``mtp.``): its weights are stored under it.
    if prefix.split(".")[0] in _DRAFT_NAMESPACES and prefix.split(".")[0] not in path.split("."):
        return True
    # Several attention layers of one decoder layer (a list: ``attn.1``, ``attn_per_step.3``)
    # named ``layers.<k>.self_attn.attn`` with a made-up index, unique on purpose: each gets
    # its own KV cache. Only for list elements and unique names (an off-by-one is neither).
    if "layer_name" in r.attributes and path.rsplit(".", 1)[-1].isdigit():
        stem = re.sub(r"\.\d+", "", path)
        names = [o.prefix for o in view.by_path.values() if "layer_name" in o.attributes]
        return stem.startswith(re.sub(r"\.\d+", "", prefix)) and names.count(prefix) == 1
    return False


def _consumers(view: _View, paths: list[str]) -> list[str]:
    """What looks the modules at ``paths`` up by their prefix."""
    out: list[str] = []
    for path in paths:
        r = view.by_path[path]
        if id(r.module) in view.registered:
            used = "the KV cache and the forward context (the layer registers by this name)"
        elif "layer_name" in r.attributes:
            used = "its per-layer scales (looked up by `layer_name`)"
        else:
            used = ""
        if passes_quant_config(r.site_file, r.site_line):
            out.append("quantization")
        if used:
            out.append(used)
    return list(dict.fromkeys(out))


def _severity(view: _View, paths: list[str]) -> tuple[str, str]:
    used = _consumers(view, paths)
    if used:
        return "error", f"{' and '.join(used)} will look it up under the wrong name"
    # A note (shown with --show-notes, in JSON and SARIF): no consumer breaks today, and
    # a review comment on it would cost a maintainer a minute for nothing (issue 20).
    return "note", (
        "nothing looks this name up today (no `quant_config` reaches it and it registers "
        "no layer by name), so it is a divergence without a consequence yet"
    )


def _check_prefixes(view: _View, out: Findings) -> None:
    roots: list[tuple[str, str]] = []  # (path, wrong prefix) reported or accepted
    for path in sorted(view.by_path, key=lambda p: (p.count("."), p)):
        r = view.by_path[path]
        if not view.wrong(path) or any(a in view.delegating for a in [path, *_ancestors(path)]):
            continue
        if any(_follows(r.prefix, root, wrong, path) for root, wrong in roots):
            continue  # a consequence of an ancestor's wrong prefix, reported there
        roots.append((path, r.prefix))
        if _convention(view, path):
            continue
        below = [p for p in view.by_path if p.startswith(path + ".") and view.wrong(p)]
        if r.defaulted and r.prefix == "" and not below and _is_container(view, path):
            continue  # a container whose layers get their names some other way
        severity, why = _severity(view, [path, *below])
        leaf = r.defaulted and r.prefix == "" and not below
        if r.defaulted and r.prefix == "":
            inside = ', so the layers inside it are named from `""`' if below else ""
            message = f'`{r.cls}` at `{path}` was built without `prefix` (`""`){inside}: {why}'
        else:
            message = f"`{r.cls}` is at `{path}` but was given prefix `{r.prefix}`: {why}"
        group = "default-prefix" if leaf else ""
        finding = Finding("PFX601", severity, message, r.site_file, r.site_line, group=group)
        out.add(finding, view.build, path)


def _is_container(view: _View, path: str) -> bool:
    """Holds prefixed modules (the Transformers backend names its layers itself)."""
    return any(p.startswith(path + ".") for p in view.by_path)


def _follows(prefix: str, root: str, wrong: str, path: str) -> bool:
    """``prefix`` is what ``path`` would get below an ancestor at ``root`` named ``wrong``."""
    if not path.startswith(root + "."):
        return False
    rel = path[len(root) + 1 :]
    return prefix in (f"{wrong}.{rel}", rel, f".{rel}") or (
        prefix.endswith("." + rel) and (prefix.startswith(wrong))
    )


def _check_duplicates(view: _View, out: Findings) -> None:
    """Two leaf layers under one name share one quantization lookup and one cache slot."""
    leaves: dict[str, list[tuple[str, Any]]] = {}
    for path, r in view.by_path.items():
        if _is_container(view, path) or r.prefix == "" or path in view.delegating:
            continue
        if view.wrong(path) and any(view.wrong(a) for a in _ancestors(path) if a in view.by_path):
            continue  # named wrong because an ancestor is: reported there
        leaves.setdefault(r.prefix, []).append((path, r))
    for prefix, same in leaves.items():
        if len(same) < 2:
            continue
        first_path, first = min(same, key=lambda x: x[1].order)
        for path, r in same:
            if r is not first:
                message = (
                    f"`{r.cls}` at `{path}` has the prefix `{prefix}` of another layer "
                    f"(`{first_path}`)"
                )
                out.add(
                    Finding("PFX602", "error", message, r.site_file, r.site_line), view.build, path
                )


def _params(module: nn.Module | None) -> bool:
    return module is not None and any(True for _ in module.parameters())


def _site_of(view: _View, module: nn.Module | None, cls: Any) -> tuple[str, int]:
    for r in view.build.recorder.records.values():
        if r.module is module:
            return r.site_file, r.site_line
    return _class_site(type(module) if module is not None else cls)


def _check_stages(view: _View, cls: Any, hf: Any, out: Findings) -> None:
    """Every stage holds what it must and nothing it must not: its own layers (others are
    ``PPMissingLayer``), the embedding on the first stage only (and the last, for a tied
    head), the final norm and ``lm_head`` on the last only."""
    layout = view.layout
    try:
        from vllm.distributed.utils import get_pp_indices
    except ImportError:
        return
    n_layers = config_value(hf, "num_hidden_layers")
    if layout.pp <= 1 or not n_layers:
        return
    start, end = get_pp_indices(n_layers, layout.pp_rank, layout.pp)
    first, last = layout.pp_rank == 0, layout.pp_rank == layout.pp - 1
    stage = f"pipeline stage {layout.pp_rank} of {layout.pp}"

    def add(module: nn.Module | None, what: str, group: str, severity: str = "error") -> None:
        file, line = _site_of(view, module, cls)
        finding = Finding("PFX605", severity, f"{stage} {what}", file, line, group=group)
        out.add(finding, view.build)

    for name, module in _decoder_lists(view.model, n_layers):
        for i, layer in enumerate(module):
            if not start <= i < end and _params(layer):
                add(
                    layer,
                    f"owns layers {start}-{end - 1} but builds `{name}.{i}` with parameters; "
                    "build other stages' layers as `PPMissingLayer` (`make_layers` does)",
                    "layers",
                )
                break
    _check_stage_ends(view, hf, first, last, add)


_TOWERS = ("vision", "visual", "audio", "tower", "vit", "qformer", "encoder", "experts")


def _decoder_lists(model: nn.Module, n_layers: int) -> list[tuple[str, nn.ModuleList]]:
    """The decoder's layer lists: those of a module that keeps ``start_layer`` (what
    ``make_layers`` returns), else lists of the layer count outside encoder towers (vision
    and audio towers are not split across stages; a list of experts is not layers)."""
    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and len(m) == n_layers
    ]
    owners = {name for name, m in model.named_modules() if hasattr(m, "start_layer")}
    kept = [(n, m) for n, m in lists if (n.rsplit(".", 1)[0] if "." in n else "") in owners]
    if kept or owners:
        return kept
    return [(n, m) for n, m in lists if not any(w in n.lower() for w in _TOWERS)]


def _check_stage_ends(view: _View, hf: Any, first: bool, last: bool, add: Any) -> None:
    head = getattr(view.model, "lm_head", None)
    pooling = getattr(type(view.model), "is_pooling_model", False)  # no logits to compute
    if last and head is not None and not _params(head) and not pooling:
        add(None, "is the last and has no `lm_head` parameters: it computes the logits", "no-head")
    if not last and _params(head) and not isinstance(head, nn.Identity):
        add(
            head,
            "is not the last but builds `lm_head` with parameters; only the last stage "
            "computes logits (build `PPMissingLayer` elsewhere). It costs a vocabulary-sized "
            "matrix of memory on this stage; nothing breaks",
            "head",
            "warning",
        )
    tied = bool(config_value(hf, "tie_word_embeddings"))
    for name, module in view.model.named_modules():
        top = name.count(".") <= 1
        embeds = type(module).__name__ == "VocabParallelEmbedding" and top
        if embeds and not first and _params(module) and not (last and tied):
            add(
                module,
                f"is not the first but builds the embedding `{name}` with parameters; "
                "only the first stage embeds tokens (and the last, for a tied head). It costs "
                "a vocabulary-sized matrix of memory on this stage; nothing breaks",
                "embedding",
                "warning",
            )
        norm = name.split(".")[-1] in ("norm", "final_layernorm", "ln_f", "norm_f")
        if norm and name.count(".") == 1 and not last and _params(module):
            add(
                module,
                f"is not the last but builds the final norm `{name}` with parameters; "
                "only the last stage applies it (a little memory; nothing breaks)",
                "norm",
                "warning",
            )


def _check_heads(view: _View, out: Findings) -> None:
    """At tp > 1, an attention layer's head counts are per rank, as the QKV projection
    beside it splits them; global counts passed where local ones are due are a finding."""
    if view.layout.tp <= 1:
        return
    for parent in view.model.modules():
        children = list(parent.children())
        attn = [c for c in children if "layer_name" in vars(c) and hasattr(c, "num_kv_heads")]
        qkv = [c for c in children if hasattr(c, "total_num_kv_heads") and hasattr(c, "num_heads")]
        if len(attn) != 1 or len(qkv) != 1:
            continue
        a, q = attn[0], qkv[0]
        if getattr(a, "head_size", None) != getattr(q, "head_size", None):
            continue
        # more query heads than the projection's: global counts. Fewer is a projection that
        # packs more (an output gate doubles its query heads: Qwen3-Next)
        if a.num_kv_heads == q.num_kv_heads and a.num_heads <= q.num_heads:
            continue
        file, line = _site_of(view, a, None)
        message = (
            f"`{type(a).__name__}` gets {a.num_heads} query / {a.num_kv_heads} KV heads at "
            f"tp={view.layout.tp}, but the QKV projection beside it gives each rank "
            f"{q.num_heads} / {q.num_kv_heads}: pass the per-rank counts "
            "(`total // tp_size`), as the projection splits them"
        )
        out.add(Finding("PFX607", "error", message, file, line), view.build)


def _check_pp_interface(built: list[Any], cls: Any, class_site: tuple, out: Findings) -> None:
    build = next((b for b in built if b.layout.tp == 1 and b.layout.pp == 1), None)
    if build is None or not getattr(cls, "supports_pp", False):
        return
    make = getattr(build.model, "make_empty_intermediate_tensors", None)
    problem = None
    if not callable(make):
        problem = "has no callable `make_empty_intermediate_tensors`"
    else:
        try:
            import torch

            make(2, torch.float32, torch.device("meta"))
        except Exception as e:
            problem = f"`make_empty_intermediate_tensors(...)` raises {type(e).__name__}: {e}"
    if problem:
        message = f"`{cls.__name__}` declares `SupportsPP` but {problem}"[:300]
        out.add(Finding("PFX606", "error", message, *class_site, group="pp"), build)


def _check_packed(
    built: list[Any], cls: Any, class_site: tuple, out: Findings, complete: bool
) -> None:
    """A ``packed_modules_mapping`` key that no build (of any layout or config variant)
    made: LoRA and quantization pack weights by these names."""
    mapping = getattr(cls, "packed_modules_mapping", None)
    if not built or not isinstance(mapping, dict) or not mapping:
        return
    leaf_names: set[str] = set()
    for build in built:
        leaf_names.update(n.rsplit(".", 1)[-1] for n, _ in build.model.named_modules())
    tried = "; ".join(sorted({getattr(b, "variant", "") or "base config" for b in built}))
    # None built: the mapping does not describe this model (an error, as before). Some
    # built: another key packs nothing in any config explored, a warning (nothing breaks,
    # a maintainer removes a stale key) when every construction site ran and nothing says
    # the class builds it elsewhere, a note when something does, not verified when some
    # construction site did not run.
    none = not any(k in leaf_names for k in mapping)
    for key, parts in mapping.items():
        if key in leaf_names:
            continue
        last = key.strip(".").rsplit(".", 1)[-1]
        if last in leaf_names and parts == [key]:
            continue  # an entry that packs a layer as itself (DotsOCR's `.attn.qkv`)
        if not none and "." in key.strip(".") and last in leaf_names:
            # vLLM looks a fused layer up by its prefix's last part (quantization's
            # is_layer_skipped, LoRA's model manager): a dotted key never applies
            message = (
                f"`{cls.__name__}.packed_modules_mapping` names `{key}`, with a dot: vLLM's "
                f"quantization and LoRA look a fused layer up by the last part of its prefix "
                f"(`{last}`), so this entry never applies and an `ignored_layers` entry or "
                f"LoRA adapter of its parts misses `{last}`; name the key `{last!r}`"
            )
            out.add(Finding("PFX606", "warning", message, *class_site, group=key), built[0])
            continue
        packs = ", ".join(f"`{p}`" for p in parts) if isinstance(parts, list) else str(parts)
        what = (
            f"`{cls.__name__}.packed_modules_mapping` names `{key}` (packing {packs}), but no "
            f"build made a module of that name (configs: {tried})"
        )
        if none or complete:
            message = f"{what}; LoRA and quantization pack weights by these names"
            severity = "error" if none else "warning"
            why = "" if none else unbuilt_key_reason(key, built, cls)
            if why:
                severity = "note"
                message = f"{what} (a note: {why}; nothing breaks)"
            out.add(Finding("PFX606", severity, message, *class_site, group=key), built[0])
        else:
            message = (
                f"not verified: {what}, and some construction sites ran in no build: a "
                "config that builds them may build it"
            )
            out.add(Finding("PFX600", "note", message, *class_site, group=key), built[0])
