"""The comparison with transformers on config variants that change the computation.

One synthesised config takes one path through the model: attention biases off, a full
rotary embedding, an untied head. A bug on another path (a bias flag the layer ignores, a
partial rotary factor dropped) builds, loads and runs with wrong outputs, and the base
comparison never sees it. So the comparison runs again on variants of the config that
its class declares and the model reads:
- every flag of the config class's own (not the generic ones every config has, but
  ``tie_word_embeddings``) that the model's files read: flipped (``attention_bias``,
  ``mlp_bias``, ``use_qkv_bias``, ``tie_word_embeddings``);
- every fraction the class declares and the model reads (a ``*factor``/``*ratio`` in
  (0, 1]), and the ``partial_rotary_factor`` inside ``rope_parameters`` where the class
  declares one there and the model reads ``rope_parameters``: 1 becomes 0.5, less than 1
  becomes 1;
- the config explorer's kept variants (``coverage/variants.py``: layer-type patterns, MoE
  layer schedules, optional sizes) whose attributes the class declares;
- the layer schedules transformers' class compares with a layer index (``schedules.py``:
  ``mlp_only_layers``, ``decoder_sparse_step``, ``first_k_dense_replace``), moved, whether
  the model reads them or not (last, counted apart).

A value another attribute is derived from (Qwen2's ``use_sliding_window`` and its
``layer_types``) is set with what the config class derives from it, as a checkpoint's
config written by transformers holds both. A variant runs only when config exploration
is on (``--explore-budget`` above 0), at most ``MAX_VARIANTS`` of them and
``MAX_SCHEDULES`` layer schedules, started within that budget (each costs what the base
comparison costs: 0.3-1 s on two cores). A variant whose comparison cannot run is listed
in the JSON, not reported (the variant is prefixlint's), but for a checkpoint of it the
model's loader refuses where the config itself loads, on a layer schedule, on a head_dim
off ``hidden_size / heads`` (``_head_dim_moved``, latent) or on a flag the model builds
otherwise for (``CompareVariant.served``, ``refusal.py``): PFX609. A value transformers'
own config class refuses (``_class_accepts``) is no config a checkpoint could hold: its
refusal is not the model's.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any

from prefixlint.introspect.compare.facts import Comparison

MAX_VARIANTS = 7  # the head_dim variant after the moved values (0.3-1 s each)
MAX_SCHEDULES = 3  # layer schedules, beside the others (Ernie 4.5 MoE has three)
_FRACTION_WORDS = ("factor", "ratio", "fraction", "pct", "percent")
_ROTARY = "partial_rotary_factor"
_GENERIC_KEPT = frozenset({"tie_word_embeddings"})  # generic, yet it changes the model


@dataclass(frozen=True)
class CompareVariant:
    overrides: dict[str, Any]
    label: str  # what a person reads: ``attention_bias=True``
    # values moved off the constants a model could write (``moved.py``): a difference on
    # it is latent for every config that keeps the value the model assumes, so its
    # PFX609 is a warning (docs/precision.md)
    latent: bool = False
    # when the model's loader refusing transformers' checkpoint of the variant is the
    # model's (PFX609): ``always`` (a layer schedule: the served model's shape),
    # ``changed`` (a flag: where the model's build changes with it, so it serves that
    # mode), "" never (the explorer's variants set one attribute of several a config
    # class derives together; the moved values are latent)
    served: str = ""
    # a layer schedule (``schedules.py``): run beside the others, ``MAX_SCHEDULES`` of them
    schedule: bool = False


def comparison_variants(
    model_config: Any, files: list[str], explored: Any, reference: type | None = None
) -> list[CompareVariant]:
    """The variants to compare on, in order: flags, fractions, the explorer's. With the
    ``reference`` class, only the flags and fractions it computes with (a value
    transformers ignores has nothing to be compared with)."""
    from prefixlint.introspect.compare.guesses import transformers_reads
    from prefixlint.introspect.compare.moved import moved_values
    from prefixlint.introspect.compare.schedules import schedule_overrides
    from prefixlint.introspect.coverage.variants import config_objects, file_facts

    config = config_objects(model_config)[0]
    own = _own_declared(type(config))
    reads = set().union(*(file_facts(f).reads for f in files)) if files else set()
    if reference is not None:
        # ``tie_word_embeddings``: transformers' ``PreTrainedModel`` ties for every class
        reads = {a for a in reads if a in _GENERIC_KEPT or transformers_reads(reference, a)}
    out: list[CompareVariant] = []
    for attr in sorted(reads & own):
        value = _value(config, attr)
        if isinstance(value, bool):
            served = "changed" if _declared_bool(type(config), attr) else ""
            out.append(_variant(config, attr, not value, served))
    for attr in sorted(reads & own):
        value = _value(config, attr)
        if _fraction(attr, value):
            out.append(_variant(config, attr, 0.5 if value == 1 else 1.0))
    for rope in (_rotary(config, reads), _scaled_rope(config, reads)):
        if rope is not None:
            out.append(rope)
    for kept in getattr(explored, "variants", []):
        if kept.status == "kept" and all(a in own for a in kept.overrides):
            out.append(CompareVariant(dict(kept.overrides), kept.label()))
    moved = moved_values(config, own, reads, reference)
    if moved is not None:
        out.append(CompareVariant(*moved, latent=True))
    head = _head_dim_moved(config, reference)
    if head is not None:
        out.append(head)
    seen: set[str] = set()
    out = [v for v in out if not (v.label in seen or seen.add(v.label))]
    if reference is None:
        return out
    # schedules transformers reads, whether the model does or not; one the list holds
    # already (the explorer's ``decoder_sparse_step=2``) becomes a schedule
    for values in schedule_overrides(config, own, reference):
        variant = replace(_variant(config, *next(iter(values.items())), "always"), schedule=True)
        known = [i for i, v in enumerate(out) if v.label == variant.label]
        if known:
            out[known[0]] = replace(out[known[0]], served="always", schedule=True)
        else:
            out.append(variant)
    return out


def chosen(variants: list[CompareVariant]) -> list[CompareVariant]:
    """The variants run: the first ``MAX_VARIANTS`` of the others, then the first
    ``MAX_SCHEDULES`` layer schedules (kept apart, so that they displace none of the
    others: a model's variants are what they were without them)."""
    schedules = [v for v in variants if v.schedule][:MAX_SCHEDULES]
    return [v for v in variants if not v.schedule][:MAX_VARIANTS] + schedules


def _head_dim_moved(config: Any, reference: type | None) -> CompareVariant | None:
    """``head_dim`` twice ``hidden_size // num_attention_heads`` where the config holds
    that quotient (or None, which transformers reads as it) and transformers' reference
    reads ``head_dim``: a model that derives the quotient instead of reading it
    (Qwen3-MoE's released checkpoints: 2048 wide, 32 heads of 128) builds and agrees on
    every config that keeps it. Latent: a config that keeps the quotient is unaffected."""
    heads, hidden = _value(config, "num_attention_heads"), _value(config, "hidden_size")
    value = _value(config, "head_dim")
    if reference is None or not _READS_HEAD_DIM.search(_modeling(reference)):
        return None  # a head size transformers never reads has nothing to compare with
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (heads, hidden)):
        return None
    quotient = hidden // heads if heads > 0 else 0
    if quotient <= 0 or value not in (None, quotient):
        return None
    # a model that refuses its checkpoint builds the heads otherwise: the model's (latent)
    label = f"head_dim={2 * quotient}"
    return CompareVariant({"head_dim": 2 * quotient}, label, latent=True, served="always")


