"""What every phase-2 check shares: the unit's shape (a check class with its documentation
and its examples), the subject a target's checks read, one build's modules by path, and
the merge of findings per construction site.

A check is one of four kinds, by what it reads: a ``FailureCheck`` judges a build that
raised (the first of the table that answers wins), a ``BuildCheck`` reads one successful
build, a ``TargetCheck`` reads all of a target's successful builds together, and a
``FactCheck`` reads the typed facts a later stage returns (the dry-runs, the coverage, the
comparison), which never build a finding themselves.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import nn

from prefixlint.introspect.finding import Finding, class_site, error_line

_SHOWN = 3  # repeats named in a message


@dataclass(frozen=True)
class Case:
    """One example of a check, as mypy's stubtest tests each comparison: vLLM's
    ``llama.py`` copied at test time with one planted defect (``old`` replaced by ``new``
    inside class ``cls``), built by phase 2 on the ``tp``/``pp`` grid (with ``config``, a
    LlamaConfig's keywords, when given), must give the check's code with ``severity`` at the
    line of ``at`` (searched from ``cls``). The clean twin of every example is the copy
    left as it is (built with ``clean_config`` where the defect is in the config): it gives
    none of the check's findings."""

    cls: str
    old: str
    new: str
    at: str
    severity: str = "error"
    tp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] = (1,)
    config: tuple[tuple[str, Any], ...] = ()
    clean_config: tuple[tuple[str, Any], ...] = ()
    at_cls: str = ""


# A target's run, stage by stage (``builds.pipeline.STAGES`` runs them in this order).
STAGES = ("set-up", "builds", "checks", "dry-runs", "comparison", "finish")


class Check:
    """A phase-2 check: ``code`` in ``codes.py``, its docstring the documentation (What /
    Why / Example / Fix), ``examples`` run by ``tests/test_introspect_checks.py``,
    ``stages`` the stages of ``STAGES`` whose results it reads."""

    code: ClassVar[str]
    examples: ClassVar[tuple[Case, ...]] = ()
    stages: ClassVar[tuple[str, ...]] = ("checks",)


class FailureCheck(Check):
    def judge(self, build: Any, subject: Subject) -> Finding | None:
        raise NotImplementedError


class BuildCheck(Check):
    def check(self, view: View, subject: Subject, out: Findings) -> None:
        raise NotImplementedError


class TargetCheck(Check):
    def check(self, built: list[Any], subject: Subject, out: Findings) -> None:
        raise NotImplementedError


class FactCheck(Check):
    """A check over typed facts: ``reads`` names the fact classes it turns into findings
    (``checks.findings_of`` hands each fact to the one unit that reads its class)."""

    reads: ClassVar[tuple[type, ...]] = ()

    def findings(self, facts: list[Any]) -> list[Finding]:
        raise NotImplementedError


@dataclass
class Subject:
    """What every check of one target reads: its class, where it is defined, its config's
    head counts, and whether every construction site ran in some build."""

    cls: type | None
    hf: Any
    complete: bool = True
    class_site: tuple[str, int] = ("", 0)
    heads: Any = None
    kv_heads: Any = None
    # (site, what it raised) of the failed builds that split no pipeline (pp=1)
    unstaged_failures: set[tuple[tuple[str, int], str]] = field(default_factory=set)
    # a speculative draft's policy (``drafts.plan.DraftPolicy``), None for a model
    draft: Any = None

    @classmethod
    def of(cls_, cls: type | None, model_config: Any, complete: bool) -> Subject:
        hf = getattr(model_config, "hf_text_config", None) or model_config.hf_config
        heads = config_value(hf, "num_attention_heads")
        kv_heads = config_value(hf, "num_key_value_heads") or heads
        return cls_(cls, hf, complete, class_site(cls), heads, kv_heads)


class Findings:
    """Findings merged per construction site, with where each repeats."""

    def __init__(self) -> None:
        self.found: dict[tuple, Finding] = {}
        self.messages: dict[tuple, dict[str, str]] = {}  # key -> path -> its message
        self.facts: dict[tuple, dict[str, dict]] = {}  # key -> path -> its facts
        self.failures: set[tuple] = set()  # keys of findings about builds that failed

    def add(self, finding: Finding, build: Any, path: str = "") -> None:
        key = finding.key()
        known = self.found.setdefault(key, finding)
        if build.error is not None:
            self.failures.add(key)
        if finding.severity == "error":
            known.severity = "error"
        if build.layout.name not in known.layouts:
            known.layouts.append(build.layout.name)
        variant = getattr(build, "variant", "") or "base config"
        if variant not in known.variants:
            known.variants.append(variant)
        if path:
            if path not in known.paths:
                known.paths.append(path)
            self.messages.setdefault(key, {}).setdefault(path, finding.message)
            self.facts.setdefault(key, {}).setdefault(path, finding.facts)

    def finish(self) -> list[Finding]:
        for key, f in self.found.items():
            f.paths.sort(key=natural_order)
            if f.paths:
                f.message = self.messages[key][f.paths[0]]  # the first layer's words
                f.facts = self.facts[key][f.paths[0]]  # and what they say
            extra = []
            if len(f.paths) > 1:
                more = ", ".join(f"`{p}`" for p in f.paths[1 : 1 + _SHOWN])
                rest = len(f.paths) - 1 - _SHOWN
                extra.append(f"the same at {more}" + (f" and {rest} more" if rest > 0 else ""))
            if len(f.layouts) > 1 or (key in self.failures and f.layouts):
                # a failure names its layouts even when one failed (the others built)
                plural = "s" if len(f.layouts) > 1 else ""
                extra.append(f"in layout{plural} {', '.join(f.layouts)}")
            if "base config" not in f.variants:
                extra.append(f"built with config variant {'; '.join(f.variants)}")
            if extra:
                f.message += f" ({'; '.join(extra)})"
        return sorted(self.found.values(), key=lambda f: (f.file, f.line, f.code, f.group))


