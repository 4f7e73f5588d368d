"""``[tool.prefixlint]`` in the nearest ``pyproject.toml``, and rule selection."""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "node_modules",
    "build",
    "dist",
    ".prefixlint_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)


class ConfigError(Exception):
    pass


@dataclass
class Config:
    select: list[str] = field(default_factory=list)  # empty: every default-enabled rule
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    extend_prefix_layers: list[str] = field(default_factory=list)
    source: Path | None = None  # the pyproject.toml it came from

    @property
    def root(self) -> Path:
        return self.source.parent if self.source else Path.cwd()

    def is_excluded(self, path: Path) -> bool:
        rel = _relative(path, self.root)
        names = rel.split("/")
        for pattern in self.exclude:
            if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(n, pattern) for n in names):
                return True
        return False

    def ignored_for(self, path: Path) -> list[str]:
        rel = _relative(path, self.root)
        out: list[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern):
                out.extend(codes)
        return out


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _codes(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.prefixlint] {key} must be a list of strings")
    return [v.strip().upper() for v in value]


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def load_configs_table(start: Path | None = None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]``: architecture -> config path, and the folder the paths
    are relative to (the pyproject's)."""
    path = find_pyproject(start or Path.cwd())
    if path is None:
        return {}, None
    table = _read_toml(path).get("tool", {}).get("prefixlint", {}).get("configs", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.prefixlint.configs] must be a table")
    return {str(k): str(v) for k, v in table.items()}, str(path.parent)


def load_config(explicit: Path | None = None, start: Path | None = None) -> Config:
    path = explicit or find_pyproject(start or Path.cwd())
    if path is None:
        return Config()
    table = _read_toml(path).get("tool", {}).get("prefixlint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.prefixlint] must be a table")
    known = {"select", "ignore", "per-file-ignores", "exclude", "extend-prefix-layers", "configs"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{path}: unknown [tool.prefixlint] keys: {', '.join(sorted(unknown))}")
    cfg = Config(source=path)
    if "select" in table:
        cfg.select = _codes(table["select"], "select")
    if "ignore" in table:
        cfg.ignore = _codes(table["ignore"], "ignore")
    if "exclude" in table:
        cfg.exclude = list(table["exclude"])
    if "extend-prefix-layers" in table:
        layers = table["extend-prefix-layers"]
        if not isinstance(layers, list):
            raise ConfigError(f"{path}: extend-prefix-layers must be a list of class names")
        cfg.extend_prefix_layers = [str(x) for x in layers]
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{path}: per-file-ignores must be a table of glob = [codes]")
    cfg.per_file_ignores = {k: _codes(v, f"per-file-ignores.{k}") for k, v in pfi.items()}
    return cfg


def _matches(code: str, selectors: Iterable[str]) -> int:
    """Length of the longest selector that is a prefix of ``code`` (0: none)."""
    best = 0
    for s in selectors:
        if s == "ALL":
            best = max(best, 1)
        elif code.startswith(s):
            best = max(best, len(s) + 1)
    return best


def select_codes(
    all_codes: dict[str, bool], select: Iterable[str], ignore: Iterable[str]
) -> set[str]:
    """ruff's rule: the more specific of select/ignore wins; no select = default-enabled rules.

    ``all_codes`` maps each code to whether it is enabled by default.
    """
    select, ignore = list(select), list(ignore)
    chosen = set()
    for code, default in all_codes.items():
        s = _matches(code, select) if select else (1 if default else 0)
        if s and s > _matches(code, ignore):
            chosen.add(code)
    return chosen


def validate_selectors(selectors: Iterable[str], all_codes: Iterable[str]) -> list[str]:
    """Selectors that match no rule (a typo should be an error, not a silent no-op)."""
    codes = list(all_codes)
    return [s for s in selectors if s != "ALL" and not any(code.startswith(s) for code in codes)]
