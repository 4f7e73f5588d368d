"""``prefixlint zoo``: build every architecture of the installed registry and summarise."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.diagnostic import Severity
from prefixlint.introspect import (
    DEFAULT_TIMEOUT,
    died,
    failure,
    list_architectures,
    to_diagnostics,
)
from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE, registry_share
from prefixlint.introspect.process.client import Worker, WorkerDied, WorkerTimeout
from prefixlint.introspect.process.memory import over_bound
from prefixlint.introspect.process.pool import WorkerPool
from prefixlint.introspect.verdict.gaps import GAP_CATEGORIES
from prefixlint.introspect.vllm_api import installed_release
from prefixlint.progress import end_steps, step


@dataclass
class Row:
    arch: str
    group: str
    status: str  # built | skipped | failed
    category: str = ""  # config-gap | environment | finding (for skipped/failed)
    reason: str = ""
    seconds: float = 0.0
    build_seconds: float = 0.0  # the tp=1 build alone
    config_source: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)
    dryrun: str = ""  # PFX701/702: verified | not verified | off | "" (not built)
    dryrun_reason: str = ""
    dryrun_seconds: float = 0.0
    lora: str = ""  # PFX703: verified | not verified | off | "" (not built)
    lora_reason: str = ""
    # the comparison with transformers (compare/facts.py): status, reason, first divergent
    compare: dict[str, Any] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)  # PFX600: not verified
    coverage: dict[str, Any] = field(default_factory=dict)  # construction sites (coverage.py)
    variants: list[dict[str, Any]] = field(default_factory=list)
    # its worker's peak resident memory while it built, that peak over the resident size
    # the build began with (what it alone needed), and what it left resident (MB; 0: not
    # measured, its worker died): the architectures that hold memory
    peak_rss_mb: float = 0.0
    peak_growth_mb: float = 0.0
    rss_growth_mb: float = 0.0


# How many of the architectures with the highest peaks the summary names.
HEAVIEST = 5
# A worker left holding more than this after a build is replaced before the next one: a
# bound on what builds leave behind in one process (a cache, a leak), not a fix of it;
# the row's ``rss_growth_mb`` names the build that grew.
RECYCLE_RSS_MB = 3072.0


@dataclass
class ZooSummary:
    rows: list[Row]
    wall_seconds: float
    planned: int = 0  # the architectures selected; more than ``rows`` when interrupted
    interrupted: bool = False
    vllm: str = field(default_factory=installed_release)  # the release the zoo ran on
    # the highest resident memory of each build worker (MB; its restarts included)
    worker_peak_rss_mb: list[float] = field(default_factory=list)

    @property
    def findings(self) -> int:
        return sum(len(r.findings) for r in self.rows)

    def heaviest(self) -> list[dict[str, Any]]:
        """The architectures whose builds alone needed the most memory."""
        rows = sorted((r for r in self.rows if r.peak_rss_mb), key=lambda r: -r.peak_growth_mb)
        return [
            {
                "arch": r.arch,
                "peak_growth_mb": r.peak_growth_mb,
                "peak_rss_mb": r.peak_rss_mb,
                "rss_growth_mb": r.rss_growth_mb,
            }
            for r in rows[:HEAVIEST]
        ]

    def counts(self) -> dict[str, Any]:
        by_status = Counter(r.status for r in self.rows)
        categories = Counter(f"{r.status}:{r.category}" for r in self.rows if r.category)
        text = [r for r in self.rows if r.group == "text_generation_models"]
        built_text = [r for r in text if r.status == "built"]
        builds = [r.build_seconds for r in self.rows if r.status == "built" and r.build_seconds]
        dry = [r for r in built_text if r.dryrun == "verified"]
        built = [r for r in self.rows if r.status == "built"]
        dry_all = [r for r in built if r.dryrun == "verified"]
        dry_seconds = [r.dryrun_seconds for r in self.rows if r.dryrun == "verified"]
        return {
            "architectures": len(self.rows),
            "planned": self.planned or len(self.rows),
            "interrupted": self.interrupted,
            "built": by_status.get("built", 0),
            "skipped": by_status.get("skipped", 0),
            "failed": by_status.get("failed", 0),
            "with_findings": sum(1 for r in self.rows if r.findings),
            "findings": self.findings,
            "by_category": dict(sorted(categories.items())),
            "text_generation": len(text),
            "text_generation_built": len(built_text),
            "text_generation_built_ratio": round(len(built_text) / len(text), 3) if text else None,
            "median_build_seconds": round(statistics.median(builds), 3) if builds else None,
            "text_generation_dryrun": len(dry),
            "text_generation_dryrun_ratio": round(len(dry) / len(built_text), 3)
            if built_text
            else None,
            "dryrun": len(dry_all),
            "dryrun_ratio": round(len(dry_all) / len(built), 3) if built else None,
            "median_dryrun_seconds": round(statistics.median(dry_seconds), 3)
            if dry_seconds
            else None,
            "median_arch_seconds": round(
                statistics.median([r.seconds for r in self.rows if r.status == "built"]), 3
            )
            if built_text
            else None,
            "wall_seconds": round(self.wall_seconds, 1),
            "vllm": self.vllm,
            "worker_peak_rss_mb": self.worker_peak_rss_mb,
            "heaviest_architectures": self.heaviest(),
            "coverage": registry_share(self.rows),
            "comparison": compared_counts(self.rows),
            "text_generation_coverage": registry_share(self.rows, ("text_generation_models",)),
        }

    def by_group(self) -> dict[str, dict[str, Any]]:
        """Per registry group: how many built, how many are not verified and why (the
        reason class: config-synthesis gap, environment gap, or a finding that stopped
        the build), and the findings of what was built."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.rows:
            g = out.setdefault(
                r.group,
                {"architectures": 0, "built": 0, "not_verified": {}, "with_findings": 0},
            )
            g["architectures"] += 1
            if r.status == "built":
                g["built"] += 1
            else:
                why = r.category or "unknown"
                g["not_verified"][why] = g["not_verified"].get(why, 0) + 1
            g["with_findings"] += bool(r.findings)
        for g in out.values():
            g["built_ratio"] = round(g["built"] / g["architectures"], 3)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["architectures"]))

    def to_json_text(self) -> str:
        return json.dumps(
            {
                "summary": {**self.counts(), "by_group": self.by_group()},
                "architectures": [r.__dict__ for r in self.rows],
            },
            indent=2,
        )

    def to_markdown(self, title: str = "Phase 2 over the installed vLLM registry") -> str:
        """docs/zoo.md: the per-group table, then every architecture that did not build
        with its one-line reason (what was tried and why it is not verified)."""
        c = self.counts()
        lines = [
            f"# {title}",
            "",
            f"`prefixlint zoo` (tp=1): {c['built']}/{c['architectures']} architectures build "
            f"({c['built'] / max(c['architectures'], 1) * 100:.1f}%); {c['with_findings']} of "
            f"them with findings ({c['findings']} in all). Wall time {c['wall_seconds']} s.",
            "",
            "Made by `bench/introspect_zoo.py --markdown docs/zoo.md` (after "
            "`scripts/setup.sh`, which installs torchvision, torchaudio and timm for phase 2).",
            "",
            "| group | built | % | not verified (why) | with findings |",
            "|---|---:|---:|---|---:|",
        ]
        for group, g in self.by_group().items():
            why = ", ".join(f"{k} {n}" for k, n in sorted(g["not_verified"].items())) or "-"
            lines.append(
                f"| {group} | {g['built']}/{g['architectures']} | "
                f"{g['built_ratio'] * 100:.1f} | {why} | {g['with_findings']} |"
            )
        lines += [
            "",
            "## Not built, and why",
            "",
            "`config-gap`: the synthesised config is not enough (give the checkpoint's own "
            "with `--config`); `environment`: a package, kernel or GPU this machine lacks; "
            "`finding`: the model's own code failed.",
            "",
        ]
        lines += self.not_built_lines("###")
        return "\n".join(lines)

    def not_built_lines(self, heading: str) -> list[str]:
        """Per group (a ``heading`` section each), the architectures not built and why."""
        lines: list[str] = []
        for group in self.by_group():
            rows = [r for r in self.rows if r.group == group and r.status != "built"]
            if not rows:
                continue
            lines += [f"{heading} {group}", ""]
            for r in sorted(rows, key=lambda r: (r.category, r.arch)):
                reason = " ".join(r.reason.split())[:160].replace("|", "/") or "no reason given"
                lines.append(f"- `{r.arch}` ({r.category or 'unknown'}): {reason}")
            lines.append("")
        return lines

    def group_lines(self) -> list[str]:
        lines = [f"{'group':<34} {'built':>9} {'%':>6}  not verified (why)  with findings"]
        for group, g in self.by_group().items():
            why = ", ".join(f"{k} {n}" for k, n in sorted(g["not_verified"].items())) or "-"
            lines.append(
                f"{group[:34]:<34} {g['built']:>4}/{g['architectures']:<4} "
                f"{g['built_ratio'] * 100:>5.1f}%  {why:<18}  {g['with_findings']}"
            )
        return lines

    def to_text(self) -> str:
        c = self.counts()
        lines = [f"{'architecture':<48} {'group':<24} {'status':<8} {'secs':>6}  detail"]
        for r in self.rows:
            detail = (
                r.reason
                if r.status != "built"
                else (", ".join(sorted({f["code"] for f in r.findings})) or "ok")
            )
            if r.category:
                detail = f"[{r.category}] {detail}"
            lines.append(
                f"{r.arch:<48} {r.group[:24]:<24} {r.status:<8} {r.seconds:>6.1f}  {detail[:120]}"
            )
        lines.append("")
        if self.interrupted:
            lines.append(f"interrupted after {c['architectures']} of {c['planned']} architectures")
        lines.append(
            f"{c['architectures']} architectures: {c['built']} built, {c['skipped']} skipped, "
            f"{c['failed']} failed; {c['with_findings']} with findings ({c['findings']} in all)"
        )
        lines.append(
            f"text generation: {c['text_generation_built']}/{c['text_generation']} built "
            f"({(c['text_generation_built_ratio'] or 0) * 100:.1f}%); median build "
            f"{c['median_build_seconds']} s; wall {c['wall_seconds']} s"
        )
        lines.append(
            f"checkpoint/quantization dry-run (PFX701/702): {c['text_generation_dryrun']}/"
            f"{c['text_generation_built']} text-generation architectures that build "
            f"({(c['text_generation_dryrun_ratio'] or 0) * 100:.1f}%), {c['dryrun']}/"
            f"{c['built']} of all builds ({(c['dryrun_ratio'] or 0) * 100:.1f}%); median "
            f"{c['median_dryrun_seconds']} s"
        )
        lines.append(compared_line(c["comparison"]))
        for key, n in c["by_category"].items():
            lines.append(f"  {key}: {n}")
        if self.worker_peak_rss_mb:
            heavy = ", ".join(f"{h['arch']} +{h['peak_growth_mb']:.0f}" for h in self.heaviest())
            lines.append(
                f"worker peak memory: {max(self.worker_peak_rss_mb):.0f} MB resident"
                + (f"; builds that needed the most (MB over their start): {heavy}" if heavy else "")
            )
        for label, key in (
            ("all built", "coverage"),
            ("text generation", "text_generation_coverage"),
        ):
            cov = c[key]
            lines.append(
                f"construction sites executed ({label}): {cov['executed']}/{cov['sites']} "
                f"({(cov['ratio'] or 0) * 100:.1f}%) in {cov['files']} files"
            )
        lines.append("")
        lines.extend(self.group_lines())
        return "\n".join(lines)


