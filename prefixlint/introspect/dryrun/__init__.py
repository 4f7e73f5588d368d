"""PFX701/PFX702/PFX703: a checkpoint, a quantization config and a LoRA dry-run on the meta
device.

PFX701: the reference ``transformers`` class of the same config, built on meta, says which
tensors a checkpoint holds (its ``state_dict`` as ``save_pretrained`` writes it: tied
copies dropped, transformers' own weight conversions reverted). Each is streamed, as a
tagged meta tensor, through the vLLM model's own ``load_weights``; ``tagged.py`` records
which parameter regions each checkpoint tensor reached. Dropped tensors, parameters (or
shards of stacked parameters) never written, and a ``load_weights`` that raises on a name
are reported.

PFX702: the model is built again under vLLM's real ``Fp8Config`` with ``ignored_layers``
naming whole kinds of checkpoint layers, and every linear layer's method is compared with
what the checkpoint names that PFX701 saw reach it demand.

Where the dry-run cannot run, a PFX600 note says why; it never guesses a finding.

Parts: ``layouts.py`` (the checkpoint layouts), ``divergence.py`` (a synthesised config
read differently), ``streaming.py`` (through ``load_weights``), ``weights.py`` (PFX701),
``quant.py`` (PFX702), ``quantlayouts.py`` (PFX701 on FP8 layouts: scales and KV-cache
scales), ``sites.py`` (where findings point); ``run`` here ties them.
``lora.py`` (PFX703) matches a LoRA adapter on the same build, after ``run``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from prefixlint.introspect.builds.layout import build_layout
from prefixlint.introspect.builds.parallel import Layout
from prefixlint.introspect.dryrun import quantlayouts
from prefixlint.introspect.dryrun.divergence import Divergence, reconcile
from prefixlint.introspect.dryrun.layouts import (
    NotVerified,
    incomplete_experts,
    normal,
    reference,
    reference_class,
)
from prefixlint.introspect.dryrun.quant import OUT_OF_TIME, layer_sources, past, quant_facts
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import stream
from prefixlint.introspect.dryrun.weightfacts import Loading
from prefixlint.introspect.dryrun.weights import (
    coverage_facts,
    loader_refusals,
    refused_modules,
)
from prefixlint.introspect.finding import Finding, Unverified, class_site, describe_error

__all__ = ["DryRun", "NotVerified", "incomplete_experts", "reference_class", "run"]


@dataclass
class DryRun:
    status: str = "off"  # verified | not verified | off
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    # checkpoint layer name -> vLLM module path, for PFX702 and the report
    mapping: dict[str, str] = field(default_factory=dict)
    # A complete stream's typed results, for a review's base against head
    # (``basediff_builds.lost_loads``): "streamed", the checkpoint names fed; "dropped",
    # those ``load_weights`` did not consume -> [file, line] of the loader that drops each;
    # "unwritten", parameters no tensor reached -> [file, line] that built their module.
    loading: dict[str, Any] = field(default_factory=dict)
    # typed facts (not findings): the pipeline hands them to their check units
    # (``checks.findings_of``); producers move here from ``findings`` one by one. Last,
    # by keyword only: callers pass ``mapping`` and ``loading`` by position.
    facts: list[Any] = field(default_factory=list)


def _note(message: str, site: tuple[str, int]) -> Unverified:
    """What the dry-run could not check, said whole (``message``) at ``site``: a fact the
    PFX600 unit words."""
    return Unverified("", message, site)


# what of the dry-run did not run, or ran in part (``Unverified.what``)
CHECKPOINT = "checkpoint dry-run"
CHECKPOINT_IN_PART = "checkpoint dry-run, in part"


def _divergence_note(divergence: Divergence, sites: Sites) -> Unverified:
    shown = divergence.reasons[:4]
    more = len(divergence.reasons) - len(shown)
    what = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return Unverified(
        CHECKPOINT_IN_PART,
        "transformers and vLLM read the synthesised config "
        f"differently, so what a checkpoint holds there is unknown ({what}); those tensors "
        "are not judged. `--config` with a real checkpoint's config.json checks them",
        sites.class_site,
    )


def _in_part(divergence: Divergence | None, why: str, sites: Sites) -> list[Unverified]:
    """What of the chosen layout was not streamed: parts a synthesised config is read
    differently as, and experts left out (``why``)."""
    notes = []
    if divergence is not None and divergence.reasons:
        notes.append(_divergence_note(divergence, sites))
    if why:
        notes.append(Unverified(CHECKPOINT_IN_PART, why, sites.class_site))
    return notes


def refused_reason(broken: bool) -> str:
    """Why a stream that raised on too many kinds of names left the rest unchecked."""
    if broken:
        return (
            "`load_weights` refuses checkpoint names the model's own tables declare (a "
            "PFX701 error); the other names load, and were not judged further"
        )
    return "`load_weights` raised on too many kinds of names to check the rest"


def _stream_context(base: Any, model_config: Any) -> Any:
    from vllm.config import set_current_vllm_config

    from prefixlint.introspect.builds.parallel import fake_parallel_state
    from prefixlint.introspect.vllm_api import set_default_torch_dtype as dtype_context

    set_default_torch_dtype = dtype_context()

    @contextlib.contextmanager
    def context() -> Any:
        with (
            fake_parallel_state(base.layout, moe=True),
            set_current_vllm_config(base.vllm_config),
            set_default_torch_dtype(model_config.dtype),
        ):
            yield

    return context


def _served_as_embedding(model_config: Any) -> bool:
    """vLLM converts the model for embedding: the config says so (a pooling runner), or
    the architecture is one vLLM registers as an embedding model, which its pooling runner
    serves through the adapter (the synthesised config has no sentence-transformers files
    that would select that runner)."""
    if getattr(model_config, "convert_type", None) == "embed":
        return True
    from prefixlint.introspect.vllm_api import EMBEDDING_GROUP, group_of

    archs = getattr(model_config.hf_config, "architectures", None) or []
    return bool(archs) and group_of(archs[0], EMBEDDING_GROUP)


def _as_served(model: nn.Module, model_config: Any) -> Any:
    """The model as vLLM's loader serves it: an architecture run as an embedding model
    (``LlamaModel``, ``MistralModel``) gets vLLM's own ``as_embedding_model`` adapter for
    the stream (``vllm_api.embedding_adapted``)."""
    from prefixlint.introspect.vllm_api import embedding_adapted

    return embedding_adapted(model, _served_as_embedding(model_config))


def _base_build(model_config: Any, builds: list[Any]) -> Any:
    base = next(
        (b for b in builds if b.error is None and b.layout.tp == 1 and b.layout.pp == 1), None
    )
    if base is not None or not any(b.error is None for b in builds):
        return base

    fresh = build_layout(builds[0].plan, Layout())  # the plan the builds were built on
    return fresh if fresh.error is None else None


def unbuilt(cls: type | None, builds: list[Any]) -> DryRun:
    """The dry-run's answer when it has no tp=1 build to load into: nothing to say when no
    layout built (the failure is reported), else a note that the layouts that built were
    not dry-run, with the tp=1 build's failure (a hidden verdict is never a silent one)."""
    if not any(b.error is None for b in builds):
        return DryRun("", "the model did not build")
    failed = next((b for b in builds if b.layout.tp == 1 and b.layout.pp == 1), None)
    error = failed.error if failed is not None else None
    why = f" ({describe_error(error)})" if error is not None else ""
    reason = f"the dry-run loads into the tp=1 build, which failed{why}"
    return DryRun("not verified", reason, facts=[Unverified("", reason, class_site(cls))])


