"""PFX701/PFX702: a checkpoint and a quantization config dry-run on the meta device.

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
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.checks import Finding
from prefixlint.introspect.tagged import Tagged, WriteRecorder, make, recording, tags_of

MAX_RETRIES = 8  # load_weights raising on distinct kinds of names


@dataclass
class DryRun:
    status: str = "off"  # verified | not verified | off
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    # checkpoint layer name -> vLLM module path, for PFX702 and the report
    mapping: dict[str, str] = field(default_factory=dict)


class NotVerified(Exception):
    """The dry-run cannot answer; the message says why (a PFX600 note)."""


# -- the reference checkpoint ---------------------------------------------------------------


Reference = dict[str, tuple[tuple[int, ...], torch.dtype]]


# Renamings of up to 4 (sub-)models are reverted in every combination (15 layouts at most).
MAX_SCOPES = 4


def _reference_class(archs: list[str]) -> type | None:
    """transformers' class of the first name it knows, matched exactly, then ignoring case
    (vLLM's ``PhiMoEForCausalLM`` is transformers' ``PhimoeForCausalLM``)."""
    import transformers

    for a in archs:
        if hasattr(transformers, a):
            return getattr(transformers, a)
    known = {n.lower(): n for n in dir(transformers) if n[:1].isupper()}
    for a in archs:
        name = known.get(a.lower())
        if name is not None and isinstance(getattr(transformers, name, None), type):
            return getattr(transformers, name)
    return None


def _reference_config(hf_config: Any) -> Any:
    """A copy of the config the reference class accepts: a ``pad_token_id`` beyond a shrunk
    vocabulary is clamped into it (it names a row, no size; vLLM never reads it)."""

    def beyond(config: Any) -> bool:
        vocab = getattr(config, "vocab_size", None)
        pad = getattr(config, "pad_token_id", None)
        return isinstance(vocab, int) and isinstance(pad, int) and not 0 <= pad < vocab

    if not any(beyond(c) for c in (hf_config, getattr(hf_config, "text_config", None))):
        return hf_config  # nothing to clamp: the config itself, no copy
    out = copy.deepcopy(hf_config)
    for config in (out, getattr(out, "text_config", None)):
        if beyond(config):
            config.pad_token_id = config.vocab_size - 1
    return out


def reference(hf_config: Any, cls: type | None = None) -> tuple[list[Reference], nn.Module]:
    """The checkpoint layouts (name -> (shape, dtype)) of the transformers class of the
    architecture (the config's, or the vLLM class's own name: an out-of-tree copy of a
    known class), the original layout first, and the reference model built on meta."""
    archs = [
        a.removesuffix("__prefixlint")
        for a in (getattr(hf_config, "architectures", None) or [])
        if isinstance(a, str)
    ]
    if cls is not None and cls.__name__ not in archs:
        archs.append(cls.__name__)
    ref_cls = _reference_class(archs)
    if ref_cls is None:
        raise NotVerified(
            f"transformers has no reference class for {', '.join(archs) or 'this config'} "
            "(remote code or a vLLM-only architecture): no checkpoint layout to compare with"
        )
    try:
        with torch.device("meta"), _quiet():
            ref = ref_cls(_reference_config(hf_config))
        state = ref.state_dict()
        from transformers import modeling_utils as mu

        for key in getattr(ref, "_keys_to_ignore_on_save", None) or ():
            state.pop(key, None)
        if hasattr(mu, "remove_tied_weights_from_state_dict"):
            state = mu.remove_tied_weights_from_state_dict(state, ref)
        native = dict(state)
        variants = _revert_variants(ref, native)
        original = _forced_transposes(ref, native)
        if hasattr(mu, "revert_weight_conversion"):
            state = mu.revert_weight_conversion(ref, state)
    except Exception as e:
        raise NotVerified(
            f"the reference `{ref_cls.__name__}` cannot be built on meta for this config: "
            f"{type(e).__name__}: {str(e).strip()[:160]}"
        ) from None
    # save_pretrained writes the original (reverted) layout; checkpoints saved without
    # reverting, in transformers' own layout, exist too: either is a valid checkpoint.
    # A layout differs from another by its names or by a shape (a transposed tensor).
    layouts = [{k: (tuple(v.shape), v.dtype) for k, v in state.items()}]
    for other in (original, native, *variants):
        shaped = {k: (tuple(v.shape), v.dtype) for k, v in (other or {}).items()}
        if shaped and all(shaped != layout for layout in layouts):
            layouts.append(shaped)
    return layouts, ref


def _forced_transposes(ref: nn.Module, native: dict[str, Any]) -> dict[str, Any] | None:
    """The original layout of tensors that transformers transposes on load only when their
    shape is not the parameter's (``Transpose(check_dims=True)``). Reverted on save, the op
    sees the parameter's own shape and keeps it, so ``save_pretrained`` writes transformers'
    layout and never the one the converter exists for (Qwen3-VL-MoE's fused experts are
    (E, H, 2I) on the hub, (E, 2I, H) in transformers). Both load in transformers; this is
    the second. None where no converter has such an op (or before transformers 5)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            PrefixChange,
            Transpose,
            WeightConverter,
            revert_weight_conversion,
        )

        # what revert_weight_conversion uses for a model not loaded with from_pretrained
        conversions = [
            c
            for c in get_model_conversion_mapping(ref, add_legacy=False)
            if not isinstance(c, PrefixChange)
        ]
    except Exception:
        return None

    def checked(op: Any) -> bool:
        return isinstance(op, Transpose) and bool(getattr(op, "check_dims", False))

    forced = []
    for c in conversions:
        if isinstance(c, WeightConverter) and any(checked(op) for op in c.operations):
            c = copy.copy(c)
            c.operations = [
                Transpose(op.dim0, op.dim1) if checked(op) else op for op in c.operations
            ]
        forced.append(c)
    if all(a is b for a, b in zip(forced, conversions, strict=True)):
        return None
    ref._weight_conversions = forced
    try:
        return revert_weight_conversion(ref, dict(native))
    except Exception:
        return None
    finally:
        del ref._weight_conversions


