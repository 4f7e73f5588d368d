"""The smoke run proper, in its own process: ``python -m prefixlint.smoke.child JOB.json``.

It writes a random-weight checkpoint with the transformers reference class, asks the
reference for greedy tokens, then starts as few vLLM engines as the checks allow and
compares. Every result is appended to the job's results file as one JSON line the moment
it is known, so that a run killed by the parent's timeout still reports what it finished.

Which engine serves which check, and why the settings do not disturb one another:

* ``base`` (eager, TP 1, prefix caching on, a token budget large enough that nothing is
  chunked): PFX801 on a short and a long prompt, each its first time in the cache; then
  the long prompt again, now a prefix-cache hit (PFX804); then the cache is reset and the
  short prompt runs among 30 others (PFX802), so that it neither hits the cache nor is
  chunked. Its first answers are the reference for PFX803/805/806.
* ``chunked`` (eager, TP 1, budget of 32 tokens, prefix caching off): the long prompt in
  four chunks (PFX803).
* ``tp2`` (eager, TP 2, else as ``base``): PFX805.
* ``compiled`` (``base`` without ``enforce_eager``): PFX806.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# One shape for every smoke model: CPU attention wants head sizes of 32 or more and block
# sizes that are multiples of 32; 4 query and 2 KV heads divide by TP 2.
SMOKE_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 512,
}
# A wide init makes the random model's logits peaked: greedy choices are then decided by
# the model, not by float rounding between two implementations.
INIT_RANGE = 0.5
SEED = 0
BLOCK = 32
MAX_LEN = 256
NEW_TOKENS = 16
SHORT_LEN, LONG_LEN, OTHERS = 24, 100, 30
CHUNK_BUDGET = 32
# Two logits closer than this at the divergent step: a near tie, not a finding.
TIE = 1e-3


class Results:
    def __init__(self, path: str) -> None:
        self.path = path

    def emit(self, **event: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, default=str) + "\n")


def prompts(vocab: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    low = 3 if vocab > 8 else 0  # keep clear of special ids

    def draw(n: int) -> list[int]:
        return [rng.randrange(low, vocab) for _ in range(n)]

    return {
        "short": draw(SHORT_LEN),
        "long": draw(LONG_LEN),
        "others": [draw(rng.randrange(5, 41)) for _ in range(OTHERS)],
    }


# -- model and checkpoint ---------------------------------------------------------------


def shrink(cfg: Any) -> Any:
    """Apply the smoke shape where the config (or its text config) has the attribute."""
    targets = [cfg]
    text = getattr(cfg, "text_config", None)
    if text is not None and text is not cfg:
        targets.append(text)
    for c in targets:
        for key, value in SMOKE_SHAPE.items():
            if hasattr(c, key) and getattr(c, key) is not None:
                setattr(c, key, value)
        for key in ("layer_types",):
            value = getattr(c, key, None)
            if isinstance(value, list):
                c.layer_types = (value * SMOKE_SHAPE["num_hidden_layers"])[
                    : SMOKE_SHAPE["num_hidden_layers"]
                ]
        if hasattr(c, "initializer_range"):
            c.initializer_range = INIT_RANGE
    return cfg


def has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def write_checkpoint(cfg: Any, folder: Path, arch: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.save_pretrained(folder)
    # save_pretrained names the transformers class; vLLM must pick the target's.
    config_file = folder / "config.json"
    data = json.loads(config_file.read_text("utf-8"))
    data["architectures"] = [arch]
    config_file.write_text(json.dumps(data, indent=1), "utf-8")
    return model


def reference(model: Any, ids: list[int], n: int) -> dict[str, Any]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[0, len(ids) :].tolist()
    return {"tokens": tokens}


# -- engines ----------------------------------------------------------------------------


def engine(folder: Path, device: str, **overrides: Any) -> Any:
    from vllm import LLM

    kwargs: dict[str, Any] = {
        "model": str(folder),
        "skip_tokenizer_init": True,
        "dtype": "float32",
        "seed": SEED,
        "max_model_len": MAX_LEN,
        "block_size": BLOCK,
        "gpu_memory_utilization": 0.1 if device == "cpu" else 0.3,
        "generation_config": "vllm",
        "enforce_eager": True,
        "enable_prefix_caching": True,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 64,
    }
    kwargs.update(overrides)
    return LLM(**kwargs)


def close(llm: Any) -> None:
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def generate(llm: Any, batch: list[list[int]], n: int = NEW_TOKENS) -> list[dict[str, Any]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": ids} for ids in batch], params, use_tqdm=False)
    return [{"tokens": list(o.outputs[0].token_ids)} for o in outs]


def divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class Margins:
    """The reference model's logit gap between two tokens after a prompt and a common
    prefix: below ``TIE``, two implementations may pick either and neither is wrong."""

    def __init__(self, model: Any = None, folder: Path | None = None) -> None:
        self.model, self.folder = model, folder

    def __call__(self, prompt: list[int], prefix: list[int], a: int, b: int) -> float | None:
        try:
            import torch

            if self.model is None and self.folder is not None:
                from transformers import AutoModelForCausalLM

                self.model = AutoModelForCausalLM.from_pretrained(
                    self.folder, torch_dtype=torch.float32
                ).eval()
                self.folder = None
            if self.model is None:
                return None
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + prefix])).logits[0, -1].float()
            return abs(float(logits[a] - logits[b]))
        except Exception:
            return None


def compare(
    name: str, prompt: list[int], ref: dict[str, Any], got: dict[str, Any], margins: Margins
) -> dict[str, Any] | None:
    """None when equal; else the first divergent position and both tokens."""
    pos = divergence(ref["tokens"], got["tokens"])
    if pos is None:
        return None
    a = ref["tokens"][pos] if pos < len(ref["tokens"]) else None
    b = got["tokens"][pos] if pos < len(got["tokens"]) else None
    margin = None
    if a is not None and b is not None:
        margin = margins(prompt, ref["tokens"][:pos], a, b)
    return {
        "prompt": name,
        "position": pos,
        "expected": a,
        "got": b,
        "expected_tokens": ref["tokens"],
        "got_tokens": got["tokens"],
        "margin": margin,
        "near_tie": margin is not None and margin < TIE,
    }


# -- the run ----------------------------------------------------------------------------


def resolve(job: dict[str, Any]) -> dict[str, Any]:
    """The class, the architecture name vLLM will know it by, and a config folder: the
    target and its config resolved as phase 2 resolves them (vLLM's general plugins
    loaded first, a plugin's own config class), so a plugin's architecture is found by
    name and built from its own config."""
    from prefixlint.introspect.builds import pipeline as build
    from prefixlint.introspect.targets import plugins

    target = job["target"]
    plugins.prepare(target)  # as vLLM's start-up and phase 2's worker do
    folder = Path(target)
    if folder.is_dir():
        data = json.loads((folder / "config.json").read_text("utf-8"))
        arch = (data.get("architectures") or [""])[0]
        cls = build.load_class(build.vllm_registry(), arch)
        return {"arch": arch, "cls": cls, "config_folder": folder, "registered": False}
    targets = build.resolve_targets(target)
    if len(targets) != 1:
        names = ", ".join(t.arch for t in targets)
        raise LookupError(f"{target} defines several model classes ({names}): name one")
    t = targets[0]
    cls = t.cls or build.load_class(build.vllm_registry(), t.arch)
    source = build.target_config_source(
        t, cls, job.get("config"), job.get("configs"), job.get("config_base")
    )
    return {
        "arch": t.arch,
        "cls": cls,
        "config_folder": Path(source.folder),
        "registered": t.registered,
        "config_source": source.source,
    }


def plugin_models(resolved: dict[str, Any]) -> list[dict[str, Any]]:
    """The out-of-tree class the engine's processes must register: one prefixlint
    registered, or a plugin's (a source tree's entry point is in no installed
    distribution those processes would run; an installed one's registration is skipped
    there when it ran first)."""
    import inspect

    from prefixlint.static.index import package_root_for

    cls = resolved["cls"]
    if not resolved["registered"] and cls.__module__.split(".")[0] == "vllm":
        return []
    file = inspect.getsourcefile(cls) or ""
    module = cls.__module__
    entry: dict[str, Any] = {"arch": resolved["arch"], "class": cls.__qualname__, "file": file}
    if module.startswith("prefixlint_target_"):
        entry["alias"] = module  # a loose file: imported from its path
    else:
        entry["module"] = module
        root = package_root_for(Path(file)) if file else None
        entry["path"] = str(root) if root is not None else str(Path(file).parent)
    return [entry]


def run(job: dict[str, Any]) -> None:
    device = _prepare_environment(job["device"])
    out = Results(job["results"])
    work = Path(job["workdir"])
    checks = set(job["checks"])
    t0 = time.perf_counter()
    resolved = _announce(job, out, work)
    ready = _checkpoint(job, resolved, work, out, checks)
    if ready is None:
        return
    model_dir, cfg, hf_model = ready
    if _refuse_unloaded(model_dir, out, checks):
        return
    vocab = int(getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size)
    p = prompts(vocab)
    out.emit(event="timing", step="checkpoint", seconds=time.perf_counter() - t0)
    refs: dict[str, Any] = {}
    if "PFX801" in checks:
        t = time.perf_counter()
        for name in ("short", "long"):
            refs[name] = reference(hf_model, p[name], NEW_TOKENS)
        out.emit(event="timing", step="transformers", seconds=time.perf_counter() - t)
    margins = Margins(hf_model, None if hf_model is not None else model_dir)
    del hf_model  # the margins keep what they need; the engines want the memory
    smoke = _Smoke(out, device, model_dir, p, margins)
    if checks & {"PFX801", "PFX802", "PFX803", "PFX804", "PFX805", "PFX806"}:
        smoke.base_engine(checks, refs)
    smoke.other_engines(checks)
    out.emit(event="timing", step="total", seconds=time.perf_counter() - t0)


def _prepare_environment(requested: str) -> str:
    """The device, and the environment vLLM reads before it is imported."""
    from prefixlint.introspect.process.env import prepare

    device = resolve_device(requested)
    os.environ["VLLM_TARGET_DEVICE"] = device
    prepare()
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return device


def _announce(job: dict[str, Any], out: Results, work: Path) -> dict[str, Any]:
    """Resolve the target, say which class and config it is, and make it loadable by the
    engine's processes (a plugin)."""
    from prefixlint.introspect.finding import class_site
    from prefixlint.smoke import plugin

    resolved = resolve(job)
    file, line = class_site(resolved["cls"])
    out.emit(
        event="target",
        arch=resolved["arch"],
        file=file,
        line=line,
        config_source=resolved.get("config_source") or f"model folder {job['target']}",
    )
    plugin.install(work / "plugin", plugin_models(resolved), os.environ)  # type: ignore[arg-type]
    return resolved