def _row(arch: str, group: str, answer: Any, seconds: float) -> Row:
    if isinstance(answer, dict) and "error" in answer:
        return Row(arch, group, "skipped", "environment", answer["error"][:300], seconds)
    result = answer[0]
    built = [lay for lay in result["layouts"] if lay["status"] == "built"]
    first = next((lay for lay in result["layouts"] if lay["tp"] == 1 and lay["pp"] == 1), None)
    status = result["status"]
    diagnostics = to_diagnostics(result)
    return Row(
        arch=arch,
        group=group,
        status=status if built or status != "built" else "failed",
        category=result.get("category", ""),
        reason=result.get("reason", ""),
        seconds=seconds,
        build_seconds=first["seconds"] if first and first["status"] == "built" else 0.0,
        config_source=result.get("config_source", ""),
        # A build that failed for a gap of config synthesis or of this machine says
        # nothing about the model: it is a PFX600 note (not verified), not a finding.
        # Not-verified notes of unexecuted sites are in ``coverage``, summed up registry-wide.
        findings=[
            d.to_json()
            for d in diagnostics
            if d.severity is not Severity.NOTE
            and not (d.code == "PFX604" and result.get("category") in GAP_CATEGORIES)
        ],
        notes=[
            d.to_json()
            for d in diagnostics
            if d.severity is Severity.NOTE and d.data.get("group") != UNEXECUTED_SITE
        ],
        dryrun=result.get("dryrun", ""),
        dryrun_reason=result.get("dryrun_reason", ""),
        dryrun_seconds=result.get("dryrun_seconds", 0.0),
        lora=result.get("lora", ""),
        lora_reason=result.get("lora_reason", ""),
        compare=result.get("compare", {}),
        coverage=result.get("coverage", {}),
        variants=result.get("variants", []),
    )


