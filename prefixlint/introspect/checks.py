"""PFX601-PFX606: what the built model says about its prefixes, heads, stages, interfaces."""

from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

from torch import nn

TP_CANDIDATES = tuple(range(1, 17))


@dataclass
class Finding:
    code: str
    severity: str
    message: str
    file: str
    line: int
    layouts: list[str] = field(default_factory=list)

    def key(self) -> tuple[str, str, int, str]:
        return (self.code, self.file, self.line, self.message)


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


def check_build(cls: type | None, model_config: Any, builds: list[Any]) -> list[Finding]:
    findings: dict[tuple, Finding] = {}

    def add(finding: Finding, layout: Any) -> None:
        known = findings.setdefault(finding.key(), finding)
        if layout.name not in known.layouts:
            known.layouts.append(layout.name)

    class_file, class_line = _class_site(cls)
    hf = getattr(model_config, "hf_text_config", None) or model_config.hf_config
    heads = getattr(hf, "num_attention_heads", None)
    kv_heads = getattr(hf, "num_key_value_heads", None) or heads
    for build in builds:
        external = build.recorder.external
        if build.error is not None:
            _check_error(build, heads, kv_heads, class_file, class_line, external, add)
            continue
        _check_prefixes(build, add)
        _check_stages(build, cls, hf, add)
        _check_interfaces(build, cls, class_file, class_line, add)
    return sorted(findings.values(), key=lambda f: (f.file, f.line, f.code))


def working_tp_sizes(heads: int | None, kv_heads: int | None) -> list[int]:
    if not heads:
        return []
    kv = kv_heads or heads
    return [tp for tp in TP_CANDIDATES if heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)]


def _check_error(build, heads, kv_heads, class_file, class_line, external, add) -> None:
    error, layout = build.error, build.layout
    text = str(error)
    if "Duplicate layer name" in text:
        file, line = _model_frame(build.error_tb, external)
        add(
            Finding(
                "PFX602",
                "error",
                f"two layers register under one name; vLLM: {text.strip()[:200]}",
                file or class_file,
                line or class_line,
            ),
            layout,
        )
        return
    divisible = "divisible" in text or (
        heads
        and (heads % layout.tp or (kv_heads and kv_heads % layout.tp and layout.tp % kv_heads))
    )
    if divisible and layout.tp > 1:
        ok = ", ".join(map(str, working_tp_sizes(heads, kv_heads)))
        add(
            Finding(
                "PFX603",
                "warning",
                f"{heads} query / {kv_heads} KV heads do not divide for tensor parallel size "
                f"{layout.tp}; sizes that work: {ok}",
                class_file,
                class_line,
            ),
            layout,
        )
        return
    file, line = _model_frame(build.error_tb, external)
    add(
        Finding(
            "PFX604",
            "error",
            f"building the model failed for {layout.name}: {type(error).__name__}: "
            f"{text.strip().splitlines()[0][:200] if text.strip() else ''}",
            file or class_file,
            line or class_line,
        ),
        layout,
    )


def _paths(model: nn.Module) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        out.setdefault(id(module), []).append(name)
    return out


def _relative(ancestor: str, path: str) -> str:
    return path[len(ancestor) + 1 :] if ancestor else path


def _check_prefixes(build, add) -> None:
    model, layout = build.model, build.layout
    paths = _paths(model)
    records = [
        r
        for r in build.recorder.records.values()
        if id(r.module) in paths and r.prefix is not None and not r.by_library
    ]
    by_path = {paths[id(r.module)][0]: r for r in records}
    # Modules that hand their own name down on purpose (vLLM's MLA and MTP wrappers
    # receive their parent's prefix); names beneath them are relative to the wrapper.
    delegating: set[str] = set()
    for path, r in by_path.items():
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if r.prefix == parent and parent and not r.defaulted:
            delegating.add(path)

    def ancestors(path: str) -> list[str]:
        parts = path.split(".")
        return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]

    reported_roots: list[tuple[str, str]] = []  # (path, wrong prefix) already explained
    explained: set[str] = set()  # paths whose wrong name an ancestor's finding explains
    has_prefixed_descendant = {a for path in by_path for a in ancestors(path) if a in by_path}
    for path in sorted(by_path, key=lambda p: (p.count("."), p)):
        r = by_path[path]
        names = paths[id(r.module)]
        if r.prefix in names or any(a in delegating for a in [path, *ancestors(path)]):
            continue
        if any(_follows(r.prefix, root, wrong, path) for root, wrong in reported_roots):
            explained.add(path)
            continue  # a consequence of an ancestor's wrong prefix, reported there
        if r.defaulted and r.prefix == "":
            if not any(
                d.prefix not in paths[id(d.module)] and _follows(d.prefix, path, "", dp)
                for dp, d in by_path.items()
                if dp.startswith(path + ".")
            ):
                # A leaf without prefix (the static rule PFX301 says so), or a container
                # whose layers get their names some other way (the Transformers backend).
                continue
            message = (
                f"`{r.cls}` at `{path}` was built without `prefix`, so the layers inside it "
                f'are named from `""` instead of `{path}`'
            )
        else:
            message = (
                f"`{r.cls}` is at `{path}` but was given prefix `{r.prefix}`: quantization, "
                "LoRA and the KV cache will look it up under the wrong name"
            )
        reported_roots.append((path, r.prefix))
        add(Finding("PFX601", "error", message, r.site_file, r.site_line), layout)

    # Two leaf layers under one name share one quantization lookup and one cache slot.
    leaves: dict[str, list[Any]] = {}
    for path, r in by_path.items():
        if (
            path in has_prefixed_descendant
            or r.prefix == ""
            or path in delegating
            or path in explained
        ):
            continue
        leaves.setdefault(r.prefix, []).append(r)
    for prefix, same in leaves.items():
        if len(same) > 1:
            first = min(same, key=lambda r: r.order)
            for r in same:
                if r is first:
                    continue
                add(
                    Finding(
                        "PFX602",
                        "error",
                        f"`{r.cls}` at `{paths[id(r.module)][0]}` has the prefix `{prefix}` "
                        f"of another layer (`{paths[id(first.module)][0]}`)",
                        r.site_file,
                        r.site_line,
                    ),
                    layout,
                )