def _checkpoint(
    job: dict[str, Any], resolved: dict[str, Any], work: Path, out: Results, checks: set[str]
) -> tuple[Path, Any, Any] | None:
    """(checkpoint folder, config, transformers reference or None): the target's own
    weights when it is a model folder with them, else a random-weight checkpoint of the
    shrunk config. None when there is no reference to compare with (every check says so).
    PFX801 is dropped from ``checks`` when transformers cannot load the reference."""
    from transformers import AutoConfig

    src = resolved["config_folder"]
    model_dir = work / "model"
    hf_model = None
    if Path(job["target"]).is_dir() and has_weights(src):
        model_dir = src
        cfg = AutoConfig.from_pretrained(src)
    else:
        cfg = shrink(AutoConfig.from_pretrained(src))
        try:
            hf_model = write_checkpoint(cfg, model_dir, resolved["arch"])
        except Exception as e:
            reason = _no_reference(cfg, e)
            for code in sorted(checks):
                out.emit(event="check", code=code, status="skip", reason=reason[:300])
            return None
    if hf_model is None and "PFX801" in checks:
        try:
            import torch
            from transformers import AutoModelForCausalLM

            hf_model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
            hf_model.eval()
        except Exception as e:
            out.emit(
                event="check",
                code="PFX801",
                status="skip",
                reason=f"transformers cannot load the reference: {type(e).__name__}: {e}"[:300],
            )
            checks.discard("PFX801")
    return Path(model_dir), cfg, hf_model


