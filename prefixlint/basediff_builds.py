"""Phase 2's base against head: differences of the builds that are not findings yet.

Each comparison takes the base's and the head's ``Phase2Result`` (built with the same
configs) and head's phase-2 findings, and returns head's findings with what it adds or
settles. ``COMPARISONS`` lists them in order; another comparison of the same two builds
(the outputs on the same weights, PFX609) is one more function of this signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefixlint.check_introspect import Phase2Result
from prefixlint.codes import CHECKPOINT_COVERAGE_CODE, url_for
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.paths import display_path

LOST_LAYOUT_CODE = "PFX604"


def lost_layouts(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """A layout that built at the base and fails at head, with the same config, is the
    change's: PFX604 (a warning) at head's failing line, and never "not verified" (a
    config gap or a skip), since that config built the base."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch)
        if now is None:
            continue
        lost = {
            name: now["layouts"][name].get("reason") or ""
            for name, layout in then["layouts"].items()
            if layout.get("status") == "built" and _status(now, name) not in ("built", None)
        }
        if not lost:
            continue
        mine = [d for d in out if d.data.get("architecture") in (arch, f"{arch}__prefixlint")]
        if any(d.severity is Severity.ERROR for d in mine):
            continue  # head's build already says what broke, at its line
        notes = [d for d in mine if d.is_not_verified]
        where = notes[0] if notes else None
        row = where.location.row if where else int(now["line"])
        filename = where.filename if where else display_path(Path(now["file"]))
        reasons = "; ".join(f"{name}: {why or 'failed'}" for name, why in sorted(lost.items()))
        pos = Position(row, 1)
        out = [d for d in out if d not in notes]
        out.append(
            Diagnostic(
                LOST_LAYOUT_CODE,
                f"`{arch}` built at the base with the same config on "
                f"{', '.join(sorted(lost))}, and fails at head ({reasons})",
                Severity.WARNING,
                filename,
                pos,
                pos,
                phase="introspect",
                url=url_for(LOST_LAYOUT_CODE),
                data={"architecture": arch, "layouts": sorted(lost), "base_built": True},
            )
        )
    return out


def _status(build: dict[str, Any], layout: str) -> str | None:
    return (build["layouts"].get(layout) or {}).get("status")


# how many names a finding lists of each kind; ``data`` has them all
SHOWN_NAMES = 5


