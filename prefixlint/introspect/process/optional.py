"""Optional packages that model files import, made importable for meta builds.

torchvision's wheels pair with one torch release each and ship a compiled extension
(``_C.so``; ``_C_stable.so`` from 0.29) built against that release's CUDA or CPU flavour.
Beside a torch of the same release but another flavour (``2.13.0+cpu`` vs the PyPI build)
the extension does not load, and ``import torchvision`` then fails in
``_meta_registrations.py`` ("operator torchvision::nms does not exist"): it registers fake
kernels for operators the extension would have defined. A meta build never calls those
operators (image processing runs on requests, not at construction), so when, and only
when, torchvision has tried its extension and torch's registry still lacks the operators,
the worker defines their schemas with ``torch.library`` and the Python side imports. The
schemas are torchvision's own (``torchvision/csrc/ops/*.cpp``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

# torchvision's operators (csrc/ops/*.cpp, TORCH_LIBRARY_FRAGMENT(torchvision, m)): the 13
# that ``_meta_registrations.py`` registers kernels for.
TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
    "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
    "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
    "SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, "
    "bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)

# Kept alive for the worker's lifetime: a dropped Library deregisters its definitions.
_LIBRARIES: list[Any] = []
STATUS: dict[str, str] = {}  # package -> "absent" | "extension" | "schemas" | "error: ..."


def _has_op(namespace: str, name: str) -> bool:
    import torch

    try:
        return torch._C._dispatch_has_kernel(f"{namespace}::{name}") or bool(
            torch._C._jit_get_schemas_for_operator(f"{namespace}::{name}")
        )
    except Exception:
        return False


def define_schemas(namespace: str, schemas: tuple[str, ...]) -> int:
    """Define the operators of ``namespace`` that do not exist yet; how many were."""
    import torch

    library = torch.library.Library(namespace, "FRAGMENT")
    added = 0
    for schema in schemas:
        name = schema.split("(", 1)[0]
        if _has_op(namespace, name):
            continue
        library.define(schema)
        added += 1
    _LIBRARIES.append(library)
    return added


class _PatchAfterExec(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a module as usual, then ``patch(module)``: for a module whose code cannot be
    changed before it runs (it is imported by its own package's ``__init__``)."""

    def __init__(self, name: str, patch: Any) -> None:
        self.name, self.patch, self.loader = name, patch, None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # find the real one, once
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)  # type: ignore[union-attr]

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)  # type: ignore[union-attr]
        self.patch(module)


def prepare_torchvision() -> str:
    """Make ``import torchvision`` work for a meta build; how it was done.

    Decided by behaviour, not by file names (``_C.so`` until 0.28, ``_C_stable.so`` from
    0.29): once ``torchvision.extension`` has run, torchvision has tried its own extension;
    the schemas are defined then, and only for operators torch's registry still lacks. A
    loaded extension leaves nothing to define (defining first would make its registration
    fail with "Tried to register an operator ... multiple times")."""
    if importlib.util.find_spec("torchvision") is None:
        return "absent"
    if _has_op("torchvision", "nms"):
        return "extension"

    def after_extension(_module: Any) -> None:
        if _has_op("torchvision", "nms"):
            STATUS["torchvision"] = "extension"
            return
        try:
            define_schemas("torchvision", TORCHVISION_SCHEMAS)
            STATUS["torchvision"] = "schemas"
        except Exception as e:  # a torch without torch.library: the import fails as before
            STATUS["torchvision"] = f"error: {type(e).__name__}: {e}"

    sys.meta_path.insert(0, _PatchAfterExec("torchvision.extension", after_extension))
    return "hooked"


def prepare_torchaudio() -> str:
    """torchaudio loads its extension at import and re-raises when the file exists but
    cannot load (PyPI's CUDA build beside a CPU torch), which breaks every import of
    it. Its Python side (``torchaudio.functional``, what model files use) runs without
    the extension: a failed load then reads as "no extension", as for a build without it."""
    if importlib.util.find_spec("torchaudio") is None:
        return "absent"

    def patch(utils: Any) -> None:
        original = utils._load_lib

        def load_lib(lib: str) -> bool:
            try:
                return original(lib)
            except OSError:
                STATUS["torchaudio"] = "without extension"
                return False

        utils._load_lib = load_lib

    sys.meta_path.insert(0, _PatchAfterExec("torchaudio._extension.utils", patch))
    return "hooked"


def optional_site() -> Path | None:
    """Where set-up installs these packages for phase 2 only (``pip install --target``):
    beside the environment, not in it, so that other processes of the environment (the
    smoke phase's vLLM engine) never import a torchvision whose extension cannot load."""
    env = os.environ.get("PREFIXLINT_OPTIONAL_SITE")
    folder = Path(env) if env else Path(sys.prefix) / "prefixlint-optional"
    return folder if folder.is_dir() else None


def prepare_optional_packages() -> dict[str, str]:
    """Run once per worker before any model file is imported. A failure here never stops
    a build: the package then fails to import as before, and that is reported."""
    site = optional_site()
    if site is not None and str(site) not in sys.path:
        sys.path.append(str(site))  # after the environment's own: a working install wins
    for package, prepare in (
        ("torchvision", prepare_torchvision),
        ("torchaudio", prepare_torchaudio),
    ):
        if package in STATUS:
            continue
        try:
            STATUS[package] = prepare()
        except Exception as e:  # a torch without torch.library, a broken install
            STATUS[package] = f"error: {type(e).__name__}: {e}"
    return dict(STATUS)