def _quantized_layouts(
    model_config: Any,
    base: Any,
    reference: tuple[dict[str, Any], Any],
    sites: Sites,
    deadline: float | None,
    found: tuple[list[Any], list[Loading]],
    notes: list[Unverified],
) -> list[str]:
    """PFX701 on FP8 layouts (``quantlayouts.py``), its facts added to ``found``'s; what
    of it did not run is a fact in ``notes`` and the part of the reason returned."""
    facts = found[1]

    def through(build: Any, layout: dict[str, Any]) -> Any:
        with _as_served(build.model, model_config):
            return stream(build.model, layout, _stream_context(build, model_config))

    seen, gap = quantlayouts.check(base, model_config, reference, sites, through, deadline)
    facts += seen
    if not gap:
        return []
    notes.append(Unverified("quantized layouts, in part", gap, sites.class_site))
    return [f"the quantized layouts in part ({gap})"]


def _quantization(
    quantize: bool,
    cls: type | None,
    model_config: Any,
    quantized: tuple[Any, dict[str, Any], tuple[dict[str, Any], Any]],
    sites: Sites,
    deadline: float | None,
    found: tuple[list[Any], list[Any]],
    notes: list[Unverified],
) -> list[str]:
    """PFX702's typed facts (``quant_facts``) and the FP8 layouts' PFX701 for the base
    build, its layer sources and the stream it loaded, added to ``found`` (findings,
    facts; what did not run: to ``notes``); returns what of them did not run.
    ``quantize`` false (a config variant's dry-run): PFX701 only, nothing here."""
    if not quantize:
        return []
    base, sources, reference = quantized
    quant, skipped = quant_facts(cls, model_config, base, sources, sites, deadline)
    found[1].extend(quant)  # each reaches its unit (``checks.findings_of``)
    partial = _quantized_layouts(model_config, base, reference, sites, deadline, found, notes)
    if skipped:
        notes.append(Unverified("quantization dry-run", skipped, sites.class_site))
        partial.append(f"the quantization dry-run did not run ({skipped})")
    return partial