def _follows(prefix: str, root: str, wrong: str, path: str) -> bool:
    """``prefix`` is what ``path`` would get below an ancestor at ``root`` named ``wrong``."""
    if not path.startswith(root + "."):
        return False
    rel = path[len(root) + 1 :]
    return prefix in (f"{wrong}.{rel}", rel, f".{rel}") or (
        prefix.endswith("." + rel) and (prefix.startswith(wrong))
    )


def _check_stages(build, cls, hf, add) -> None:
    layout = build.layout
    if layout.pp <= 1:
        return
    try:
        from vllm.distributed.utils import get_pp_indices
    except ImportError:
        return
    model = build.model
    n_layers = getattr(hf, "num_hidden_layers", None)
    if not n_layers:
        return
    start, end = get_pp_indices(n_layers, layout.pp_rank, layout.pp)
    records = {id(r.module): r for r in build.recorder.records.values()}
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) != n_layers:
            continue
        for i, layer in enumerate(module):
            if start <= i < end:
                continue
            if any(True for _ in layer.parameters()):
                r = records.get(id(layer))
                file, line = (r.site_file, r.site_line) if r else _class_site(type(layer))
                add(
                    Finding(
                        "PFX605",
                        "error",
                        f"pipeline stage {layout.pp_rank} of {layout.pp} owns layers "
                        f"{start}-{end - 1} but builds `{name}.{i}` with parameters; build "
                        "other stages' layers as `PPMissingLayer` (`make_layers` does)",
                        file,
                        line,
                    ),
                    layout,
                )
                break
    last = layout.pp_rank == layout.pp - 1
    head = getattr(model, "lm_head", None)
    if last and head is not None and not any(True for _ in head.parameters()):
        # A tied head shares the embedding's weight; it still has parameters.
        file, line = _class_site(cls)
        add(
            Finding(
                "PFX605",
                "error",
                "the last pipeline stage has no `lm_head` parameters: it computes the logits",
                file,
                line,
            ),
            layout,
        )


def _check_interfaces(build, cls, class_file, class_line, add) -> None:
    model, layout = build.model, build.layout
    if layout.tp != 1 or layout.pp != 1:
        return  # once per architecture is enough
    supports_pp = getattr(cls, "supports_pp", False)
    if supports_pp:
        make = getattr(model, "make_empty_intermediate_tensors", None)
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
            add(
                Finding(
                    "PFX606",
                    "error",
                    f"`{cls.__name__}` declares `SupportsPP` but {problem}"[:300],
                    class_file,
                    class_line,
                ),
                layout,
            )
    mapping = getattr(cls, "packed_modules_mapping", None)
    if isinstance(mapping, dict) and mapping:
        names = [name for name, _ in model.named_modules()]
        leaf_names = {n.rsplit(".", 1)[-1] for n in names}
        missing = [k for k in mapping if k not in leaf_names]
        # Mappings cover every variant of a family (MLA or not, MoE or dense): only a
        # mapping none of whose names was built is inconsistent with this model.
        if missing and len(missing) == len(mapping):
            add(
                Finding(
                    "PFX606",
                    "error",
                    f"`{cls.__name__}.packed_modules_mapping` names "
                    f"{', '.join(f'`{m}`' for m in missing)}, but no module of these names "
                    "was built; LoRA and quantization pack weights by these names",
                    class_file,
                    class_line,
                ),
                layout,
            )


def display(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
