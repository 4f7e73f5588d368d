"""``prefixlint zoo``: phase 2 over every architecture of the installed registry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from prefixlint.commands.common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    FORMATS,
    NO_COMPARE,
    NO_DRYRUN,
    NO_WARM_WORKER,
    STRICT_HELP,
    int_list,
    report,
    writable,
)


@click.command()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="text",
    help="text/json: the zoo's summary; sarif/github/rdjson: its findings only.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    help="Architectures built at once.  [default: one per CPU, at most 4, when workers fork "
    "from the warm zygote; else 1]",
)
@click.option(
    "--shard", default="0/1", show_default=True, help="i/n: every n-th architecture from i."
)
@click.option("--tp", default="1", show_default=True, help="Tensor-parallel sizes per build.")
@click.option("--pp", default="1", show_default=True, help="Pipeline sizes (SupportsPP only).")
@click.option(
    "--timeout", type=float, default=120.0, show_default=True, help="Seconds per architecture."
)
@click.option("--only", multiple=True, help="Restrict to these architectures (repeatable).")
@NO_DRYRUN
@NO_COMPARE
@NO_WARM_WORKER
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the report here.")
@click.option(
    "--journal",
    type=click.Path(path_type=Path, dir_okay=False),
    help="JSON lines, one per architecture as it finishes (an interrupted run keeps what it "
    "did).  [default: OUTPUT with the suffix .jsonl, else prefixlint-zoo.jsonl]",
)
@click.option(
    "--resume",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Continue the run whose journal this is: its architectures are not built again, "
    "the others are appended to it.",
)
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.option(
    "--explore-budget",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds per architecture for config variants that build unexecuted construction "
    "sites (0: the synthesised config only).",
)
def zoo(
    output_format: str,
    jobs: int | None,
    shard: str,
    tp: str,
    pp: str,
    timeout: float,
    only: tuple[str, ...],
    no_dryrun: bool,
    no_compare: bool,
    no_warm_worker: bool,
    output: Path | None,
    journal: Path | None,
    resume: Path | None,
    strict: bool,
    explore_budget: float,
) -> None:
    """Build every architecture of the installed vLLM registry and summarise."""
    from prefixlint.introspect.process.stopping import stop_on_signals
    from prefixlint.introspect.process.warm import warm_folder
    from prefixlint.introspect.zoo.run import JournalError, run_zoo

    try:
        index, count = (int(x) for x in shard.split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"--shard must be i/n with 0 <= i < n, got {shard!r}") from None
    if resume is not None and journal is not None and resume.resolve() != journal.resolve():
        raise click.UsageError("--resume appends to its own journal: leave out --journal")
    journal = resume or journal or _default_journal(output)
    writable(output)
    writable(journal, "--journal")
    warm = warm_folder(no_warm_worker)
    if jobs is None:
        from prefixlint.introspect.process.pool import worker_count

        jobs = worker_count(warm, 4)  # a forked worker costs a fork; a cold one, imports
    with stop_on_signals() as signals:  # a second signal must not lose the report
        try:
            summary = run_zoo(
                jobs=jobs,
                shard=(index, count),
                tp=int_list(tp),
                pp=int_list(pp),
                timeout=timeout,
                only=list(only),
                progress=output_format == "text" or output is not None,
                dryrun=not no_dryrun,
                compare=not no_compare,
                explore_budget=explore_budget,
                journal=journal,
                resume=resume,
                # its workers fork from the zygote: --jobs and a worker replaced past its
                # memory bound cost a fork, not torch's and vLLM's imports
                warm=warm,
            )
        except JournalError as e:
            raise click.UsageError(f"--resume: {e}") from None
        signals.shield()  # the builds are over: only the report is left to write
        _write(summary, output_format, output)
    if summary.interrupted:
        click.echo(
            f"prefixlint zoo: interrupted after {len(summary.rows)} of {summary.planned} "
            f"architectures; the finished ones are in {journal}: continue with the same "
            f"options and --resume {journal}",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    unverified = strict and any(r.status != "built" for r in summary.rows)
    sys.exit(EXIT_FINDINGS if summary.findings or unverified else EXIT_OK)


def _write(summary: Any, output_format: str, output: Path | None) -> None:
    if output_format in ("text", "json"):
        text = summary.to_json_text() if output_format == "json" else summary.to_text()
        if output is not None:
            output.write_text(text, encoding="utf-8")
        else:
            click.echo(text)
        return
    from prefixlint.diagnostic import Diagnostic

    findings = [Diagnostic.from_json(f) for row in summary.rows for f in row.findings + row.notes]
    findings.sort(key=lambda d: d.sort_key())
    report(findings, output_format, len(summary.rows), output)


def _default_journal(output: Path | None) -> Path:
    if output is None:
        return Path("prefixlint-zoo.jsonl")
    if output.suffix == ".jsonl":
        return output.with_name(output.name + ".journal.jsonl")
    return output.with_suffix(".jsonl")
