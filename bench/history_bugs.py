"""Real, fixed vLLM model bugs of wrong outputs or silent-wrong loads, re-created in today's
files, run through phase 2 as a user runs it (issue 38: recall on real bugs).

    .venv/bin/python bench/history_bugs.py
    .venv/bin/python bench/history_bugs.py --only gptj-rope-style --quick

Each case names the pull request or issue of the bug. The code has moved on since, so the
same kind of defect is re-created in the installed vLLM's file: a copy, made at run time
in a temp folder, as an out-of-tree plugin (relative imports made absolute, as
``tests/test_compare.py``'s ``model_copy``), with the case's (old text, new text) edits.
Nothing of vLLM is vendored here: only the short texts the edits replace.

Each copy, and a clean copy of each file, runs through
``prefixlint introspect COPY.py:Class --format json`` (``--quick``: ``--tp 1 --pp 1
--no-dryrun``, for a fast loop). A case is
- *caught*: an error in the copy at an edited line, or at the line that builds the module
  where the difference first shows (``at``: the class and the text of that line);
- *caught elsewhere*: an error in the copy, on another line, that the clean copy lacks;
- *missed*: no error the clean copy lacks.
An error of the clean copy is printed too: clean vLLM must give none.

These cases were chosen from vLLM's history by the kind of bug (not from what prefixlint
finds); they serve as a held-out measure, and the fixes they led to are general
(docs/compare.md, "Coverage, fifth round: real bugs from vLLM's history").
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIXLINT = ROOT / ".venv" / "bin" / "prefixlint"


@dataclass(frozen=True)
class Case:
    name: str
    url: str
    kind: str
    file: str
    arch: str
    edits: tuple[tuple[str, str], ...]
    at: tuple[str, str]  # (class, text of the line that builds the first divergent module)
    # a small config.json of these values (``model_type`` first) for ``--config``, where
    # the synthesised config is not the family's (empty: the synthesised config)
    config: dict = field(default_factory=dict)


CASES = [
    # GPT-J rotates pairs (2i, 2i+1), not the two halves: vLLM's GPT-J used the NeoX
    # layout until https://github.com/vllm-project/vllm/pull/941
    Case(
        "gptj-rope-style",
        "https://github.com/vllm-project/vllm/pull/941",
        "rotary layout (GPT-J vs NeoX)",
        "gpt_j.py",
        "GPTJForCausalLM",
        (("            is_neox_style=False,\n", "            is_neox_style=True,\n"),),
        ("GPTJBlock", "self.attn = GPTJAttention("),
    ),
    # Falcon-40B's (new decoder architecture) KV head count was read wrong: gibberish,
    # https://github.com/vllm-project/vllm/pull/1164
    Case(
        "falcon-kv-heads",
        "https://github.com/vllm-project/vllm/pull/1164",
        "KV head count of a config variant",
        "falcon.py",
        "FalconForCausalLM",
        (
            (
                "            self.total_num_kv_heads = config.num_kv_heads\n",
                "            self.total_num_kv_heads = self.total_num_heads\n",
            ),
        ),
        ("FalconAttention", "self.query_key_value = QKVParallelLinear("),
    ),
    # Gemma's MLP is the tanh-approximate GeLU; vLLM ran the exact one,
    # https://github.com/vllm-project/vllm/issues/3411 (kernel: pull/3337)
    Case(
        "gemma-exact-gelu",
        "https://github.com/vllm-project/vllm/issues/3411",
        "activation approximation",
        "gemma.py",
        "GemmaForCausalLM",
        (
            (
                '    elif hidden_activation == "gelu_pytorch_tanh":\n'
                '        return GeluAndMul(approximate="tanh")\n',
                '    elif hidden_activation == "gelu_pytorch_tanh":\n'
                '        return GeluAndMul(approximate="none")\n',
            ),
        ),
        ("GemmaDecoderLayer", "self.mlp = GemmaMLP("),
    ),
    # Qwen2-MoE's `mlp_only_layers` (dense MLPs in some layers) was not read,
    # https://github.com/vllm-project/vllm/pull/4774
    Case(
        "qwen2moe-mlp-only-layers",
        "https://github.com/vllm-project/vllm/pull/4774",
        "MoE layer schedule flag ignored",
        "qwen2_moe.py",
        "Qwen2MoeForCausalLM",
        (("        if (layer_idx not in mlp_only_layers) and (\n", "        if (\n"),),
        ("Qwen2MoeDecoderLayer", "self.mlp = Qwen2MoeSparseMoeBlock("),
    ),
    # Command-R multiplies its logits by `logit_scale`; the first vLLM port did not,
    # https://github.com/vllm-project/vllm/pull/3433 (review: logit_scale unused)
    Case(
        "cohere-logit-scale",
        "https://github.com/vllm-project/vllm/pull/3433",
        "logits scale dropped",
        "commandr.py",
        "CohereForCausalLM",
        (
            (
                "            config.vocab_size, scale=config.logit_scale\n",
                "            config.vocab_size\n",
            ),
        ),
        ("CohereForCausalLM", "self.logits_processor = LogitsProcessor("),
    ),
    # Aquila2-34B-16K (vLLM runs it with llama.py) needs its linear rope scaling; vLLM's
    # model ignored `rope_scaling`: https://github.com/vllm-project/vllm/issues/1436
    Case(
        "llama-rope-scaling-ignored",
        "https://github.com/vllm-project/vllm/issues/1436",
        "rope scaling ignored",
        "llama.py",
        "LlamaForCausalLM",
        (
            (
                '            rope_parameters=getattr(config, "rope_parameters", None),\n'
                "            is_neox_style=is_neox_style,\n",
                '            rope_parameters={"rope_type": "default", "rope_theta": '
                'config.rope_parameters["rope_theta"]},\n'
                "            is_neox_style=is_neox_style,\n",
            ),
        ),
        ("LlamaDecoderLayer", "self.self_attn = attn_layer_type("),
    ),
    # Phi-3.5-MoE produced weird strings: its experts' checkpoint names were loaded into
    # the wrong shards after a loader refactor, https://github.com/vllm-project/vllm/pull/8293
    Case(
        "phimoe-expert-shards",
        "https://github.com/vllm-project/vllm/pull/8293",
        "MoE expert weights loaded into the wrong shard",
        "phimoe.py",
        "PhiMoEForCausalLM",
        (
            (
                '            ckpt_names=("w1", "w2", "w3"),\n',
                '            ckpt_names=("w3", "w2", "w1"),\n',
            ),
        ),
        ("PhiMoEDecoderLayer", "self.block_sparse_moe = PhiMoE("),
        # Phi-3.5-MoE's config sets both bias flags; phimoe.py builds the biases whatever
        # they say (docs/precision.md: a true difference on transformers' defaults)
        {"model_type": "phimoe", "attention_bias": True, "lm_head_bias": True},
    ),
    # ERNIE-4.5-MoE's `e_score_correction_bias` (moe_statics) was not used by the router,
    # https://github.com/vllm-project/vllm/pull/21586
    Case(
        "ernie45moe-correction-bias",
        "https://github.com/vllm-project/vllm/pull/21586",
        "MoE routing bias dropped",
        "ernie45_moe.py",
        "Ernie4_5_MoeForCausalLM",
        (("            e_score_correction_bias=self.gate.e_score_correction_bias,\n", ""),),
        ("Ernie4_5_MoeMoE", "self.experts = FusedMoEFactory("),
    ),
]


def plugin_copy(folder: Path, case: Case | None, file: str) -> tuple[Path, str]:
    """The installed vLLM's ``file`` as a plugin file in ``folder``, with ``case``'s edits."""
    from prefixlint.static.index import find_installed_package

    vllm = find_installed_package("vllm")
    text = (vllm / "model_executor" / "models" / file).read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    for old, new in case.edits if case else ():
        if text.count(old) != 1:
            raise ValueError(f"{case.name}: the edit's text occurs {text.count(old)} times")
        text = text.replace(old, new)
    stem = file.removesuffix(".py")
    path = folder / f"{stem}_{case.name.replace('-', '_') if case else 'clean'}.py"
    path.write_text(text)
    return path, text


SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
SMALL |= {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 384}
SMALL |= {"num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 128}


def config_folder(folder: Path, values: dict) -> Path:
    from transformers import AutoConfig

    out = folder / f"config_{values['model_type']}"
    kind, rest = values["model_type"], {k: v for k, v in values.items() if k != "model_type"}
    AutoConfig.for_model(kind, **{**SMALL, **rest}).save_pretrained(out)
    return out


def run(path: Path, arch: str, quick: bool, config: Path | None = None) -> tuple[list[dict], float]:
    """prefixlint's errors in ``path`` (and their comparison), with the seconds it took."""
    cmd = [str(PREFIXLINT), "introspect", f"{path}:{arch}", "--format", "json"]
    if config is not None:
        cmd += ["--config", str(config)]
    if quick:
        cmd += ["--tp", "1", "--pp", "1", "--no-dryrun"]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=path.parent, timeout=900)
    seconds = time.monotonic() - start
    if out.returncode not in (0, 1):
        raise RuntimeError(out.stderr[-2000:] or out.stdout[-2000:])
    found = json.loads(out.stdout)
    items = found if isinstance(found, list) else found.get("diagnostics", [])
    mine = [d for d in items if Path(d.get("filename", "")).name == path.name]
    return [d for d in mine if d.get("severity") == "error"], seconds


