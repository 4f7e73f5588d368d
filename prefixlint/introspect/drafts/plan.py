"""Speculative-decoding drafts (EAGLE, EAGLE-3, MTP, DFlash, DSpark, Medusa, ...) are built
as vLLM builds them: beside a target model, under a ``SpeculativeConfig``.

A draft class reads the target's config (``vllm_config.model_config``: its layer count,
its hidden size) and the draft's own (``speculative_config.draft_model_config``); built
alone it stops at ``assert speculative_config is not None``. Here the target is a small
synthesised model of the architecture the draft expects (EAGLE Llama -> Llama, an MTP
head -> its base model), and vLLM's own ``SpeculativeConfig`` derives the draft config
from it (for MTP and DSpark, from the target's config, as for a real checkpoint).

Runs inside the worker (imports vLLM).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Name -> method. Order matters: EAGLE-3 before EAGLE.
_METHODS = (
    (re.compile(r"^Eagle3|Eagle3$"), "eagle3"),
    (re.compile(r"^(P?[Ee]agle)"), "eagle"),
    (re.compile(r"^DFlash"), "dflash"),
    (re.compile(r"DSpark"), "dspark"),
    (re.compile(r"MTP"), "mtp"),
    (re.compile(r"^Medusa"), "medusa"),
    (re.compile(r"^MLPSpeculator"), "mlp_speculator"),
    (re.compile(r"^ExtractHiddenStates"), "extract_hidden_states"),
)
# methods whose draft config is the target's, rewritten by vLLM (hf_config_override)
_FROM_TARGET = ("mtp", "dspark")
_DRAFT_WORDS = re.compile(
    r"^(Eagle3|P?[Ee]agle|DFlash2?|DSpark(V41)?)|(Eagle3|MTPModel|MTP|DSparkModel|DraftModel|"
    r"AssistantModel)$"
)
DEFAULT_TARGET = "LlamaForCausalLM"


@dataclass
class DraftPlan:
    arch: str
    target: str  # the target architecture
    method: str
    spec: Any = None  # vllm.config.SpeculativeConfig
    forced: bool = False  # vLLM named another draft class: the architecture was set

    @property
    def source(self) -> str:
        forced = "; architecture forced" if self.forced else ""
        return f"synthesised draft ({self.method}) of {self.target}{forced}"


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def is_draft(arch: str, registry: Any) -> bool:
    """A draft by vLLM's own tables (vllm_api.speculative_architectures); by its name
    where the vLLM has none."""
    drafts = _drafts_of(registry)
    return arch in drafts if drafts else bool(_DRAFT_WORDS.search(arch))


@functools.lru_cache(maxsize=4)
def _drafts_of(registry: Any) -> frozenset[str]:
    from prefixlint.introspect.vllm_api import speculative_architectures

    return frozenset(speculative_architectures(registry))


def method_for(arch: str) -> str:
    for pattern, method in _METHODS:
        if pattern.search(arch):
            return method
    return "eagle"


def target_candidates(arch: str, archs: list[str], registry: Any) -> list[str]:
    """Target architectures to try, best first: the name without the draft words
    (``Eagle3Qwen3ForCausalLM`` -> ``Qwen3ForCausalLM``), then the registry's models whose
    name starts like the draft's stem (``DeepSeekMTPModel`` -> ``Deepseek*``), then Llama."""
    stem = _DRAFT_WORDS.sub("", arch)
    out: list[str] = []
    if stem in archs and stem != arch:
        out.append(stem)
    key = _norm(re.sub(r"(For\w+|Model)$", "", stem))
    if key:
        family = [
            a for a in archs if _norm(a).startswith(key) and a != arch and not is_draft(a, registry)
        ]
        family.sort(key=lambda a: (not a.endswith("ForCausalLM"), len(a)))
        out += [a for a in family if a not in out][:8]
    if DEFAULT_TARGET not in out:
        out.append(DEFAULT_TARGET)
    return out


def _with_mtp_layers(folder: str, arch: str = "") -> None:
    """The synthesised target's config.json says it has one MTP layer (see mtp.py)."""
    from prefixlint.introspect.drafts.mtp import mtp_sections, with_mtp_layers

    with_mtp_layers(folder, mtp_sections(arch) if arch else ())


