"""``prefixlint review``: a GitHub pull-request review for the findings on changed lines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from prefixlint.commands.common import (
    EXIT_ERROR,
    changed_lines,
    exit_for,
    report_internal_errors,
    writable,
)
from prefixlint.commands.lint import CheckOptions, lint


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--diff-base",
    metavar="REV",
    help="Comment only on lines added or changed since the merge base of REV and HEAD "
    "(required unless --payload).",
)
@click.option(
    "--payload",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Post (or print) this review payload, written by `check --also review=FILE` (one "
    "run for every format, phase 2 included), instead of linting.",
)
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning"]),
    default="error",
    show_default=True,
    help="Exit 1 when the change adds a finding of at least this severity (not with "
    "--payload: the `check` run that wrote it has the exit code).",
)
@click.option("--select", multiple=True, help="Codes or prefixes to enable.")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="pyproject.toml to use."
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the results cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Results cache folder.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: cores).")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the payload here.")
@click.option(
    "--post",
    is_flag=True,
    help="Send the review to GitHub (GITHUB_TOKEN, GITHUB_REPOSITORY, the PR number).",
)
@click.option(
    "--pr", type=click.IntRange(min=1), help="Pull request number (default: from GITHUB_REF)."
)
@click.option(
    "--api-url",
    default="https://api.github.com",
    show_default=True,
    envvar="GITHUB_API_URL",
    help="GitHub REST API root (GitHub Enterprise: https://HOST/api/v3).",
)
def review(
    paths: tuple[Path, ...],
    diff_base: str | None,
    payload: Path | None,
    fail_on: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_path: Path | None,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    output: Path | None,
    post: bool,
    pr: int | None,
    api_url: str,
) -> None:
    """Print a GitHub pull-request review for the findings on changed lines (JSON).

    The body of POST /repos/{owner}/{repo}/pulls/{n}/reviews: one comment per finding on a
    line added or changed since --diff-base, with a suggestion when the fix is one line.
    With --post, send it (nothing is sent when there is no comment). Exit 0 when the
    review was printed (and posted) and the change adds no finding of --fail-on's
    severity, 1 when it does, 2 on a usage error or when GitHub refused it. The changed
    files are also checked as they were at the base: a finding is the change's when it is
    new there, wherever its line is.
    """
    import json

    from prefixlint.review import ReviewError, post_review, worth_posting

    found: list = []
    writable(output)
    if payload is not None:
        if paths or diff_base or select or ignore or config_path or no_cache or cache_dir or jobs:
            raise click.UsageError(
                "--payload posts a finished review: paths, --diff-base, --select, --ignore, "
                "--config, --no-cache, --cache-dir and --jobs belong to the `check` run that "
                "wrote it"
            )
        body = _read_payload(payload)
    elif diff_base is None:
        raise click.UsageError("give --diff-base REV (or --payload FILE)")
    else:
        body, found = _lint_review(
            CheckOptions(
                paths=paths,
                select=select,
                ignore=ignore,
                config_path=config_path,
                no_cache=no_cache,
                cache_dir=cache_dir,
                jobs=jobs,
            ),
            diff_base,
        )
    text = json.dumps(body, indent=2)
    if output is not None:
        try:
            output.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            raise click.UsageError(f"cannot write {output}: {e.strerror or e}") from None
    else:
        click.echo(text)
    if post and not worth_posting(body):
        click.echo("prefixlint review: no finding on changed lines, nothing posted", err=True)
    elif post:
        try:
            answer = post_review(body, pr=pr, api_url=api_url)
        except ReviewError as e:
            click.echo(f"prefixlint review: {e}", err=True)
            sys.exit(EXIT_ERROR)
        where = answer.get("html_url") or "GitHub"
        count = len(body["comments"])
        click.echo(f"prefixlint review: posted {count} comment(s) to {where}", err=True)
    exit_for(found, fail_on)


def _lint_review(opts: CheckOptions, diff_base: str) -> tuple[dict[str, Any], list]:
    """(the payload, the findings the change causes: compared with the base)."""
    from prefixlint.commands.basecheck import findings_of_change
    from prefixlint.review import build_review

    changes = changed_lines(diff_base)
    run = lint(opts)
    report_internal_errors(run.result.internal_errors)
    found = findings_of_change(run, opts, changes)
    return build_review(found, changes), found


def _read_payload(path: Path) -> dict[str, Any]:
    """A payload file as `check --also review=FILE` writes it; anything else is a usage
    error, not a traceback."""
    import json

    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise click.UsageError(f"--payload {path}: cannot read a review payload: {e}") from None
    keys = {"commit_id", "event", "body", "comments"}
    shaped = isinstance(body, dict) and keys <= set(body)
    if not shaped or not isinstance(body["comments"], list):
        raise click.UsageError(
            f"--payload {path}: not a review payload (an object with {', '.join(sorted(keys))})"
        )
    return body
