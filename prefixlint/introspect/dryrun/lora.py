"""PFX703: the LoRA dry-run: an adapter's names matched on the meta build as vLLM's LoRA
loader and manager match them.

vLLM finds an adapter's targets by name. ``WorkerLoRAManager._load_adapter`` expects the
last name of every linear and MoE layer and every ``embedding_modules`` name
(``get_supported_lora_modules``), a fused layer replaced by its parts
(``process_packed_modules_mapping``); ``LoRAModel.from_local_checkpoint`` raises for an
adapter tensor whose module (``parse_fine_tuned_lora_name`` under the model's
``hf_to_vllm_mapper.get_rename_mapper()``) ends otherwise. An adapter that loads is then
applied by module path (``LoRAModelManager._create_lora_modules``): the weights of a path
no wrapped module takes (no such module, a layer no LoRA layer replaces) are dropped
without a word.

The adapter is ``--lora`` (a PEFT folder or hub id: ``adapter_config.json`` and the
safetensors header, never a weight), else a synthetic one training every linear layer of
the checkpoint the dry-run streamed (``DryRun.mapping``: PEFT's ``all-linear``), and, for a
model that lists ``embedding_modules``, its embeddings and head (``embedding_layers``). Every
decision is vLLM's own function, run on the tp=1 build; the loops around them are closures
or inline code that needs a device (the expected list, ``check_unexpected_modules``, the
manager's choice of modules), so those loops alone are repeated here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from prefixlint.introspect.dryrun import _base_build, _served_as_embedding
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.finding import Unverified, class_site, describe_error
from prefixlint.introspect.targets.adapter import Adapter, read_adapter
from prefixlint.introspect.targets.checkpoint import CheckpointError

EMBEDDING_ENDS = ("lora_embedding_A", "lora_embedding_B")  # PEFT's, for an embedding
# vLLM's manager gives a classification head's full weights (``modules_to_save``) to a
# top-level module of one of these names only (``supported_modules_to_save``)
CLASSIFIER_HEADS = ("score", "classifier")
OWN_LAYOUT = (
    "the synthetic adapter's layers come from the model's own layout (the checkpoint "
    "dry-run streamed none): a layer its loader renames in code is not seen"
)


@dataclass
class LoraRun:
    status: str = "off"  # verified | not verified | off
    reason: str = ""
    # what it found and what it could not check (``LoraIssue``, ``Unverified``): the
    # pipeline hands them to their units (``checks.findings_of``)
    facts: list[Any] = field(default_factory=list)


def synthetic_adapter(mapping: dict[str, str], language: str | None) -> tuple[Adapter, int]:
    """PEFT's ``all-linear`` adapter of the streamed checkpoint: lora_A/lora_B of every
    checkpoint layer the dry-run saw reach a linear layer, named as PEFT names them.
    Layers outside ``language`` (a multimodal model's towers, which vLLM's manager wraps
    only with ``enable_tower_connector_lora``) are left out; how many is returned."""
    layers = sorted(
        k for k, path in mapping.items() if language is None or path.startswith(language)
    )
    keys = [f"base_model.model.{layer}.lora_{ab}.weight" for layer in layers for ab in "AB"]
    targets = sorted({layer.rsplit(".", 1)[-1] for layer in layers})
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": targets}
    return Adapter("synthetic", "", config, keys, synthetic=True), len(mapping) - len(layers)


# -- vLLM's matching -------------------------------------------------------------------------


@dataclass
class Match:
    """An adapter matched against one model: the names vLLM expects, and each adapter
    module as (its PEFT name, the name vLLM parses it to)."""

    expected: set[str]
    packed: dict[str, list[str]]
    supported: list[str]
    unexpected: list[tuple[str, str]] = field(default_factory=list)
    accepted: list[tuple[str, str]] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)
    embeddings: set[str] = field(default_factory=set)  # modules trained as embeddings


def expected_modules(supported: list[str], packed: dict[str, list[str]]) -> set[str]:
    """``WorkerLoRAManager._load_adapter``'s expected list (inline code there, repeated)."""
    out: list[str] = []
    for module in supported:
        out.extend(packed.get(module, [module]))
        if module == "experts":
            out.append(module)
    return set(out)


