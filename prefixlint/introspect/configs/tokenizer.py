"""A small tokenizer for a model that looks a token up at construction."""

from __future__ import annotations

import re

from prefixlint.introspect.configs.hints import source_texts

_SPECIAL_TOKEN = re.compile(r"[\"'](<[^\"'\s<>]{1,40}>)[\"']")


def write_tokenizer(folder: str, files: list[str]) -> None:
    """A word-level tokenizer in ``folder``: unknown, padding, begin and end tokens and
    the special tokens (``"<image>"``, ``"<|vision_pad|>"``) the model's ``files`` name,
    all inside the shrunk vocabulary. Enough for a model that looks a token id up at
    construction; a meta build tokenizes nothing."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials: list[str] = []
    for text in source_texts(None, files):
        specials += [t for t in _SPECIAL_TOKEN.findall(text) if t not in specials]
    words = ["<unk>", "<pad>", "<s>", "</s>", *specials][:256]
    vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    fast.save_pretrained(folder)
