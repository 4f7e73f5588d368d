"""What the dry-run against a real checkpoint (``--checkpoint``) adds over the synthetic one,
per architecture, measured in one run.

    .venv/bin/python bench/checkpoint_dryrun.py [--only LlamaForCausalLM ...]

For each architecture, prefixlint's own small config is the checkpoint's config.json and
the transformers reference class, built on meta, gives its tensors. Two real checkpoints
of zeros are written with ``safetensors``: a plain one (bfloat16) and an FP8 one (each
decoder layer's 2-D weights, experts included, router and norms not, in float8_e4m3fn with
scalar ``weight_scale``/``input_scale``; the head in ``ignored_layers``). Each
architecture is dry-run three times in one worker, tp=1, with the same config: synthetic
(the reference layout, a synthetic ``Fp8Config``), against the plain checkpoint, against
the FP8 one. Printed: each run's status, PFX701/702 findings and dry-run seconds, the time
to read the checkpoint (headers, in this process), the added time of each checkpoint run
over the synthetic one, and the medians of the added times and of their ratios.

Target: the checkpoint check adds <= 1 s median per architecture over the synthetic run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = [
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Phi3ForCausalLM",
    "GraniteForCausalLM",
    "Olmo2ForCausalLM",
    "StableLmForCausalLM",
    "Gemma2ForCausalLM",
    "MixtralForCausalLM",
]


def write_checkpoints(arch: str, folder: Path) -> tuple[Path, Path] | str:
    """The plain and the FP8 checkpoint of ``arch``, or why there is none."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from prefixlint.introspect.configs import resolve_config
    from prefixlint.introspect.dryrun import NotVerified, reference

    try:
        source = resolve_config(arch, architecture_name=arch)
        config = AutoConfig.from_pretrained(source.folder)
        layouts, _ = reference(config)
    except (NotVerified, Exception) as e:
        return f"{type(e).__name__}: {str(e)[:120]}"
    layout = layouts[0]
    text = json.loads(Path(source.folder, "config.json").read_text())
    text["dtype"] = "bfloat16"
    plain, fp8 = folder / "plain", folder / "fp8"
    for out in (plain, fp8):
        out.mkdir(parents=True)
    tensors = {n: torch.zeros(shape, dtype=torch.bfloat16) for n, (shape, _) in layout.items()}
    save_file(tensors, str(plain / "model.safetensors"))
    (plain / "config.json").write_text(json.dumps(text))
    quantized = {}
    for name, tensor in tensors.items():
        if _quantized(name, tensor.dim()):
            layer = name.removesuffix(".weight")
            quantized[name] = tensor.to(torch.float8_e4m3fn)
            quantized[f"{layer}.weight_scale"] = torch.ones((), dtype=torch.float32)
            quantized[f"{layer}.input_scale"] = torch.ones((), dtype=torch.float32)
        else:
            quantized[name] = tensor
    save_file(quantized, str(fp8 / "model.safetensors"))
    quant = {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
    (fp8 / "config.json").write_text(json.dumps({**text, "quantization_config": quant}))
    return plain, fp8


def _quantized(name: str, dims: int) -> bool:
    """The layers an FP8 export quantizes: a decoder layer's 2-D weights (linear layers
    and experts), not the router (``gate``), norms or embeddings."""
    return (
        ".layers." in name
        and name.endswith(".weight")
        and dims == 2
        and not (name.endswith("gate.weight") or "norm" in name or "embed" in name)
    )


def dry_run(worker, arch: str, config: str, checkpoint: str | None) -> dict:
    from prefixlint.introspect import introspect

    report = introspect(
        arch,
        tp=(1,),
        pp=(1,),
        config=None if checkpoint else config,
        checkpoint=checkpoint,
        worker=worker,
        explore_budget=0,
    )
    if report.error or not report.results:
        return {"dryrun": "error", "dryrun_seconds": 0.0, "dryrun_reason": report.error or ""}
    return report.results[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=DEFAULT)
    args = ap.parse_args()

    from prefixlint.introspect.process.client import Worker
    from prefixlint.introspect.targets import checkpoint as ck

    started = time.perf_counter()
    worker = Worker()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        written = {a: write_checkpoints(a, Path(tmp) / a) for a in args.only}
        first = next((v for v in written.values() if not isinstance(v, str)), None)
        if first is not None:  # warm the worker: vLLM's imports and first builds
            dry_run(worker, "LlamaForCausalLM", str(first[0]), str(first[1]))
        for arch, made in written.items():
            if isinstance(made, str):
                rows.append((arch, None, made))
                continue
            plain, fp8 = made
            read_started = time.perf_counter()
            ck.resolve(str(fp8))
            read = time.perf_counter() - read_started
            runs = {
                "synthetic": dry_run(worker, arch, str(plain), None),
                "plain": dry_run(worker, arch, str(plain), str(plain)),
                "fp8": dry_run(worker, arch, str(plain), str(fp8)),
            }
            rows.append((arch, (runs, read), ""))
    worker.close()
    print(
        f"{'architecture':<24} {'synthetic':>16} {'plain ckpt':>16} {'fp8 ckpt':>16} "
        f"{'read':>6} {'+plain':>7} {'+fp8':>7}"
    )
    added: dict[str, list[float]] = {"plain": [], "fp8": []}
    ratios: dict[str, list[float]] = {"plain": [], "fp8": []}
    verified = {"plain": 0, "fp8": 0}
    for arch, measured, why in rows:
        if measured is None:
            print(f"{arch:<24} no checkpoint: {why}")
            continue
        runs, read = measured
        base = runs["synthetic"]["dryrun_seconds"]
        cells = []
        for kind in ("synthetic", "plain", "fp8"):
            r = runs[kind]
            found = sum(f["code"] in ("PFX701", "PFX702") for f in r.get("findings", []))
            cells.append(f"{r['dryrun'][:10]:>10} {found:>2}f {r['dryrun_seconds']:.2f}")
        extra = []
        for kind in ("plain", "fp8"):
            r = runs[kind]
            extra.append(f"{r['dryrun_seconds'] + read - base:>+7.2f}")
            if r["dryrun"] == "verified" and runs["synthetic"]["dryrun"] == "verified":
                verified[kind] += 1
                added[kind].append(r["dryrun_seconds"] + read - base)
                ratios[kind].append((r["dryrun_seconds"] + read) / max(base, 1e-3))
        print(
            f"{arch:<24} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {read:>6.3f} "
            + " ".join(extra)
        )
        for kind in ("plain", "fp8"):
            r = runs[kind]
            if r["dryrun"] != "verified":
                print(f"  {kind}: {r['dryrun']}: {r.get('dryrun_reason', '')[:160]}")
            for f in r.get("findings", []):
                if f["code"] in ("PFX701", "PFX702"):
                    where = f"{Path(f['file']).name}:{f['line']}"
                    print(f"  {kind}: {f['code']} {where} {f['message'][:150]}")
    print()
    for kind in ("plain", "fp8"):
        if added[kind]:
            print(
                f"{kind} checkpoint: verified on {verified[kind]}/{len(rows)} architectures; "
                f"median added {statistics.median(added[kind]):+.3f} s over the synthetic "
                f"dry-run (ratio {statistics.median(ratios[kind]):.2f}x)   target <= +1 s"
            )
    print(f"wall {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