def _spec_config(method: str, draft_folder: str, target_mc: Any) -> Any:
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        model=draft_folder,
        method=method,
        num_speculative_tokens=1,
        target_model_config=target_mc,
        target_parallel_config=ParallelConfig(),
    )


def _draft_archs(spec: Any) -> list[str]:
    dmc = spec.draft_model_config
    return list(getattr(dmc, "architectures", None) or dmc.hf_config.architectures or [])


# Methods whose draft keeps its own checkpoint (not the target's). vLLM renames an
# EAGLE/DFlash draft's architecture (``X`` -> ``EagleX``, ``Eagle3X``, ``DFlashX``) unless
# the name already says so; ``draft_model`` keeps it. A draft registered under a name no
# renaming yields (``PEagleDraftModel``, ``LiLiCorrDraftModel``) is reached by the method
# that keeps its name, so each is tried, the name's own first.
_OWN_CHECKPOINT = ("eagle3", "eagle", "dflash", "draft_model")


@dataclass
class _Attempt:
    target: str
    method: str
    target_folder: Callable[[], str]
    draft_folder: Callable[[str], str]  # from the target's folder
    extra: bool = False  # tried only when no attempt before gave a draft config at all


def _attempts(
    arch: str, cls: type | None, method: str, archs: list[str], registry: Any, resolve: Any
) -> list[_Attempt]:
    """Targets and methods to try, best first: the name's method against the targets
    named like the draft; for MTP, then the targets vLLM derives the draft from (mtp.py);
    for the other methods, then the other methods against the best-placed target."""
    from prefixlint.introspect.drafts import mtp
    from prefixlint.introspect.drafts.backend import backend_targets, synth_target

    candidates = target_candidates(arch, archs, registry)

    def own(draft_method: str, target_folder: str) -> str:
        folder = resolve(arch, cls)
        folder = target_shaped(folder, target_folder, arch, cls)
        with contextlib.suppress(Exception):  # a vLLM without the converters: as it was
            seed_method_fields(folder, arch, draft_method)
        return folder

    def same(folder: str) -> str:
        return folder

    if method not in _FROM_TARGET:
        mine = functools.partial(own, method)
        out = [_Attempt(t, method, functools.partial(resolve, t, None), mine) for t in candidates]
        for other in _OWN_CHECKPOINT:
            if other != method:
                first = candidates[0]
                target = functools.partial(resolve, first, None)
                theirs = functools.partial(own, other)
                out.append(_Attempt(first, other, target, theirs, extra=True))
        return out
    out = [
        _Attempt(t, method, functools.partial(synth_target, mt, t), same)
        for t, mt in backend_targets(arch, registry, is_draft)
    ]
    out += [_Attempt(t, method, functools.partial(resolve, t, None), same) for t in candidates]
    types = [mt for mt in mtp.model_types(mtp.override_triggers(arch)) if mtp.has_config_class(mt)]
    for mt in types:  # a target of a type vLLM maps to the draft, synthesised so
        for target in mtp.archs_of_types([mt], archs):
            synth = functools.partial(mtp.synth_of_type, mt, target)
            out.append(_Attempt(target, method, synth, same, extra=True))
    # A type no registry architecture has: the draft's own checkpoint (an assistant
    # model beside its target), against the targets named like the draft.
    unmatched = [mt for mt in types if not mtp.archs_of_types([mt], archs)]
    for mt in unmatched:
        draft = functools.partial(mtp.synth_of_type, mt, arch)
        out += [
            _Attempt(t, method, functools.partial(resolve, t, None), lambda _f, d=draft: d(), True)
            for t in candidates
        ]
    return out


_READ = re.compile(r"\bconfig\.(\w+)|getattr\(\s*[\w.]*config\s*,\s*[\"'](\w+)")


def _config_reads(cls: type | None) -> set[str]:
    """Attribute names the draft's own module reads from a config."""
    import inspect

    try:
        text = Path(inspect.getsourcefile(cls) or "").read_text(encoding="utf-8")
    except (OSError, TypeError):
        return set()
    return {a or b for a, b in _READ.findall(text)}


