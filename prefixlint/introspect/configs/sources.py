"""Where an architecture's config comes from: ``--config``, then
``[tool.prefixlint.configs]`` in pyproject, then synthesis (``synthesis.py``), and for a
remote-code architecture no table knows, a small Llama-shaped config."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prefixlint.introspect.configs.model_types import exactly_mapped
from prefixlint.introspect.configs.shrink import shrink_kwargs
from prefixlint.introspect.configs.synthesis import ConfigGap, synth_config


@dataclass
class ConfigSource:
    folder: str  # holds config.json
    source: str  # "file <path>", "pyproject <path>", "synthesised (<model type>)"
    synthesised: bool = False  # made by prefixlint, not read from a file: the fact, not the words


def resolve_config(
    arch: str,
    explicit: str | None = None,
    table: dict[str, str] | None = None,
    table_base: Path | None = None,
    architecture_name: str | None = None,
    num_layers: int = 4,
    model_cls: type | None = None,
) -> ConfigSource:
    """``--config`` first, then ``[tool.prefixlint.configs]``, then synthesis. The
    config's ``architectures`` is set to ``architecture_name`` (the registered name)."""
    import json

    name = architecture_name or arch
    path: Path | None = None
    origin = ""
    if explicit:
        path, origin = Path(explicit), f"file {explicit}"
    elif table and arch in table:
        path = Path(table[arch])
        if table_base is not None and not path.is_absolute():
            path = table_base / path
        origin = f"pyproject {path}"
    folder = tempfile.mkdtemp(prefix="prefixlint-config-")
    if path is not None:
        config_file = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigGap(f"cannot read config {config_file}: {e}") from None
        data["architectures"] = [name]
        Path(folder, "config.json").write_text(json.dumps(data), encoding="utf-8")
        return ConfigSource(folder, origin)
    try:
        cfg = synth_config(arch, num_layers=num_layers, model_cls=model_cls)
        origin = f"synthesised ({cfg.model_type})"
    except ConfigGap as gap:
        if "no model type" not in str(gap) and exactly_mapped(arch):
            raise
        # A remote-code architecture (no config class in transformers or vLLM): most read
        # Llama's attribute names, so a small Llama config is the best guess.
        cfg = llama_shaped(num_layers)
        origin = "synthesised (llama-shaped: remote-code architecture)"
    cfg.architectures = [name]
    cfg.save_pretrained(folder)
    _rename_sub_config_keys(type(cfg), Path(folder, "config.json"))
    return ConfigSource(folder, origin, synthesised=True)


_POPPED_INTO = re.compile(r"self\.(\w+)\s*=\s*\w+\(\s*\*\*\s*kwargs\.pop\(\s*[\"'](\w+)[\"']")


def _rename_sub_config_keys(cls: type, path: Path) -> None:
    """``self.text_config = TextConfig(**kwargs.pop("language_config", {}))``: the config
    saves the attribute's name but loads another; the saved file is given the name its
    constructor reads, so the reloaded config has the shrunk sub-config."""
    import inspect
    import json

    try:
        source = inspect.getsource(cls.__init__)
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, TypeError, ValueError):
        return
    renamed = False
    for attr, key in _POPPED_INTO.findall(source):
        if attr != key and attr in data and key not in data:
            data[key] = data.pop(attr)
            renamed = True
    if renamed:
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def llama_shaped(num_layers: int = 4):
    from transformers import LlamaConfig

    default = LlamaConfig()
    return LlamaConfig(**shrink_kwargs(default, num_layers))
