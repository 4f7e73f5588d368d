"""Build one architecture for several parallel layouts, on the meta device, and check it.

Runs inside a worker process (see ``process/server.py``): it imports torch and vLLM. A target
(``targets.py``) gets its config (``configs/``: a given file, or synthesis repaired by
probe builds), its ModelConfig (``modelconfig.py``), one build per layout
(``building.py``) and config variants that reach unexecuted sites (``explore.py``); the
checks (``checks.py``), coverage notes (``coverage.py``) and the checkpoint dry-run
(``dryrun/``) judge the builds, and ``outcome.py`` says what it all came to.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.introspect.process.env import prepare

prepare()

from prefixlint.introspect.builds.layout import (  # noqa: E402
    V2_SOURCE,
    Build,
    BuildPlan,
    build_layout,
    needs_model_runner_v2,
)
from prefixlint.introspect.builds.modelconfig import (  # noqa: E402
    load_model_config,
    model_config_repaired,
)
from prefixlint.introspect.builds.parallel import Layout  # noqa: E402
from prefixlint.introspect.builds.recorder import named_sites  # noqa: E402
from prefixlint.introspect.checks import check_build, findings_of  # noqa: E402
from prefixlint.introspect.checks import pfx608_engine_start as startup  # noqa: E402
from prefixlint.introspect.checks.pfx703_lora import folded  # noqa: E402
from prefixlint.introspect.configs import (  # noqa: E402
    ConfigGap,
    ConfigSource,
    frame_files,
    repair,
    resolve_config,
    seed_from_code,
    write_tokenizer,
)
from prefixlint.introspect.coverage.numbering import explore_numbering  # noqa: E402
from prefixlint.introspect.coverage.sites import covered, not_verified  # noqa: E402
from prefixlint.introspect.coverage.variant_dryrun import dry_run_variants  # noqa: E402
from prefixlint.introspect.coverage.variants import Exploration, explore  # noqa: E402
from prefixlint.introspect.drafts.mtp_layers import complete_mtp_layers  # noqa: E402
from prefixlint.introspect.drafts.plan import (  # noqa: E402
    draft_policy,
    force_architecture,
    is_draft,
    plan_draft,
    shared_with_target,
)
from prefixlint.introspect.finding import (  # noqa: E402
    Finding,
    Unverified,
    class_site,
    in_models_folder,
    model_code,
)
from prefixlint.introspect.process.kernels import stand_ins_used  # noqa: E402
from prefixlint.introspect.targets.resolve import (  # noqa: E402
    Target,
    load_class,
    vllm_registry,
)

# (the worker reaches the targets through this module)
from prefixlint.introspect.targets.resolve import resolve_targets as resolve_targets  # noqa: E402
from prefixlint.introspect.verdict import own  # noqa: E402
from prefixlint.introspect.verdict.gaps import (  # noqa: E402
    describe,
    fix_hint,
    outside_vllm,
    reclaim,
    split_gaps,
)
from prefixlint.introspect.verdict.located import in_user_code  # noqa: E402
from prefixlint.introspect.verdict.outcome import (  # noqa: E402
    LayoutOutcome,
    TargetResult,
    classify,
    environmental,
    skipped,
)


def target_config_source(
    target: Target,
    cls: type | None,
    config: str | None,
    config_table: dict[str, str] | None,
    config_base: str | None,
) -> ConfigSource:
    """The config a target is built from, in every phase (``smoke`` too): ``--config``,
    ``[tool.prefixlint.configs]``, a plugin's own config class, synthesis, and for an
    out-of-tree class no table knows a Llama-shaped config, said out loud."""
    arch_for_config = target.arch.removesuffix("__prefixlint")
    if not config and not (config_table and arch_for_config in config_table):
        from prefixlint.introspect.targets.plugins import config_source

        plugin = config_source(target.arch, cls)  # a plugin's own config class
        if plugin is not None:
            return plugin
    try:
        return resolve_config(
            arch_for_config,
            config,
            config_table,
            Path(config_base) if config_base else None,
            architecture_name=target.arch,
            model_cls=cls,
        )
    except ConfigGap:
        if not target.registered or config:
            raise
        # An out-of-tree class with a name transformers does not know: Llama-shaped.
        source = resolve_config("LlamaForCausalLM", None, None, None, target.arch)
        source.source = (
            f"synthesised (llama-shaped fallback: no config known for {arch_for_config}; "
            "give one with --config or [tool.prefixlint.configs])"
        )
        return source


@dataclass
class Options:
    """What the caller asked of a target's run (``run_target``'s keywords)."""

    config: str | None = None
    config_table: dict[str, str] | None = None
    config_base: str | None = None
    dryrun: bool = True
    explore_budget: float = 0.0
    deadline: float | None = None
    checkpoint: str | None = None
    lora: str | None = None
    compare: bool = True


@dataclass
class TargetRun:
    """One target's run as it passes through the stages: what each stage leaves for the
    next. ``result`` is what the worker answers."""

    target: Target
    layouts: list[Layout]
    options: Options
    result: TargetResult
    started: float
    cls: Any = None
    plan: Any = None
    source: Any = None
    builds: list[Build] = field(default_factory=list)
    explored: Exploration | None = None
    numbered: list[Any] = field(default_factory=list)  # a draft's numbering facts


def run_target(target: Target, layouts: list[Layout], **options: Any) -> TargetResult:
    """A target's run, stage by stage (``STAGES``), each stage one function over the
    ``TargetRun``; a stage that returns False ends the run (a target refused at set-up).
    ``options`` are ``Options``' fields: ``compare``, the comparison with transformers
    (``compare/``, PFX609); ``checkpoint``, a checkpoint folder whose layout and
    quantization config the dry-run checks (``checkpoint_run.py``; its config.json is the
    build config unless ``config`` is given); ``lora``, a PEFT adapter folder the LoRA
    dry-run matches (``dryrun/lora.py``; without one, a synthetic adapter)."""
    result = TargetResult(target=target.spec, arch=target.arch)
    run = TargetRun(target, layouts, Options(**options), result, time.perf_counter())
    for stage in STAGES:
        if stage(run) is False:
            return run.result
    return run.result


def _set_up(run: TargetRun) -> bool:
    """Set-up: the target's class and its config (a refusal here is the model's finding
    at its line, or the target is skipped)."""
    registry = vllm_registry()
    result, target, given = run.result, run.target, run.options
    run.cls = target.cls
    if run.cls is None:
        try:
            run.cls = load_class(registry, target.arch)
        except (Exception, SystemExit) as e:
            own = startup.import_failure(e) or startup.unresolved_registration(
                registry, target.arch
            )
            run.result = _refused(skipped(result, e, run.started), own)
            return False
    config = (given.config, given.config_table, given.config_base, given.checkpoint)
    try:
        run.plan, run.source = _target_config(result, target, run.cls, registry, config)
    except Exception as e:
        own = startup.interface_refusal(run.cls, e) or startup.malformed_config(e)
        run.result = _refused(skipped(result, e, run.started), own)
        return False
    if run.layouts:
        draft = (target.arch.removesuffix("__prefixlint"), registry, target)
        run.plan = _prepared(result, run.plan, run.layouts[0], run.cls, run.source, draft)
    return True


def _builds(run: TargetRun) -> None:
    """Builds: one per layout, then the config variants that reach sites no layout ran
    (and, for a draft, its layers numbered on), and which construction sites ran."""
    plan, cls, layouts = run.plan, run.cls, run.layouts
    run.builds = _build_layouts(run.result, plan, layouts)

    def build(config: Any, layout: Layout) -> Build:
        # a variant's overrides are applied to the plan's own config, in place
        return build_layout(plan, layout)

    budget = run.options.explore_budget
    explored = explore(cls, plan.model_config, layouts, run.builds, build, budget)
    if plan.draft_spec is not None and budget > 0:  # layers numbered on
        run.numbered = explore_numbering(
            cls, plan.model_config, layouts, run.builds, build, explored
        )
    run.builds += explored.builds
    run.explored = explored
    covered(run.result, cls, run.builds, explored)


def _checks(run: TargetRun) -> None:
    """Per-build and target checks (``checks.CHECKS``), the coverage's notes, and the
    layer-index refusals vLLM's start would raise."""
    result, cls, plan = run.result, run.cls, run.plan
    complete = not result.coverage["not_executed"]
    result.findings = _findings(
        run.target.arch, cls, plan, run.builds, result.synthesised, complete
    )
    result.findings += findings_of(run.numbered + not_verified(result.coverage))
    result.findings += startup.layer_index_refusals(run.builds, plan.model_config, cls)


