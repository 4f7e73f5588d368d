"""PFX701: the checkpoint dry-run: tensors the loader never loads, parameters it never
writes, a loader that raises. The dry-run observes them as typed facts
(``dryrun/weightfacts.py``); this unit alone writes their words, decides their severity
and merges them per line and kind."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from prefixlint.codes import CHECKPOINT_COVERAGE_CODE
from prefixlint.introspect.checks import pfx701_checkpoint
from prefixlint.introspect.checks.base import Case, FactCheck
from prefixlint.introspect.checks.pfx600_not_verified import NotVerified
from prefixlint.introspect.dryrun.layouts import normal
from prefixlint.introspect.dryrun.streaming import MAX_RETRIES
from prefixlint.introspect.dryrun.weightfacts import (
    PFX701_FACTS,
    BrokenLoader,
    LoaderRaises,
    Loading,
    NeverLoaded,
    RefusedDeclared,
    ScalesDropped,
    Unwritten,
    UnwrittenElements,
    UnwrittenShard,
)
from prefixlint.introspect.finding import Finding, Unverified

# the words that say a parameter (or shard) left unwritten stays random: a note on the
# model's own layout says the rest without them
RANDOM_SHARD = ": it stays random"
RANDOM_PARAMETER = ": no checkpoint tensor reaches it, so it stays random"
REFUSES_DECLARED = "`load_weights` refuses checkpoint tensors the model's own tables declare"
CONTESTED = (
    " (a warning: these KV-cache scales are named at attention blocks with no "
    "`k_proj`/`v_proj`/`qkv_proj`, where compressed-tensors puts none and ModelOpt "
    "names its projections, so a real FP8 checkpoint may not hold them)"
)
_OWN_TABLES = (
    ", with the checkpoint names the model's own tables give (its loader may read that "
    "tensor under another name, renamed, split or loaded apart in code, which a layout "
    "derived from the model cannot see: `--checkpoint` with a real checkpoint, or the "
    "smoke phase, decides)"
)


class WeightLoading(FactCheck):
    """## What it does
    Streams the reference checkpoint of the config (the transformers class's names, the
    model type's class, or a layout derived from the model's own tables; with
    `--checkpoint` the real one's headers) through the model's own `load_weights` on meta
    tensors that remember their source, and reports what stayed undone. The stream lives
    in `dryrun/` (`streaming.py`, `weights.py`; `selflayout.py` and `checkpoint_run.py`
    for the other layouts), which returns typed facts (`dryrun/weightfacts.py`); this unit
    writes their words and decides their severity, each reported at the model's line.

    ## Details
    The reference `transformers` class of the same config is built on the meta device;
    its `state_dict()` as `save_pretrained` writes it (tied copies dropped,
    transformers' weight conversions reverted) is what a checkpoint holds. Each tensor
    is streamed, as a meta tensor of the reference shape, through the model's own
    `load_weights` (mapper, stacked-params mapping, tie branch, skips included), and
    every write into a parameter is recorded with the region it covers. Reported: a
    tensor never loaded (at the `load_weights` that drops it), a parameter or a shard of
    a stacked parameter never written (at the line that built the module, or at the
    mapping entry that sends another tensor into its shard), and a `load_weights` that
    raises on a name. Where there is no reference class (remote code, a vLLM-only
    architecture, a plugin), the layout comes from the class of the config's model type,
    else from the model itself (its parameters back through its stacked-params tables,
    mappers and `packed_modules_mapping`); a loader that renames in code is asked which
    names it takes (its own constant renamings undone, a shared segment left out, a
    fused tensor read whole). On such a layout a parameter left unwritten is a PFX600
    note (not verified), the head's skip a warning, a `load_weights` whose own code
    fails an error. Where a weight loader needs real data, or refuses the whole layout,
    a PFX600 note says so; names the model's own tables declare (a part its mapper's
    stacked entries, written or built, a stacked-params table or
    `packed_modules_mapping` stack into a fused layer it builds) are never another
    layout: a loader that refuses them while every other name loads is an error at its
    line. Runs on the tp=1 build; `--no-dryrun` turns it off. With `--checkpoint` (a
    folder or hub id), the checkpoint's own tensors, read from its safetensors headers,
    are streamed instead, through the model built under its quantization config; a
    quantized tensor written into a parameter of another kind of dtype (fp8 values cast
    into a bfloat16 weight) is reported too.

    ## Why is this bad?
    A tensor never loaded leaves a parameter random; a loader that raises stops the load.

    A loader that refuses names the model's own tables say its checkpoint holds (a part
    that its mapper's stacked entries or `packed_modules_mapping` stack into a fused layer
    it builds) is broken, not fed another format: an error at its line, naming the parts
    and the table that declares each (`weights.declared_names`).

    ## Example
    A decoder layer that stores its MLP as `self.ffn` while checkpoints name it `mlp`.
    A mapper without its `".gate_proj": (".gate_up_proj", 0)` entry, or assigned again
    below in the class body without its stacked entries, while `packed_modules_mapping`
    still says `"gate_up_proj": ["gate_proj", "up_proj"]`.

    ## Fix
    Map the checkpoint's names in `load_weights` (or `hf_to_vllm_mapper`), or name the
    attribute as the checkpoint does; keep one `hf_to_vllm_mapper` per class, with every
    stacked entry.
    """

    code = "PFX701"
    stages: ClassVar[tuple[str, ...]] = ("dry-runs",)
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaDecoderLayer",
            "        self.mlp = LlamaMLP(",
            "        self.ffn = LlamaMLP(",
            "self.gate_up_proj = MergedColumnParallelLinear(",
            at_cls="LlamaMLP",
        ),
        Case(
            "LlamaModel",
            '            ".gate_proj": (".gate_up_proj", 0),\n',
            "",
            "return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)",
        ),
    )

    # the stream's facts, and a real checkpoint's casts and partial loads
    # (``pfx701_checkpoint.py``)
    reads: ClassVar[tuple[type, ...]] = PFX701_FACTS + pfx701_checkpoint.READS

    def findings(self, facts: list[Any]) -> list[Finding]:
        """One finding per line and kind: the first fact's, with how many repeat it (the
        layers of a model), then the layout it was seen on."""
        real = [f for f in facts if isinstance(f, pfx701_checkpoint.READS)]
        groups: dict[tuple, list[tuple[Finding, Loading]]] = {}
        for fact in (f for f in facts if not isinstance(f, pfx701_checkpoint.READS)):
            found = _finding(fact)
            key = (found.code, found.file, found.line, _same(fact))
            groups.setdefault(key, []).append((found, fact))
        out = []
        for same in groups.values():
            first, fact = same[0]
            if len(same) > 1:
                first.message += f" (and {len(same) - 1} more like it)"
            if fact.layout and first.code == CHECKPOINT_COVERAGE_CODE:
                first.message += f" ({fact.layout})"
            out.append(first)
        return out + pfx701_checkpoint.findings(real)


def _finding(fact: Loading) -> Finding:
    """The fact's finding before merging: its words, its severity, then what the FP8
    layout it was seen on adds."""
    if isinstance(fact, LoaderRaises) and fact.refused_layout:
        said = _raised(fact)
        return _not_verified(
            f"{said} (one of more than {MAX_RETRIES} kinds of names it refused: the "
            "checkpoint layout checked may not be the one this loader reads; `--checkpoint` "
            "with a real checkpoint, or the smoke phase with its weights, decides)",
            fact.site,
        )
    if fact.own_layout:
        return _on_own_layout(fact)
    severity, message, data = _words(fact)
    if fact.contested:
        severity, message = "warning", message + CONTESTED
    if fact.more_scales:
        message += f" (and {fact.more_scales} more kind(s) of scale at this line)"
    if fact.fp8_kv is not None:
        named = f", KV-cache scales named like `{fact.fp8_kv}`" if fact.fp8_kv else ""
        message += (
            "; in an FP8 checkpoint's layout, as vLLM's `Fp8Config` builds the model: "
            f"per-tensor `weight_scale`/`input_scale`{named}"
        )
    return Finding(CHECKPOINT_COVERAGE_CODE, severity, message, *fact.site, facts=data)


def _words(fact: Loading, random: bool = True) -> tuple[str, str, dict[str, Any]]:
    """Severity, message and the finding's data of a fact (``random``: with the words
    that say what stays random)."""
    if isinstance(fact, NeverLoaded):
        return _never_loaded(fact)
    if isinstance(fact, Unwritten):
        message = f"`{fact.param}` is never written by `load_weights`"
        message += RANDOM_PARAMETER if random else ""
        data = {"kind": "unwritten", "param": fact.param, "subject": fact.param}
        if fact.embedding_head:
            return (
                "note",
                message
                + (" (a note: served as an embedding model, whose pooler never uses the head)"),
                data,
            )
        return "error", message, data
    if isinstance(fact, UnwrittenElements):
        message = (
            f"{fact.missing} of {fact.total} elements of `{fact.param}` are never written "
            "by `load_weights`: they stay random"
        )
        message += _also(fact.also)
        data = {"kind": "unwritten-part", "param": fact.param, "shard": "", "subject": fact.param}
        return "error", message, data
    if isinstance(fact, UnwrittenShard):
        return "error", _shard(fact, random), {"kind": "unwritten-part", "param": fact.param}
    if isinstance(fact, LoaderRaises):
        return "error", _raised(fact), {"kind": "loader-raises", "tensor": fact.tensor}
    if isinstance(fact, RefusedDeclared):
        return "error", _refused(fact), {}
    if isinstance(fact, BrokenLoader):
        return "error", _broken(fact), {"kind": "loader-raises", "tensor": fact.tensor}
    if isinstance(fact, ScalesDropped):
        return "error", _dropped(fact), {}
    raise TypeError(f"PFX701 does not read {type(fact).__name__}")


def _never_loaded(fact: NeverLoaded) -> tuple[str, str, dict[str, Any]]:
    name = fact.tensor
    data: dict[str, Any] = {"kind": "never-loaded", "tensor": name, "subject": name}
    if fact.skips_param:
        data["skips_param"] = True
        return (
            "error",
            (
                f"checkpoint tensor `{name}` is never loaded and the parameter of that name "
                "stays random: `load_weights` skips it"
            ),
            data,
        )
    if fact.nothing_random:
        # Nothing stays random: a tensor the model does without (a pooler vLLM's BERT
        # never runs) breaks nothing today, a note (issue 20's severity).
        return (
            "note",
            (
                f"checkpoint tensor `{name}` is never loaded: `load_weights` drops it, and "
                "every parameter of the model is written without it (a note: nothing stays "
                "random, so the model does without it)"
            ),
            data,
        )
    return (
        "error",
        (f"checkpoint tensor `{name}` is never loaded: `load_weights` drops it silently"),
        data,
    )


def _shard(fact: UnwrittenShard, random: bool) -> str:
    message = f"shard `{fact.shard}` of `{fact.param}` is never written by `load_weights`"
    message += RANDOM_SHARD if random else ""
    for other, names in fact.misrouted:
        message += (
            f"; shard `{other}` is written by {' and '.join(f'`{n}`' for n in names)}"
            " instead: a stacked-params mapping entry names the wrong shard"
        )
    if fact.slots:
        message += f"; so is that shard's slot of its {', '.join(f'`{s}`' for s in fact.slots)}"
    return message + _also(fact.also)


def _also(others: list[str]) -> str:
    """The module's other parameters that miss the same part (a quantized layer's
    ``weight_packed`` and ``weight_scale``: one mapping entry)."""
    return f"; so is the same part of its {', '.join(f'`{o}`' for o in others)}" if others else ""


def _raised(fact: LoaderRaises) -> str:
    return f"`load_weights` raises on checkpoint tensor `{fact.tensor}`: {fact.said}"


def _refused(fact: RefusedDeclared) -> str:
    said = []
    for part, fused, table, where in fact.parts:
        at = f"; {where[0].rsplit('/', 1)[-1]}:{where[1]} names both" if where else ""
        said.append(f"`{part}` (into `{fused}` by {table}{at})")
    more = f" and {len(said) - 6} more" if len(said) > 6 else ""
    fused = ", ".join(f"`{p}`" for p in fact.fused)
    return (
        f"{REFUSES_DECLARED}: {', '.join(said[:6])}{more}; on `{fact.tensor}`: "
        f"{fact.said}; {fused} stay random in part, and a real checkpoint does not load "
        "either (the names are the model's own, not a layout prefixlint guessed)"
    )


def _broken(fact: BrokenLoader) -> str:
    what = (
        "before it reads any checkpoint tensor"
        if fact.tensor == "?"
        else f"on checkpoint tensor `{fact.tensor}`"
    )
    message = (
        f"`load_weights` raises {what}: {fact.said}; its own code fails, so no checkpoint "
        "loads through it"
    )
    return message + (" (more tensors raise there)" if fact.more else "")


def _dropped(fact: ScalesDropped) -> str:
    shown = ", ".join(f"`{k}`" for k in fact.kinds[:4]) + (
        f" and {len(fact.kinds) - 4} more kinds" if len(fact.kinds) > 4 else ""
    )
    held = ", ".join(f"`{p}`" for p in fact.params[:3]) + (" ..." if len(fact.params) > 3 else "")
    return (
        f"{len(fact.names)} checkpoint tensor(s) of an FP8 checkpoint are never loaded: "
        f"`load_weights` drops {shown} silently, so {held} keep vLLM's initial values"
    )


def _on_own_layout(fact: Loading) -> Finding:
    """What a fact is worth on the model's own layout (``selflayout.py``, which keeps
    only the facts where something stays random). The head, named as its parameter,
    that the loader skips while it stays random: a warning, the loader's own gap unless
    its checkpoint renames it (an unconditional ``lm_head`` skip on an untied head, a bug
    vLLM has fixed more than once). Any other parameter or shard left unwritten: not
    verified (a PFX600 note). On vLLM's registry every such finding was a tensor the
    loader renames, splits or loads from another file in code (SPLADE's
    ``cls.predictions``, Qwen3.5's ``in_proj_qkvz``, Gemma 4's ``k_eq_v``, DFlash's
    ``mask_embedding.pt``: docs/precision.md); the names rest on prefixlint's reading of
    the model's tables."""
    _, message, data = _words(fact, random=False)
    if isinstance(fact, NeverLoaded) and fact.skips_param and fact.tensor.startswith("lm_head."):
        _, message, data = _words(fact)
        message += (
            "; the loader takes every other name the model's parameters give, so this is "
            "most likely its own gap, unless its checkpoint names the tensor otherwise"
        )
        return Finding(CHECKPOINT_COVERAGE_CODE, "warning", message, *fact.site, facts=data)
    return _not_verified(message + _OWN_TABLES, fact.site)


def _not_verified(said: str, site: tuple[str, int]) -> Finding:
    """A fact this unit does not hold against the model: the PFX600 unit's note (its one
    builder, with the note's identity), in this unit's words."""
    return NotVerified().note(Unverified("", said, site))


def _same(fact: Loading) -> tuple:
    """What a fact says with layer numbers left out, read from its fields (never from
    words): a raise by its error whatever the tensor, any other by all it carries."""
    if isinstance(fact, LoaderRaises) and not fact.refused_layout:
        return ("raises", normal(f" {fact.said}"[:120]))
    return (type(fact).__name__, *(_normal(getattr(fact, f.name)) for f in fields(fact)))


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return normal(value)
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    return value
