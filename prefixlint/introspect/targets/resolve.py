"""What phase 2 builds: a registry architecture, ``module:Class`` or ``file.py[:Class]``,
resolved to model classes (an out-of-tree class is registered with vLLM's registry).

Runs inside a worker process (imports torch and vLLM)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixlint.introspect.process.env import prepare

prepare()

from torch import nn  # noqa: E402


@dataclass
class Target:
    """What to build: a registry architecture, ``module:Class`` or ``file.py[:Class]``."""

    spec: str
    arch: str = ""  # the architecture name the config carries
    cls: type | None = None
    registered: bool = False  # True when prefixlint registered it (out-of-tree)


def vllm_registry() -> Any:
    """vLLM's model registry module, with lazy subprocess inspection turned off."""
    from prefixlint.introspect import vllm_api

    return vllm_api.registry_module(in_process=True)


def _import_file(path: Path) -> Any:
    """A file inside a package is imported as its package module (relative imports work);
    a loose file as itself."""
    from prefixlint.static.index import module_name_for, package_root_for

    module_name, _ = module_name_for(path)
    root = package_root_for(path)
    if module_name and root is not None:
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        try:
            found = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            found = None  # the import below says why, as it always did
        origin = found.origin if found is not None else None
        if origin is None or Path(origin).resolve() == path.resolve():
            return importlib.import_module(module_name)
        # The name is another file's (a copy of ``vllm/.../llama.py`` while vLLM is
        # installed elsewhere, a pull request's base beside its head): this file, under
        # a name of its own in the same package, so its relative imports still resolve.
        return _exec_file(path, f"{module_name}__prefixlint_{abs(hash(str(path.resolve())))}")
    return _exec_file(path, f"prefixlint_target_{abs(hash(str(path.resolve())))}")


def _exec_file(path: Path, name: str) -> Any:
    """``path`` imported as module ``name`` (its package: what precedes the last dot)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _model_classes(module: Any) -> list[type]:
    out = []
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, nn.Module)
            and value.__module__ == module.__name__
            and "vllm_config" in inspect.signature(value.__init__).parameters
            and hasattr(value, "forward")
            and ("For" in value.__name__ or hasattr(value, "compute_logits"))
        ):
            out.append(value)
    return out


def _named_class(module: Any, name: str) -> type:
    """The class a ``module:Class`` target names, or a one-line LookupError: vLLM's
    registry answers anything but an ``nn.Module`` subclass with its own TypeError."""
    value = getattr(module, name, None)
    if value is None:
        raise LookupError(f"{module.__name__} has no {name!r}")
    if not (isinstance(value, type) and issubclass(value, nn.Module)):
        raise LookupError(f"{name} is not a model class (not a torch.nn.Module subclass)")
    return value


def resolve_targets(spec: str) -> list[Target]:
    registry = vllm_registry()
    archs = set(registry.ModelRegistry.get_supported_archs())
    if spec in archs:
        return [Target(spec, arch=spec)]
    module: Any
    class_name: str | None = None
    if spec.endswith(".py") or ".py:" in spec:
        file_part, _, class_name = spec.partition(".py:")
        path = Path(file_part if spec.endswith(".py") else file_part + ".py")
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        module = _import_file(path)
        class_name = class_name or None
    elif ":" in spec:
        module_name, _, class_name = spec.partition(":")
        module = importlib.import_module(module_name)
    else:
        from prefixlint.introspect.targets.plugins import unknown_architecture_hint

        raise LookupError(
            f"{spec!r} is not an architecture of the installed vLLM registry"
            + unknown_architecture_hint()
        )
    classes = [_named_class(module, class_name)] if class_name else _model_classes(module)
    if not classes:
        raise LookupError(f"no model class (an nn.Module taking vllm_config) in {spec}")
    targets = []
    for cls in classes:
        name = cls.__name__
        registered = False
        if name in archs:
            registered_cls = _registered_class(registry, name)
            if registered_cls is not cls:
                name = f"{name}__prefixlint"
                registry.ModelRegistry.register_model(name, cls)
                registered = True
        else:
            registry.ModelRegistry.register_model(name, cls)
            registered = True
        targets.append(Target(spec, arch=name, cls=cls, registered=registered))
    return targets


def load_class(registry: Any, arch: str) -> type:
    """The class an architecture name maps to (see ``vllm_api.load_model_class``)."""
    from prefixlint.introspect import vllm_api

    return vllm_api.load_model_class(registry, arch)


def _registered_class(registry: Any, arch: str) -> type | None:
    try:
        return load_class(registry, arch)
    except Exception:
        return None