def _dry_runs(run: TargetRun) -> None:
    """Dry-runs: the checkpoint, quantization and LoRA (PFX701-703)."""
    given = (run.options.checkpoint, run.options.lora)
    _dry_run(
        run.result,
        run.cls,
        run.plan,
        run.builds,
        run.options.dryrun,
        run.options.deadline,
        given,
        run.explored,
    )


def _comparison(run: TargetRun) -> None:
    """The comparison with transformers (PFX609); a real checkpoint's config is not
    compared: its weights are not transformers'."""
    if not run.options.checkpoint:
        explore = (run.explored, run.options.explore_budget)
        _compare(run.result, run.cls, run.plan, run.builds, run.options.compare, explore)


def _finish(run: TargetRun) -> None:
    """What it came to: findings in the user's code only (a plugin's, not vLLM's), the
    target's status, and the meta models freed (a zoo worker builds hundreds)."""
    result, builds = run.result, run.builds
    result.findings = in_user_code(result.findings, run.cls, builds)
    failed = [b for b in builds if b.error is not None]
    if len(failed) == len(builds) and builds:
        result.status = "failed"
        result.reason = _describe(failed[0].error)
        result.category = classify(failed[0].error, result.findings, result.synthesised)
    result.seconds = time.perf_counter() - run.started
    for build in builds:
        build.model = None


