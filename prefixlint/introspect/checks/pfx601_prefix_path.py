"""PFX601: a built module's prefix differs from its path in ``named_modules()``."""

from __future__ import annotations

import re
from typing import ClassVar

from prefixlint.introspect.checks.base import BuildCheck, Case, Findings, Subject, View, ancestors
from prefixlint.introspect.coverage.sites import passes_quant_config
from prefixlint.introspect.finding import Finding

# vLLM conventions that are not path mismatches: a draft model's weights live under its
# own namespace (``mtp.``, ``draft_model.``) whatever attribute holds it.
_DRAFT_NAMESPACES = ("mtp", "draft_model")


class PrefixPath(BuildCheck):
    """## What it does
    Compares the prefix each module received at construction with where it ends up in the
    built model (every layout and explored config variant), one finding per construction
    site.

    ## Details
    The prefix a module received at construction is compared with where it ends up in
    the built model, over every build (layouts and explored config variants). A layer
    built with the default `""` where its path is not empty is a finding too. One
    finding per construction site, naming the first path and where else it repeats. An
    error when a consumer looks the name up (a `quant_config` reaches the module at its
    construction site, or the layer registers itself by name for the KV cache and the
    forward context); a note that says so when nothing does (shown with `--show-notes`,
    in JSON and SARIF). A container built without `prefix` is reported once, at its own
    construction. vLLM's conventions are accepted: wrappers handing their own name to a
    child (MLA, MTP), MLA's `.attn` for `mla_attn`, a draft model's `mtp`/`draft_model`
    namespace, attention layers of one decoder layer given unique names on purpose.
    Reported at the line of the model that built the module.

    ## Why is this bad?
    Quantization, the KV cache and the forward context look a layer up by its prefix: a
    name that is not the path gets the wrong quantization or no cache slot.

    ## Example
    `self.mlp = LlamaMLP(...)` built without `prefix`, stored at `layers.0.mlp`.

    ## Fix
    Pass `prefix=maybe_prefix(prefix, "<attribute>")` to every child.
    """

    code = "PFX601"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaDecoderLayer",
            'prefix=f"{prefix}.mlp",',
            "",
            "self.mlp = LlamaMLP(",
            tp=(1, 2),
            pp=(2,),
        ),
        Case(
            "LlamaForCausalLM",
            'maybe_prefix(prefix, "lm_head")',
            'maybe_prefix(prefix, "head")',
            "self.lm_head = ParallelLMHead(",
            tp=(1, 2),
            pp=(2,),
        ),
    )

    def check(self, view: View, subject: Subject, out: Findings) -> None:
        roots: list[tuple[str, str]] = []  # (path, wrong prefix) reported or accepted
        for path in sorted(view.by_path, key=lambda p: (p.count("."), p)):
            r = view.by_path[path]
            if not view.wrong(path) or any(a in view.delegating for a in [path, *ancestors(path)]):
                continue
            if any(_follows(r.prefix, root, wrong, path) for root, wrong in roots):
                continue  # a consequence of an ancestor's wrong prefix, reported there
            roots.append((path, r.prefix))
            if _convention(view, path):
                continue
            if subject.draft is not None and subject.draft.numbered_on(path, r.prefix):
                continue  # a draft's layers are numbered on from its target's: the contract
            below = [p for p in view.by_path if p.startswith(path + ".") and view.wrong(p)]
            if r.defaulted and r.prefix == "" and not below and view.is_container(path):
                continue  # a container whose layers get their names some other way
            severity, why = _severity(view, [path, *below])
            leaf = r.defaulted and r.prefix == "" and not below
            facts: dict[str, str] = {}
            if r.defaulted and r.prefix == "":
                inside = ', so the layers inside it are named from `""`' if below else ""
                message = f'`{r.cls}` at `{path}` was built without `prefix` (`""`){inside}: {why}'
            else:
                message = f"`{r.cls}` is at `{path}` but was given prefix `{r.prefix}`: {why}"
                facts = {"path": path, "prefix": r.prefix}
            group = "default-prefix" if leaf else ""
            site = (r.site_file, r.site_line)
            finding = Finding(self.code, severity, message, *site, group=group, facts=facts)
            out.add(finding, view.build, path)


def _convention(view: View, path: str) -> bool:
    """vLLM's own naming conventions, which consumers expect: not findings."""
    r = view.by_path[path]
    prefix, parent = r.prefix or "", path.rsplit(".", 1)[0] if "." in path else ""
    # MLA: ``self.mla_attn = MLAAttention(prefix=f"{prefix}.attn")``; the checkpoint and the
    # KV cache use ``.attn``.
    if path.endswith(".mla_attn") and prefix == f"{parent}.attn" and "MLA" in r.cls:
        return True
    # A draft model's namespace (``mtp.``): its weights are stored under it.
    if prefix.split(".")[0] in _DRAFT_NAMESPACES and prefix.split(".")[0] not in path.split("."):
        return True
    # Several attention layers of one decoder layer (a list: ``attn.1``, ``attn_per_step.3``)
    # named ``layers.<k>.self_attn.attn`` with a made-up index, unique on purpose: each gets
    # its own KV cache. Only for list elements and unique names (an off-by-one is neither).
    if "layer_name" in r.attributes and path.rsplit(".", 1)[-1].isdigit():
        stem = re.sub(r"\.\d+", "", path)
        names = [o.prefix for o in view.by_path.values() if "layer_name" in o.attributes]
        return stem.startswith(re.sub(r"\.\d+", "", prefix)) and names.count(prefix) == 1
    return False


def _consumers(view: View, paths: list[str]) -> list[str]:
    """What looks the modules at ``paths`` up by their prefix."""
    out: list[str] = []
    for path in paths:
        r = view.by_path[path]
        if id(r.module) in view.registered:
            used = "the KV cache and the forward context (the layer registers by this name)"
        elif "layer_name" in r.attributes:
            used = "its per-layer scales (looked up by `layer_name`)"
        else:
            used = ""
        if passes_quant_config(r.site_file, r.site_line):
            out.append("quantization")
        if used:
            out.append(used)
    return list(dict.fromkeys(out))


def _severity(view: View, paths: list[str]) -> tuple[str, str]:
    used = _consumers(view, paths)
    if used:
        return "error", f"{' and '.join(used)} will look it up under the wrong name"
    # A note (shown with --show-notes, in JSON and SARIF): no consumer breaks today, and
    # a review comment on it would cost a maintainer a minute for nothing (issue 20).
    return "note", (
        "nothing looks this name up today (no `quant_config` reaches it and it registers "
        "no layer by name), so it is a divergence without a consequence yet"
    )


def _follows(prefix: str, root: str, wrong: str, path: str) -> bool:
    """``prefix`` is what ``path`` would get below an ancestor at ``root`` named ``wrong``."""
    if not path.startswith(root + "."):
        return False
    rel = path[len(root) + 1 :]
    return prefix in (f"{wrong}.{rel}", rel, f".{rel}") or (
        prefix.endswith("." + rel) and (prefix.startswith(wrong))
    )