def _refused(
    base: Any,
    model_config: Any,
    streamed: tuple[Any, dict[str, Any]],
    sites: Sites,
    found: tuple[list[Any], list[Loading], list[Unverified]],
) -> DryRun:
    """A stream that raised on too many kinds of names: the loader's error when the names
    are the model's own, else not verified (``loader_refusals``)."""

    def restream(part: dict[str, Any]) -> Any:
        with _as_served(base.model, model_config):
            return stream(base.model, part, _stream_context(base, model_config))

    findings, facts, notes = found
    judged, broken = loader_refusals(facts, *streamed, sites, restream)
    return DryRun("not verified", refused_reason(broken), facts=findings + judged + notes)


def run(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    enabled: bool = True,
    synthesised: bool = False,
    deadline: float | None = None,
    quantize: bool = True,
) -> DryRun:
    """PFX701 and PFX702 (``quantize=False``: PFX701 only, for a config variant) for one
    target, the tp=1 build reused. ``synthesised``: a config made up by prefixlint, so where
    transformers and vLLM read it into different structures nothing is judged
    (``reconcile``). Past ``deadline`` (``time.monotonic``), steps not run get a note."""
    if not enabled:
        return DryRun("off")
    base = _base_build(model_config, builds)
    if base is None:
        return unbuilt(cls, builds)
    sites = Sites(cls, base.model, base.recorder)
    sites.embedding = _served_as_embedding(model_config)
    if past(deadline):
        note = Unverified("checkpoint and quantization dry-run", OUT_OF_TIME, sites.class_site)
        return DryRun("not verified", OUT_OF_TIME, facts=[note])
    try:
        from vllm.config import set_current_vllm_config

        # Under the build's vLLM config: model modules imported earlier in this worker may
        # have put vLLM layers into transformers' classes (ones that ask for the current
        # config), and the reference must not depend on which ran before.
        with set_current_vllm_config(base.vllm_config):
            layouts, ref = reference(model_config.hf_config, cls)
        if not callable(getattr(base.model, "load_weights", None)):
            raise NotVerified("the model has no `load_weights`")
    except NotVerified as e:
        said = Unverified(CHECKPOINT, str(e), sites.class_site)
        return DryRun("not verified", str(e), facts=[said])
    tried = []
    for layout in layouts:
        divergence = reconcile(cls, ref, base.model, layout) if synthesised else None
        incomplete, why = incomplete_experts(layout)
        streamed = {
            k: v
            for k, v in layout.items()
            if k not in incomplete and not (divergence and k in divergence.names)
        }
        with _as_served(base.model, model_config):
            s = stream(base.model, streamed, _stream_context(base, model_config))
        found = coverage_facts(s, streamed, sites, divergence)
        tried.append((s, streamed, found, divergence, why))
        if not found and not s.limit:
            break
    # the layout vLLM loads best: a loader need only accept one of them
    s, streamed, facts, divergence, why = min(tried, key=lambda t: (not t[0].complete, len(t[2])))
    findings: list[Any] = []  # notes (``Unverified``) of what did not run
    notes = _in_part(divergence, why, sites)
    if s.limit:
        reason = f"a weight loader needs real data on meta tensors ({s.limit})"
        site = (s.limit_error and sites.frame(s.limit_error)) or sites.loader("")
        notes.append(Unverified(CHECKPOINT, reason, site))
        return DryRun("not verified", reason, facts=findings + facts + notes)
    if not s.complete:
        return _refused(base, model_config, (s, streamed), sites, (findings, facts, notes))
    refused = refused_modules(s, sites)
    sources = {k: v for k, v in layer_sources(s, base.model).items() if normal(k) not in refused}
    mapping = {layer: path for path, layers in sources.items() for layer in layers}
    quantized = (base, sources, (streamed, s))
    found = (findings, facts)
    partial = _quantization(quantize, cls, model_config, quantized, sites, deadline, found, notes)
    # "verified" with a reason: what of the check did not run, never left unsaid
    if divergence is not None and divergence.reasons:
        partial.append(f"{len(divergence.reasons)} part(s) read differently from the config")
    if why:
        partial.append(why)
    reason = f"in part: {'; '.join(partial)}" if partial else ""
    loading = _loading(s, streamed, sites)
    return DryRun("verified", reason, [], mapping, loading, facts=findings + facts + notes)


def _loading(s: Any, streamed: dict[str, Any], sites: Sites) -> dict[str, Any]:
    """What the stream consumed and wrote, as typed facts with head's lines."""
    dropped = {n: list(sites.loader(n)) for n in sorted(streamed) if n not in s.recorder.consumed}
    unwritten = {
        t.name: list(sites.module(t.name.rpartition(".")[0]))
        for t in s.recorder.by_storage.values()
        if t.is_param and not t.written
    }
    return {"streamed": sorted(streamed), "dropped": dropped, "unwritten": unwritten}