STAGES = (_set_up, _builds, _checks, _dry_runs, _comparison, _finish)


def _target_config(
    result: TargetResult, target: Target, cls: Any, registry: Any, given: tuple
) -> tuple[BuildPlan, ConfigSource]:
    """The target's build plan (its ModelConfig) and where its config came from: a
    checkpoint's, a draft's as vLLM derives it, the one given, or a synthesised one (with
    the guesses said)."""
    config, config_table, config_base, checkpoint = given
    arch_for_config = target.arch.removesuffix("__prefixlint")
    from_checkpoint = bool(checkpoint and not config)
    if from_checkpoint:  # said before it is read: a checkpoint that cannot be read is skipped
        result.config_source = f"checkpoint {checkpoint} (its config.json)"
        result.synthesised = False
        config = _checkpoint_config(str(checkpoint))
    draft = None
    if not config and not (config_table and arch_for_config in config_table):
        draft = _draft_model_config(arch_for_config, cls, registry, target.arch)
    if draft is not None:  # a draft's config is vLLM's, derived from a synthesised target
        plan, result.config_source = draft
        return plan, ConfigSource("", result.config_source, synthesised=True)
    source = target_config_source(target, cls, config, config_table, config_base)
    result.config_source, result.synthesised = source.source, source.synthesised
    if from_checkpoint:
        result.config_source = f"checkpoint {checkpoint} (its config.json)"
        result.synthesised = False
    if source.synthesised:
        model_config, early = model_config_repaired(source.folder)
        if early:
            result.config_source += f"; guessed {', '.join(early)}"
    else:
        model_config = load_model_config(source.folder)
    return BuildPlan(model_config), source


def _build_layouts(result: TargetResult, plan: BuildPlan, layouts: list[Layout]) -> list[Build]:
    """One build per layout, each outcome recorded, the kernel stand-ins used said."""
    builds: list[Build] = []
    for layout in layouts:
        build = build_layout(plan, layout)
        builds.append(build)
        status = "built" if build.error is None else "failed"
        outcome = LayoutOutcome(layout, status, build.seconds, _describe(build.error))
        if build.model is not None and build.error is None:
            outcome.params = {n: list(p.shape) for n, p in build.model.named_parameters()}
            outcome.modules = named_sites(build.model, build.recorder)
        result.layouts.append(outcome)
    stood_in = stand_ins_used([b.model for b in builds])
    if stood_in:  # said, as every guess is (kernels.py)
        result.config_source += (
            f"; stand-ins for vLLM's compiled ops this vLLM lacks: {', '.join(stood_in)}"
        )
    return builds


def _refused(result: TargetResult, finding: Finding | None) -> TargetResult:
    """A target that could not be set up because of the model itself (``startup.py``):
    the finding at its line, and the target counts as the model's failure."""
    if finding is not None:
        result.findings.append(finding)
        result.category = "finding"
    return result


