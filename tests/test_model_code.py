"""Which files are the model's own code (``introspect/finding.py``): one reading for the
crash sites, the plugins' error sites and the dry-run's model files, and the two narrower
or wider readings kept beside it (the recorder's library, the repairs' ``models/``
folders), each on real installed paths and temporary user and plugin files."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from prefixlint.introspect import finding
from prefixlint.introspect.finding import (
    in_models_folder,
    layer_library_roots,
    library_roots,
    model_code,
)
from tests.conftest import VLLM, requires_vllm


def _installed(package: str, *parts: str) -> str:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return str(Path(next(iter(spec.submodule_search_locations)), *parts))


def _recorder_library(file: str) -> bool:
    return file.startswith(layer_library_roots())


# (where, file; model code; with vLLM's models left out (a plugin's error site); in the
# recorder's library; in a models/ folder)
CASES = [
    ("vllm model", ("vllm", "model_executor", "models", "llama.py"), True, False, False, True),
    (
        "vllm model helper",
        ("vllm", "model_executor", "models", "utils.py"),
        False,
        False,
        False,
        True,
    ),
    ("vllm layer", ("vllm", "model_executor", "layers", "linear.py"), False, False, True, False),
    ("vllm config", ("vllm", "config", "__init__.py"), False, False, False, False),
    ("torch", ("torch", "nn", "modules", "linear.py"), False, False, True, False),
    (
        "transformers model",
        ("transformers", "models", "llama", "modeling_llama.py"),
        False,
        False,
        True,
        True,
    ),
    ("prefixlint", ("prefixlint", "introspect", "finding.py"), False, False, True, False),
]


@requires_vllm
@pytest.mark.parametrize(("where", "parts", "model", "plugin", "library", "folder"), CASES)
def test_installed_files(where, parts, model, plugin, library, folder) -> None:
    file = _installed(*parts)
    assert model_code(file) is model, where
    assert model_code(file, vllm_models=False) is plugin, where
    assert _recorder_library(file) is library, where
    assert in_models_folder(file) is folder, where


def test_the_standard_library_and_generated_code_are_never_the_models() -> None:
    assert not model_code(os.__file__)
    assert not _recorder_library(os.__file__)  # the recorder's site walks through it
    assert not model_code("<string>") and not model_code("<frozen importlib._bootstrap>")


def test_a_users_file_and_an_installed_plugins_are(tmp_path: Path) -> None:
    user = tmp_path / "my_model.py"
    plugin = tmp_path / "lib" / "python3" / "site-packages" / "my_plugin" / "modeling.py"
    toy = tmp_path / "models" / "toy.py"
    for file in (user, plugin, toy):
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("x = 1\n")
        assert model_code(str(file)) and model_code(str(file), vllm_models=False), file
        assert not _recorder_library(str(file)), file
    # the repairs read only a models/ folder's files (the convention the tests keep)
    assert in_models_folder(str(toy)) and not in_models_folder(str(plugin))
    # a copy of a vLLM model outside the installed package is vLLM's model code
    copy = tmp_path / "vllm" / "model_executor" / "models" / "llama.py"
    assert model_code(str(copy)) and not model_code(str(copy), vllm_models=False)


def test_the_library_roots_are_computed_once() -> None:
    assert library_roots() is library_roots()
    before = finding.library_roots.cache_info().misses
    for _ in range(100):
        model_code(os.__file__)
    assert finding.library_roots.cache_info().misses == before
    if VLLM is not None:
        assert str(VLLM.resolve()) + os.sep in library_roots()


_CLASSES = """
import dataclasses

class Plain:
    class Inner:
        pass

@dataclasses.dataclass
class Decorated:
    x: int = 0

def factory():
    class Local:
        pass
    return Local

if True:
    class Twice:
        pass
else:
    class Twice:  # inspect finds the first one of a name
        pass

Made = type("Made", (), {})
"""


def test_class_site_gives_inspects_line_read_once_per_file(tmp_path: Path) -> None:
    """``class_site`` reads a file's classes once (``inspect`` parses the whole file for
    each class): the same file and line as ``inspect.getsourcelines`` for decorated,
    nested, local and repeated classes, and for every class of vLLM's llama.py."""
    import inspect
    import sys

    from prefixlint.introspect.finding import class_site

    path = tmp_path / "classes_for_site.py"
    path.write_text(_CLASSES)
    spec = importlib.util.spec_from_file_location("classes_for_site", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["classes_for_site"] = module
    try:
        spec.loader.exec_module(module)
        classes = [
            module.Plain,
            module.Plain.Inner,
            module.Decorated,
            module.factory(),
            module.Twice,
        ]
        if VLLM is not None:
            import vllm.model_executor.models.llama as llama

            classes += [c for c in vars(llama).values() if isinstance(c, type)]
        for cls in classes:
            try:
                expected = (inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1])
            except (OSError, TypeError):
                expected = ("", 0)
            assert class_site(cls) == expected, cls
        assert class_site(module.Decorated)[1] == 8  # its decorator's line
        assert class_site(module.Twice)[1] == 18  # the first of the two
        assert class_site(None) == ("", 0)
        # A class its file does not define by that name: as inspect, no source.
        assert class_site(module.Made) == ("", 0)
    finally:
        sys.modules.pop("classes_for_site", None)