def _revert_variants(ref: nn.Module, native: dict[str, Any]) -> list[dict[str, Any]]:
    """Other original layouts of the same checkpoint. transformers reverts the renamings of
    the model and of each sub-model all together, and drops prefix changes for a model it
    did not load; for composite models that is not always what the hub holds (a
    sub-model's renaming applied on top of the parent's gives ``language_model.model.model.``;
    PaliGemma's ``vision_tower.vision_model.`` prefix is dropped). So the renamings of each
    subset of the (sub-)models are reverted, and a result is kept when transformers' own
    loading maps every one of its names back onto the model: a layout transformers loads
    is a checkpoint layout. Empty where this transformers has no such API (before 5)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            rename_source_key,
            revert_weight_conversion,
        )

        scopes = list(
            dict.fromkeys(
                getattr(c, "scope_prefix", None)
                for c in get_model_conversion_mapping(ref, add_legacy=False)
                if not isinstance(c, WeightConverter)
            )
        )
    except Exception:
        return []
    if not scopes or len(scopes) > MAX_SCOPES:
        return []
    out = []
    for mask in range(1, 1 << len(scopes)):
        kept = {scope for bit, scope in enumerate(scopes) if mask >> bit & 1}
        try:
            ref._weight_conversions = [
                c
                for c in get_model_conversion_mapping(ref, add_legacy=False)
                if isinstance(c, WeightConverter) or getattr(c, "scope_prefix", None) in kept
            ]
            try:
                state = revert_weight_conversion(ref, dict(native))
            finally:
                del ref._weight_conversions
            forward = get_model_conversion_mapping(ref, add_legacy=False)
            renamings = [c for c in forward if not isinstance(c, WeightConverter)]
            converters = [c for c in forward if isinstance(c, WeightConverter)]
            loads = all(
                rename_source_key(name, renamings, converters)[0] in native for name in state
            )
        except Exception:
            continue
        if loads:
            out.append(state)
    return out[::-1]  # the most renamings reverted first


@contextlib.contextmanager
def _quiet() -> Any:
    import logging
    import warnings

    log = logging.getLogger("transformers")
    level = log.level
    log.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            log.setLevel(level)


_EXPERT = re.compile(r"^(?P<owner>.*\.experts\.)(?P<index>\d+)\.(?P<rest>.+)$")


def incomplete_experts(layout: Reference) -> tuple[set[str], str]:
    """Per-expert tensors of experts that lack a tensor every other expert of the same
    block has, and why. An expert without, say, its down projection computes nothing, so
    no checkpoint holds one: such rows are an allocation of the reference class
    (transformers' Longcat-Flash sizes ``gate_up_proj`` for its routed *and* its weightless
    identity experts, ``down_proj`` for the routed ones only). They are not streamed; a
    loader that misses whole experts is still judged (every expert is complete there)."""
    kinds: dict[str, dict[str, set[int]]] = {}
    for name in layout:
        m = _EXPERT.match(name)
        if m:
            kinds.setdefault(m["owner"], {}).setdefault(m["rest"], set()).add(int(m["index"]))
    dropped: set[str] = set()
    why = ""
    for owner, by_kind in kinds.items():
        complete = set.intersection(*by_kind.values())
        partial = set.union(*by_kind.values()) - complete
        if not partial:
            continue
        for name in layout:
            m = _EXPERT.match(name)
            if m and m["owner"] == owner and int(m["index"]) in partial:
                dropped.add(name)
        if not why:
            counts = ", ".join(f"`{k}` {len(v)}" for k, v in sorted(by_kind.items()))
            why = (
                f"the reference class holds experts of `{_normal(owner.rstrip('.'))}` that "
                f"lack tensors the others have ({counts}): {len(partial)} incomplete "
                "experts, which no checkpoint holds, are not streamed"
            )
    return dropped, why


# -- transformers and vLLM reading a synthesised config differently -------------------------


@dataclass
class Divergence:
    """Where the reference and the vLLM model, built from the same *synthesised* config,
    are different structures: the two read it differently (which layers are MoE, an
    optional bias or norm, a size from another attribute), so what a checkpoint of this
    config holds there is unknown. Those parts are a PFX600 note, not judged. A config
    from a real checkpoint is consistent with it, so there every divergence is judged."""

    names: set[str] = field(default_factory=set)  # reference tensors not streamed
    paths: set[str] = field(default_factory=set)  # vLLM modules whose parameters are not judged
    reasons: list[str] = field(default_factory=list)

    def add(self, reason: str) -> None:
        if _normal(reason) not in {_normal(r) for r in self.reasons}:
            self.reasons.append(reason)

    def covers(self, vllm_name: str) -> bool:
        return any(vllm_name.startswith(f"{p}.") for p in self.paths)


_MISSING = object()


def _block(name: str) -> str | None:
    """The layer's child a tensor lies in (``model.layers.2.mlp``), or None outside layers."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 2]) if i + 2 < len(parts) else None
    return None