def _prepared(
    result: TargetResult,
    plan: BuildPlan,
    layout: Layout,
    cls: type | None,
    source: ConfigSource,
    draft: tuple[str, Any, Target],
) -> BuildPlan:
    """The plan to build: Model Runner V2 where V1 refuses the model, a synthesised
    config repaired (guessed attributes, a demanded dtype, guesses a draft's target reads
    too); what was done is added to ``result.config_source``."""
    arch, registry, target = draft
    if needs_model_runner_v2(plan, layout):
        result.config_source += f"; {V2_SOURCE}"
    if not result.synthesised:
        return plan
    guessed, last_error = _repair_loop(plan, layout, cls=cls)
    if plan.draft_spec is not None:  # a draft's dtype is its target's: plan again
        other = _draft_in_dtype(plan, arch, cls, registry, target.arch, last_error)
    else:
        config = _demanded_dtype(plan.model_config, source.folder, last_error, guessed)
        other = plan if config is plan.model_config else plan.replanned(config)
    more: list[str] = []
    if other is not plan:
        plan = other
        more, last_error = _repair_loop(plan, layout, cls=cls)
    elif needs_model_runner_v2(plan, layout, last_error):
        result.config_source += f"; {V2_SOURCE}"
        more, last_error = _repair_loop(plan, layout, cls=cls)
    elif last_error is not None and _mirror_to_target(plan, guessed):
        more, last_error = _repair_loop(plan, layout, cls=cls)
    guessed += more
    if source.folder:  # a draft's config is vLLM's, from its target: no folder of ours
        config = _with_tokenizer(plan.model_config, source.folder, last_error, guessed, cls)
        if config is not plan.model_config:
            plan = plan.replanned(config)
            guessed += ["tokenizer", *_repair_loop(plan, layout, cls=cls)[0]]
    if guessed:
        result.config_source += f"; guessed {', '.join(guessed)}"
    return plan


def _findings(
    arch: str,
    cls: type | None,
    plan: BuildPlan,
    builds: list[Build],
    synthesised: bool,
    complete: bool,
) -> list[Finding]:
    """The checks over the builds that say something about the model; a PFX600 note for
    the layouts that failed because of the config or this machine (see ``gaps.py``)."""
    checked, gap_builds = split_gaps(builds, synthesised, classify)
    checked, gap_builds = reclaim(checked, gap_builds, _own_failure(plan, builds, arch, cls))
    draft = draft_policy(plan.draft_spec)  # consulted by the checks
    findings = check_build(cls, plan.model_config, checked, complete, draft)
    gaps = [
        Unverified(
            arch,
            reason,
            class_site(cls),
            "build",
            fix_hint(category, reason, synthesised, outside_vllm(class_site(cls)[0])),
            tuple(b.layout.name for b in failed),
            category,
            synthesised,
        )
        for (category, reason), failed in gap_builds.items()
    ]
    return findings + findings_of(gaps)


def _own_failure(plan: BuildPlan, builds: list[Build], arch: str, cls: type | None) -> Any:
    """Whether failed builds that look like gaps are the model's own failure
    (``verdict/own.py``): a head count fixed by a literal in the model's code, or a raise
    of the model's that every layout and every config variant tried reaches, or a failure
    in the model's frames that only pipeline stages reach while the same config built
    every unsplit layout."""
    from prefixlint.introspect.checks.base import config_value
    from prefixlint.introspect.coverage.variants import applied

    model_config = plan.model_config
    hf = getattr(model_config, "hf_text_config", None) or model_config.hf_config
    heads = config_value(hf, "num_attention_heads")
    counts = (heads, config_value(hf, "num_key_value_heads") or heads)

    def rebuild(overrides: dict[str, Any]) -> Build | None:
        with applied(model_config, overrides) as ok:
            return build_layout(plan, builds[0].layout) if ok else None

    def judge(failed: list[Build]) -> bool:
        fixed = [
            own.fixed_head_count(b.error_tb, b.error, b.recorder.external, counts) for b in failed
        ]
        if all(fixed) or own.only_pipeline_stages(failed, builds):
            return True
        if own.always_raised(failed, builds, rebuild, lambda a: config_value(hf, a)):
            return True
        other = _registered(arch.removesuffix("__prefixlint"))
        return own.equal_class_builds(
            failed, lambda c: _builds_as(plan, c, failed[0].layout), cls, other
        )

    return judge