def line_of(text: str, cls: str, needle: str) -> int:
    return text.count("\n", 0, text.index(needle, text.index(f"class {cls}("))) + 1


def edited_lines(text: str, case: Case) -> set[int]:
    lines: set[int] = set()
    for _, new in case.edits:
        if not new:
            continue
        start = text.count("\n", 0, text.index(new)) + 1
        lines.update(range(start, start + max(1, new.count("\n"))))
    return lines


def key(d: dict) -> tuple[str, str]:
    return d["code"], re.sub(r"line \d+|\d+\.\d+(e-?\d+)?", "#", d["message"])


def verdict(case: Case, text: str, errors: list[dict], clean: list[dict]) -> tuple[str, str]:
    """``(caught | caught elsewhere | missed, what)`` of one case's errors."""
    base = {key(d) for d in clean}
    new = [d for d in errors if key(d) not in base]
    lines = edited_lines(text, case) | {line_of(text, *case.at)}
    hit = [d for d in new if d["location"]["row"] in lines]
    if hit:
        return "caught", f"{hit[0]['code']} line {hit[0]['location']['row']}"
    if new:
        return "caught elsewhere", f"{new[0]['code']} line {new[0]['location']['row']}"
    return "missed", ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or c.name in args.only]
    folder = Path(tempfile.mkdtemp(prefix="prefixlint-history-"))
    start, clean_errors, rows = time.monotonic(), {}, []
    try:
        for case in cases:
            config = config_folder(folder, case.config) if case.config else None
            if case.file not in clean_errors:
                path, _ = plugin_copy(folder, None, case.file)
                clean_errors[case.file], seconds = run(path, case.arch, args.quick, config)
                for d in clean_errors[case.file]:
                    print(
                        f"  clean {case.file}: {d['code']} line {d['location']['row']}: "
                        f"{d['message'][:150]}",
                        flush=True,
                    )
            path, text = plugin_copy(folder, case, case.file)
            errors, seconds = run(path, case.arch, args.quick, config)
            result, what = verdict(case, text, errors, clean_errors[case.file])
            rows.append((case, result, what, seconds))
            print(f"{case.name:28s} {result:16s} {what:22s} {seconds:6.1f}s", flush=True)
            for d in errors:
                print(f"    {d['code']} line {d['location']['row']}: {d['message'][:200]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    kinds = ("caught", "caught elsewhere", "missed")
    counts = {r: sum(1 for row in rows if row[1] == r) for r in kinds}
    print(f"\n{len(rows)} cases: " + ", ".join(f"{n} {r}" for r, n in counts.items()))
    print(f"clean copies with an error: {sum(1 for e in clean_errors.values() if e)}")
    print(f"total {time.monotonic() - start:.0f}s")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