def _mapped(cls: type | None, name: str) -> str:
    """The vLLM name of a checkpoint name through the class's ``hf_to_vllm_mapper``."""
    fn = getattr(getattr(cls, "hf_to_vllm_mapper", None), "_map_name", None)
    if callable(fn):
        with contextlib.suppress(Exception):
            out = fn(name)
            if isinstance(out, str):
                return out
    return name


def _submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def _walk(model: nn.Module, name: str) -> tuple[str, Any]:
    """How far ``name`` resolves in the vLLM model: (deepest resolved path, the value of the
    next component: ``None`` when the model set it to None, ``_MISSING`` when absent)."""
    obj: Any = model
    path: list[str] = []
    for part in name.split("."):
        value = getattr(obj, part, _MISSING) if isinstance(obj, nn.Module) else _MISSING
        if value is None or value is _MISSING:
            return ".".join(path), value
        obj, path = value, [*path, part]
    return ".".join(path), obj


def _is_moe(module: nn.Module) -> bool:
    """Routed experts: a child named ``experts``, an experts class, or stacked 3-D expert
    weights (class names alone say nothing: ``Glm4MoeLiteRMSNorm``)."""
    return any(
        name.rsplit(".", 1)[-1] == "experts" or type(m).__name__.endswith(("Experts", "FusedMoE"))
        for name, m in module.named_modules()
    ) or any(p.dim() == 3 for p in module.parameters())