def _registered(arch: str) -> type | None:
    """The class vLLM's registry maps ``arch`` to; None when it has none."""
    try:
        return load_class(vllm_registry(), arch)
    except Exception:
        return None


def _builds_as(plan: BuildPlan, other: type, layout: Layout) -> bool:
    """``other`` builds with the plan's config at ``layout``."""
    from dataclasses import replace

    return build_layout(replace(plan, model_class=other), layout).error is None


def _dry_run(
    result: TargetResult,
    cls: type | None,
    plan: BuildPlan,
    builds: list[Build],
    enabled: bool,
    deadline: float | None = None,
    given: tuple[str | None, str | None] = (None, None),
    explored: Exploration | None = None,
) -> None:
    """PFX701/PFX702 (``dryrun/``; against a real checkpoint ``checkpoint_run.py``) and
    PFX703 (``dryrun/lora.py``, with the LoRA adapter given or a synthetic one) on the
    tp=1 build, and PFX701 on the config variants that add parameters
    (``variant_dryrun.py``); a failure of the dry-run itself is a PFX600 note, never a
    lost target."""
    from prefixlint.introspect import dryrun
    from prefixlint.introspect.checks import packed
    from prefixlint.introspect.dryrun import checkpoint_run, lora, selflayout

    checkpoint, adapter = given
    model_config = plan.model_config
    started = time.perf_counter()
    own_layout = False  # the model's own layout (selflayout): no reference for a variant
    try:
        synthesised = result.synthesised
        if checkpoint:
            outcome = checkpoint_run.run(cls, model_config, builds, checkpoint, enabled, deadline)
        else:
            outcome = dryrun.run(cls, model_config, builds, enabled, synthesised, deadline)
            if selflayout.applies(outcome):  # no reference class: the model's own layout
                why, own_layout = outcome.reason, True
                outcome = selflayout.run(
                    cls, model_config, builds, result.synthesised, why, deadline
                )
    except Exception as e:
        failed = Unverified("the checkpoint dry-run failed", _describe(e), class_site(cls))
        outcome = dryrun.DryRun("not verified", _describe(e), facts=[failed])
    outcome.findings += findings_of(outcome.facts)
    if explored is not None and not checkpoint:  # a real checkpoint's config has no variants
        synthesised = result.synthesised
        found, gaps = dry_run_variants(
            cls,
            model_config,
            builds,
            explored,
            outcome,
            synthesised,
            deadline,
            own_layout,
            rendered=findings_of,
        )
        outcome.findings += found + findings_of(gaps)
    if plan.draft_spec is not None:
        for f in outcome.findings:
            shared_with_target(f)
    # fused layers the packed_modules_mapping lacks (packed.py), with or without a dry-run
    fused = packed.missing_entries(cls, builds, outcome.mapping)
    adapted = lora.run(cls, model_config, builds, outcome.mapping, enabled, adapter)
    result.findings += packed.without_duplicates(outcome.findings, fused)
    result.findings += folded(findings_of(adapted.facts), fused) + fused
    result.dryrun, result.dryrun_reason = outcome.status, outcome.reason
    result.loading = outcome.loading
    result.lora, result.lora_reason = adapted.status, adapted.reason
    result.dryrun_seconds = time.perf_counter() - started


def _compare(
    result: TargetResult,
    cls: type | None,
    plan: BuildPlan,
    builds: list[Build],
    enabled: bool,
    explore: tuple[Exploration | None, float],
) -> None:
    """The comparison with transformers (``compare/``) on a real CPU build, its facts
    kept in ``result.compare`` and turned into PFX609 (or a PFX600 note) by its unit;
    with exploration on (``explore``: its result and budget), on the config variants
    that change the computation too (``compare/variants.py``)."""
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare import compare
    from prefixlint.introspect.compare.variants import compare_variants

    if not any(b.error is None for b in builds):
        return
    comparison = compare(cls, plan, builds, enabled, result.synthesised)
    explored, budget = explore
    variants = []
    refused = ""
    if budget > 0 and comparison.status.name != "NOT_RUN":
        try:
            variants = compare_variants(
                cls, plan, builds, explored, result.synthesised, budget, comparison.assumed
            )
        except Exception as e:  # the variants are this stage's extra, never a lost target
            refused = _describe(e)
    result.compare = comparison.to_json()
    if refused:
        result.compare["variants_refused"] = refused
    if variants:
        result.compare["variants"] = [v.to_json() for v in variants]
        result.compare["seconds"] = round(comparison.seconds + sum(v.seconds for v in variants), 3)
    unit = OutputMismatch()
    result.findings += unit.findings(comparison, cls) + unit.on_variants(comparison, variants, cls)


