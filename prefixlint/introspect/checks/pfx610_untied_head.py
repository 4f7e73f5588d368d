"""PFX610: the config ties the output head to the input embedding, the built model does not."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from prefixlint.introspect.checks.base import (
    BuildCheck,
    Case,
    Findings,
    Subject,
    View,
    config_value,
)
from prefixlint.introspect.finding import Finding

_TIE = "            if config.tie_word_embeddings:\n"
_TIED = _TIE + "                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)\n"


class UntiedHead(BuildCheck):
    """## What it does
    On the unsplit build (tp=1, pp=1) of a config with `tie_word_embeddings`, checks that
    the model's one output head (`ParallelLMHead`) holds the same weight as its one input
    embedding (`VocabParallelEmbedding`), as `lm_head.tie_weights(embed_tokens)` makes it.

    ## Details
    Only the base config's build is judged (not a config variant's), where the text config
    and the top-level config both tie (a language model inside a multimodal one may read
    either), and only a model with exactly one head and one input embedding of the same
    shape (a draft with several heads, or a head of another vocabulary, is not). A head
    that is the embedding module itself (`self.lm_head = self.model.embed_tokens`) is
    tied. Reported at the line that built the head.

    ## Why is this bad?
    A tied checkpoint holds the embedding only: vLLM's loaders skip `lm_head.*` when the
    config ties (`skip_prefixes=["lm_head."]`), so an untied head keeps its initial
    values and every logit is wrong, with no error at load. A removed `tie_weights` call
    is invisible to every name-level check.

    ## Example
    `self.lm_head = ParallelLMHead(...)` without the
    `if config.tie_word_embeddings: self.lm_head = self.lm_head.tie_weights(...)` after it.

    ## Fix
    Tie the head when the config says so:
    `self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)`.
    """

    code = "PFX610"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            _TIED,
            _TIE + "                pass\n",
            "self.lm_head = ParallelLMHead(",
            config=(("tie_word_embeddings", True),),
            clean_config=(("tie_word_embeddings", True),),
        ),
    )

    def check(self, view: View, subject: Subject, out: Findings) -> None:
        if view.layout.tp != 1 or view.layout.pp != 1:
            return
        if getattr(view.build, "variant", ""):
            return  # a config variant's build: its own `tie_word_embeddings` is not read here
        if not _ties(subject.hf, view.build):
            return
        heads = [m for m in view.model.modules() if _kind(m, "ParallelLMHead")]
        embeds = [
            m
            for m in view.model.modules()
            if _kind(m, "VocabParallelEmbedding") and not _kind(m, "ParallelLMHead")
        ]
        if len(heads) != 1 or len(embeds) != 1:
            return
        head, embed = heads[0], embeds[0]
        weight, tied_to = getattr(head, "weight", None), getattr(embed, "weight", None)
        if weight is None or tied_to is None or weight is tied_to:
            return
        if tuple(weight.shape) != tuple(tied_to.shape):
            return
        path = next((p for p, m in view.model.named_modules() if m is head), "lm_head")
        message = (
            f"the config ties the output head to the input embedding "
            f"(`tie_word_embeddings`), but `{path}` holds a weight of its own: a tied "
            "checkpoint has no head weights, so it keeps its initial values; tie it with "
            "`lm_head.tie_weights(embed_tokens)`"
        )
        site = view.site_of(head, subject.cls)
        out.add(Finding(self.code, "error", message, *site), view.build, path)


def _ties(text_config: Any, build: Any) -> bool:
    """Both the text config and the top-level config tie (where the top-level one says
    anything): a multimodal model's language model may read either (Qwen3-VL-MoE's reads
    the top-level one), so a config whose two say otherwise is not judged."""
    model_config = getattr(getattr(build, "vllm_config", None), "model_config", None)
    top = getattr(model_config, "hf_config", None)
    said = [config_value(c, "tie_word_embeddings") for c in (text_config, top) if c is not None]
    return bool(said) and all(t is None or bool(t) for t in said) and any(said)


def _kind(module: nn.Module, name: str) -> Any:
    """The module is vLLM's ``name`` layer or a subclass of it (read by name: a plugin's
    copy of vLLM's module imports the same classes)."""
    return any(c.__name__ == name for c in type(module).__mro__)