def target_shaped(folder: str, target_folder: str, arch: str, cls: type | None) -> str:
    """An EAGLE-style draft is a decoder layer or two of its target's architecture. When
    no config class is known for the draft (a Llama-shaped guess) and the draft's module
    reads attributes that guess lacks but the target's config has (an MLA draft reads
    ``qk_nope_head_dim``), the draft gets the target's config, shrunk to the draft's
    layer count, its own architecture name. Otherwise the folder is kept."""
    path, target_path = Path(folder) / "config.json", Path(target_folder) / "config.json"
    try:
        mine = json.loads(path.read_text(encoding="utf-8"))
        theirs = json.loads(target_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return folder
    if mine.get("model_type") != "llama" or theirs.get("model_type") in (None, "llama"):
        return folder
    from prefixlint.introspect.drafts.mtp import override_types

    if theirs.get("model_type") in override_types():
        return folder  # vLLM would rewrite a config of this type into an MTP draft's
    wanted = {a for a in _config_reads(cls) - set(mine) if a in theirs}
    if not wanted:
        return folder
    data = {**theirs, "architectures": [arch]}
    if isinstance(mine.get("num_hidden_layers"), int):
        data["num_hidden_layers"] = mine["num_hidden_layers"]
    out = Path(tempfile.mkdtemp(prefix="prefixlint-config-"))
    (out / "config.json").write_text(json.dumps(data), encoding="utf-8")
    return str(out)


def _converter(arch: str, method: str) -> Any:
    """vLLM's converter from a ``speculators`` checkpoint to the draft config of a method
    (speculators/algos.py): the one named like the draft (``dflash2`` for
    ``DFlash2DraftModel``), else the method's."""
    from prefixlint.introspect.vllm_api import speculators_converters

    converters = speculators_converters()
    name = _norm(arch)
    named = [k for k in converters if name.startswith(_norm(k))]
    key = max(named, key=len) if named else method
    return converters.get(key)


def _guess_field(key: str) -> Any:
    """A value for a field a converter requires: layer ids of a small target (vLLM
    indexes aux layers from 1), a token id inside any vocabulary."""
    if key.endswith("_ids"):
        return [1, 2]
    if key.endswith("_id"):
        return 1
    raise KeyError(key)


def seed_method_fields(folder: str, arch: str, method: str) -> list[str]:
    """Give a synthesised draft config the fields vLLM's own converter writes for its
    method (``dflash_config`` with ``target_layer_ids`` and ``mask_token_id`` for DFlash,
    ``target_layer_ids`` for DSpark, ...), where the config lacks them; the draft's
    architecture is kept. Returns the keys added."""
    convert = _converter(arch, method)
    if convert is None:
        return []
    given: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for _ in range(8):  # the converter names each field it requires (KeyError)
        fields = {}
        try:
            convert(config_dict=dict(given), pre_trained_config=fields)
            break
        except KeyError as e:
            given[str(e.args[0])] = _guess_field(str(e.args[0]))
    else:
        return []
    path = Path(folder) / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    added = [
        k for k, v in fields.items() if k != "architectures" and v is not None and k not in data
    ]
    for k in added:
        data[k] = fields[k]
    path.write_text(json.dumps(data), encoding="utf-8")
    return added


def mtp_gap(arch: str, archs: list[str]) -> str:
    """Why no target can give an MTP draft, from what vLLM derives it from: "" when
    prefixlint has nothing more precise to say."""
    from prefixlint.introspect.drafts import mtp

    types = mtp.model_types(mtp.override_triggers(arch))
    if not types:
        return ""
    if not any(mtp.has_config_class(mt) for mt in types):
        return (
            f"vLLM derives {arch} only from a target config of model type "
            f"{', '.join(types)} (SpeculativeConfig.hf_config_override), and neither "
            "transformers nor vLLM has a config class for it (remote code)"
        )
    return ""


def plan_draft(
    arch: str, cls: type | None, registry: Any, make_model_config: Any, resolve: Any
) -> DraftPlan:
    """A speculative config that makes vLLM build ``arch`` against a synthesised target.
    ``make_model_config(folder)`` and ``resolve(arch, model_cls)`` (a config folder) are
    build.py's. Raises the last failure when no target works (a config gap)."""
    method = method_for(arch)
    archs = list(registry.ModelRegistry.get_supported_archs())
    last: BaseException | None = None
    fallback: DraftPlan | None = None
    for attempt in _attempts(arch, cls, method, archs, registry, resolve):
        if attempt.extra and fallback is not None:
            break  # a draft config of the named targets, its architecture forced (below)
        try:
            target_folder = attempt.target_folder()
            if attempt.method in _FROM_TARGET:
                _with_mtp_layers(target_folder, arch)
            target_mc = make_model_config(target_folder)
            draft_folder = attempt.draft_folder(target_folder)
            spec = _spec_config(attempt.method, draft_folder, target_mc)
        except Exception as e:  # this target does not fit; try the next
            last = last or e  # the best-placed target's reason, not Llama's
            continue
        plan = DraftPlan(arch, attempt.target, attempt.method, spec)
        if arch in _draft_archs(spec):
            return plan
        fallback = fallback or plan
    if fallback is not None:
        force_architecture(fallback)
        return fallback
    gap = mtp_gap(arch, archs) if method in _FROM_TARGET else ""
    if gap:
        raise LookupError(gap)
    raise last or LookupError(f"no target architecture fits the draft {arch}")


def force_architecture(plan: DraftPlan, name: str | None = None) -> None:
    """Build ``name`` (default: the draft's architecture) on the plan's draft config: vLLM
    derived another draft class from every target tried, or the class under check is an
    out-of-tree copy registered under another name."""
    name = name or plan.arch
    dmc = plan.spec.draft_model_config
    hf = copy.copy(dmc.hf_config)
    hf.architectures = [name]
    dmc.hf_config = hf
    if hasattr(dmc, "architectures"):
        with contextlib.suppress(Exception):
            dmc.architectures = [name]
    if name == plan.arch:
        plan.forced = True


_LAYER = re.compile(r"(?P<head>[\w.]*?)(?P<i>\d+)(?P<rest>[\w.]*)")  # a numbered layer's path


def target_layer_offset(path: str, prefix: str | None, offset: int) -> bool:
    """A PFX601 about a draft layer at ``path`` given the ``prefix`` of its index past the
    target's layers: vLLM's drafts number their layers from the target's layer count
    (``start_layer_id=target_layer_num``) so that their attention layers and KV cache
    never share a name with the target's. That naming is the contract, not a defect."""
    at, given = _LAYER.fullmatch(path), _LAYER.fullmatch(prefix or "")
    return bool(
        at
        and given
        and offset > 0
        and at.group("head") == given.group("head")
        and at.group("rest") == given.group("rest")  # a layer's attention named on, alone
        and int(given.group("i")) - int(at.group("i")) == offset
    )


@dataclass(frozen=True)
class DraftPolicy:
    """What vLLM does with a speculative draft that the checks read as data (issue 20):
    its layers are numbered on from the target's ``layer_offset`` layers
    (``numbered_on``), and it runs beside the last pipeline stage, so its ``SupportsPP``
    methods are never called (``pipelined`` False: PFX606 says so in a note)."""

    layer_offset: int
    pipelined: bool = False

    def numbered_on(self, path: str, prefix: str | None) -> bool:
        return target_layer_offset(path, prefix, self.layer_offset)


def draft_policy(spec: Any) -> DraftPolicy | None:
    """The policy of a draft's build plan (``BuildPlan.draft_spec``); None for a model."""
    if spec is None:
        return None
    offset = getattr(spec.target_model_config.hf_text_config, "num_hidden_layers", 0)
    return DraftPolicy(offset or 0)


# vLLM's proposer replaces these modules of a draft with the target's
# (``_maybe_share_embeddings`` and ``_maybe_share_lm_head`` in
# ``vllm/v1/spec_decode/llm_base_proposer.py``): an MTP draft always, an EAGLE draft
# whose checkpoint has none. What its loader leaves in them is never used.
SHARED_WITH_TARGET = ("model.embed_tokens.", "lm_head.")
_SHARED_NOTE = (
    " (a note: a speculative draft, whose `{path}` vLLM's proposer replaces with the "
    "target's when the draft's checkpoint has none: `_maybe_share_embeddings` and "
    "`_maybe_share_lm_head`)"
)


def shared_with_target(finding: Any) -> None:
    """A draft's PFX701 about the embedding or head that vLLM shares from the target: a
    note, with the reason in the message (issue 20's severity)."""
    if finding.code != "PFX701" or finding.severity == "note":
        return
    named = finding.facts.get("subject") or ""  # the tensor or parameter it is about
    path = next((p for p in SHARED_WITH_TARGET if named.startswith(p)), None)
    if path is not None:
        finding.severity = "note"
        finding.message += _SHARED_NOTE.format(path=path.rstrip("."))
