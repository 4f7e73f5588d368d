"""Draft numbering: a draft's per-layer lists varied, for layers numbered after the target's.

vLLM numbers a draft's layers on from its target's (EAGLE's ``start_layer_id``, an MTP
layer ``num_hidden_layers + i``), while a draft checkpoint's per-layer lists
(``layer_types``) hold one entry per draft layer. A draft that indexes such a list with
its global layer number reads past its end, but only once the list exists: a synthesised
draft config without one never takes that path, and no unexecuted site is guarded by it,
so exploration never sets it. Here each list the draft's files index by a layer number
(``layer_types[layer_idx]``) and its config lacks is set to one entry per draft layer, as
a draft checkpoint's config.json writes it, and the draft is built again. An
``IndexError`` raised at that subscript, in the model's own file, is a finding (PFX604);
any other failure is the variant's (repaired as exploration repairs one, and tried
again), listed like every variant. A variant that builds and
executes new sites is kept as exploration keeps one.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefixlint.introspect.coverage.sites import measure, own_files
from prefixlint.introspect.coverage.variants import (
    OTHER_KIND,
    Exploration,
    Variant,
    applied,
    config_objects,
    file_facts,
    repaired_build,
)


@dataclass(frozen=True)
class DraftListIndexed:
    """A draft that indexes its per-layer list ``attr`` (given ``entries`` entries, one per
    draft layer) with a layer's global number: building it at ``layout`` with the variant
    ``variant`` raised ``IndexError: error`` at ``site``, the subscript (PFX604)."""

    attr: str
    entries: int
    error: str
    site: tuple[str, int]
    layout: str
    variant: str


def numbering_variants(model_config: Any, files: list[str]) -> list[tuple[Variant, set[str]]]:
    """One variant per per-layer list the files index by a non-literal index and the
    draft's config lacks (absent or None), with the ``file:line`` sites of the subscripts."""
    configs = config_objects(model_config)
    n = getattr(configs[0], "num_hidden_layers", None)
    if not isinstance(n, int) or n <= 0:
        return []
    lines: dict[str, set[str]] = {}
    kinds: dict[str, list[Any]] = {}
    for f in files:
        for attr, use in file_facts(f).uses.items():
            if use.indexed and _per_layer_name(attr):
                lines.setdefault(attr, set()).update(f"{f}:{i}" for i in use.indexed)
                more = [v for v in use.compared if isinstance(v, str) and v not in kinds]
                kinds.setdefault(attr, []).extend(more)
    out = []
    for attr in sorted(lines):
        if any(getattr(c, attr, None) is not None for c in configs):
            continue  # the config has it: indexing it is the base build's path
        # the kind the code names nowhere first: the numbering, not a kind, is under test
        cycle = [OTHER_KIND, *kinds[attr]]
        value = [cycle[i % len(cycle)] for i in range(n)]
        why = f"`{attr}`: one entry per draft layer (the draft's layers are numbered on)"
        variant = Variant({attr: value}, why, guarded=False, everywhere=True)
        out.append((variant, lines[attr]))
    return out


def _per_layer_name(attr: str) -> bool:
    """A name a per-layer list has (``layer_types``, ``mlp_layer_types``): not a config
    object read through another (``draft_model_config.hf_config``), nor a switch."""
    named = "layer" in attr or attr.endswith("types")
    return named and not attr.endswith(("config", "_ids")) and not attr.startswith("$")


def explore_numbering(
    cls: type | None,
    model_config: Any,
    layouts: list[Any],
    builds: list[Any],
    build: Callable[[Any, Any], Any],
    explored: Exploration,
) -> list[DraftListIndexed]:
    """The numbering variants of a draft built at the first layout (kept ones at all);
    a list indexed past its end at one of its subscripts, as facts (PFX604)."""
    if not layouts or not any(b.error is None for b in builds):
        return []
    files = own_files(cls, builds[0].recorder.external)
    repaired = repaired_build(build, files)
    found: list[DraftListIndexed] = []
    for variant, sites in numbering_variants(model_config, files):
        explored.variants.append(variant)
        with applied(model_config, variant.overrides, variant.everywhere) as ok:
            first = build(model_config, layouts[0]) if ok else None
            if first is not None and first.error is not None and not _raised_at(first, sites):
                # what the new path reads and the config lacks (a ``sliding_window``)
                first = repaired(model_config, layouts[0])
            if first is None:
                variant.status = "failed: the config refuses the value"
            elif first.error is not None:
                variant.status = f"failed: {type(first.error).__name__}: {_line(first.error)}"
                site = _raised_at(first, sites)
                if site is not None:
                    found.append(_finding(variant, first, site))
            else:
                _keep(variant, cls, model_config, layouts, builds, build, explored, first)
    return found


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:120] if text else ""


def _raised_at(build: Any, sites: set[str]) -> tuple[str, int] | None:
    """The subscript the build's ``IndexError`` was raised at, when it is one of ``sites``
    (the innermost frame, so a list vLLM indexes for the model is not the model's)."""
    if not isinstance(build.error, IndexError):
        return None
    frames = list(traceback.walk_tb(build.error_tb or build.error.__traceback__))
    if not frames:
        return None
    frame, line = frames[-1]
    site = f"{frame.f_code.co_filename}:{line}"
    return (frame.f_code.co_filename, line) if site in sites else None


def _finding(variant: Variant, build: Any, site: tuple[str, int]) -> DraftListIndexed:
    ((attr, value),) = variant.overrides.items()
    error = _line(build.error)
    return DraftListIndexed(attr, len(value), error, site, build.layout.name, variant.label())


def _keep(
    variant: Variant,
    cls: type | None,
    model_config: Any,
    layouts: list[Any],
    builds: list[Any],
    build: Callable[[Any, Any], Any],
    explored: Exploration,
    first: Any,
) -> None:
    """As exploration keeps a variant: when it executes a site no build executed."""
    before = measure(cls, [*builds, *explored.builds])
    after = measure(cls, [*builds, *explored.builds, first])
    variant.new_sites = after["executed"] - before["executed"]
    if variant.new_sites <= 0:
        variant.status = "no new site"
        return
    variant.status = "kept"
    first.variant = variant.label()
    explored.builds.append(first)
    for layout in layouts[1:]:
        more = build(model_config, layout)
        if more.error is None:
            more.variant = variant.label()
            explored.builds.append(more)
