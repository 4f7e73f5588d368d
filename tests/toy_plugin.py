"""The out-of-tree plugin package written for the tests (``tests/fixtures/plugins/toy``):
installed as a user installs a plugin, or copied as a source tree with a planted defect.

The package has a ``vllm.general_plugins`` entry point whose ``register()`` calls
``AutoConfig.register`` for its own config class (model type ``prefixlint_toy``, unknown to
transformers) and ``ModelRegistry.register_model("ToyForCausalLM", ...)``.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).parent / "fixtures" / "plugins" / "toy"
PACKAGE = "prefixlint_toy"
ARCHITECTURE = "ToyForCausalLM"


def can_install() -> bool:
    """pip and the fixture's build backend are importable here (no network is used)."""
    return all(importlib.util.find_spec(m) is not None for m in ("pip", "setuptools"))


def install(site: Path, source: Path = SOURCE) -> Path:
    """``pip install --no-deps --target site``, as a user installs a released plugin into
    a folder on ``PYTHONPATH``; built from a copy (setuptools writes into the tree), offline.
    ``source``: the plugin's tree (the clean fixture, or a ``source_copy``'s). Returns
    ``site``."""
    tree = site.parent / f"{site.name}-source"
    shutil.copytree(source, tree)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(tree),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return site


def source_copy(root: Path, tag: str, edit=None) -> Path:
    """The fixture as a source tree (not installed) under ``root/tag``, with its package
    renamed ``toy_<tag>`` and its architecture ``Toy<Tag>ForCausalLM`` (so that copies
    built in one worker process do not share modules or registry names), and ``edit``
    applied to ``model.py``'s text. Returns the copied ``model.py``."""
    package = f"toy_{tag}"
    arch = f"Toy{tag.title().replace('_', '')}ForCausalLM"
    tree = root / tag
    shutil.copytree(SOURCE, tree)
    (tree / PACKAGE).rename(tree / package)
    for path in [tree / "pyproject.toml", *sorted((tree / package).glob("*.py"))]:
        text = path.read_text()
        text = re.sub(rf"\b{PACKAGE}\b", package, text)
        text = re.sub(rf"\b{ARCHITECTURE}\b", arch, text)
        path.write_text(text)
    model = tree / package / "model.py"
    if edit is not None:
        before = model.read_text()
        after = edit(before)
        assert after != before, "the planted edit changed nothing"
        model.write_text(after)
    return model


def architecture_of(model: Path) -> str:
    return next(m for m in re.findall(r"^class (\w+ForCausalLM)\b", model.read_text(), re.M))


def line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line containing ``text``."""
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(hits) >= occurrence, (text, hits)
    return hits[occurrence - 1]