def _expert_widths(
    reference: dict[str, Any], names: list[str], module: nn.Module
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The routed experts' down-projection dims in the reference (``experts...down_proj``)
    and in vLLM (``w2_weight``) when they differ; only the sizes of one expert, never a
    count of experts or a name, so a loader that misses experts is still judged."""
    # (in, out) of one expert's down projection, in either orientation: transformers
    # stores some fused experts transposed (GptOss, Llama4: (E, I, H); vLLM (E, H, I))
    mine = {
        tuple(sorted(reference[n][0][-2:]))
        for n in names
        if ".experts." in n and "shared" not in n and "down_proj" in n and len(reference[n][0]) >= 2
    }
    theirs = {
        tuple(sorted(p.shape[-2:]))
        for n, p in module.named_parameters()
        if n.endswith("w2_weight") and "shared" not in n and p.dim() == 3
    }
    if len(mine) == 1 and len(theirs) == 1 and mine != theirs:
        return mine.pop(), theirs.pop()
    return None


def reconcile(
    cls: type | None, ref: nn.Module, model: nn.Module, reference: dict[str, Any]
) -> Divergence:
    """Before streaming: layer blocks that are MoE on one side and dense on the other, or
    MoE on both with weights of other sizes, and tensors vLLM explicitly set to None."""
    out = Divergence()
    blocks: dict[str, list[str]] = {}
    for name in reference:
        block = _block(name)
        if block is not None:
            blocks.setdefault(block, []).append(name)
    for block, names in blocks.items():
        mine, theirs = _submodule(ref, block), _submodule(model, _mapped(cls, block))
        if mine is None or theirs is None:
            continue
        moe_ref, moe_vllm = _is_moe(mine), _is_moe(theirs)
        if moe_ref != moe_vllm:
            kinds = ("MoE", "dense") if moe_vllm else ("dense", "MoE")
            why = f"`{block}` is {kinds[0]} in vLLM, {kinds[1]} in transformers"
        elif moe_ref and _expert_widths(reference, names, theirs) is not None:
            mine_w, theirs_w = _expert_widths(reference, names, theirs)  # type: ignore[misc]
            why = (
                f"the experts of `{block}` are {theirs_w} in vLLM, {mine_w} in transformers "
                "(the intermediate size comes from another attribute)"
            )
        else:
            continue
        out.names.update(names)
        out.paths.add(_mapped(cls, block))
        out.add(why)
    for name in reference:
        if name in out.names:
            continue
        path, value = _walk(model, _mapped(cls, name))
        if value is None:
            out.names.add(name)
            leaf = _mapped(cls, name)[len(path) :].lstrip(".").split(".")[0]
            out.add(f"vLLM builds `{path or type(model).__name__}` with `{leaf}` = None")
    return out


def explained_drop(cls: type | None, model: nn.Module, name: str, stream: Stream) -> str | None:
    """After streaming: a checkpoint tensor inside a layer for which vLLM has no module or
    parameter at all, in a module whose parameters were all written (a renamed module
    would leave its own parameter unwritten): vLLM built the module without it. Or one
    whose vLLM parameter is a tied alias of another, written, parameter (a head tied in
    vLLM and not in the reference: each read the tie flag from another sub-config)."""
    block = _block(name)
    mapped = _mapped(cls, name)
    path, value = _walk(model, mapped)
    tied = stream.recorder.owner(value) if isinstance(value, torch.Tensor) else None
    if tied is not None and tied.name != mapped and tied.written:
        # the config's tie flag, read from another (sub-)config by one of the two
        return f"vLLM ties `{mapped}` to `{tied.name}`, transformers keeps both"
    if block is None or value is not _MISSING or not path.startswith(_mapped(cls, block)):
        return None
    written = {t.name for t in stream.recorder.by_storage.values() if t.written}
    under = [n for n, _ in _submodule(model, path).named_parameters(prefix=path)]  # type: ignore[union-attr]
    if not under or any(n not in written for n in under):
        return None
    leaf = mapped[len(path) :].lstrip(".").split(".")[0]
    return f"vLLM builds `{path}` without `{leaf}`, transformers with it"


# -- streaming through load_weights ----------------------------------------------------------

_META_LIMITS = (
    "meta tensor",
    "on meta",
    "'Meta' backend",
    "Meta backend",
    "data-dependent",
    "data dependent",
    "Cannot access data pointer",
    "cannot be called on meta",
    "Could not run",
    "item()",
)
_FINDING_ERRORS = (KeyError, ValueError, AssertionError, IndexError)


@dataclass
class Stream:
    recorder: WriteRecorder
    raised: list[tuple[str, BaseException]] = field(default_factory=list)
    complete: bool = False
    limit: str = ""  # why the stream could not run (a meta limitation)
    limit_error: BaseException | None = None


def _normal(name: str) -> str:
    """Layer numbers left out, also where a name ends inside a message (before a backtick)."""
    return re.sub(r"\.\d+(?=[.`]|$)", ".N", name)


def _targets(model: nn.Module) -> dict[str, tuple[torch.Tensor, bool]]:
    out: dict[str, tuple[torch.Tensor, bool]] = {}
    for name, p in model.named_parameters():
        out[name] = (p, True)
    for name, b in model.named_buffers():
        out.setdefault(name, (b, False))
    return out


def _failing_name(error: BaseException, names: list[str], last: str | None) -> str | None:
    """The checkpoint tensor being loaded when ``error`` was raised."""
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        for value in frame.f_locals.values():
            if isinstance(value, Tagged):
                tags = sorted(tags_of(value))
                if tags:
                    return tags[0]
    text = str(error)
    hits = [n for n in names if n in text or n.rsplit(".", 1)[0] in text]
    if hits:
        return max(hits, key=len)
    return last


def _is_meta_limit(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, NotImplementedError) or any(w in text for w in _META_LIMITS)


def stream(model: nn.Module, reference: dict[str, Any], context: Any) -> Stream:
    """Feed every reference tensor to ``model.load_weights``; on a name that raises, record
    it and feed again without that kind of name (a few times at most)."""
    names = sorted(reference)
    excluded: set[str] = set()
    out = Stream(WriteRecorder({}))
    for _ in range(MAX_RETRIES + 1):
        recorder = WriteRecorder(_targets(model))
        last: list[str | None] = [None]

        def weights(recorder=recorder, last=last) -> Any:
            for name in names:
                if _normal(name) in excluded:
                    continue
                last[0] = name
                shape, dtype = reference[name]
                yield name, make(name, shape, dtype)

        out.recorder = recorder
        try:
            with context(), recording(recorder), _quiet():
                model.load_weights(weights())
        except Exception as e:
            if _is_meta_limit(e) or not _is_finding_error(e):
                out.limit, out.limit_error = _describe(e), e
                return out
            name = _failing_name(e, names, last[0]) or "?"
            out.raised.append((name, e))
            if name == "?" or _normal(name) in excluded:
                return out
            excluded.add(_normal(name))
            continue
        out.complete = True
        return out
    return out


def _is_finding_error(error: BaseException) -> bool:
    if isinstance(error, _FINDING_ERRORS):
        return True
    return isinstance(error, RuntimeError) and ("shape" in str(error) or "size" in str(error))


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:240]


# -- where to report ---------------------------------------------------------------------------


class Sites:
    """Lines of the model's own files: where a module was built, a ``load_weights``, a
    mapping entry."""

    def __init__(self, cls: type | None, model: nn.Module, recorder: Any) -> None:
        self.cls = cls
        self.model = model
        self.recorder = recorder
        self.class_site = _source_site(cls)
        self.embedding = False  # served through vLLM's embedding adapter

    def model_file(self, filename: str) -> bool:
        if not filename or not self.recorder.external(filename):
            return False
        norm = filename.replace("\\", "/")
        if "/vllm/" in norm and not re.search(r"/vllm/(model_executor/)?models/", norm):
            return False  # vLLM's loader machinery (decorators, weight utils)
        return not filename.replace("\\", "/").endswith(
            ("/models/utils.py", "/models/interfaces.py", "/models/adapters.py")
        )

    def module(self, path: str) -> tuple[str, int]:
        try:
            module = self.model.get_submodule(path)
        except AttributeError:
            return self.class_site
        record = self.recorder.records.get(id(module))
        if record is not None and record.module is module and record.site_file:
            return record.site_file, record.site_line
        return _source_site(type(module)) if path else self.class_site

    def prefix_root(self, path: str) -> tuple[str, int]:
        """Where the wrong name starts: the outermost module on ``path`` built with a
        prefix that is not its own path (what PFX601 reports)."""
        parts = path.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            try:
                module = self.model.get_submodule(sub)
            except AttributeError:
                break
            record = self.recorder.records.get(id(module))
            if (
                record is not None
                and record.module is module
                and isinstance(record.prefix, str)
                and record.prefix != sub
                and record.site_file
            ):
                return record.site_file, record.site_line
        return self.module(path)

    def loader(self, name: str) -> tuple[str, int]:
        """The ``load_weights`` of the deepest module on ``name``'s path that has its own:
        vLLM's loader hands a checkpoint name down to it."""
        best = self._loader_of(type(self.model))
        path = ""
        for part in name.split(".")[:-1]:
            path = f"{path}.{part}" if path else part
            try:
                module = self.model.get_submodule(path)
            except AttributeError:
                break
            best = self._loader_of(type(module)) or best
        return best or self.class_site

    def _loader_of(self, klass: type) -> tuple[str, int] | None:
        fn = getattr(klass, "load_weights", None)
        if not callable(fn):
            return None
        site = _source_site(fn)
        return site if self.model_file(site[0]) else None

    def frame(self, error: BaseException) -> tuple[str, int] | None:
        best = None
        for frame, line in traceback.walk_tb(error.__traceback__):
            if self.model_file(frame.f_code.co_filename):
                best = (frame.f_code.co_filename, line)
        return best

    @functools.cached_property
    def files(self) -> list[str]:
        """The model's own source files (its classes and their bases), found once: a
        loader that raises on many names asks for each of them."""
        out = []
        for klass in {type(m) for m in self.model.modules()} | {self.cls}:
            for base in getattr(klass, "__mro__", ()):
                f = _source_file(base)
                if self.model_file(f) and f not in out:
                    out.append(f)
        return out

    def mapping_line(self, *words: str) -> tuple[str, int] | None:
        """The first line of the model's files that quotes every word (a stacked-params
        or mapper entry such as ``(".qkv_proj", "v_proj", "v")``)."""
        patterns = [
            re.compile(rf"\b{w}\b" if w.isdigit() else rf"[\"']\.?{re.escape(w)}\.?[\"']")
            for w in words
        ]
        for f in self.files:
            try:
                with open(f, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for i, text in enumerate(lines, 1):
                if all(p.search(text) for p in patterns):
                    return f, i
        return None

    def packed_mapping(self) -> tuple[str, int]:
        for klass in getattr(self.cls, "__mro__", ()):
            if "packed_modules_mapping" in vars(klass):
                file, start = _source_site(klass)
                try:
                    lines, _ = inspect.getsourcelines(klass)
                except (OSError, TypeError):
                    return file, start
                for i, text in enumerate(lines):
                    if "packed_modules_mapping" in text:
                        return file, start + i
                return file, start
        return self.class_site


def _source_file(obj: Any) -> str:
    try:
        return inspect.getsourcefile(obj) or ""
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=4096)
def _source_site(obj: Any) -> tuple[str, int]:
    """File and first line of a class or function. Cached: ``getsourcelines`` of a class
    parses its whole file each time."""
    try:
        return inspect.getsourcefile(obj) or "", inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return "", 0


# -- PFX701 findings ---------------------------------------------------------------------------


def _shards(module: nn.Module, param: torch.Tensor) -> list[tuple[str, int, int]] | None:
    """(label, start, end) along the output dim for the shards of a stacked parameter."""
    sizes = getattr(module, "output_sizes", None)
    dim = getattr(param, "output_dim", None)
    if not isinstance(sizes, (list, tuple)) or len(sizes) < 2 or dim is None:
        return None
    if param.dim() <= dim or sum(sizes) != param.shape[dim]:
        return None
    qkv = "QKV" in type(module).__name__ and len(sizes) == 3
    labels = ["q", "k", "v"] if qkv else [str(i) for i in range(len(sizes))]
    out, start = [], 0
    for label, size in zip(labels, sizes, strict=True):
        out.append((label, start, start + size))
        start += size
    return out


def _shard_findings(stream: Stream, target: Any, sites: Sites) -> list[Finding]:
    path = target.name.rpartition(".")[0]
    try:
        module = sites.model.get_submodule(path)
    except AttributeError:
        return []
    covered = stream.recorder.covered(target)
    rows = getattr(module, "org_vocab_size", None)
    if covered is not None and isinstance(rows, int) and 0 < rows < covered.shape[0]:
        covered = covered[:rows]  # vocabulary padding rows are never in a checkpoint
    shards = _shards(module, target.tensor) if covered is not None else None
    if covered is None or covered.all():
        return []
    if shards is None:
        missing = int((~covered).sum())
        msg = (
            f"{missing} of {covered.numel()} elements of `{target.name}` are never written "
            "by `load_weights`: they stay random"
        )
        return [Finding("PFX701", "error", msg, *sites.module(path))]
    dim = target.tensor.output_dim
    row = target.tensor.stride(dim)
    base = target.tensor.storage_offset()
    writers: dict[str, set[str]] = {}
    for label, lo, hi in shards:
        flat = (base + lo * row, base + hi * row)
        writers[label] = {
            t for wlo, whi, tags in target.writes if wlo < flat[1] and whi > flat[0] for t in tags
        }
    out = []
    for label, lo, hi in shards:
        if covered.narrow(dim, lo, hi - lo).all():
            continue
        msg = (
            f"shard `{label}` of `{target.name}` is never written by `load_weights`: "
            "it stays random"
        )
        site = sites.module(path)
        for other, names in writers.items():
            if len(names) < 2 or dim != 0:
                continue
            msg += (
                f"; shard `{other}` is written by {' and '.join(f'`{n}`' for n in sorted(names))}"
                " instead: a stacked-params mapping entry names the wrong shard"
            )
            site = _wrong_entry(sites, path, other, names) or site
        out.append(Finding("PFX701", "error", msg, *site))
    return out


def _owner(sites: Sites, path: str, label: str) -> str | None:
    """The checkpoint layer that should fill shard ``label`` of the stacked module."""
    packed = getattr(sites.cls, "packed_modules_mapping", None) or {}
    parts = packed.get(module_leaf(path)) if isinstance(packed, dict) else None
    if label.isdigit():
        return parts[int(label)] if parts and int(label) < len(parts) else None
    return next((p for p in parts or () if p.startswith(f"{label}_")), f"{label}_proj")


def _wrong_entry(sites: Sites, path: str, label: str, names: set[str]) -> tuple[str, int] | None:
    """The mapping line that sends a checkpoint layer into shard ``label`` it does not own."""
    leaves = sorted({n.rsplit(".", 2)[-2] for n in names if n.count(".") >= 1})
    owner = _owner(sites, path, label)
    culprits = [leaf for leaf in leaves if leaf != owner] or leaves
    for leaf in culprits:
        found = sites.mapping_line(leaf, module_leaf(path), label)
        if found:
            return found
    return None


def module_leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def coverage_findings(
    stream: Stream, reference: dict[str, Any], sites: Sites, divergence: Divergence | None = None
) -> list[Finding]:
    """``divergence`` (synthesised configs only): the parts not judged, and it collects the
    tensors vLLM has no place for in a module it otherwise fills."""

    def explained(name: str) -> bool:
        why = divergence and explained_drop(sites.cls, sites.model, name, stream)
        if why and divergence is not None:
            divergence.add(why)
        return bool(why)

    out = [
        _raise_finding(name, error, sites)
        for name, error in stream.raised
        if not (stream.complete and explained(name))
    ]
    if not stream.complete:
        return out
    raised = {_normal(n) for n, _ in stream.raised}
    targets = [
        t
        for t in stream.recorder.by_storage.values()
        if t.is_param and not (divergence and divergence.covers(t.name))
    ]
    unwritten = {t.name: t for t in targets if not t.written}
    # With every parameter written, a dropped tensor has no place it was meant for in the
    # built model: an unused head or statistic, most likely on purpose. Still reported, as
    # a warning, since a renamed module that vLLM builds fresh would look the same.
    nothing_random = not unwritten and not _partial(stream, sites)
    for name in sorted(reference):
        if name in stream.recorder.consumed or _normal(name) in raised:
            continue
        if name not in unwritten and explained(name):
            continue
        if nothing_random and _declared_drop(sites.cls, name):
            continue
        severity = "error"
        if name in unwritten:
            unwritten.pop(name)
            msg = (
                f"checkpoint tensor `{name}` is never loaded and the parameter of that name "
                "stays random: `load_weights` skips it"
            )
        elif nothing_random:
            severity = "warning"
            msg = (
                f"checkpoint tensor `{name}` is never loaded: `load_weights` drops it, and "
                "every parameter of the model is written without it (unused by vLLM?)"
            )
        else:
            msg = f"checkpoint tensor `{name}` is never loaded: `load_weights` drops it silently"
        out.append(Finding("PFX701", severity, msg, *sites.loader(name)))
    for name in sorted(unwritten):
        path = name.rpartition(".")[0]
        why = divergence and _optional_bias(stream, reference, name)
        if why and divergence is not None:
            divergence.add(why)
            continue
        msg = (
            f"`{name}` is never written by `load_weights`: no checkpoint tensor reaches it, "
            "so it stays random"
        )
        severity = "error"
        if sites.embedding and name.startswith("lm_head."):
            # vLLM's embedding adapter keeps the head; its pooler never computes logits
            severity = "warning"
            msg += " (served as an embedding model, whose pooler never uses the head)"
        out.append(Finding("PFX701", severity, msg, *sites.module(path)))
    for t in targets:
        if t.written:
            out.extend(_shard_findings(stream, t, sites))
    return out


def _declared_drop(cls: type | None, name: str) -> bool:
    """The class's own ``hf_to_vllm_mapper`` maps the name to None: the model says it does
    not load it (Qwen2.5-Omni's thinker maps ``talker.`` and ``token2wav.`` to None). Only
    asked when every parameter is written; with one left random it is still reported."""
    fn = getattr(getattr(cls, "hf_to_vllm_mapper", None), "_map_name", None)
    if callable(fn):
        with contextlib.suppress(Exception):
            return fn(name) is None
    return False


def _optional_bias(stream: Stream, reference: dict[str, Any], name: str) -> str | None:
    """An unwritten ``bias`` of a module whose weight was written from checkpoint layers
    none of which has a bias in the reference: vLLM builds the bias, transformers does
    not, for this config (Phi-3.5-MoE's biases: vLLM always, transformers on
    ``attention_bias``)."""
    path, _, leaf = name.rpartition(".")
    if leaf != "bias":
        return None
    weight = next(
        (t for t in stream.recorder.by_storage.values() if t.name == f"{path}.weight"), None
    )
    if weight is None or not weight.sources:
        return None
    layers = {tag.rpartition(".")[0] for tag in weight.sources}
    if any(f"{layer}.bias" in reference for layer in layers):
        return None
    return f"vLLM builds `{path}` with a bias, transformers without"


def _partial(stream: Stream, sites: Sites) -> bool:
    return any(
        _shard_findings(stream, t, sites)
        for t in stream.recorder.by_storage.values()
        if t.is_param and t.written
    )


def _raise_finding(name: str, error: BaseException, sites: Sites) -> Finding:
    leaf = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    site = sites.frame(error) or sites.loader(name)
    entry = sites.mapping_line(leaf) if isinstance(error, ValueError) else None
    if entry is not None and "shard" in str(error).lower():
        site = entry
    msg = f"`load_weights` raises on checkpoint tensor `{name}`: {_describe(error)}"
    return Finding("PFX701", "error", msg, *site)


def _layout_refused(findings: list[Finding]) -> list[Finding]:
    """A loader that raised on more kinds of names than the stream retries refuses the
    reference layout as a whole: far more often a checkpoint format transformers renames
    (remote code's own names) than a loader broken for every kind of tensor, which any
    real checkpoint would expose at once. Its raises become warnings that say so."""
    out = []
    for f in findings:
        if f.code == "PFX701" and f.message.startswith("`load_weights` raises"):
            f.severity = "warning"
            f.message += (
                f" (one of more than {MAX_RETRIES} kinds of names it refused: the checkpoint "
                "layout transformers gives may not be the one this loader reads; `--config` "
                "with a real checkpoint's config.json or the smoke phase with its weights "
                "decides)"
            )
        out.append(f)
    return out


def _kind(message: str) -> str:
    """A message with layer numbers, and for a raise the tensor name, left out."""
    if message.startswith("`load_weights` raises on checkpoint tensor"):
        message = re.sub(r"^[^:]*:", "", message)[:120]
    return _normal(message)


def merge(findings: list[Finding]) -> list[Finding]:
    """One finding per line and kind of message: layer 0's, with how many layers repeat it."""
    groups: dict[tuple[str, str, int, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, f.file, f.line, _kind(f.message)), []).append(f)
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) > 1:
            first.message += f" (and {len(same) - 1} more like it)"
        out.append(first)
    return out