def changed_parameters(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """A parameter the base's build had and head's lacks, gains, or has in another shape,
    on a layout built at both (the first such layout): a checkpoint written for the base
    no longer loads as it did. PFX701 (a warning) at the line of head that built the
    module of a new or reshaped parameter (else of the nearest module above a gone one),
    so that a review anchors it in the class whose construction changed."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch)
        layout = _both_built(then, now)
        if now is None or layout is None:
            continue
        before, after = then["layouts"][layout]["params"], now["layouts"][layout]["params"]
        gone = sorted(set(before) - set(after))
        added = sorted(set(after) - set(before))
        reshaped = sorted(n for n in set(before) & set(after) if before[n] != after[n])
        if not (gone or added or reshaped):
            continue
        said = [
            f"{what} {_names(names)}"
            for what, names in (("gone", gone), ("new", added), ("reshaped", reshaped))
            if names
        ]
        modules = now["layouts"][layout].get("modules") or {}
        file, row = _module_site(modules, [*added, *reshaped, *gone], now)
        out.append(
            _warning(
                f"`{arch}` ({layout}) has other parameters than at the base, with the same "
                f"config: {'; '.join(said)}: a checkpoint written for the base does not load "
                "into it as it did",
                (file, row),
                {
                    "architecture": arch,
                    "group": "base-parameters",
                    "layout": layout,
                    "gone": gone,
                    "new": added,
                    "reshaped": {n: [before[n], after[n]] for n in reshaped},
                },
            )
        )
    return out


def _both_built(then: dict[str, Any], now: dict[str, Any] | None) -> str | None:
    """The first layout built at the base and at head."""
    for name, lay in (now or {}).get("layouts", {}).items():
        if lay.get("status") == "built" and _status(then, name) == "built":
            return name
    return None


def _module_site(
    modules: dict[str, list[Any]], params: list[str], build: dict[str, Any]
) -> tuple[str, int]:
    """The line of head that built the module of the first of ``params`` (or of the
    nearest module above it that head has); head's class line when none is known."""
    for name in params:
        path = name.rpartition(".")[0]
        while path:
            if path in modules:
                return str(modules[path][2]), int(modules[path][3])
            path = path.rpartition(".")[0]
    return str(build["file"]), int(build["line"])


def _warning(message: str, site: tuple[str, int], data: dict[str, Any]) -> Diagnostic:
    pos = Position(int(site[1]), 1)
    return Diagnostic(
        CHECKPOINT_COVERAGE_CODE,
        message,
        Severity.WARNING,
        display_path(Path(site[0])),
        pos,
        pos,
        phase="introspect",
        url=url_for(CHECKPOINT_COVERAGE_CODE),
        data=data,
    )


# the comparisons' warnings, and the code of head's own finding that says the same at a line
_SAID_BY = {"base-loading": CHECKPOINT_COVERAGE_CODE, "base-names": "PFX601"}


def settled(kept: list[Diagnostic]) -> list[Diagnostic]:
    """The change's findings (after ``basediff.judge``) without a comparison's warning at
    a line where a finding of the change (``_SAID_BY``: a new PFX701 error at the loader,
    a new PFX601 at the construction) already says it. Only after the judgement: head's
    PFX701 at a loader that already dropped another tensor at the base is not the
    change's, and then the warning is what says what the change dropped."""

    def rows_saying(o: Diagnostic, code: str) -> set[int]:
        """Where ``o`` says ``code``: its own line, or the line of phase 2's evidence it
        carries (a static PFX302 at the ``prefix=`` line holds the PFX601 phase 2 reported
        at the statement's first line, where the comparison's warning sits too)."""
        rows = {o.location.row} if o.code == code else set()
        for r in o.data.get("runtime", []):
            if r.get("code") == code:
                rows |= {o.location.row, (r.get("location") or {}).get("row")}
        return rows

    def said(d: Diagnostic) -> bool:
        code = _SAID_BY.get(str(d.data.get("group")))
        return code is not None and any(
            o.severity is not Severity.NOTE
            and o.data.get("group") not in _SAID_BY
            and d.location.row in rows_saying(o, code)
            and Path(o.filename).resolve() == Path(d.filename).resolve()
            for o in kept
        )

    return [d for d in kept if not said(d)]


def lost_loads(base: Phase2Result, head: Phase2Result, found: list[Diagnostic]) -> list[Diagnostic]:
    """The dry-runs of base and head on the same synthetic checkpoint (the names both
    streamed): a tensor the base's ``load_weights`` consumed and head's drops, at head's
    loader that drops it; a parameter the base's load wrote and head's leaves unwritten,
    at head's line that built its module. A warning per line (``settled`` drops it where a
    new PFX701 of the change sits at that line: it says the same)."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch) or {}
        before, after = then.get("loading") or {}, now.get("loading") or {}
        if not (before and after):
            continue  # a dry-run that did not complete on either side says nothing here
        same = set(before["streamed"]) & set(after["streamed"])
        consumed = same - set(before["dropped"])
        params = {p for lay in then["layouts"].values() for p in lay.get("params") or {}}
        written = params - set(before["unwritten"])
        lost: dict[tuple[str, int], dict[str, list[str]]] = {}
        for kind, facts, had in (
            ("dropped", after["dropped"], consumed),
            ("unwritten", after["unwritten"], written),
        ):
            for name, site in facts.items():
                # a parameter left unwritten because its own tensor is dropped: the
                # drop says it, at the loader (as the dry-run itself does)
                if name in had and not (kind == "unwritten" and name in after["dropped"]):
                    at = (str(site[0]), int(site[1]))
                    lost.setdefault(at, {"dropped": [], "unwritten": []})[kind].append(name)
        for site, names in sorted(lost.items()):
            said = [
                f"{what} {_names(sorted(names[kind]))}"
                for kind, what in (
                    ("dropped", "checkpoint tensors it loaded are dropped at head:"),
                    ("unwritten", "parameters it wrote stay unwritten at head:"),
                )
                if names[kind]
            ]
            out.append(
                _warning(
                    f"`{arch}`'s checkpoint dry-run loaded more at the base, on the same "
                    f"synthetic checkpoint: {'; '.join(said)}",
                    site,
                    {"architecture": arch, "group": "base-loading", **names},
                )
            )
    return out


# the fields of ``recorder.named_sites`` a review compares, and how a finding names each
_NAMED = ((0, "prefix"), (1, "attention layer name"))


def changed_names(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """On the first layout built at both: a module (the same attribute path) whose
    recorded prefix or attention layer name changed, and attention layer names the base
    registered and head does not (or the reverse). A warning at the line of head that
    built the module: quantization configs, checkpoint scales (``k_scale``) and the
    engine's per-layer tables go by these names. Left out as not a regression: a name
    that equals its path at head (a fix, or a rename that keeps name == path, whose
    parameters' names the parameter comparison judges), and a module inside one already
    reported (its names follow its parent's); ``settled`` drops it where a new PFX601
    sits (a prefix that equalled its path at the base and no longer does)."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch)
        layout = _both_built(then, now)
        if now is None or layout is None:
            continue
        before = then["layouts"][layout].get("modules") or {}
        after = now["layouts"][layout].get("modules") or {}
        changed = _renamed(before, after)
        new_params = set(now["layouts"][layout]["params"]) - set(then["layouts"][layout]["params"])
        moved = _attention_moved(before, after, changed, new_params)
        for path, (what, was, now_is) in changed.items():
            out.append(
                _warning(
                    f"`{arch}` ({layout}): `{path}` was built with {what} `{was}` at the "
                    f"base and `{now_is}` at head, with the same config: quantization "
                    "configs, checkpoint scales and per-layer settings that name it no "
                    "longer reach it",
                    (after[path][2], after[path][3]),
                    {
                        "architecture": arch,
                        "group": "base-names",
                        "layout": layout,
                        "path": path,
                        "kind": what,
                        "base": was,
                        "head": now_is,
                    },
                )
            )
        if moved is not None:
            gone, added, site = moved
            said = [f"{w} {_names(n)}" for w, n in (("gone", gone), ("new", added)) if n]
            out.append(
                _warning(
                    f"`{arch}` ({layout}) registers other attention layer names than at "
                    f"the base, with the same config: {'; '.join(said)}: checkpoint "
                    "scales (`k_scale`, `v_scale`) and per-layer settings named for the "
                    "base no longer reach them",
                    site or (now["file"], now["line"]),
                    {
                        "architecture": arch,
                        "group": "base-attention",
                        "layout": layout,
                        "gone": gone,
                        "new": added,
                    },
                )
            )
    return out


def _renamed(
    before: dict[str, list[Any]], after: dict[str, list[Any]]
) -> dict[str, tuple[str, str, str]]:
    """Module path -> (which name, base's, head's), outermost modules only."""
    out: dict[str, tuple[str, str, str]] = {}
    for path in sorted(set(before) & set(after)):
        if any(_within(path, above) for above in out):
            continue  # its names follow its parent's, reported there
        for index, what in _NAMED:
            was, now_is = before[path][index], after[path][index]
            if not (isinstance(was, str) and isinstance(now_is, str)) or was == now_is:
                continue
            if now_is == path:
                continue  # a fix, or a rename the parameter comparison judges
            out[path] = (what, was, now_is)
            break
    return out


def _within(path: str, module: str) -> bool:
    return path == module or path.startswith(f"{module}.")


def _attention_moved(
    before: dict[str, list[Any]],
    after: dict[str, list[Any]],
    changed: dict[str, tuple[str, str, str]],
    new_params: set[str],
) -> tuple[list[str], list[str], tuple[str, int] | None] | None:
    """Attention layer names of modules the base had and head lacks, and of head's new
    modules, but those of a module already reported or whose siblings' parameters are
    new (the parameter comparison reports that rename); with head's line of the first
    new one."""

    def names(modules: dict[str, list[Any]], other: dict[str, list[Any]]) -> dict[str, str]:
        # a module at the same path on both sides is ``_renamed``'s (a change or a fix)
        return {
            m[1]: path
            for path, m in modules.items()
            if isinstance(m[1], str)
            and path not in other
            and not any(_within(path, c) for c in changed)
        }

    then, now = names(before, after), names(after, before)
    added = []
    for name in sorted(set(now) - set(then)):
        path = now[name]
        parent = path.rpartition(".")[0]
        if any(p.startswith(f"{parent}.") for p in new_params):
            continue
        added.append(name)
    gone = sorted(set(then) - set(now))
    if not added and (not gone or set(now) - set(then)):
        return None  # nothing changed, or only names whose change is reported elsewhere
    site = (str(after[now[added[0]]][2]), int(after[now[added[0]]][3])) if added else None
    return gone, added, site


def _names(names: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:SHOWN_NAMES])
    more = len(names) - SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


Comparison = Callable[[Phase2Result, Phase2Result, list[Diagnostic]], list[Diagnostic]]
COMPARISONS: tuple[Comparison, ...] = (
    lost_layouts,
    changed_parameters,
    lost_loads,
    changed_names,
)


def compare_builds(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """Head's phase-2 findings after every comparison with the base's builds."""
    for comparison in COMPARISONS:
        found = comparison(base, head, found)
    return _one_per_line(found)


_GROUPS = ("base-parameters", "base-loading", "base-names", "base-attention")


def _one_per_line(found: list[Diagnostic]) -> list[Diagnostic]:
    """One comparison's warning per line: architectures of one file that build the same
    module (``LlamaForCausalLM``, ``LlamaBidirectionalModel``) share that line; the
    first says the others in its message and ``data["architectures"]``."""
    out: list[Diagnostic] = []
    first: dict[tuple[str, str, int], int] = {}
    own_words: dict[tuple[str, str, int], str] = {}  # the first's message, before "also in"
    for d in found:
        group = d.data.get("group")
        key = (str(group), str(Path(d.filename).resolve()), d.location.row)
        if group not in _GROUPS:
            out.append(d)
        elif key not in first:
            first[key] = len(out)
            own_words[key] = d.message
            out.append(replace(d, data={**d.data, "architectures": [d.data["architecture"]]}))
        else:
            at = first[key]
            kept = out[at]
            archs = list(dict.fromkeys([*kept.data["architectures"], d.data["architecture"]]))
            also = ", ".join(f"`{a}`" for a in archs[1:])
            data = {**kept.data, "architectures": archs}
            words = f"{own_words[key]} (also in {also})" if also else own_words[key]
            out[at] = replace(kept, message=words, data=data)
    return out