JOURNAL_FORMAT = 1


class JournalError(Exception):
    """A ``--resume`` file that cannot be read, or was made with other options."""


def read_journal(path: Path, params: dict[str, Any]) -> list[Row]:
    """The rows of a zoo journal made with ``params`` (the options a row depends on)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise JournalError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        header = json.loads(lines[0]) if lines else {}
        if header.get("prefixlint_zoo") != JOURNAL_FORMAT:
            raise ValueError("no zoo journal header")
        rows = [Row(**json.loads(line)["row"]) for line in lines[1:] if line.strip()]
    except (ValueError, TypeError, KeyError) as e:
        raise JournalError(f"{path} is not a zoo journal: {e}") from None
    theirs = header.get("params", {})
    differ = [
        f"{k}: {theirs.get(k)!r} there, {v!r} here" for k, v in params.items() if theirs.get(k) != v
    ]
    if differ:
        raise JournalError(
            f"{path} was made with other options ({'; '.join(differ)}): resume with the "
            "options of that run"
        )
    return rows


class _Journal:
    """One JSON line per finished architecture, flushed as it finishes: an interrupted
    run keeps what it did."""

    def __init__(self, path: Path | None, params: dict[str, Any], append: bool) -> None:
        self.fh = None
        if path is None:
            return
        self.fh = path.open("a" if append else "w", encoding="utf-8")
        if not append:
            self._write({"prefixlint_zoo": JOURNAL_FORMAT, "params": params})

    def _write(self, obj: dict[str, Any]) -> None:
        if self.fh is not None:
            self.fh.write(json.dumps(obj, default=str) + "\n")
            self.fh.flush()

    def add(self, row: Row) -> None:
        self._write({"row": row.__dict__})

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def _selected(
    only: list[str] | None, shard: tuple[int, int], warm: Path | None
) -> tuple[dict[str, str], list[str]]:
    """The registry's architectures with their groups, and those this run builds."""
    lister = Worker(warm=warm)
    try:
        groups = list_architectures(lister, DEFAULT_TIMEOUT)
    finally:
        lister.close()
    archs = sorted(groups)
    if only:
        archs = [a for a in archs if a in set(only)]
    index, count = shard
    return groups, archs[index::count]


