"""A real checkpoint's layout, read without loading a weight.

A checkpoint is a folder (or a Hugging Face hub id) holding ``config.json`` and safetensors
files, one or sharded behind ``model.safetensors.index.json``. What the dry-run needs is
in a few hundred kilobytes: the config (with its ``quantization_config``) and, from each
safetensors header, every tensor's name, dtype and shape. Headers are read through
``safetensors``' own reader (``safe_open(...).get_slice(name)``: the header only, the data
is never touched) or, without that package, by parsing the 8-byte length and JSON header
the format defines. A hub id's config and headers come through ``huggingface_hub``'s
metadata calls (HTTP range requests for the headers) and are written to a local folder as
a manifest, which the phase-2 worker then reads like a local checkpoint.

No torch and no vLLM here: the command line resolves a checkpoint before it starts a
worker, so a bad path or an unreachable hub is a usage error (exit 2), never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixlint.config import is_hub_id

# How vLLM's loader finds the files: the index's weight map when there is one (it also
# drops duplicates such as ``consolidated.safetensors``), else every ``*.safetensors``.
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MANIFEST_NAME = "prefixlint-checkpoint.json"  # a hub checkpoint's headers, written locally
# ModelOpt 0.29 and before: the quantization config beside config.json, which vLLM reads
# when config.json has none (``transformers_utils/config.py``)
LEGACY_QUANT_NAME = "hf_quant_config.json"
_MAX_HEADER = 100 * 1024 * 1024  # a header beyond this is a corrupt file, not a checkpoint


class CheckpointError(Exception):
    """The checkpoint cannot be read; the message says why and what to do."""


@dataclass
class Checkpoint:
    source: str  # what was asked for: a folder or a hub id
    folder: str  # the local folder holding its config.json (a hub id's: a manifest folder)
    config: dict[str, Any]
    # name -> (shape, safetensors dtype: "BF16", "F8_E4M3", ...)
    tensors: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # the safetensors files read

    @property
    def quantization(self) -> dict[str, Any] | None:
        """The checkpoint's ``quantization_config`` (top level, or a text config's)."""
        for config in (self.config, self.config.get("text_config")):
            quant = config.get("quantization_config") if isinstance(config, dict) else None
            if isinstance(quant, dict):
                return quant
        return None

    @property
    def quant_method(self) -> str:
        quant = self.quantization
        return str(quant.get("quant_method", "")) if quant else ""

    def describe(self) -> str:
        where = f"{len(self.files)} safetensors file{'s' if len(self.files) != 1 else ''}"
        return f"`{self.source}` ({len(self.tensors)} tensors from the headers of {where})"


def resolve(source: str, cache: str | None = None) -> Checkpoint:
    """A local checkpoint folder, or a hub id whose config and headers are fetched into
    a manifest folder under ``cache`` (default: a new temporary folder)."""
    path = Path(source).expanduser()
    if path.exists():  # absolute: the worker that reads it again may run elsewhere
        return read(str(path.resolve()), source)
    if not is_hub_id(source):
        raise CheckpointError(
            f"checkpoint {source!r}: no such folder (and not a hub id `org/name`)"
        )
    return read(fetch_hub(source, cache), source)


def read(folder: str, source: str | None = None) -> Checkpoint:
    """The checkpoint in ``folder``: its config.json and its tensors' names, shapes and
    dtypes (from the manifest a hub fetch wrote, or from the safetensors headers)."""
    root = Path(folder)
    if root.is_file():
        root = root.parent  # config.json (or a safetensors file) named instead of its folder
    if not root.is_dir():
        raise CheckpointError(f"checkpoint {folder!r}: no such folder")
    config = _json(root / "config.json", "the checkpoint's config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{root / 'config.json'}: not a JSON object")
    legacy = root / LEGACY_QUANT_NAME
    if config.get("quantization_config") is None and legacy.is_file():
        config["quantization_config"] = _json(legacy, "the quantization config")
    manifest = root / MANIFEST_NAME
    if manifest.is_file():
        data = _json(manifest, "the checkpoint manifest")
        try:
            tensors = {
                str(name): (tuple(int(d) for d in shape), str(dtype))
                for name, (shape, dtype) in data["tensors"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError(f"{manifest}: not a checkpoint manifest") from None
        return Checkpoint(
            data.get("source", source or str(root)),
            str(root),
            config,
            tensors,
            list(data.get("files", [])),
        )
    files = safetensors_files(root)
    tensors: dict[str, tuple[tuple[int, ...], str]] = {}
    for file in files:
        for name, entry in read_header(root / file).items():
            if name in tensors:
                raise CheckpointError(f"{root}: tensor `{name}` is in more than one file")
            tensors[name] = entry
    _check_index(root, tensors)
    return Checkpoint(source or str(root), str(root), config, tensors, files)


def safetensors_files(root: Path) -> list[str]:
    index = root / INDEX_NAME
    if index.is_file():
        weight_map = _json(index, "the safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: no `weight_map`")
        files = sorted(set(map(str, weight_map.values())))
        missing = [f for f in files if not (root / f).is_file()]
        if missing:
            raise CheckpointError(f"{index} names files that are not there: {missing[:3]}")
        return files
    files = sorted(p.name for p in root.glob("*.safetensors"))
    if not files:
        others = sorted(p.name for p in root.glob("*.bin")) + sorted(
            p.name for p in root.glob("*.pt")
        )
        hint = (
            f" (it has {', '.join(others[:3])}: pickled weights, whose layout cannot be "
            "read without loading them; convert to safetensors)"
            if others
            else ""
        )
        raise CheckpointError(f"{root}: no safetensors files{hint}")
    return files


def _check_index(root: Path, tensors: dict[str, Any]) -> None:
    index = root / INDEX_NAME
    if not index.is_file():
        return
    listed = set(_json(index, "the safetensors index")["weight_map"])
    absent = sorted(listed - set(tensors))
    if absent:
        raise CheckpointError(
            f"{index} lists {len(absent)} tensors its files do not hold (`{absent[0]}`)"
        )


def read_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of one safetensors file, its data never read."""
    try:
        return _header_by_safetensors(path)
    except ImportError:
        return parse_header(path)
    except CheckpointError:
        raise
    except Exception as e:  # safetensors' own error for a corrupt file
        raise CheckpointError(f"{path}: not a readable safetensors file: {e}") from None


