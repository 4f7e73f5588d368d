"""Which classes are text decoders (not vision towers): facts the leftover rules share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from prefixlint.static.model_classes import ARCHITECTURE_NAME
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.resolve import DECODER_ATTENTION_LAYERS
from prefixlint.static.rule import LintRule


def qualified_callee(rule: LintRule, callee: str | None) -> str | None:
    if callee is None:
        return None
    return rule.ctx.resolver.qualified_name(rule.ctx.summary, callee)


def top_class_name(rule: LintRule) -> str | None:
    stack = rule.ctx.prefixes.class_stack
    return stack[0].name.value if stack else None


# -- decoder classes (PFX402, PFX403) ---------------------------------------------------------

DECODER_ATTENTION = DECODER_ATTENTION_LAYERS
VOCAB_LAYERS = frozenset({"VocabParallelEmbedding", "ParallelLMHead"})
LM_LAYERS = VOCAB_LAYERS | {"make_layers"}
DECODER_NAME = re.compile(r"(DecoderLayer|DecoderBlock|ForCausalLM)$")
# Classes of encoders and adapters: a vision or audio tower legitimately uses plain layers
# and SDPA (vLLM runs many of them replicated), so the decoder label does not flow into them.
TOWER_NAME = re.compile(
    r"(Vision|Visual|ViT|Vit[A-Z]|Image|Audio|Speech|Whisper|Siglip|SigLIP|Clip|CLIP|"
    r"Projector|Resampler|Connector|Perceiver|Patch|Encoder|Tower|Pixel|Video|Merger|Adapter)"
)
TEXT_NAME = re.compile(r"(Decoder|CausalLM|LanguageModel|TextModel|Text[A-Z])")


def is_tower(name: str) -> bool:
    return bool(TOWER_NAME.search(name)) and not TEXT_NAME.search(name)


@dataclass
class ClassFacts:
    builds: set[str] = field(default_factory=set)  # local classes it constructs or names
    seed: bool = False  # builds vLLM decoder attention, a vocab-parallel layer, make_layers
    attention: bool = False  # builds vLLM decoder attention itself
    vocabulary: bool = False  # builds a vocab-parallel embedding or head itself


def is_vllm_decoder_layer(rule: LintRule, name: str) -> bool:
    short = name.rsplit(".", 1)[-1]
    if short not in DECODER_ATTENTION and short not in LM_LAYERS:
        return False
    head = name.split(".")[0]
    if head not in rule.ctx.summary.imports:
        return False
    return (qualified_callee(rule, name) or name).startswith("vllm.")


class DecoderClasses:
    """Which top-level classes of a file are part of a text decoder.

    A class is a decoder class when it builds vLLM's decoder ``Attention``, a vocab-parallel
    embedding or head, or calls ``make_layers``; or when it is named like a decoder layer or
    a causal LM; or when it builds such a class and is no architecture (a layer block that
    builds its attention); or when a decoder class constructs it, unless it is named like a
    vision or audio tower, projector or adapter.
    """

    def __init__(self) -> None:
        self.facts: dict[str, ClassFacts] = {}

    def note_call(self, rule: LintRule, callee: str | None) -> None:
        top = top_class_name(rule)
        if top is None or callee is None:
            return
        facts = self.facts.setdefault(top, ClassFacts())
        head = callee.split(".")[0]
        if head in rule.ctx.summary.classes and "." not in callee:
            facts.builds.add(head)
            return
        if is_vllm_decoder_layer(rule, callee):
            facts.seed = True
            short = callee.rsplit(".", 1)[-1]
            facts.attention = facts.attention or short in DECODER_ATTENTION
            facts.vocabulary = facts.vocabulary or short in VOCAB_LAYERS

    def note_name(self, rule: LintRule, name: str) -> None:
        """A class named, not called: ``attn_cls = Attention``, ``layer_type=MyLayer``."""
        top = top_class_name(rule)
        if top is None:
            return
        if name in rule.ctx.summary.classes:
            if name != top:
                self.facts.setdefault(top, ClassFacts()).builds.add(name)
        elif is_vllm_decoder_layer(rule, name):
            self.facts.setdefault(top, ClassFacts()).seed = True

    def note_function(self, rule: LintRule, node: cst.FunctionDef) -> None:
        """Classes given as parameter defaults (``attn_layer_type=LlamaAttention``)."""
        p = node.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.default is not None:
                name = dotted_name(param.default)
                if name:
                    self.note_name(rule, name)

    def compute(self, rule: LintRule) -> set[str]:
        classes = rule.ctx.summary.classes
        seeds = {
            name
            for name in classes
            if self.facts.get(name, ClassFacts()).seed
            or (DECODER_NAME.search(name) and not is_tower(name))
        }
        # A block that builds a decoder class (a layer that builds its attention) is one
        # too, and so is what it builds beside it (the MLP): not the model above it.
        attention = {n for n, f in self.facts.items() if f.attention}
        blocks = {
            name
            for name, facts in self.facts.items()
            if name in classes
            and facts.builds & attention
            and not is_tower(name)
            and not ARCHITECTURE_NAME.search(name)
        }
        todo = sorted(seeds | blocks)
        out: set[str] = set()
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            for built in self.facts.get(name, ClassFacts()).builds:
                if built not in out and not is_tower(built):
                    todo.append(built)
        return out

    def without_paged_attention(self, decoder: set[str]) -> set[str]:
        """The decoder classes of a part that never builds vLLM's decoder attention: the
        classes connected to them by construction (either way) build none. A transformer
        of its own (a code predictor over residual codebooks, a local decoder) when the
        model keeps its main decoder's attention in vLLM's layers elsewhere."""
        # The model above the layers (an architecture, the class holding the vocabulary)
        # joins every part: the parts are what is connected below it.
        parts = {
            n
            for n in decoder
            if not ARCHITECTURE_NAME.search(n) and not self.facts.get(n, ClassFacts()).vocabulary
        }
        neighbours: dict[str, set[str]] = {n: set() for n in parts}
        for name in parts:
            for built in self.facts.get(name, ClassFacts()).builds & parts:
                neighbours[name].add(built)
                neighbours[built].add(name)
        decoder = parts
        out: set[str] = set()
        seen: set[str] = set()
        for start in sorted(decoder):
            if start in seen:
                continue
            part, todo = set(), [start]
            while todo:
                n = todo.pop()
                if n in part:
                    continue
                part.add(n)
                todo.extend(neighbours[n] - part)
            seen |= part
            if not any(self.facts.get(n, ClassFacts()).attention for n in part):
                out |= part
        return out

    def holds_vocabulary(self, name: str) -> bool:
        """The class builds one of vLLM's vocab-parallel embeddings or heads itself."""
        return self.facts.get(name, ClassFacts()).vocabulary