# transformers' modeling reads the config's head_dim (GPT-2's own ``self.head_dim``, the
# width over the heads, is no read of it)
_READS_HEAD_DIM = re.compile(r"config\.head_dim\b|getattr\(\s*\w*config\s*,\s*[\"']head_dim[\"']")


def _modeling(reference: type) -> str:
    import inspect

    from prefixlint.introspect.compare.guesses import module_source

    return module_source(inspect.getmodule(reference))


def _class_accepts(model_config: Any, overrides: dict[str, Any]) -> bool:
    """Whether the text config's class builds with ``overrides`` over its defaults: the
    explorer's ``interleave_moe_layer_step=0`` (Llama 4) makes transformers' own
    derivation raise (``range`` of step 0), so the variant holds no config a checkpoint
    could, and what fails on it says nothing of the model."""
    from prefixlint.introspect.coverage.variants import config_objects

    kind = type(config_objects(model_config)[0])
    try:
        kind(**overrides)
    except Exception:
        return False
    return True


def _value(config: Any, attr: str) -> Any:
    """``config.attr``, or None. A heterogeneous config (transformers' per-layer configs,
    Gemma 4's ``head_dim``) refuses a global read of a per-layer attribute with its own
    error: that value has no one variant."""
    try:
        return getattr(config, attr, None)
    except Exception:
        return None


def _declared_bool(kind: type, attr: str) -> bool:
    """Whether the config class declares ``attr`` a flag alone, not a mode that may be a
    string too (Laguna's ``gating: bool | str``: ``"per-head"``, ``"per-element"``, and
    ``False`` read one way by vLLM, another by transformers): a refused checkpoint of the
    other value of such a mode says nothing of a flag the model serves."""
    for base in kind.__mro__:
        annotation = getattr(base, "__annotations__", {}).get(attr)
        if annotation is not None:
            return "str" not in str(annotation)
    return True