# -- PFX702 -------------------------------------------------------------------------------------


def layer_sources(stream: Stream, model: nn.Module) -> dict[str, list[str]]:
    """vLLM linear module path -> the checkpoint layers (names without the tensor's last
    component) whose tensors were written into its parameters, in the order of the
    regions they fill (q, k, v)."""
    from vllm.model_executor.layers.linear import LinearBase

    linear = {path for path, m in model.named_modules() if isinstance(m, LinearBase)}
    first: dict[str, dict[str, int]] = {}
    for t in stream.recorder.by_storage.values():
        path = t.name.rpartition(".")[0]
        if not (t.is_param and path in linear and t.sources):
            continue
        where = first.setdefault(path, {})
        for lo, _, tags in t.writes:
            for tag in tags:
                layer = tag.rpartition(".")[0]
                where[layer] = min(where.get(layer, lo), lo)
        for tag in t.sources:
            where.setdefault(tag.rpartition(".")[0], 1 << 62)
    return {path: sorted(w, key=lambda k: (w[k], k)) for path, w in first.items()}


def ignore_sets(sources: dict[str, list[str]]) -> list[set[str]]:
    """Two ``ignored_layers`` lists that split the kinds of linear layers between them, so
    that each layer is checked once ignored and once quantized."""
    kinds: dict[str, set[str]] = {}
    for path, layers in sources.items():
        kinds.setdefault(module_leaf(path), set()).update(layers)
    names = sorted(kinds)
    first = set().union(*(kinds[k] for k in names[0::2])) if names else set()
    second = set().union(*(kinds[k] for k in names[1::2])) if names[1:] else set()
    return [first, second]