def _built_row(worker: Worker, arch: str, group: str, params: dict, timeout: float) -> Row:
    """One architecture built in ``worker``: its row, a failure of the worker included."""
    t = time.perf_counter()
    try:
        answer = worker.run({"kind": "build", "target": arch, **params}, timeout)
        row = _row(arch, group, answer, time.perf_counter() - t)
        for key in ("peak_rss_mb", "peak_growth_mb", "rss_growth_mb"):
            setattr(row, key, worker.job_memory.get(key, 0.0))
        return row
    except (WorkerTimeout, WorkerDied) as e:
        stopped = isinstance(e, WorkerDied) and over_bound(str(e))
        diag = (
            died(arch, e)
            if stopped
            else failure(arch, f"building `{arch}` failed in its worker: {e}", e.site)
        )
        return Row(
            arch,
            group,
            "failed",
            "environment" if stopped else "finding",
            str(e),
            time.perf_counter() - t,
            findings=[diag.to_json()],
        )


def _job_params(
    tp: list[int] | None, pp: list[int] | None, dryrun: bool, budget: float, compare: bool
) -> dict[str, Any]:
    """The options a row depends on: sent with each build, kept in the journal's header."""
    return {
        "tp": tp or [1],
        "pp": pp or [1],
        "dryrun": dryrun,
        "explore_budget": budget,
        "compare": compare,
    }