def _fraction(attr: str, value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and 0 < value <= 1 and any(w in attr.lower() for w in _FRACTION_WORDS)


def _rotary(config: Any, reads: set[str]) -> CompareVariant | None:
    """``rope_parameters["partial_rotary_factor"]`` (transformers 5 keeps it there; vLLM's
    ``get_rope`` reads it) where the class's default holds one and the model passes
    ``rope_parameters`` on."""
    current = _value(config, "rope_parameters")
    default = getattr(_default(type(config)), "rope_parameters", None)
    if "rope_parameters" not in reads or not isinstance(current, dict):
        return None
    if not isinstance(default, dict) or _ROTARY not in default:
        return None
    factor = current.get(_ROTARY, default[_ROTARY])
    if not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        return None
    value = 0.5 if factor == 1 else 1.0
    return CompareVariant(
        {"rope_parameters": {**current, _ROTARY: value}}, f"rope_parameters.{_ROTARY}={value}"
    )


def _scaled_rope(config: Any, reads: set[str]) -> CompareVariant | None:
    """Linear rope scaling (``rope_type="linear"``, factor 2) where the config holds the
    default rope in one ``rope_parameters`` and the model passes it on: a model that drops
    the scaling (vLLM's llama.py for Aquila2-16K, issue 1436) agrees on the default rope,
    and rotates every position but 0 otherwise on a checkpoint that scales."""
    current = _value(config, "rope_parameters")
    if "rope_parameters" not in reads or not isinstance(current, dict):
        return None
    if current.get("rope_type", "default") != "default" or "rope_theta" not in current:
        return None  # another scaling already, or per-layer-type parameters (Gemma 3)
    scaled = {**current, "rope_type": "linear", "factor": 2.0}
    return CompareVariant({"rope_parameters": scaled}, "rope_parameters.rope_type=linear")


def _variant(config: Any, attr: str, value: Any, served: str = "") -> CompareVariant:
    overrides = {attr: value, **_derived(config, attr, value)}
    return CompareVariant(overrides, f"{attr}={value!r}", served=served)


def _derived(config: Any, attr: str, value: Any) -> dict[str, Any]:
    """What the config class derives from ``attr`` (the attributes whose default changes
    with it), derived from ``value`` and the rest of this config."""
    kind = type(config)
    try:
        before, after = vars(kind()), vars(kind(**{attr: value}))
        depends = [k for k, v in after.items() if k != attr and before.get(k, v) != v]
        if not depends:
            return {}
        given = {k: v for k, v in config.to_dict().items() if k not in depends}
        rebuilt = vars(kind(**{**given, attr: value}))
    except Exception:  # a class that cannot be built so: the attribute alone
        return {}
    return {k: rebuilt[k] for k in depends if k in rebuilt}


def _default(kind: type) -> Any:
    try:
        return kind()
    except Exception:
        return None


def _own_declared(kind: type) -> frozenset[str]:
    """What the config class declares beyond what every transformers config has."""
    from prefixlint.introspect.compare.guesses import declared

    generic: frozenset[str] = frozenset()
    for base in kind.__mro__:
        if base.__name__ in ("PreTrainedConfig", "PretrainedConfig"):
            generic = declared(base)
            break
    return (declared(kind) - generic) | (declared(kind) & _GENERIC_KEPT)


def compare_variants(
    cls: type | None,
    plan: Any,
    builds: list[Any],
    explored: Any,
    synthesised: bool,
    budget: float,
    assumed: dict[str, Any] | None = None,
) -> list[Comparison]:
    """The comparison on each variant (``Comparison.variant`` names it); none is started
    after ``budget`` seconds. ``assumed``: the values the base comparison settled on for
    guesses transformers never reads (``guesses.py``), kept for the variants (they are
    not tried again for each)."""
    from prefixlint.introspect.compare import compare
    from prefixlint.introspect.coverage.sites import own_files
    from prefixlint.introspect.coverage.variants import applied

    base = next((b for b in builds if b.error is None), None)
    if base is None:
        return []
    files = own_files(cls, base.recorder.external)
    started = time.perf_counter()
    out: list[Comparison] = []
    from prefixlint.introspect.compare.reference import family_known, reference_class

    hf_config = plan.model_config.hf_config
    ref = reference_class(hf_config, cls, family_known(hf_config, synthesised))
    for variant in chosen(comparison_variants(plan.model_config, files, explored, ref)):
        if time.perf_counter() - started > budget:
            break
        with applied(plan.model_config, {**(assumed or {}), **variant.overrides}) as ok:
            if not ok:
                continue
            result = compare(cls, plan, builds, True, synthesised)
        result.variant, result.latent = variant.label, variant.latent
        if result.refusal is not None:
            served = variant.served if _class_accepts(plan.model_config, variant.overrides) else ""
            result.refusal = replace(result.refusal, served=served)
        out.append(result)
    return out
