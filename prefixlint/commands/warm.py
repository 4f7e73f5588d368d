"""``prefixlint warm status`` and ``prefixlint warm stop``: the user's warm processes (the
zygotes of ``prefixlint/warm/``), listed and stopped, as ``dmypy status`` / ``dmypy stop``
do for mypy's daemon. See docs/warm.md for what one costs and how to turn them off."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click


@click.group()
def warm() -> None:
    """List or stop the warm processes that serve later calls (docs/warm.md)."""


@warm.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per warm process.")
def status(as_json: bool) -> None:
    """Each warm process: pid, kind, key, the folder of its last call, memory, idle time."""
    from prefixlint.warm import client
    from prefixlint.warm.registry import status_rows

    folder = client.home()
    rows = status_rows(folder)
    if as_json:
        click.echo(json.dumps({"folder": str(folder), "processes": rows}, indent=2))
        return
    if not rows:
        click.echo(f"no warm process (folder {folder})")
        return
    total = sum(r["rss_mb"] or 0 for r in rows)
    click.echo(f"{len(rows)} warm process(es), {total:.0f} MB resident (folder {folder})")
    click.echo(f"{'PID':>8}  {'KIND':<8} {'KEY':<22} {'RSS MB':>7} {'IDLE':>11}  LAST FOLDER")
    for r in rows:
        rss = f"{r['rss_mb']:.0f}" if r["rss_mb"] is not None else "?"
        idle = f"{r['idle_s']}/{int(r['idle_limit_s'] or 0)} s"
        state = "" if r["state"] == "serving" else " (retiring)"
        click.echo(
            f"{r['pid']:>8}  {r['kind']:<8} {r['key']:<22} {rss:>7} {idle:>11}  "
            f"{r['folder']}{state}"
        )
        click.echo(f"{'':>10}python {r['python']}")


@warm.command()
@click.option("--all", "every", is_flag=True, help="Every warm process of this user.")
def stop(every: bool) -> None:
    """Stop this environment's warm processes (--all: every one), and what they serve."""
    from prefixlint.introspect.process import warm as phase2
    from prefixlint.warm import client
    from prefixlint.warm.registry import live

    folder = client.home()
    env = dict(os.environ)
    mine = {f"cli-{client.key(env)}", phase2.key(env)}
    stopped = 0
    for info in live(folder):
        if every or info.get("key") in mine:
            stopped += client.ask(Path(info["sock"]), "stop") or _kill(int(info["pid"]))
    click.echo(f"stopped {stopped} warm process(es)")


def _kill(pid: int) -> bool:
    """A zygote that no longer listens (retiring): ended by its pid."""
    from prefixlint.warm.client import kill_group

    kill_group(pid)
    return True