def natural_order(path: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def alike(value: Any) -> Any:
    """A typed fact (or a part of it) with layer numbers left out of every name and its
    site left out: the facts of one site that say the same of other layers are equal
    here (``dryrun.layouts.normal``'s rule, read off the data, never off the words)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        kept = tuple(alike(getattr(value, f.name)) for f in fields if f.name != "site")
        return (type(value).__name__, *kept)
    if isinstance(value, tuple):
        return tuple(alike(v) for v in value)
    if isinstance(value, str):
        return re.sub(r"\.\d+(?=[.`]|$)", ".N", value)
    return value


def by_site_alike(facts: list[Any]) -> list[list[Any]]:
    """Facts (each with a ``site``) grouped per site and ``alike`` value, in the order
    each group first appears: a unit reports a group once, at its first fact, saying
    ``more_like_it`` for the others."""
    groups: dict[tuple, list[Any]] = {}
    for fact in facts:
        groups.setdefault((fact.site, alike(fact)), []).append(fact)
    return list(groups.values())


def more_like_it(group: list[Any]) -> str:
    return f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""


def model_frame(tb: Any, external: Callable[[str], bool]) -> tuple[str, int]:
    """The innermost traceback frame in the model's own code (not vLLM's layers, torch
    or prefixlint): where the model did what failed."""
    best = ("", 0)
    for frame, line in traceback.walk_tb(tb):
        if external(frame.f_code.co_filename):
            best = (frame.f_code.co_filename, line)
    return best


def config_value(config: Any, name: str) -> Any:
    """``config.name``, or None. A heterogeneous config (per-layer values, transformers'
    ``per_layer_config``) refuses a global read of a per-layer attribute with its own
    error, not an AttributeError: that value is then unknown here, not a crash."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None


def first_line(error: BaseException) -> str:
    return error_line(error)


@dataclass
class View:
    """One build's modules by path, with what the recorder saw at their construction."""

    build: Any
    paths: dict[int, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        build = self.build
        self.model = build.model
        self.layout = build.layout
        for name, module in self.model.named_modules(remove_duplicate=False):
            self.paths.setdefault(id(module), []).append(name)
        self.by_path = {
            self.paths[id(r.module)][0]: r
            for r in build.recorder.records.values()
            if id(r.module) in self.paths and r.prefix is not None and not r.by_library
        }
        self.delegating = self._delegating()
        # layers that registered themselves by name (attention, MoE, Mamba state): the
        # forward context and the KV cache find them under their prefix
        context = getattr(
            getattr(build.vllm_config, "compilation_config", None), "static_forward_context", {}
        )
        self.registered = {id(m) for m in (context or {}).values()}

    def _delegating(self) -> set[str]:
        """Modules that hand their own name down on purpose (vLLM's MLA and MTP wrappers
        receive their parent's prefix); names beneath them are relative to the wrapper."""
        out = set()
        for path, r in self.by_path.items():
            parent, _, name = path.rpartition(".")
            # An element of a container (`layers.3`) given the container's name is a loop
            # that left out the index, never a wrapper's convention.
            # The name the parent received counts as its name: a draft's layers are
            # numbered on from the target's, and a wrapper there hands that number down.
            received = self.by_path[parent].prefix if parent in self.by_path else None
            handed = r.prefix == parent or (received is not None and r.prefix == received)
            if handed and parent and not r.defaulted and not name.isdigit():
                out.add(path)
        return out

    def wrong(self, path: str) -> bool:
        return self.by_path[path].prefix not in self.paths[id(self.by_path[path].module)]

    def is_container(self, path: str) -> bool:
        """Holds prefixed modules (the Transformers backend names its layers itself)."""
        return any(p.startswith(path + ".") for p in self.by_path)

    def site_of(self, module: nn.Module | None, cls: Any) -> tuple[str, int]:
        for r in self.build.recorder.records.values():
            if r.module is module:
                return r.site_file, r.site_line
        return class_site(type(module) if module is not None else cls)


def ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def has_params(module: nn.Module | None) -> bool:
    return module is not None and any(True for _ in module.parameters())