def run_zoo(
    jobs: int = 1,
    shard: tuple[int, int] = (0, 1),
    tp: list[int] | None = None,
    pp: list[int] | None = None,
    timeout: float = 120.0,
    only: list[str] | None = None,
    progress: bool = True,
    dryrun: bool = True,
    explore_budget: float = 0.0,
    journal: Path | None = None,
    compare: bool = True,
    resume: Path | None = None,
    warm: Path | None = None,
) -> ZooSummary:
    """Build the selected architectures, ``jobs`` at a time. Each finished row goes to
    ``journal`` (with ``resume``, appended to that journal, whose architectures are not
    built again). ``warm``: the cache folder of the zygote the workers fork from (None:
    cold workers). Ctrl-C stops the builds and returns what finished, ``interrupted``."""
    started = time.perf_counter()
    params = _job_params(tp, pp, dryrun, explore_budget, compare)
    previous = read_journal(resume, params) if resume is not None else []
    groups, archs = _selected(only, shard, warm)
    done_before = {r.arch: r for r in previous if r.arch in set(archs)}
    todo = [a for a in archs if a not in done_before]
    finished: dict[str, Row] = dict(done_before)
    record = _Journal(resume or journal, params, append=resume is not None)

    def one(arch: str, worker: Worker) -> Row:
        row = _built_row(worker, arch, groups[arch], {**params, "budget": timeout}, timeout)
        if worker.job_memory.get("rss_mb", 0.0) > RECYCLE_RSS_MB:
            worker.close()  # the next build starts a fresh worker
        return row

    pool = WorkerPool(min(jobs, len(todo) or 1), warm)
    interrupted = False
    try:
        # rows as they finish; an interrupt ends the builds in flight (not a verdict)
        for i, row in pool.run(todo, one, ordered=False):
            finished[todo[i]] = row
            record.add(row)
            if progress:
                step(sys.stderr, f"[{len(finished) - len(done_before)}/{len(todo)}] {todo[i][:60]}")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pool.close()
        record.close()
        if progress:
            end_steps(sys.stderr)
    rows = [finished[a] for a in archs if a in finished]
    return ZooSummary(
        rows,
        time.perf_counter() - started,
        planned=len(archs),
        interrupted=interrupted,
        worker_peak_rss_mb=pool.peak_rss_mb,
    )


def compared_counts(rows: list[Row]) -> dict[str, Any]:
    """The comparison with transformers over the built rows: how many compared, equal,
    differ, and did not run by reason, in all and per group."""

    def count(some: list[Row]) -> dict[str, Any]:
        facts = [r.compare for r in some if r.compare]
        by = Counter(f.get("status", "") for f in facts)
        reasons = Counter(f.get("reason", "") for f in facts if f.get("status") == "not run")
        return {
            "compared": by.get("equal", 0) + by.get("differs", 0),
            "equal": by.get("equal", 0),
            "differs": by.get("differs", 0),
            "not_run": dict(sorted(reasons.items())),
            "differs_at": sorted(
                f"{r.arch}: {r.compare.get('first')}"
                for r in some
                if r.compare.get("status") == "differs"
            ),
        }

    groups = sorted({r.group for r in rows})
    return {
        "all": count(rows),
        "by_group": {g: count([r for r in rows if r.group == g]) for g in groups},
    }


def compared_line(c: dict[str, Any]) -> str:
    every = c["all"]
    not_run = ", ".join(f"{k} {n}" for k, n in every["not_run"].items()) or "none"
    return (
        f"comparison with transformers (PFX609): {every['compared']} compared, "
        f"{every['equal']} equal, {every['differs']} differ; not run: {not_run}"
    )
