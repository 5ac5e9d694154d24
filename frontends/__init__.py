"""Frontends: one thin module per source format, each lowering to the canonical IR.

The torch frontend needs torch (an optional extra) and is imported lazily, so the ONNX path and the
rest of narrowpipe work without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["from_torch", "load_pt2"]


def from_torch(*args: Any, **kwargs: Any):  # noqa: ANN201 - see frontends.torch.frontend.from_torch
    from .torch.frontend import from_torch as impl
    return impl(*args, **kwargs)


def load_pt2(*args: Any, **kwargs: Any):  # noqa: ANN201
    from .torch.frontend import load_pt2 as impl
    return impl(*args, **kwargs)
