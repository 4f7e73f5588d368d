from __future__ import annotations

import os

# A model module importing stdlib ``distutils`` before setuptools makes setuptools'
# distutils shim assert at its import ("'_distutils' in core.__file__") later in the same
# test process; the engine and worker subprocesses are unaffected. Keep stdlib's.
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
# Commands the tests run start cold workers (as before the warm worker): no zygote outlives
# the tests. tests/test_warm_worker.py turns it on, and stops its zygotes.
os.environ.setdefault("PREFIXLINT_WARM_WORKER", "0")
# A test that turns them on uses a warm folder of its own, never the user's (whose bound on
# live zygotes would retire the user's own).
if "PREFIXLINT_WARM_DIR" not in os.environ:
    import atexit
    import shutil as _shutil
    import tempfile

    os.environ["PREFIXLINT_WARM_DIR"] = tempfile.mkdtemp(prefix="prefixlint-warm-tests-")
    atexit.register(_shutil.rmtree, os.environ["PREFIXLINT_WARM_DIR"], ignore_errors=True)

import importlib.util
import itertools
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from prefixlint.static.index import find_installed_package

VLLM = find_installed_package("vllm")
requires_vllm = pytest.mark.skipif(VLLM is None, reason="vLLM is not installed")


@pytest.fixture
def vllm_copy(tmp_path: Path):
    """A writable mirror of the installed vLLM's package path, for re-created bugs.

    Only the files a test writes live there; every other import resolves in the installed
    vLLM (the loader looks in both roots).
    """
    assert VLLM is not None
    models = tmp_path / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "model_executor", models):
        (folder / "__init__.py").write_text("")

    def copy(name: str, edit=None) -> Path:
        source = (VLLM / "model_executor" / "models" / name).read_text()
        target = models / name
        target.write_text(edit(source) if edit else source)
        return target

    yield copy
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="module")
def worker():
    """One phase-2 worker process per test module (it imports vLLM once)."""
    from prefixlint.introspect.process.client import Worker

    w = Worker()
    yield w
    w.close()


_MODULE_NUMBERS = itertools.count()


def model_module(tmp_path: Path, source: str) -> ModuleType:
    """``source`` imported as a model file under a ``models/`` folder (where phase 2's
    repairs read model code), under a name no other test uses."""
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    name = f"toy_model_{next(_MODULE_NUMBERS)}"
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