def _no_reference(cfg: Any, error: BaseException) -> str:
    """Why no random-weight checkpoint was written: transformers has no causal-LM class
    for the config's class (a plugin's own config class), said in one line, not
    transformers' list of every class it knows."""
    if isinstance(error, ValueError) and str(error).startswith("Unrecognized configuration"):
        return (
            f"transformers cannot build a reference: it has no causal-LM class for "
            f"`{type(cfg).__module__}.{type(cfg).__qualname__}` (model type "
            f"{getattr(cfg, 'model_type', '?')!r}), and the random-weight checkpoint is "
            f"written by that class; give a model folder with weights as TARGET"
        )
    return f"transformers cannot build a reference: {type(error).__name__}: {error}"


def _refuse_unloaded(model_dir: Path, out: Results, checks: set[str]) -> bool:
    """True (and every check an error that says why) when the checkpoint leaves
    parameters of the vLLM model unloaded: what they compute is noise."""
    missing = unloaded_weights(model_dir)
    if not missing:
        return False
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    reason = (
        f"not compared: {len(missing)} parameter(s) of the model get no tensor from the "
        f"checkpoint ({shown}), so they hold uninitialised memory and any comparison is "
        f"noise. The config does not fit the class: give its own config with --config "
        f"or [tool.prefixlint.configs]"
    )
    for code in sorted(checks):
        out.emit(event="check", code=code, status="error", reason=reason[:600])
    return True


