"""Phase 2's kind of zygote (``prefixlint/warm/zygote.py``): torch and vLLM imported once.

It does a cold worker's set-up once (``server.set_up``: nothing of the user's model); each
child serves jobs as a cold worker does (``server.serve``); idle after its first child, it
builds one of vLLM's own models (``server.warm_up_build``) so that later children do not
pay a first build's one-time costs."""

from __future__ import annotations

from typing import Any

NAME = "phase 2"  # what ``prefixlint warm status`` calls this kind
IDLE = 300.0  # seconds unused before it stops: it holds ~650 MB (torch, vLLM)


def set_up() -> None:
    from prefixlint.introspect.process.server import set_up as worker_set_up

    worker_set_up()


def warm_up() -> None:
    from prefixlint.introspect.process.server import warm_up_build

    warm_up_build()


def child(request: dict[str, Any]) -> int:
    from prefixlint.introspect.process.server import serve

    serve()
    return 0