def match(model: nn.Module, adapter: Adapter, api: dict[str, Any]) -> Match:
    """``check_unexpected_modules`` (a closure in ``from_local_checkpoint``), key by key,
    every decision by vLLM's functions; a module's lora_A and lora_B count once."""
    from prefixlint.introspect.vllm_api import lora_rename_mapper

    supported = list(api["get_supported_lora_modules"](model))
    packed = dict(api["process_packed_modules_mapping"](model))
    result = Match(expected_modules(supported, packed), packed, supported)
    mapper = lora_rename_mapper(model)
    skip = getattr(model, "lora_skip_prefixes", None)
    parse = api["parse_fine_tuned_lora_name"]
    seen: set[str] = set()
    for key in adapter.keys or []:
        if api["is_base_embedding_weights"](key) or "base_layer" in key:
            continue
        if skip and api["should_skip"](key, skip):
            continue
        try:
            name, _ = parse(key, mapper)
            peft, _ = parse(key)  # the checkpoint's own name, before any mapping
        except ValueError:
            result.unparsed.append(key)
            continue
        if name in seen:
            continue
        seen.add(name)
        if "lora_embedding_" in key or _embedding(model, name):
            result.embeddings.add(name)
        if ".experts" in name:
            ok = name[name.find(".experts") + 1 :] in result.expected
        else:
            base = name.rsplit(".", 1)[-1]
            ok = base in result.expected or base in adapter.modules_to_save
        (result.accepted if ok else result.unexpected).append((peft, name))
    return result


def _embedding(model: nn.Module, path: str) -> bool:
    """The module at ``path`` is one of vLLM's embeddings or heads (a head's adapter is
    ``lora_A``/``lora_B``, as PEFT names an ``nn.Linear``'s, yet vLLM takes it only as
    an ``embedding_modules`` entry)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    try:
        return isinstance(model.get_submodule(path), VocabParallelEmbedding)
    except AttributeError:
        return False


# the input embedding's name in transformers' models, which PEFT adapters target by it
INPUT_EMBEDDING = "embed_tokens"


def embedding_layers(cls: type | None, model: nn.Module, language: str | None) -> dict[str, Any]:
    """Checkpoint layer -> (module path, whether a head) of the embeddings and heads the
    synthetic adapter trains: for a model that lists ``embedding_modules`` (vLLM's
    embedding LoRA: ``VocabParallelEmbeddingWithLoRA``, the head through
    ``LogitsProcessorWithLoRA``; 81 of vLLM 0.32's 114 ``SupportsLoRA`` model files list
    none, and then vLLM trains none), each module those names name and each vocabulary
    embedding named ``embed_tokens`` (a model that does not list the embedding it has under
    that name is what this finds). A head is trained only where the list names it: a model
    that lists its input embedding alone (vLLM's Transformers backend) takes no head
    adapter by design."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        VocabParallelEmbedding,
    )

    from prefixlint.introspect.dryrun.selflayout import checkpoint_name
    from prefixlint.introspect.dryrun.tables import weights_mapper

    listed = getattr(cls, "embedding_modules", None) or {}
    if not listed:
        return {}
    mapper = weights_mapper(cls)
    out: dict[str, Any] = {}
    for path, module in model.named_modules():
        leaf = path.rsplit(".", 1)[-1]
        head = isinstance(module, ParallelLMHead)
        vocab = isinstance(module, VocabParallelEmbedding) and leaf == INPUT_EMBEDDING
        if not (leaf in listed or vocab) or getattr(module, "weight", None) is None:
            continue
        if language is not None and not path.startswith(language) and not head:
            continue
        name = checkpoint_name(mapper, f"{path}.weight", None)
        if name is not None:
            out[name.removesuffix(".weight")] = (path, head)
    return out


def language_prefix(model: nn.Module) -> str | None:
    """The prefix of the only part vLLM's manager wraps by default: a multimodal model's
    language model (``get_mm_mapping``; towers need ``enable_tower_connector_lora``).
    None: every module (``_init_punica_wrapper``)."""
    from vllm.model_executor.models import supports_multimodal

    if not (supports_multimodal(model) and hasattr(model, "get_mm_mapping")):
        return None
    try:
        return str(model.get_mm_mapping().language_model[0])
    except Exception:
        return None