def _checkpoint_config(folder: str) -> str:
    """The checkpoint's config.json as the build config (``checkpoint.build_config``)."""
    from prefixlint.introspect.targets.checkpoint import CheckpointError, build_config, read

    try:
        return build_config(read(folder))
    except CheckpointError as e:
        raise ConfigGap(f"checkpoint {folder}: {e}") from None


def _config_objects(model_config: Any, spec: Any = None) -> list[Any]:
    out = []
    configs = [model_config.hf_config, getattr(model_config, "hf_text_config", None)]
    if spec is not None:  # a draft reads its target's config too
        target = spec.target_model_config
        configs += [target.hf_config, getattr(target, "hf_text_config", None)]
    for config in configs:
        if config is not None and config not in out:
            out.append(config)
            for value in vars(config).values():
                if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                    out.append(value)
    return out


def model_files(cls: type | None) -> list[str]:
    """The source files of the model class and its bases in model code. The class's own
    file counts wherever it lies: a user's copy of a vLLM model (``/tmp/x/hy_v3.py``)
    reads its config as the original does, and a repair that cannot read it guesses
    nothing (HY V3's ``first_k_dense_replace``, read only there)."""
    out = []
    for i, klass in enumerate(getattr(cls, "__mro__", ())):
        try:
            f = inspect.getsourcefile(klass) or ""
        except (OSError, TypeError):
            continue
        own = i == 0 and model_code(f)
        if (own or in_models_folder(f)) and f not in out:
            out.append(f)
    return out


def _repair_loop(
    plan: BuildPlan, layout: Layout, attempts: int = 40, cls: type | None = None
) -> tuple[list[str], BaseException | None]:
    """A synthesised config lacks attributes real checkpoints carry; a probe build names
    them one at a time (an AttributeError, or a TypeError on an attribute that is None)
    and each gets a value consistent with how the model's code uses it. A failure that
    names none (a MoE model that finds no MoE layer) seeds, once, every attribute the
    model's files read and the config lacks."""
    guessed: list[str] = []
    seeded = retried = False
    files = model_files(cls)
    error: BaseException | None = None
    for _ in range(attempts):
        probe = build_layout(plan, layout)
        error = probe.error
        if error is None:
            break
        if probe.vllm_config is None and not retried:
            # VllmConfig's own validation refused once: vLLM's config hooks update the
            # model config as they validate (a hybrid model's mamba block size), and the
            # next VllmConfig, as every layout's build makes it, may pass. Probe again.
            retried = True
            continue
        configs = _config_objects(plan.model_config, plan.draft_spec)
        attr = repair(probe.error, configs, files)
        if attr is None:
            # Seed only for a failure inside the model's code (not, say, VllmConfig's own
            # validation) that names nothing, and only once.
            if seeded or environmental(probe.error) or not frame_files(probe.error):
                break
            seeded = True
            more = seed_from_code(configs, frame_files(probe.error) + files)
            if not more:
                break
            guessed.extend(more)
            continue
        guessed.append(attr)
        guessed += complete_mtp_layers(configs)  # a guessed per-layer list's MTP part
    return guessed, error


_DTYPE_DEMAND = (("bfloat16 only", "bfloat16"), ("float16 only", "float16"))


def _demanded_dtype(
    model_config: Any, folder: str, error: BaseException | None, guessed: list[str]
) -> Any:
    """A model that builds only in one dtype (a kernel cache that supports bfloat16 only)
    is built in it: the checkpoint's dtype, which a synthesised config does not carry."""
    if error is None:
        return model_config
    for words, dtype in _DTYPE_DEMAND:
        if words in str(error):
            try:
                other = load_model_config(folder, dtype=dtype)
            except Exception:
                return model_config
            # the guesses were made on the first config objects: carry them over
            for old, new in zip(
                _config_objects(model_config), _config_objects(other), strict=False
            ):
                for name in guessed:
                    if name in vars(old):
                        setattr(new, name, getattr(old, name))
            return other
    return model_config


