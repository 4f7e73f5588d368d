"""Phase 2's recall on bug KINDS (issue 38's blind-batch classes and kinds in their spirit).

    .venv/bin/python bench/bug_kinds.py [--only CASE ...] [--explore-budget 10]

Each case is a one- or few-token edit ``(file, class, old, new)`` applied at run time to a
copy of the installed vLLM's model file (relative imports made absolute, as
``tests/test_compare.py``'s ``model_copy``), written to a temp dir and checked as
``introspect /tmp/.../copy.py:Class`` would (one phase-2 worker for all, tp=pp=1, the
checkpoint dry-run and config exploration on as in ``introspect``'s defaults). The clean
copy of every file is checked the same way first: a finding it has already is no catch.

A case is *caught* when a new PFX609 error sits in the patched file (its line is printed
with the edited line's, to be read: the edited line, or the construction line of the first
divergent module), *caught (warning)* when the new PFX609 there is a warning (a latent
variant's: docs/precision.md), *other code* when a new error of another code sits there,
*elsewhere* when a new error sits in another file, *missed* otherwise. Printed: one row
per case, then the totals. No vLLM code is vendored: the
edits are applied to the installed file, and a case whose ``old`` text is not found fails.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (id, kind, file, class, old, new): ``old`` is replaced once, from the first occurrence.
CASES: list[tuple[str, str, str, str, str, str]] = [
    (
        "gptj-partial-rotary",
        "partial rotary factor ignored",
        "gpt_j.py",
        "GPTJForCausalLM",
        'rope_parameters["partial_rotary_factor"] = config.rotary_dim / self.head_size',
        'rope_parameters["partial_rotary_factor"] = 1.0',
    ),
    (
        "stablelm-partial-rotary",
        "partial rotary factor ignored",
        "stablelm.py",
        "StablelmForCausalLM",
        "rope_parameters=self.config.rope_parameters,",
        'rope_parameters={**self.config.rope_parameters, "partial_rotary_factor": 1.0},',
    ),
    (
        "stablelm-qkv-bias",
        "attention-bias flag ignored",
        "stablelm.py",
        "StablelmForCausalLM",
        "            self.qkv_bias,\n",
        "            False,\n",
    ),
    (
        "granite-attention-bias",
        "attention-bias flag ignored",
        "granite.py",
        "GraniteForCausalLM",
        "            bias=attention_bias,\n",
        "            bias=False,\n",
    ),
    (
        "falcon-bias",
        "attention-bias flag ignored",
        "falcon.py",
        "FalconForCausalLM",
        "bias=config.bias,",
        "bias=False,",
    ),
    (
        "glm4_moe_lite-inv-freq",
        "rotary cache not skipped at load",
        "glm4_moe_lite.py",
        "Glm4MoeLiteForCausalLM",
        'if "rotary_emb.inv_freq" in name:',
        'if "rotary_emb.inv_freq_" in name:',
    ),
    (
        "hy_v3-tied-lm-head",
        "tied head's lm_head.weight not skipped",
        "hy_v3.py",
        "HYV3ForCausalLM",
        'if self.config.tie_word_embeddings and "lm_head.weight" in name:',
        'if False and "lm_head.weight" in name:',
    ),
    (
        "mixtral-softmax-scale",
        "softmax scale written wrong",
        "mixtral.py",
        "MixtralForCausalLM",
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = self.head_dim**-0.25",
    ),
    (
        "gemma2-softmax-scale-attr",
        "softmax scale from the wrong attribute",
        "gemma2.py",
        "Gemma2ForCausalLM",
        "self.scaling = config.query_pre_attn_scalar**-0.5",
        "self.scaling = self.head_dim**-0.5",
    ),
    (
        "qwen3-untied",
        "tie_weights call removed",
        "qwen3.py",
        "Qwen3ForCausalLM",
        "self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)",
        "self.lm_head = self.lm_head",
    ),
    (
        "mixtral-untied",
        "tie_weights call removed",
        "mixtral.py",
        "MixtralForCausalLM",
        "self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)",
        "self.lm_head = self.lm_head",
    ),
    (
        "qwen3-norm-eps",
        "norm eps not read from the config",
        "qwen3.py",
        "Qwen3ForCausalLM",
        "self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)",
        "self.input_layernorm = RMSNorm(config.hidden_size, eps=1e-5)",
    ),
    (
        "gemma2-gelu-exact",
        "activation swapped (gelu for gelu_pytorch_tanh)",
        "gemma2.py",
        "Gemma2ForCausalLM",
        'GeluAndMul(approximate="tanh")',
        'GeluAndMul(approximate="none")',
    ),
    (
        "granite-residual-dropped",
        "residual dropped",
        "granite.py",
        "GraniteForCausalLM",
        "hidden_states = residual + hidden_states * self.residual_multiplier",
        "hidden_states = hidden_states * self.residual_multiplier",
    ),
    (
        "granite-rope-theta",
        "rope theta not read from the config",
        "granite.py",
        "GraniteForCausalLM",
        'else config.rope_parameters["rope_theta"]',
        "else 10000.0",
    ),
    (
        "gemma2-sliding-layers",
        "sliding window on the wrong layers",
        "gemma2.py",
        "Gemma2ForCausalLM",
        'is_sliding = config.layer_types[layer_idx] == "sliding_attention"',
        'is_sliding = config.layer_types[layer_idx] != "sliding_attention"',
    ),
    (
        "qwen3_moe-renormalize",
        "MoE norm_topk_prob ignored",
        "qwen3_moe.py",
        "Qwen3MoeForCausalLM",
        "renormalize=config.norm_topk_prob,",
        "renormalize=False,",
    ),
    (
        "glm4_moe-routed-scaling",
        "routed scaling factor dropped",
        "glm4_moe.py",
        "Glm4MoeForCausalLM",
        "routed_scaling_factor=self.routed_scaling_factor,",
        "routed_scaling_factor=1.0,",
    ),
    (
        "qwen3-q-norm-skipped",
        "q norm skipped",
        "qwen3.py",
        "Qwen3ForCausalLM",
        "q_by_head = self.q_norm(q_by_head)",
        "q_by_head = q_by_head",
    ),
    (
        "qwen3_moe-head-dim",
        "head_dim from hidden/heads, not the config's",
        "qwen3_moe.py",
        "Qwen3MoeForCausalLM",
        "self.head_dim = head_dim or (hidden_size // self.total_num_heads)",
        "self.head_dim = hidden_size // self.total_num_heads",
    ),
]


def _installed(name: str) -> str:
    import vllm

    return (Path(vllm.__file__).parent / "model_executor" / "models" / name).read_text()


def _copy(folder: Path, name: str, stem: str, old: str | None, new: str | None) -> Path:
    """``name`` of the installed vLLM as an out-of-tree file, ``old`` replaced by ``new``."""
    text = _installed(name)
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    if old is not None and new is not None:
        if old not in text:
            raise SystemExit(f"{stem}: the installed {name} has no {old!r}")
        text = text.replace(old, new, 1)
    path = folder / f"{stem}.py"
    path.write_text(text)
    return path


def _errors(report, path: Path) -> set[tuple[str, str, int]]:
    """(code, where, line) of every error, and of every PFX609 warning (its code then
    ``PFX609 (warning)``); ``where`` is ``file`` for the checked file."""
    out = set()
    for d in report.diagnostics:
        severity = str(d.severity).lower()
        code = d.code
        if d.code == "PFX609" and severity.endswith("warning"):
            code = "PFX609 (warning)"
        elif not severity.endswith("error"):
            continue
        where = "file" if Path(d.filename).name == path.name else Path(d.filename).name
        out.add((code, where, d.location.row))
    return out


def _compared(report) -> bool:
    """Whether the comparison ran on the target (equal or differs)."""
    return any(r.get("compare", {}).get("status") in ("equal", "differs") for r in report.results)


def _verdict(new: set[tuple[str, str, int]]) -> str:
    if any(code == "PFX609" and where == "file" for code, where, _ in new):
        return "caught"
    if any(code == "PFX609 (warning)" and where == "file" for code, where, _ in new):
        return "caught (warning)"
    if any(where == "file" and not code.endswith("(warning)") for code, where, _ in new):
        return "other code"
    return "elsewhere" if new else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--explore-budget", type=float, default=10.0)
    args = parser.parse_args()
    from prefixlint.introspect import introspect
    from prefixlint.introspect.process.client import Worker

    cases = [c for c in CASES if not args.only or c[0] in args.only]
    started = time.perf_counter()
    worker = Worker()
    counts: dict[str, int] = {}

    def run(path: Path, cls: str):
        return introspect(
            f"{path}:{cls}",
            tp=(1,),
            pp=(1,),
            worker=worker,
            explore_budget=args.explore_budget,
        )

    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            clean: dict[str, set[tuple[str, str, int]]] = {}
            for case_id, kind, name, cls, old, new in cases:
                if name not in clean:
                    path = _copy(folder, name, f"clean_{name[:-3]}", None, None)
                    clean[name] = {(c, w, r) for c, w, r in _errors(run(path, cls), path)}
                    print(f"clean {name}: {sorted(clean[name]) or 'no error'}", flush=True)
                path = _copy(folder, name, case_id.replace("-", "_"), old, new)
                text = path.read_text()
                edited = text.count("\n", 0, text.index(new)) + 1
                t0 = time.perf_counter()
                report = run(path, cls)
                new_errors = _errors(report, path) - clean[name]
                verdict = _verdict(new_errors)
                if verdict == "missed" and not _compared(report):
                    verdict = "not run"  # prefixlint's gap (a PFX600 note), no miss of a kind
                counts[verdict] = counts.get(verdict, 0) + 1
                where = ", ".join(f"{c}@{w}:{r}" for c, w, r in sorted(new_errors)) or "-"
                print(
                    f"{case_id:<28} {verdict:<16} {time.perf_counter() - t0:>5.1f}s "
                    f"edit@{edited} {where}  [{kind}]",
                    flush=True,
                )
    finally:
        worker.close()
    total = sum(counts.values())
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"total {total}: {summary}; {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