def wrapped_modules(model: nn.Module, found: Match, api: dict[str, Any]) -> dict[str, bool]:
    """Module path -> whether one of vLLM's LoRA layers replaces it, for every module the
    manager considers (``_create_lora_modules`` with no deployment ``target_modules``:
    ``is_supported_lora_module``, then ``from_layer``'s ``can_replace_layer`` in order).
    A language-model-only multimodal model's towers are left out; MoE runners and the LM
    head (wrapped through its logits processor) count as wrapped."""
    from vllm.model_executor.layers.fused_moe import MoERunner

    language = language_prefix(model)
    config = api["LoRAConfig"]()
    out: dict[str, bool] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if not api["is_supported_lora_module"](name, module, found.supported):
            continue
        if language is not None and not name.startswith(language):
            continue
        if isinstance(module, MoERunner) or "lm_head" in name:
            out[name] = True
            continue
        parts = list(found.packed.get(name.rsplit(".", 1)[-1], []))
        out[name] = any(
            _replaces(c, module, config, parts, getattr(model, "config", None))
            for c in api["lora_classes"]
        )
    return out


def _replaces(lora_cls: Any, module: nn.Module, config: Any, parts: list[str], hf: Any) -> bool:
    try:
        return bool(
            lora_cls.can_replace_layer(
                source_layer=module, lora_config=config, packed_modules_list=parts, model_config=hf
            )
        )
    except Exception:  # a layer class that cannot judge this module does not replace it
        return False


def taker(
    name: str, wrapped: dict[str, bool], packed: dict[str, list[str]], pooling: bool = False
) -> str | None:
    """The module the manager gives the adapter module ``name`` to: the module of that
    path, or the fused module beside it whose packed parts name it
    (``_register_packed_modules``); a pooling model's ``model.X`` takes ``X`` too (the
    manager's retry without ``model.``, ``_get_lora_layer_weights``: an embedding
    model's adapter names its base model's layers without it)."""
    if name in wrapped:
        return name
    parent, _, leaf = name.rpartition(".")
    for fused, parts in packed.items():
        path = f"{parent}.{fused}" if parent else fused
        if len(parts) > 1 and leaf in parts and path in wrapped:
            return path
    return taker(f"model.{name}", wrapped, packed) if pooling else None


# -- what it means, at the model's line ------------------------------------------------------


