"""Results cache: a file's findings, keyed by its content hash and what it depends on.

A file's findings depend on its own text, on the summaries of the modules its names
resolve through (recorded as dependencies with their size and mtime), and on the rule set
and settings (the fingerprint). JSON, not pickle: a cache folder inside a checked-out
repository is untrusted input.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefixlint import __version__

CACHE_DIR_ENV = "PREFIXLINT_CACHE_DIR"


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def stat_key(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def source_stamp(root: Path) -> str:
    """A hash of the (path, mtime, size) of every Python file under ``root``."""
    stats = sorted(
        (str(path.relative_to(root)), *(stat_key(str(path)) or [])) for path in root.rglob("*.py")
    )
    return content_hash(json.dumps(stats).encode())


@cache
def code_version() -> str:
    """prefixlint's version and a stamp of its own source files: cached results are keyed by
    the code that made them, so an edited or upgraded prefixlint (an editable checkout, a
    release that kept its version number) never serves a verdict its rules no longer give.
    Once per process (~10 ms); a warm zygote retires when a file it imported changed."""
    return f"{__version__}+{source_stamp(Path(__file__).resolve().parent.parent)}"


@dataclass
class Entry:
    digest: str
    deps: dict[str, list[int] | None]
    diagnostics: list[dict[str, Any]]


class ResultCache:
    def __init__(self, folder: Path, fingerprint: dict[str, Any]) -> None:
        self.folder = folder
        key = json.dumps({"version": code_version(), **fingerprint}, sort_keys=True)
        self.file = folder / f"results-{content_hash(key.encode())}.json"
        self.entries: dict[str, Entry] = {}
        self.dirty = False
        self._load()

    @classmethod
    def folder_for(cls, cache_dir: Path | str | None = None) -> Path:
        """A command's cache folder: ``--cache-dir``, else ``$PREFIXLINT_CACHE_DIR``, else
        ``./.prefixlint_cache`` (phase 2's zygote lives there too)."""
        return Path(cache_dir or os.environ.get(CACHE_DIR_ENV) or ".prefixlint_cache")

    def _load(self) -> None:
        try:
            raw = json.loads(self.file.read_text(encoding="utf-8"))
            for path, e in raw.get("files", {}).items():
                self.entries[path] = Entry(e["digest"], e["deps"], e["diagnostics"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.entries = {}  # missing or corrupt: start afresh

    def get(self, path: str, digest: str) -> list[dict[str, Any]] | None:
        entry = self.entries.get(path)
        if entry is None or entry.digest != digest:
            return None
        for dep, key in entry.deps.items():
            if stat_key(dep) != key:
                return None
        return entry.diagnostics

    def put(
        self, path: str, digest: str, deps: list[str], diagnostics: list[dict[str, Any]]
    ) -> None:
        self.entries[path] = Entry(digest, {d: stat_key(d) for d in deps}, diagnostics)
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            gitignore = self.folder / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Automatically created by prefixlint.\n*\n")
            payload = {
                "files": {
                    p: {"digest": e.digest, "deps": e.deps, "diagnostics": e.diagnostics}
                    for p, e in self.entries.items()
                }
            }
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(payload, f, separators=(",", ":"))
            os.replace(tmp, self.file)
        except OSError:
            pass  # a read-only tree still gets its findings, just not cached


class SummaryCache:
    """Index summaries of imported modules (vLLM's layers, sibling modules), keyed by path
    and (mtime, size): a run that checks one changed file need not re-parse its imports."""

    def __init__(self, folder: Path) -> None:
        from prefixlint.static.index import SUMMARY_FORMAT

        key = f"{code_version()}/{SUMMARY_FORMAT}".encode()
        self.file = folder / f"summaries-{content_hash(key)}.json"
        self.folder = folder
        self._entries: dict[str, tuple[list[int], dict[str, Any]]] | None = None
        self.new: dict[str, tuple[list[int], dict[str, Any]]] = {}

    @property
    def entries(self) -> dict[str, tuple[list[int], dict[str, Any]]]:
        """Read on first use: a warm run whose files are all cached never needs them (the
        file holds every summary of vLLM a run has read, megabytes of JSON)."""
        if self._entries is None:
            try:
                raw = json.loads(self.file.read_text(encoding="utf-8"))
                self._entries = {p: (e[0], e[1]) for p, e in raw.items()}
            except (OSError, ValueError, TypeError, IndexError, AttributeError):
                self._entries = {}
        return self._entries

    def get(self, path: str) -> dict[str, Any] | None:
        entry = self.entries.get(path)
        if entry is None or stat_key(path) != entry[0]:
            return None
        return entry[1]

    def put(self, path: str, summary: dict[str, Any]) -> None:
        key = stat_key(path)
        if key is not None:
            self.entries[path] = self.new[path] = (key, summary)

    def merge(self, new: dict[str, tuple[list[int], dict[str, Any]]]) -> None:
        self.entries.update(new)
        self.new.update(new)

    def save(self) -> None:
        if not self.new:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({p: list(e) for p, e in self.entries.items()}, f, separators=(",", ":"))
            os.replace(tmp, self.file)
        except OSError:
            pass


class FactCache:
    """Facts derived from vLLM's own files (its registry's definitions, the loader's
    arguments), kept in the cache folder so that they are read once per vLLM release, not
    on every run. Each fact records the files it was read from by content hash; a file's
    (mtime, size) beside the hash spares re-reading it when nothing touched it, and a file
    that is missing is recorded as such (it may appear)."""

    def __init__(self, folder: Path, version: str) -> None:
        key = f"{code_version()}/{version}".encode()
        self.file = folder / f"vllm-facts-{content_hash(key)}.json"
        self.folder = folder
        self.entries: dict[str, Any] = {}
        try:
            raw = json.loads(self.file.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                self.entries = raw
        except (OSError, ValueError):
            self.entries = {}

    def get(self, name: str) -> Any | None:
        """The fact ``name``, when none of the files it was read from changed."""
        entry = self.entries.get(name)
        try:
            if entry is None or not all(_same_file(p, d) for p, d in entry["deps"].items()):
                return None
            return entry["value"]
        except (KeyError, TypeError, AttributeError, IndexError, ValueError):
            return None  # corrupt: made again

    def put(self, name: str, value: Any, deps: set[str]) -> None:
        self.entries[name] = {"value": value, "deps": {p: _file_key(p) for p in sorted(deps)}}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.entries, f, separators=(",", ":"))
            os.replace(tmp, self.file)
        except OSError:
            pass  # a read-only folder: the fact is made again next run


def _file_key(path: str) -> list | None:
    """(mtime, size, content hash) of a file, or of a folder's sorted listing; None when it
    cannot be read."""
    stat = stat_key(path)
    try:
        if os.path.isdir(path):
            # Not ``__pycache__``: it comes and goes with Python's bytecode, not the code.
            names = sorted(n for n in os.listdir(path) if n != "__pycache__")
            data = "\n".join(names).encode("utf-8", "surrogateescape")
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError:
        return None
    return [*(stat or [0, 0]), content_hash(data)]


def _same_file(path: str, key: list | None) -> bool:
    """``path`` still has the content it had when ``key`` was taken (its stat first)."""
    if key is None:
        return stat_key(path) is None
    if stat_key(path) == key[:2]:
        return True
    now = _file_key(path)
    return now is not None and now[2] == key[2]