def _mirror_to_target(plan: BuildPlan, guessed: list[str]) -> bool:
    """A draft reads its target's config too (``vllm_config.model_config`` is the
    target's), and vLLM derives an MTP draft's config from the target's: an attribute
    guessed on the draft's config is given to the target's config object of the same
    class when it lacks it. Whether anything was given."""
    spec, model_config = plan.draft_spec, plan.model_config
    if spec is None:
        return False
    target = spec.target_model_config
    pairs = [
        (model_config.hf_config, target.hf_config),
        (getattr(model_config, "hf_text_config", None), getattr(target, "hf_text_config", None)),
    ]
    given = False
    for mine, theirs in pairs:
        if mine is None or theirs is None or mine is theirs:
            continue
        if type(mine).__name__.removesuffix("MTP") != type(theirs).__name__.removesuffix("MTP"):
            continue
        for name in guessed:
            if name in vars(mine) and name not in vars(theirs):
                with contextlib.suppress(Exception):
                    setattr(theirs, name, getattr(mine, name))
                    given = True
    return given


def _draft_model_config(
    arch: str, cls: type | None, registry: Any, registered_as: str, dtype: str = "float32"
) -> tuple[BuildPlan, str] | None:
    """The draft's plan (its ModelConfig, built by vLLM's SpeculativeConfig against a
    synthesised target, and that spec), and where it came from; None for an architecture
    that is not a draft."""
    if not is_draft(arch, registry):
        return None

    def resolve(name: str, model_cls: type | None) -> str:
        return resolve_config(name, architecture_name=name, model_cls=model_cls).folder

    try:
        make = functools.partial(load_model_config, dtype=dtype)
        plan = plan_draft(arch, cls, registry, make, resolve)
    except Exception as e:
        raise ConfigGap(
            f"no speculative config builds {arch} against a synthesised target: "
            f"{type(e).__name__}: {str(e).strip()[:200]}"
        ) from e
    if registered_as != arch:  # an out-of-tree copy of a draft: build the copy
        force_architecture(plan, registered_as)
    return BuildPlan(plan.spec.draft_model_config, plan.spec), plan.source


def _draft_in_dtype(
    plan: BuildPlan,
    arch: str,
    cls: type | None,
    registry: Any,
    registered_as: str,
    error: BaseException | None,
) -> BuildPlan:
    """``_demanded_dtype`` for a draft: vLLM gives a draft its target's dtype, so the
    draft is planned again against a target of the dtype the model demands (on the same
    runner). Without such a demand: ``plan``."""
    for words, dtype in _DTYPE_DEMAND:
        if error is not None and words in str(error):
            try:
                draft = _draft_model_config(arch, cls, registry, registered_as, dtype=dtype)
            except Exception:
                return plan
            if draft is None:
                return plan
            return plan.replanned(draft[0].model_config, draft[0].draft_spec)
    return plan


def _with_tokenizer(
    model_config: Any, folder: str, error: BaseException | None, guessed: list[str], cls: Any
) -> Any:
    """A model that looks its special tokens up in the tokenizer at construction
    (``cached_tokenizer_from_config(...).vocab["<image>"]``) gets a small word-level one
    written beside the synthesised config, holding the special tokens its files name;
    the guesses made so far are carried over. Without such a failure: ``model_config``."""
    if error is None or not _reads_tokenizer(error):
        return model_config
    try:
        write_tokenizer(folder, frame_files(error) + model_files(cls))
        dtype = str(model_config.dtype).removeprefix("torch.")
        overrides = getattr(model_config, "hf_overrides", None) or None
        other = load_model_config(folder, dtype, overrides, tokenizer=folder)
    except Exception:
        return model_config
    for old, new in zip(_config_objects(model_config), _config_objects(other), strict=False):
        for name in guessed:
            if name in vars(old):
                setattr(new, name, getattr(old, name))
    return other


def _reads_tokenizer(error: BaseException) -> bool:
    """The innermost model-code function that failed called vLLM's tokenizer getter, and
    got None (phase 2 does not load one)."""
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        if not in_models_folder(frame.f_code.co_filename):
            continue
        try:
            source = inspect.getsource(frame.f_code)
        except (OSError, TypeError):
            return False
        return "tokenizer_from_config(" in source and (
            "NoneType" in str(error) or isinstance(error, AssertionError)
        )
    return False


def _describe(error: BaseException | None) -> str:
    return describe(error)
