"""Parameters on the meta device, buffers real (accelerate's ``include_buffers=False``).

Some modules read buffers at construction (rotary caches); parameters are what would cost
memory. Each parameter is moved to meta in place right after registration with
``torch.utils.swap_tensors``, which keeps the Python object, vLLM's parameter subclass
(``ModelWeightParameter``) and its attributes (``weight_loader``, ``output_dim``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


def _to_meta(param: torch.Tensor) -> None:
    if param.device.type == "meta":
        return
    twin = nn.Parameter(torch.empty_like(param, device="meta"), requires_grad=param.requires_grad)
    if type(param) is not nn.Parameter:
        twin.__class__ = type(param)
    twin.__dict__.update(param.__dict__)
    torch.utils.swap_tensors(param, twin)


@contextlib.contextmanager
def meta_parameters() -> Iterator[None]:
    original = nn.Module.register_parameter

    def register_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(self, name, param)
        if param is not None:
            _to_meta(param)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]
