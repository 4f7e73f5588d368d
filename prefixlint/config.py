"""``[tool.prefixlint]`` in the nearest ``pyproject.toml``, and rule selection."""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prefixlint.paths import resolved

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

# Files larger than this (in MB) are not parsed: a note says so. The largest model file in
# vLLM is about 0.13 MB; a file of megabytes is generated, and linting it costs about 10 s
# and 150 MB per MB of model code.
DEFAULT_MAX_FILE_MB = 1.0


class ConfigError(Exception):
    pass


@dataclass
class Config:
    select: list[str] = field(default_factory=list)  # empty: every default-enabled rule
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    extend_prefix_layers: list[str] = field(default_factory=list)
    max_file_size: float = DEFAULT_MAX_FILE_MB  # in MB
    source: Path | None = None  # the pyproject.toml it came from

    @property
    def root(self) -> Path:
        return self.source.parent if self.source else Path.cwd()

    def is_excluded(self, path: Path) -> bool:
        if not self.exclude:  # the usual case: no path to work out per file
            return False
        rel = _relative(path, self.root)
        names = rel.split("/")
        for pattern in self.exclude:
            if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(n, pattern) for n in names):
                return True
        return False

    def ignored_for(self, path: Path) -> list[str]:
        if not self.per_file_ignores:
            return []
        rel = _relative(path, self.root)
        out: list[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern):
                out.extend(codes)
        return out


def _relative(path: Path, root: Path) -> str:
    try:
        return resolved(path).relative_to(resolved(root)).as_posix()
    except ValueError:
        return resolved(path).as_posix()


def _codes(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.prefixlint] {key} must be a list of strings")
    return [v.strip().upper() for v in value]


def _strings(value: object, path: Path, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.prefixlint] {key} must be a list of strings")
    return list(value)


def _megabytes(value: object, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(
            f"{path}: [tool.prefixlint] max-file-size must be a positive number of MB, "
            f"got {value!r}"
        )
    return float(value)


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def find_config_file(start: Path) -> Path | None:
    """The closest ``pyproject.toml`` above ``start`` that has a ``[tool.prefixlint]``
    table (as ruff looks for ``[tool.ruff]``); else the closest one at all."""
    start = start.resolve()
    nearest = None
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if not candidate.is_file():
            continue
        nearest = nearest or candidate
        if "prefixlint" in _read_toml(candidate).get("tool", {}):
            return candidate
    return nearest


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def load_configs_table(start: Path | None = None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.configs]``: architecture -> config path, and the folder the paths
    are relative to (the pyproject's). A path that does not exist is an error: a build
    must never fall back to a guessed config in its place."""
    path = find_pyproject(start or Path.cwd())
    if path is None:
        return {}, None
    return configs_table(_read_toml(path).get("tool", {}).get("prefixlint", {}), path)


def configs_table(table: object, path: Path) -> tuple[dict[str, str], str | None]:
    """Validate ``[tool.prefixlint.configs]`` of the pyproject at ``path``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.prefixlint] must be a table")
    configs = table.get("configs", {})
    if not isinstance(configs, dict):
        raise ConfigError(f"{path}: [tool.prefixlint.configs] must be a table")
    out = {}
    for arch, value in configs.items():
        if not isinstance(value, str):
            raise ConfigError(
                f"{path}: [tool.prefixlint.configs] {arch} must be the path of a config.json "
                f"(or of a folder holding one), got {value!r}"
            )
        target = Path(value) if Path(value).is_absolute() else path.parent / value
        file = target / "config.json" if target.is_dir() else target
        if not file.is_file():
            raise ConfigError(
                f"{path}: [tool.prefixlint.configs] {arch} = {value!r}: {file} does not exist"
            )
        out[str(arch)] = value
    return out, str(path.parent)


def load_checkpoints_table(start: Path | None = None) -> tuple[dict[str, str], str | None]:
    """``[tool.prefixlint.checkpoints]``: architecture -> checkpoint folder (relative to
    the pyproject) or hub id, and the pyproject's folder."""
    path = find_pyproject(start or Path.cwd())
    if path is None:
        return {}, None
    return checkpoints_table(_read_toml(path).get("tool", {}).get("prefixlint", {}), path)


# ``org/name`` or ``org/name@revision``: a checkpoint on the hub.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def is_hub_id(source: str) -> bool:
    return not Path(source).exists() and bool(_HUB_ID.match(source))


def checkpoints_table(table: object, path: Path) -> tuple[dict[str, str], str | None]:
    """Validate ``[tool.prefixlint.checkpoints]``: each value a folder that exists or a
    hub id (``org/name``, fetched when a run needs it)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.prefixlint] must be a table")
    checkpoints = table.get("checkpoints", {})
    if not isinstance(checkpoints, dict):
        raise ConfigError(f"{path}: [tool.prefixlint.checkpoints] must be a table")
    out = {}
    for arch, value in checkpoints.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"{path}: [tool.prefixlint.checkpoints] {arch} must be a checkpoint folder "
                f"or a hub id `org/name`, got {value!r}"
            )
        local = Path(value) if Path(value).is_absolute() else path.parent / value
        if not local.is_dir() and not (is_hub_id(value) and not local.exists()):
            raise ConfigError(
                f"{path}: [tool.prefixlint.checkpoints] {arch} = {value!r}: {local} is not a "
                "folder (nor is the value a hub id `org/name`)"
            )
        out[str(arch)] = value
    return out, str(path.parent)


def load_config(explicit: Path | None = None, start: Path | None = None) -> Config:
    path = explicit or find_pyproject(start or Path.cwd())
    if path is None:
        return Config()
    table = _read_toml(path).get("tool", {}).get("prefixlint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.prefixlint] must be a table")
    known = {
        "select",
        "ignore",
        "per-file-ignores",
        "exclude",
        "extend-prefix-layers",
        "configs",
        "checkpoints",
        "max-file-size",
    }
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{path}: unknown [tool.prefixlint] keys: {', '.join(sorted(unknown))}")
    configs_table(table, path)  # a bad config path is an error for every command
    checkpoints_table(table, path)
    cfg = Config(source=path)
    if "select" in table:
        cfg.select = _codes(table["select"], "select")
    if "ignore" in table:
        cfg.ignore = _codes(table["ignore"], "ignore")
    if "exclude" in table:
        cfg.exclude = _strings(table["exclude"], path, "exclude")
    if "extend-prefix-layers" in table:
        cfg.extend_prefix_layers = _strings(
            table["extend-prefix-layers"], path, "extend-prefix-layers"
        )
    if "max-file-size" in table:
        cfg.max_file_size = _megabytes(table["max-file-size"], path)
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