@dataclass
class Judge:
    """Turns a ``Match`` into ``LoraIssue`` facts at the model's lines, one per site: the
    names an issue covers are gathered (``gather``) before its fact is made (``finish``)."""

    cls: type | None
    model: nn.Module
    sites: Sites
    found: Match
    mapping: dict[str, str]  # checkpoint layer -> vLLM module path (the dry-run's)
    model_config: Any = None
    issues: dict[tuple[str, int, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.cls, "__name__", "the model")

    def gather(self, site: tuple[str, int], group: str, name: str, **what: Any) -> None:
        issue = self.issues.setdefault((*site, group), {"names": [], **what})
        if name not in issue["names"]:
            issue["names"].append(name)

    def refused(self, peft: str, name: str) -> None:
        """An adapter module vLLM's loader refuses: its name is no expected one."""
        base = name.rsplit(".", 1)[-1]
        fused = self.fused_home(peft, name)
        if fused is not None:
            leaf = fused.rsplit(".", 1)[-1]
            self.gather(self.sites.module(fused), f"lora:fused:{leaf}", base, path=fused)
        elif name in self.found.embeddings:
            self.gather(self.sites.class_site, "lora:embedding", base)
        elif self.module(name) is not None and self.found.packed.get(base, [base]) != [base]:
            # the module exists under that name: the mapping splits it into other names
            self.gather(self.sites.module(name), f"lora:whole:{base}", base, path=name)
        elif self.renamed(peft, name):
            site = self.sites.loader(f"{peft}.weight")
            self.gather(site, "lora:renamed:refused", name, peft=peft, refused=True)
        else:
            self.gather(self.near(name), "lora:unmapped:refused", name, refused=True)

    def dropped(self, peft: str, name: str, wrapped: dict[str, bool]) -> None:
        """An adapter module vLLM loads: which module takes it, and whether LoRA wraps it."""
        language = language_prefix(self.model)
        path = taker(name, wrapped, self.found.packed, self.pooling())
        fused = self.fused_home(peft, name) if path is None else None
        if fused is not None and wrapped.get(fused) is False:
            path = fused  # its loader fills a fused layer no LoRA layer replaces: not a rename
        if path is not None and wrapped[path]:
            return
        if path is not None:
            leaf = path.rsplit(".", 1)[-1]
            site = self.sites.module(path)
            self.gather(
                site, f"lora:unwrapped:{leaf}", name.rsplit(".", 1)[-1], path=path, refused=False
            )
        elif language is not None and not name.startswith(language):
            site = self.sites.class_site
            self.gather(site, "lora:tower", name, language=language, refused=False)
        elif self.renamed(peft, name):
            site = self.sites.loader(f"{peft}.weight")
            self.gather(site, "lora:renamed:dropped", name, peft=peft, refused=False)
        else:
            self.gather(self.near(name), "lora:unmapped:dropped", name, refused=False)

    def pooling(self) -> bool:
        """vLLM's manager sees a pooling model: the class is one, or vLLM serves this
        architecture as an embedding model (``as_embedding_model``, as the dry-run does)."""
        from vllm.model_executor.models import is_pooling_model

        served = self.model_config is not None and _served_as_embedding(self.model_config)
        return served or is_pooling_model(self.model)

    def fused_home(self, peft: str, name: str) -> str | None:
        """The fused module the adapter module's part is loaded into: where the dry-run saw
        its checkpoint layer go, else the model's stacked-params tables for a module beside
        it."""
        from prefixlint.introspect.dryrun.tables import fused_kind, shard_sources

        base = name.rsplit(".", 1)[-1]
        path = self.mapping.get(peft)
        if path is None:
            parent = name.rpartition(".")[0]
            for leaf, parts in shard_sources(self.model, self.cls).items():
                if base in [p for p, _ in parts]:
                    path = f"{parent}.{leaf}" if parent else leaf
                    break
        module = self.module(path) if path else None
        if module is None or fused_kind(module) is None or path.rsplit(".", 1)[-1] == base:
            return None
        return path

    def renamed(self, peft: str, name: str) -> bool:
        """The checkpoint layer loads into a module of another path (the loader renames in
        code) than the one LoRA's renames give."""
        path = self.mapping.get(peft)
        return path is not None and path != name and self.module(path) is not None

    def module(self, path: str) -> nn.Module | None:
        try:
            return self.model.get_submodule(path)
        except AttributeError:
            return None

    def near(self, name: str) -> tuple[str, int]:
        """Where the model built the deepest existing module on ``name``'s path."""
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            path = ".".join(parts[:i])
            if self.module(path) is not None:
                return self.sites.module(path)
        return self.sites.class_site

    def finish(self) -> list[LoraIssue]:
        # vLLM refuses the whole adapter first: what else a refused site's layer would do
        # with it is moot (one finding per site)
        refusing = {(f, n) for (f, n, g), i in self.issues.items() if i.get("refused", True)}
        out = []
        for (file, line, group), issue in self.issues.items():
            if not issue.get("refused", True) and (file, line) in refusing:
                continue
            out.append(self.issue((file, line), group, issue))
        return out

    def issue(self, site: tuple[str, int], group: str, issue: dict[str, Any]) -> LoraIssue:
        """One gathered issue as its fact: what the unit's words need, read off the model."""
        kind = group.split(":")[1]
        path = issue.get("path", "")
        peft = issue.get("peft", "")
        into = self.mapping.get(peft, "") if kind == "renamed" else ""
        module = self.module(path) if path else None
        entry = self.found.packed.get(path.rsplit(".", 1)[-1]) if path else None
        judged = into or path  # the module whose kind softens the finding (a router)
        return LoraIssue(
            kind,
            site,
            group,
            tuple(issue["names"]),
            self.name,
            tuple(sorted(n for n in self.found.expected if "." not in n)),
            path=path,
            module=type(module).__name__ if path else "",
            entry=tuple(entry) if entry is not None else None,
            fed=tuple(self.fed(path)) if kind == "fused" else (),
            peft=peft,
            loads_into=into,
            refused=issue.get("refused", True),
            router=kind in ("renamed", "unwrapped") and self.router(judged),
            language=issue.get("language", ""),
        )

    def router(self, path: str) -> bool:
        """The module at ``path`` is a router (one output per expert): adapters train one
        only with PEFT's ``all-linear`` (docs/precision.md), so a warning."""
        from prefixlint.introspect.dryrun.quant import _router

        module = self.module(path)
        return (
            module is not None
            and self.model_config is not None
            and _router(self.model_config, module)
        )

    def fed(self, path: str) -> list[str]:
        """The checkpoint parts the dry-run saw written into ``path``, in their order."""
        return list(
            dict.fromkeys(k.rsplit(".", 1)[-1] for k, p in self.mapping.items() if p == path)
        )


@dataclass(frozen=True)
class LoraIssue:
    """An adapter module vLLM's LoRA loader refuses or its manager drops (PFX703), at
    ``site`` of the model, as ``checks/pfx703_lora.py`` words it. ``kind``: "fused" (a
    fused layer whose ``packed_modules_mapping`` entry lacks parts the adapter trains),
    "whole" (a module trained whole that the mapping splits), "embedding" (one
    ``embedding_modules`` does not list), "renamed" (the loader renames in code, LoRA's
    renames do not), "unmapped" (no module has the name), "unwrapped" (no LoRA layer
    replaces the module that takes it), "tower" (outside the language model), "head" (a
    ``modules_to_save`` head the model does not expose). ``names``: the adapter modules
    it covers; ``expected``: the names LoRA expects; ``model``: the class's name."""

    kind: str
    site: tuple[str, int]
    group: str
    names: tuple[str, ...]
    model: str
    expected: tuple[str, ...] = ()
    path: str = ""  # the module at issue, and its class's name
    module: str = ""
    entry: tuple[str, ...] | None = None  # its ``packed_modules_mapping`` entry
    fed: tuple[str, ...] = ()  # the checkpoint parts the dry-run wrote into it
    peft: str = ""  # renamed: the checkpoint's name, and the module it loads into
    loads_into: str = ""
    refused: bool = True  # the loader refuses the adapter (else drops the weights)
    router: bool = False
    language: str = ""  # tower: the language model's prefix
    synthetic: bool = False  # found with the synthetic adapter


def classifier_heads(model: nn.Module, adapter: Adapter, sites: Sites) -> list[LoraIssue]:
    """A ``modules_to_save`` classification head the model does not expose: vLLM gives
    full weights only to a top-level ``score``/``classifier`` of a pooling model
    (``_validate_modules_to_save`` raises otherwise)."""
    from vllm.model_executor.models import is_pooling_model

    out = []
    for head in adapter.modules_to_save:
        if head not in CLASSIFIER_HEADS:
            continue  # vLLM refuses it whatever the model (``peft_notes``)
        if is_pooling_model(model) and head in dict(model.named_children()):
            continue
        name = type(model).__name__
        out.append(LoraIssue("head", sites.class_site, "lora:head", (head,), name))
    return out


def adapter_notes(
    adapter: Adapter, found: Match, api: dict[str, Any], site: tuple
) -> list[Unverified]:
    """What vLLM refuses in the adapter itself, whatever the model (its own
    ``PEFTHelper.validate_legal``; names it cannot parse): a PFX600 note each."""
    out = []
    try:
        helper = api["PEFTHelper"].from_dict(dict(adapter.config))
        helper.validate_legal(api["LoRAConfig"](max_lora_rank=512))
    except (ValueError, TypeError) as e:
        out.append(_note(f"vLLM refuses the adapter itself, whatever the model: {e}", site))
    if found.unparsed:
        shown = ", ".join(f"`{n}`" for n in found.unparsed[:3])
        out.append(
            _note(f"vLLM cannot parse the adapter's tensor names {shown}: it refuses it", site)
        )
    return out


def _note(cause: str, site: tuple[str, int]) -> Unverified:
    return Unverified("LoRA dry-run", cause, site)


# -- entry point --------------------------------------------------------------------------------


def run(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    mapping: dict[str, str],
    enabled: bool = True,
    adapter: str | None = None,
) -> LoraRun:
    """PFX703 for one target: ``adapter`` (a local PEFT folder, ``resolve_adapter``'s)
    or, without one, the synthetic adapter of the dry-run's ``mapping`` (else of the
    model's own layout), matched on the tp=1 build (``_build_for_lora``, ``_under_lora``
    say which otherwise). A model without ``SupportsLoRA`` is not run (a note when an adapter was
    given); what cannot run is a PFX600 note."""
    site = class_site(cls)
    if not enabled and adapter is None:
        return LoraRun("off")
    if not getattr(cls, "supports_lora", False):
        why = f"`{getattr(cls, '__name__', cls)}` does not declare `SupportsLoRA`"
        notes = [_note(f"{why}: vLLM refuses `--enable-lora` for it", site)] if adapter else []
        return LoraRun("off", why, notes)
    from prefixlint.introspect.vllm_api import lora_matching

    api, missing = lora_matching()
    if missing:
        return LoraRun("not verified", missing, [_note(missing, site)])
    base, why = _build_for_lora(model_config, builds)
    if base is None:
        return LoraRun("not verified", why)
    base, lora_build = _under_lora(cls, model_config, base, api)
    why = "; ".join(w for w in (why, lora_build) if w)
    try:
        chosen, more, mapping = _adapter_for(cls, base.model, mapping, adapter)
    except CheckpointError as e:
        return LoraRun("not verified", str(e), [_note(str(e), site)])
    if chosen is None:
        return LoraRun("not verified", more[0])
    partial = [w for w in (why, *more) if w]
    why = f"in part: {'; '.join(partial)}" if partial else ""
    if chosen.keys is None:
        why = "the adapter's tensors are not in a safetensors file (headers only are read)"
        return LoraRun("not verified", why, [_note(why, site)])
    from vllm.config import set_current_vllm_config

    try:
        with set_current_vllm_config(base.vllm_config):
            facts = _judged(cls, base, chosen, mapping, api)
    except Exception as e:  # vLLM's matching on meta: a gap, never a lost target
        failed = f"vLLM's matching failed on the meta build: {describe_error(e)}"
        return LoraRun("not verified", failed, [_note(failed, site)])
    return LoraRun("verified", why, facts)


def _build_for_lora(model_config: Any, builds: list[Any]) -> tuple[Any, str]:
    """The build to match on and what to say of it: the tp=1 build, else one of another
    layout without pipeline stages (vLLM's LoRA layers replace the sharded linear layers
    as they replace whole ones, under the fake TP group; the names are the same), else
    None with why."""
    base = _base_build(model_config, builds)
    if base is not None:
        return base, ""
    other = next((b for b in builds if b.error is None and b.layout.pp == 1), None)
    if other is not None:
        return other, f"matched on the {other.layout.name} build (tp=1 did not build)"
    if any(b.error is None for b in builds):
        return None, "no layout without pipeline stages built (its own note says why)"
    return None, "the model did not build (its own note says why)"


def _under_lora(
    cls: type | None, model_config: Any, base: Any, api: dict[str, Any]
) -> tuple[Any, str]:
    """The build as ``--enable-lora`` makes it (a ``LoRAConfig`` in the ``VllmConfig``)
    for a model whose files read ``lora_config``: such a model may build otherwise under
    it (Qwen4Exp keeps its indexer projection out of ``qkv_proj`` and maps `qkv_proj` to
    three parts only then), and the adapter meets that build. Else ``base``; returns the
    build and what to say of it."""
    from prefixlint.introspect.builds.layout import build_layout
    from prefixlint.introspect.dryrun.tables import model_files

    if not any("lora_config" in _text(f) for f in model_files(base.model, cls)):
        return base, ""
    rebuilt = build_layout(base.plan, base.layout, lora_config=api["LoRAConfig"]())
    if rebuilt.error is not None:
        error = describe_error(rebuilt.error)
        return base, f"matched on the build without a LoRA config (with one: {error})"
    return rebuilt, ""


@functools.lru_cache(maxsize=64)
def _text(file: str) -> str:
    try:
        return Path(file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _adapter_for(
    cls: type | None, model: nn.Module, mapping: dict[str, str], adapter: str | None
) -> tuple[Adapter | None, list[str], dict[str, str]]:
    """The adapter to match, what of the check it leaves out, and the checkpoint layer ->
    module path table it is judged with; None with the reason when there is none. The
    synthetic one trains the layers the checkpoint dry-run streamed, else (that dry-run did
    not finish) those of the model's own layout."""
    if adapter is not None:
        return read_adapter(adapter), [], mapping
    partial = []
    if not mapping:
        mapping = own_layers(cls, model)
        partial.append(OWN_LAYOUT)
    if not mapping:
        return None, ["no linear layer of the model derives a checkpoint name"], mapping
    chosen, towers = synthetic_adapter(mapping, language_prefix(model))
    if towers:
        partial.append(f"{towers} tower layer(s) left out (vLLM's default)")
    embeddings = embedding_layers(cls, model, language_prefix(model))
    for layer, (_, head) in sorted(embeddings.items()):
        # PEFT's names: an embedding's ``lora_embedding_A``, a (linear) head's ``lora_A``
        ends = ("lora_A.weight", "lora_B.weight") if head else EMBEDDING_ENDS
        chosen.keys = [*(chosen.keys or []), *(f"base_model.model.{layer}.{e}" for e in ends)]
        chosen.config["target_modules"] = sorted(
            {*chosen.config["target_modules"], layer.rsplit(".", 1)[-1]}
        )
    mapping = {**mapping, **{layer: path for layer, (path, _) in embeddings.items()}}
    return chosen, partial, mapping


def own_layers(cls: type | None, model: nn.Module) -> dict[str, str]:
    """Checkpoint layer -> linear module path as the model's own tables name them
    (``selflayout``'s derivation: a fused layer's parts from its stacked-params tables and
    ``packed_modules_mapping``, names through the inverse of ``hf_to_vllm_mapper``), for
    a model whose checkpoint dry-run streamed no layer (a loader that raised or needs
    real data): the synthetic adapter still covers every linear layer."""
    from vllm.model_executor.layers.linear import LinearBase

    from prefixlint.introspect.dryrun.selflayout import checkpoint_name
    from prefixlint.introspect.dryrun.tables import fused_kind, shard_sources, weights_mapper

    mapper, sources = weights_mapper(cls), shard_sources(model, cls)
    out: dict[str, str] = {}
    for path, module in model.named_modules():
        if not isinstance(module, LinearBase) or getattr(module, "weight", None) is None:
            continue
        owner, _, leaf = path.rpartition(".")
        fused = f"{path}.weight" if fused_kind(module) and leaf in sources else None
        parts = [f"{owner}.{p}".lstrip(".") for p, _ in sources[leaf]] if fused else [path]
        for part in parts:
            name = checkpoint_name(mapper, f"{part}.weight", fused)
            if name is not None:
                out[name.removesuffix(".weight")] = path
    return out


def _judged(
    cls: type | None, base: Any, adapter: Adapter, mapping: dict[str, str], api: dict[str, Any]
) -> list[Any]:
    sites = Sites(cls, base.model, base.recorder)
    found = match(base.model, adapter, api)
    judge = Judge(cls, base.model, sites, found, mapping, base.vllm_config.model_config)
    for peft, name in found.unexpected:
        judge.refused(peft, name)
    wrapped = wrapped_modules(base.model, found, api)
    for peft, name in found.accepted:
        if ".experts" in name or name.rsplit(".", 1)[-1] in adapter.modules_to_save:
            continue  # experts: matched by their own expert mapping; heads: below
        judge.dropped(peft, name, wrapped)
    out = judge.finish() + classifier_heads(base.model, adapter, sites)
    if adapter.synthetic:  # prefixlint's guess of an adapter: a warning at most (the unit)
        out = [replace(f, synthetic=True) for f in out]
    return [*out, *adapter_notes(adapter, found, api, sites.class_site)]
