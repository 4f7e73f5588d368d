"""The checkpoint dry-run of config variants: a kept variant whose build has parameters the
base build lacks is streamed through ``load_weights`` too, under its own config.

The base config's dry-run never sees a parameter only a variant builds (a ``k_norm`` on
KV-shared layers, whose checkpoint has none): it passes unloaded. Each such variant's tp=1
build gets PFX701 (no quantization dry-run: the cost stays one stream per variant), with
the variant's config applied again, for the reference checkpoint and for a loader that
reads the config. A finding the base dry-run already made is not repeated; a variant whose
dry-run cannot run gets a PFX600 note with the variant and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefixlint.introspect.coverage.variants import Exploration, applied, config_objects
from prefixlint.introspect.finding import Finding, Unverified, class_site

_OWN_LAYOUT = (
    "not run: no transformers class says what a checkpoint of the variant's config holds "
    "(the base config's dry-run used the model's own layout)"
)


_UNREAD = (
    "not run: the config class holds no {}, so the transformers class that says what a "
    "checkpoint holds never reads the value the variant sets"
)


def _unread_by_reference(model_config: Any, overrides: dict[str, Any]) -> list[str]:
    """The varied attributes no config object has before the variant sets them (vLLM reads
    them with a default, the transformers config class does not declare them): no real
    checkpoint's config carries them, so a variant's parameters are not judged against a
    reference that cannot build them (Qwen3-VL-MoE's ``shared_expert_intermediate_size``,
    read by the Qwen3-MoE layers it shares)."""
    configs = config_objects(model_config)
    return [
        attr
        for attr in overrides
        if not attr.startswith("$") and not any(hasattr(c, attr) for c in configs)
    ]


def _tp1(builds: list[Any], label: str) -> Any:
    """The tp=1, pp=1 build of the config variant ``label`` ("": the base config)."""
    return next(
        (
            b
            for b in builds
            if b.error is None
            and b.model is not None
            and b.variant == label
            and b.layout.tp == 1
            and b.layout.pp == 1
        ),
        None,
    )


def _parameters(build: Any) -> set[str]:
    return {name for name, _ in build.model.named_parameters()}


def dry_run_variants(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    explored: Exploration,
    base: Any,
    synthesised: bool,
    deadline: float | None = None,
    own_layout: bool = False,
    rendered: Callable[[list[Any]], list[Finding]] | None = None,
) -> tuple[list[Finding], list[Unverified]]:
    """PFX701 findings of the kept variants that add parameters, and what of them was not
    verified (``Unverified`` facts, PFX600 notes), for a base dry-run ``base``
    (``dryrun.DryRun``) that verified; nothing otherwise (the base dry-run's own note says
    why nothing was checked). ``own_layout``: the base dry-run had no reference class
    (``selflayout.py``); the variants get a note, not a dry-run. ``rendered``: the findings
    of a dry-run's typed facts (``checks.findings_of``, passed in: the checks read
    coverage, so coverage does not import them)."""
    from prefixlint.introspect import dryrun
    from prefixlint.introspect.dryrun.quant import OUT_OF_TIME, past

    start = _tp1(builds, "")
    if base.status != "verified" or start is None:
        return [], []
    known = {(f.code, f.file, f.line) for f in base.findings}
    base_params = _parameters(start)
    out: list[Finding] = []
    notes: list[Unverified] = []
    for variant in explored.variants:
        label = variant.label()
        build = _tp1(explored.builds, label) if variant.status == "kept" else None
        if build is None or not _parameters(build) - base_params:
            continue
        if own_layout:
            notes.append(_note(cls, label, _OWN_LAYOUT))
            continue
        unread = _unread_by_reference(model_config, variant.overrides)
        if unread:
            notes.append(_note(cls, label, _UNREAD.format(", ".join(f"`{a}`" for a in unread))))
            continue
        if past(deadline):
            notes.append(_note(cls, label, OUT_OF_TIME))
            break
        try:
            with applied(model_config, variant.overrides, variant.everywhere):
                outcome = dryrun.run(
                    cls, model_config, [build], True, synthesised, deadline, quantize=False
                )
        except Exception as e:  # a failure of the dry-run itself, never a lost target
            notes.append(_note(cls, label, f"{type(e).__name__}: {str(e).strip()[:200]}"))
            continue
        if outcome.status != "verified":
            notes.append(_note(cls, label, outcome.reason))
        facts = getattr(outcome, "facts", None) or []
        if facts and rendered is None:
            raise TypeError("a variant's dry-run gave facts, and nothing renders them")
        for finding in outcome.findings + (rendered(facts) if rendered and facts else []):
            key = (finding.code, finding.file, finding.line)
            if finding.code != "PFX701" or key in known:
                continue
            known.add(key)
            finding.message += (
                f" (config variant {label}, which builds parameters the base config does not)"
            )
            out.append(finding)
    return out, notes


def _note(cls: type | None, label: str, reason: str) -> Unverified:
    return Unverified(f"the checkpoint dry-run of config variant {label}", reason, class_site(cls))