def quant_findings(
    cls: type | None,
    model_config: Any,
    base: Any,
    sources: dict[str, list[str]],
    sites: Sites,
    deadline: float | None = None,
) -> tuple[list[Finding], str]:
    """Build under vLLM's Fp8Config for each ignore set and compare each linear layer's
    method with the checkpoint layers it loads. Returns findings and a reason when the
    check could not run (or not before ``deadline``: each build takes about as long as
    the first)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    from prefixlint.introspect.build import build_layout

    out: list[Finding] = []
    for ignored in ignore_sets(sources):
        if _past(deadline, need=base.seconds):
            return out, OUT_OF_TIME
        config = Fp8Config(ignored_layers=sorted(ignored))
        build = build_layout(model_config, base.layout, quant_config=config)
        if build.error is not None:
            if "same" in str(build.error) and "precision" in str(build.error).lower():
                msg = (
                    "a fused layer mixes checkpoint layers the checkpoint ignores with ones it "
                    "quantizes; `packed_modules_mapping` does not match the checkpoint: "
                    f"vLLM: {_describe(build.error)}"
                )
                out.append(Finding("PFX702", "error", msg, *sites.packed_mapping()))
                continue
            return out, f"building under `Fp8Config` failed: {_describe(build.error)}"
        for path, layers in sorted(sources.items()):
            skipped = set(layers) & ignored
            if skipped and skipped != set(layers):
                continue  # a layer fed by several kinds: no single expectation
            try:
                module = build.model.get_submodule(path)
            except AttributeError:
                continue
            method = getattr(module, "quant_method", None)
            if method is None or getattr(module, "quant_config", None) is None:
                continue  # built without a quant config: the model opts the layer out
            actual = isinstance(method, UnquantizedLinearMethod)
            if actual != bool(skipped):
                out.append(_quant_mismatch(cls, path, module, layers, bool(skipped), sites))
    return out, ""


def _quant_mismatch(
    cls: type | None, path: str, module: nn.Module, layers: list[str], ignored: bool, sites: Sites
) -> Finding:
    prefix = getattr(module, "prefix", path)
    names = ", ".join(f"`{n}`" for n in layers)
    if ignored:
        what = f"`{path}` is quantized although the checkpoint lists {names} in `ignored_layers`"
    else:
        what = f"`{path}` is left unquantized although the checkpoint quantizes {names}"
    leaf = module_leaf(path)
    leaves = list(dict.fromkeys(module_leaf(n) for n in layers))
    packed = getattr(cls, "packed_modules_mapping", None) or {}
    site = sites.module(path)
    if prefix != path:
        site = sites.prefix_root(path)
        why = (
            f"its prefix `{prefix}` is not its path, and the quantization config matches the prefix"
        )
    elif len(layers) > 1 and leaves != [leaf]:
        entry = packed.get(leaf)
        if entry is None:
            why = f"`packed_modules_mapping` has no entry `{leaf!r}: {leaves}`"
        else:
            why = f"`packed_modules_mapping[{leaf!r}]` is {list(entry)}, not {leaves}"
        site = sites.packed_mapping()
    elif layers != [path]:
        name = layers[0]
        why = (
            f"the checkpoint calls it `{name}` and no `hf_to_vllm_mapper` entry renames that "
            f"to `{path}`"
        )
    else:
        why = "vLLM's `is_layer_skipped` decides otherwise for this prefix"
    return Finding("PFX702", "error", f"{what} (prefix `{prefix}`): {why}", *site)


# -- entry point ------------------------------------------------------------------------------


def _note(message: str, site: tuple[str, int]) -> Finding:
    return Finding("PFX600", "note", f"not verified: {message}", *site)


def _divergence_note(divergence: Divergence, sites: Sites) -> Finding:
    shown = divergence.reasons[:4]
    more = len(divergence.reasons) - len(shown)
    what = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return _note(
        "checkpoint dry-run, in part: transformers and vLLM read the synthesised config "
        f"differently, so what a checkpoint holds there is unknown ({what}); those tensors "
        "are not judged. `--config` with a real checkpoint's config.json checks them",
        sites.class_site,
    )


def _stream_context(base: Any, model_config: Any) -> Any:
    from vllm.config import set_current_vllm_config

    from prefixlint.introspect.parallel import fake_parallel_state
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


@contextlib.contextmanager
def _as_served(model: nn.Module, model_config: Any) -> Any:
    """The model as vLLM's loader serves it: an architecture run as an embedding model
    (``LlamaModel``, ``MistralModel``) gets vLLM's own ``as_embedding_model`` adapter, whose
    ``load_weights`` accepts a base model's checkpoint (names without ``model.``) by
    probing the prefix (adapters.py). The built instance takes the adapter class for the
    stream only; the adapter adds no parameters."""
    original = type(model)
    adapted = original
    if _served_as_embedding(model_config):
        with contextlib.suppress(Exception):
            from vllm.model_executor.models.adapters import as_embedding_model

            adapted = as_embedding_model(original)
    if adapted is not original and issubclass(adapted, original):
        model.__class__ = adapted
    try:
        yield
    finally:
        model.__class__ = original


def _base_build(model_config: Any, builds: list[Any]) -> Any:
    base = next(
        (b for b in builds if b.error is None and b.layout.tp == 1 and b.layout.pp == 1), None
    )
    if base is not None or not any(b.error is None for b in builds):
        return base
    from prefixlint.introspect.build import build_layout
    from prefixlint.introspect.parallel import Layout

    fresh = build_layout(model_config, Layout())
    return fresh if fresh.error is None else None


OUT_OF_TIME = "skipped: the builds used most of this target's time budget (raise `--timeout`)"


def _past(deadline: float | None, need: float = 0.0) -> bool:
    """The deadline has passed, or would before a step of ``need`` seconds ends."""
    return deadline is not None and time.monotonic() + need > deadline


def run(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    enabled: bool = True,
    synthesised: bool = False,
    deadline: float | None = None,
) -> DryRun:
    """PFX701 and PFX702 for one target; the tp=1 build is reused. ``synthesised``: the
    config was made up by prefixlint, so where transformers and vLLM read it into different
    structures nothing is judged (``reconcile``). Past ``deadline`` (``time.monotonic``),
    the steps not yet run are skipped with a note."""
    if not enabled:
        return DryRun("off")
    base = _base_build(model_config, builds)
    if base is None:
        return DryRun("", "the model did not build")
    sites = Sites(cls, base.model, base.recorder)
    sites.embedding = _served_as_embedding(model_config)
    if _past(deadline):
        note = _note(f"checkpoint and quantization dry-run: {OUT_OF_TIME}", sites.class_site)
        return DryRun("not verified", OUT_OF_TIME, [note])
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
        return DryRun("not verified", str(e), [_note(f"checkpoint dry-run: {e}", sites.class_site)])
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
        found = coverage_findings(s, streamed, sites, divergence)
        tried.append((s, streamed, found, divergence, why))
        if not found and not s.limit:
            break
    # the layout vLLM loads best: a loader need only accept one of them
    s, _, findings, divergence, why = min(tried, key=lambda t: (not t[0].complete, len(t[2])))
    if divergence is not None and divergence.reasons:
        findings.append(_divergence_note(divergence, sites))
    if why:
        findings.append(_note(f"checkpoint dry-run, in part: {why}", sites.class_site))
    if s.limit:
        reason = f"a weight loader needs real data on meta tensors ({s.limit})"
        site = (s.limit_error and sites.frame(s.limit_error)) or sites.loader("")
        findings.append(_note(f"checkpoint dry-run: {reason}", site))
        return DryRun("not verified", reason, merge(findings))
    if not s.complete:
        reason = "`load_weights` raised on too many kinds of names to check the rest"
        return DryRun("not verified", reason, merge(_layout_refused(findings)))
    sources = layer_sources(s, base.model)
    mapping = {layer: path for path, layers in sources.items() for layer in layers}
    quant, skipped = quant_findings(cls, model_config, base, sources, sites, deadline)
    findings += quant
    # "verified" with a reason: what of the check did not run, never left unsaid
    partial = []
    if skipped:
        findings.append(_note(f"quantization dry-run: {skipped}", sites.class_site))
        partial.append(f"the quantization dry-run did not run ({skipped})")
    if divergence is not None and divergence.reasons:
        partial.append(f"{len(divergence.reasons)} part(s) read differently from the config")
    if why:
        partial.append(why)
    reason = f"in part: {'; '.join(partial)}" if partial else ""
    return DryRun("verified", reason, merge(findings), mapping)