def _header_by_safetensors(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    from safetensors import safe_open

    out = {}
    # numpy framework: no torch needed; shapes and dtypes come from the header
    with safe_open(str(path), framework="np") as handle:
        for name in handle.keys():  # noqa: SIM118 (safe_open is no mapping)
            piece = handle.get_slice(name)
            out[name] = (tuple(int(d) for d in piece.get_shape()), str(piece.get_dtype()))
    return out


def parse_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """The safetensors format itself: a little-endian u64 length, then that many bytes of
    JSON (name -> dtype, shape, offsets; ``__metadata__``)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: too short for a safetensors file")
            (length,) = struct.unpack("<Q", head)
            if length > _MAX_HEADER:
                raise CheckpointError(f"{path}: header of {length} bytes: not safetensors")
            header = json.loads(handle.read(length))
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            out[name] = (tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: header entry `{name}` has no shape or dtype") from None
    return out


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: no {path.name} ({what})") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON: {e}") from None


# -- the build config ---------------------------------------------------------------------------


def build_config(checkpoint: Checkpoint) -> str:
    """A folder holding the checkpoint's config.json without its quantization config:
    phase 2's layout builds (prefixes, sharding) run unquantized as before, and the
    dry-run builds under the real quantization config itself (``realquant.py``)."""
    config = json.loads(json.dumps(checkpoint.config))
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            part.pop("quantization_config", None)
    text = json.dumps(config, indent=2, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"prefixlint-checkpoint-config-{digest}"
    folder.mkdir(exist_ok=True)
    target = folder / "config.json"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        temporary = folder / f".config.json.{os.getpid()}"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(target)  # atomic: another worker may read it now
    return str(folder)


# -- a hub id ---------------------------------------------------------------------------------


def _unreachable(endpoint: str, timeout: float = 5.0) -> str:
    """Why the hub's host cannot be reached ("" when it can): asked once, quickly, before
    ``huggingface_hub`` retries a refused connection for half a minute."""
    import socket
    from urllib.parse import urlsplit

    proxies = ("https_proxy", "http_proxy", "all_proxy")
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in proxies):
        return ""  # reached through a proxy: only huggingface_hub's own request tells
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return f"no connection to {endpoint} ({e.strerror or type(e).__name__})"
    return ""


def hub_reachable(refused: str, local: str) -> None:
    """Raise, with ``refused`` and what to do instead (``local``), when the hub cannot
    be asked: ``huggingface_hub`` missing, switched off, or its host unreachable."""
    try:
        from huggingface_hub import constants
    except ImportError:
        raise CheckpointError(f"{refused}: `huggingface_hub` is not installed; {local}") from None
    if constants.HF_HUB_OFFLINE:
        raise CheckpointError(
            f"{refused}: the hub is switched off here (HF_HUB_OFFLINE); unset it where the "
            f"network allows, or {local}"
        )
    unreachable = _unreachable(constants.ENDPOINT)
    if unreachable:
        raise CheckpointError(f"{refused}: {unreachable}; {local}")


def fetch_hub(source: str, cache: str | None = None) -> str:
    """config.json and the safetensors headers of a hub repository (``org/name`` or
    ``org/name@revision``), written to a manifest folder; no weight is downloaded."""
    repo, _, revision = source.partition("@")
    refused = f"checkpoint {source!r}: no such folder, and as a hub id it cannot be read"
    local = "pass a local folder holding config.json and the safetensors files (headers are enough)"
    hub_reachable(refused, local)
    import huggingface_hub

    try:
        config = huggingface_hub.hf_hub_download(repo, "config.json", revision=revision or None)
        meta = huggingface_hub.get_safetensors_metadata(repo, revision=revision or None)
        legacy = _optional_file(repo, LEGACY_QUANT_NAME, revision or None)
    except Exception as e:
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else "no detail"
        raise CheckpointError(
            f"{refused} ({type(e).__name__}: {detail}): check the id, or {local}"
        ) from None
    tensors = {
        name: (tuple(info.shape), str(info.dtype))
        for file in meta.files_metadata.values()
        for name, info in file.tensors.items()
    }
    folder = cache or tempfile.mkdtemp(prefix="prefixlint-hub-")
    text = Path(config).read_text(encoding="utf-8")
    out = write_manifest(folder, source, text, sorted(meta.files_metadata), tensors)
    if legacy is not None:
        Path(out, LEGACY_QUANT_NAME).write_text(Path(legacy).read_text(encoding="utf-8"))
    return out


def _optional_file(repo: str, name: str, revision: str | None) -> str | None:
    """A small file of the repository if it has one (its path in the hub cache)."""
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return huggingface_hub.hf_hub_download(repo, name, revision=revision)
    except EntryNotFoundError:
        return None


def write_manifest(
    folder: str,
    source: str,
    config_text: str,
    files: list[str],
    tensors: dict[str, tuple[tuple[int, ...], str]],
) -> str:
    """A checkpoint folder without weights: its config.json and a manifest of the tensors
    its safetensors headers hold (what ``fetch_hub`` writes; ``read`` reads it back)."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(config_text, encoding="utf-8")
    manifest = {
        "source": source,
        "files": list(files),
        "tensors": {name: [list(shape), dtype] for name, (shape, dtype) in tensors.items()},
    }
    (root / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    return str(root)


# -- which checkpoint for which architecture ----------------------------------------------------


TableFor = Callable[[Path | None], tuple[dict[str, str], str | None]]


class Checkpoints:
    """Which checkpoint an architecture class is checked against: ``--checkpoint`` for
    the architectures its config.json names (all, if it names none), else the class's
    entry in the ``[tool.prefixlint.checkpoints]`` of the pyproject closest to its file.
    Each is resolved (read, or fetched from the hub) once, in this process."""

    def __init__(self, explicit: str | None, table_for: TableFor) -> None:
        self.explicit = resolve(explicit) if explicit else None
        self.table_for = table_for
        self._resolved: dict[str, Checkpoint] = {}

    @property
    def architectures(self) -> list[str]:
        names = self.explicit.config.get("architectures") if self.explicit else None
        return [n for n in names or [] if isinstance(n, str)]

    def check(self, classes: list[str]) -> None:
        """``--checkpoint`` must name one of the classes being built (one that names no
        architecture is for every class)."""
        names = self.architectures
        if self.explicit is None or not names or set(names) & set(classes):
            return
        raise CheckpointError(
            f"checkpoint {self.explicit.source!r} is one of {', '.join(names)}; the checked files "
            f"define {', '.join(classes) or 'no architecture class'}: check a class against "
            "it with `prefixlint introspect FILE.py:CLASS --checkpoint ...`"
        )

    def for_class(self, path: Path | None, name: str) -> str | None:
        if self.explicit is not None and name in (self.architectures or [name]):
            return self.explicit.folder
        table, base = self.table_for(path)
        value = table.get(name)
        if value is None:
            return None
        local = Path(value).expanduser()
        if base is not None and not local.is_absolute() and (Path(base) / local).exists():
            value = str(Path(base) / local)
        if value not in self._resolved:
            self._resolved[value] = resolve(value)
        return self._resolved[value].folder
