"""A LoRA adapter as ``--lora`` names it: a local PEFT folder, or a hub id whose
``adapter_config.json`` and safetensors header are fetched; never a weight. Stdlib only:
the command line reads it before a worker starts (``dryrun/lora.py`` matches it)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixlint.introspect.targets.checkpoint import (
    CheckpointError,
    hub_reachable,
    is_hub_id,
    read_header,
)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_MANIFEST = "prefixlint-adapter.json"  # a hub adapter's tensor names, written locally


@dataclass
class Adapter:
    source: str  # what was asked for: a folder, a hub id, or "synthetic"
    folder: str
    config: dict[str, Any]
    keys: list[str] | None  # the tensor names; None: weights in a format without a header
    synthetic: bool = False

    @property
    def modules_to_save(self) -> list[str]:
        value = self.config.get("modules_to_save")
        return [str(v) for v in value] if isinstance(value, list) else []


def resolve_adapter(source: str) -> Adapter:
    """``--lora``: a local PEFT folder, or a hub id whose ``adapter_config.json`` and
    safetensors header are fetched into a local folder. Raises ``CheckpointError`` (a
    usage error on the command line) when it cannot be read."""
    path = Path(source).expanduser()
    if path.exists():
        return read_adapter(str(path.resolve()), source)
    if not is_hub_id(source):
        raise CheckpointError(f"adapter {source!r}: no such folder (and not a hub id `org/name`)")
    return read_adapter(_fetch_adapter(source), source)


def read_adapter(folder: str, source: str | None = None) -> Adapter:
    root = Path(folder)
    if root.is_file():
        root = root.parent
    if not root.is_dir():
        raise CheckpointError(f"adapter {folder!r}: no such folder")
    config = _json(root / ADAPTER_CONFIG)
    if not isinstance(config, dict):
        raise CheckpointError(f"{root / ADAPTER_CONFIG}: not a JSON object")
    manifest = root / ADAPTER_MANIFEST
    if manifest.is_file():
        data = _json(manifest)
        keys = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(keys, list):
            raise CheckpointError(f"{manifest}: not an adapter manifest")
        return Adapter(str(data.get("source", source)), str(root), config, [str(k) for k in keys])
    weights = root / ADAPTER_WEIGHTS
    if weights.is_file():
        return Adapter(source or str(root), str(root), config, sorted(read_header(weights)))
    if any((root / name).is_file() for name in ("adapter_model.bin", "adapter_model.pt")):
        return Adapter(source or str(root), str(root), config, None)
    raise CheckpointError(f"{root}: no {ADAPTER_WEIGHTS} (the adapter's tensors)")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: no {path.name}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot be read as JSON: {e}") from None


def _fetch_adapter(source: str) -> str:
    """A hub adapter's ``adapter_config.json`` and tensor names (the safetensors header,
    read by range request), written to a local folder; no weight is downloaded."""
    repo, _, revision = source.partition("@")
    refused = f"adapter {source!r}: no such folder, and as a hub id it cannot be read"
    local = f"pass a local PEFT folder ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})"
    hub_reachable(refused, local)
    import huggingface_hub

    try:
        config = huggingface_hub.hf_hub_download(repo, ADAPTER_CONFIG, revision=revision or None)
        meta = huggingface_hub.HfApi().parse_safetensors_file_metadata(
            repo, ADAPTER_WEIGHTS, revision=revision or None
        )
    except Exception as e:
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else "no detail"
        raise CheckpointError(f"{refused} ({type(e).__name__}: {detail}); {local}") from None
    folder = Path(tempfile.mkdtemp(prefix="prefixlint-adapter-"))
    (folder / ADAPTER_CONFIG).write_text(Path(config).read_text(encoding="utf-8"))
    manifest = {"source": source, "keys": sorted(meta.tensors)}
    (folder / ADAPTER_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return str(folder)