class _Smoke:
    """The engine runs of one smoke job: ``base`` first (its answers are the reference of
    the other engines), then one engine per remaining check."""

    def __init__(
        self, out: Results, device: str, model_dir: Path, p: dict[str, Any], margins: Margins
    ) -> None:
        self.out = out
        self.device = device
        self.model_dir = model_dir
        self.p = p
        self.margins = margins
        self.base: dict[str, Any] = {}

    def _compare(self, name: str, expected: Any, got: Any) -> dict[str, Any] | None:
        return compare(name, self.p[name], expected, got, self.margins)

    def base_engine(self, checks: set[str], refs: dict[str, Any]) -> None:
        """PFX801 (against transformers), PFX804 (a prefix-cache hit) and PFX802 (in a
        batch) on the base engine, whose first answers are kept in ``self.base``."""
        out, p, t = self.out, self.p, time.perf_counter()
        llm = engine(self.model_dir, self.device)
        record_shared_memory(out)
        out.emit(event="timing", step="engine base", seconds=time.perf_counter() - t)
        t = time.perf_counter()
        self.base["short"] = generate(llm, [p["short"]])[0]
        self.base["long"] = generate(llm, [p["long"]])[0]
        out.emit(event="timing", step="base generate", seconds=time.perf_counter() - t)
        if "PFX801" in checks:
            findings = [
                f
                for name in ("short", "long")
                if (f := self._compare(name, refs[name], self.base[name]))
            ]
            report(out, "PFX801", findings, time.perf_counter() - t)
        if "PFX804" in checks:
            t = time.perf_counter()
            again = generate(llm, [p["long"]])[0]
            f = self._compare("long", self.base["long"], again)
            report(out, "PFX804", [f] if f else [], time.perf_counter() - t)
        if "PFX802" in checks:
            t = time.perf_counter()
            llm.reset_prefix_cache()
            batch = generate(llm, [p["short"], *p["others"]])[0]
            f = self._compare("short", self.base["short"], batch)
            report(out, "PFX802", [f] if f else [], time.perf_counter() - t)
        close(llm)
        del llm

    def other_engines(self, checks: set[str]) -> None:
        """PFX803 (chunked prefill), PFX805 (TP 2) and PFX806 (compiled), each against
        the base engine's answers."""
        if "PFX803" in checks:
            self.against_base(
                "PFX803",
                "chunked-prefill",
                ("long",),
                enable_chunked_prefill=True,
                max_num_batched_tokens=CHUNK_BUDGET,
                max_num_seqs=8,
                enable_prefix_caching=False,
            )
        if "PFX805" in checks:
            reason = tp_skip_reason(self.device)
            if reason:
                self.out.emit(event="check", code="PFX805", status="skip", reason=reason)
            else:
                if self.device == "cpu":
                    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"
                self.against_base(
                    "PFX805", "tensor-parallel-2", ("short", "long"), tensor_parallel_size=2
                )
        if "PFX806" in checks:
            self.against_base("PFX806", "compiled", ("short", "long"), enforce_eager=False)

    def against_base(self, code: str, label: str, names: tuple[str, ...], **overrides: Any) -> None:
        out, t = self.out, time.perf_counter()
        try:
            llm = engine(self.model_dir, self.device, **overrides)
        except Exception as e:
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
            out.emit(
                event="check",
                code=code,
                status="skip",
                reason=f"the {label} engine did not start: {why}"[:300],
                seconds=time.perf_counter() - t,
            )
            return
        record_shared_memory(out)
        out.emit(event="timing", step=f"engine {label}", seconds=time.perf_counter() - t)
        t = time.perf_counter()
        findings = []
        for name in names:
            got = generate(llm, [self.p[name]])[0]
            if f := self._compare(name, self.base[name], got):
                findings.append(f)
        close(llm)
        report(out, code, findings, time.perf_counter() - t)


