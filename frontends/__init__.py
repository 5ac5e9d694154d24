"""Frontends: one thin module per source format, each lowering to the canonical IR.

The torch frontend needs torch (an optional extra) and is imported lazily, so the ONNX path and the
rest of narrowpipe work without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["from_torch", "load_pt2", "save_pt2", "export", "export_decode_step"]


def from_torch(*args: Any, **kwargs: Any):  # noqa: ANN201 - see frontends.torch.frontend.from_torch
    from .torch.frontend import from_torch as impl
    return impl(*args, **kwargs)


def load_pt2(*args: Any, **kwargs: Any):  # noqa: ANN201
    from .torch.pt2 import load_pt2 as impl
    return impl(*args, **kwargs)


def save_pt2(*args: Any, **kwargs: Any):  # noqa: ANN201 - see frontends.torch.pt2.save_pt2
    from .torch.pt2 import save_pt2 as impl
    return impl(*args, **kwargs)


def export(*args: Any, **kwargs: Any):  # noqa: ANN201 - see frontends.torch.frontend.export_module
    from .torch.frontend import export_module as impl
    return impl(*args, **kwargs)


def export_decode_step(*args: Any, **kwargs: Any):  # noqa: ANN201 - see frontends.torch.decode_export
    from .torch.decode_export import export_decode_step as impl
    return impl(*args, **kwargs)