def record_shared_memory(out: Results) -> None:
    """The shared-memory segments this run's processes map now that an engine is up,
    for the parent to release after the run (``shm.py``)."""
    from prefixlint.smoke.shm import mapped_by_group

    names = sorted(mapped_by_group(os.getpgrp()))
    if names:
        out.emit(event="shm", names=names)


def unloaded_weights(model_dir: Path) -> list[str]:
    """Parameters of the vLLM model that its ``load_weights`` does not fill from the
    checkpoint in ``model_dir``. vLLM's loader exempts unquantized layers from its own
    check, so a missing bias would otherwise run on uninitialised memory. The model is
    built on the meta device (phase 2's build) and fed meta copies of the tensors."""
    import torch
    from safetensors import safe_open

    from prefixlint.introspect.builds.parallel import Layout, fake_parallel_state
    from prefixlint.introspect.builds.pipeline import BuildPlan, build_layout, load_model_config

    built = build_layout(BuildPlan(load_model_config(str(model_dir))), Layout(tp=1))
    if built.model is None or not hasattr(built.model, "load_weights"):
        return []  # the engine will say why it cannot build; nothing to compare here

    def weights() -> Any:
        for file in sorted(model_dir.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    sliced = f.get_slice(name)
                    yield name, torch.empty(sliced.get_shape(), dtype=torch.float32, device="meta")

    from vllm.config import set_current_vllm_config

    try:
        with set_current_vllm_config(built.vllm_config), fake_parallel_state(Layout(tp=1), True):
            loaded = built.model.load_weights(weights())
    except Exception:
        return []  # a loader that cannot run on meta tensors: left to the engine
    if not loaded:
        return []
    return sorted({n for n, _ in built.model.named_parameters()} - set(loaded))


def resolve_device(device: str) -> str:
    if device == "cpu":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise RuntimeError("--device cuda: torch sees no CUDA device here")
    return "cpu"


def tp_skip_reason(device: str) -> str:
    if device == "cuda":
        import torch

        n = torch.cuda.device_count()
        return "" if n >= 2 else f"tensor parallel 2 needs 2 GPUs, this machine has {n}"
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    if cores < 2:
        return f"tensor parallel 2 on CPU needs 2 cores (one per rank), this process has {cores}"
    return ""


def report(out: Results, code: str, findings: list[dict[str, Any]], seconds: float) -> None:
    real = [f for f in findings if not f["near_tie"]]
    if real:
        out.emit(event="check", code=code, status="fail", findings=real, seconds=seconds)
    elif findings:
        out.emit(
            event="check",
            code=code,
            status="pass",
            seconds=seconds,
            note="tokens differ only at a near tie (logits within "
            f"{TIE}): position {findings[0]['position']}",
        )
    else:
        out.emit(event="check", code=code, status="pass", seconds=seconds)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text("utf-8"))
    try:
        run(job)
    except BaseException as e:
        Results(job["results"]).emit(
            event="error",
            message=f"{type(e).__name__}: {e}"[:1000],
            traceback="".join(traceback.format_exception(e))[-4000:],
        )
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
