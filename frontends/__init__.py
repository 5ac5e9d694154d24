"""Frontends: one thin module per source format, each lowering to the canonical IR.

The torch frontend needs torch (an optional extra) and is imported lazily, so the ONNX path and the
rest of narrowpipe work without it. The wrappers below carry the real signatures and docstrings, so
``help(narrowpipe.from_torch)`` reads as the function does without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..ir import Graph

__all__ = ["from_torch", "load_pt2", "save_pt2", "export", "export_decode_step"]


def _args_tuple(args: Any) -> tuple[Any, ...]:
    """Positional example inputs as torch.export takes them: a tuple (one tensor is wrapped; asking a
    tensor's truth to default it raised 'Boolean value of Tensor ... is ambiguous')."""
    if args is None:
        return ()
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


def from_torch(module: Any, args: Any = None, kwargs: Mapping[str, Any] | None = None, *,
               dynamic_shapes: Any = None, strict: bool = False, name: str | None = None) -> Graph:
    """Lower a torch model to an IR graph: an ``nn.Module`` (exported here with ``torch.export``), an
    ``ExportedProgram`` or an fx ``GraphModule``. ``args``: the example positional inputs (a tuple, or
    one tensor); ``kwargs``: keyword inputs (``{"input_ids": ids, "use_cache": False}``);
    ``dynamic_shapes`` follows ``torch.export``: dims given as ``torch.export.Dim("batch")`` keep their
    names, with the example's size as default binding and a role from their name or place. Trace huge
    models on the meta device (no weights are allocated). Needs torch."""
    from .torch.frontend import from_torch as impl
    return impl(module, _args_tuple(args), kwargs, dynamic_shapes=dynamic_shapes, strict=strict, name=name)


def load_pt2(path: str | Path, *, strict: bool = False, dynamic_shapes: Any = None) -> Graph:
    """A program saved with ``torch.export.save`` (or :func:`save_pt2`) as an IR graph; dim names from
    ``dynamic_shapes`` if given, else from the archive if :func:`save_pt2` wrote them. Needs torch."""
    from .torch.pt2 import load_pt2 as impl
    return impl(path, strict=strict, dynamic_shapes=dynamic_shapes)


def save_pt2(program: Any, path: str | Path, *, dynamic_shapes: Any = None) -> Path:
    """``torch.export.save`` of an ``ExportedProgram`` that keeps the ``Dim`` names (torch keeps only
    ``s77``): those :func:`export` recorded, or those of ``dynamic_shapes``. Needs torch."""
    from .torch.pt2 import save_pt2 as impl
    return impl(program, path, dynamic_shapes=dynamic_shapes)


def export(module: Any, args: Any = None, kwargs: Mapping[str, Any] | None = None, *,
           dynamic_shapes: Any = None, strict: bool = False) -> Any:
    """``torch.export.export`` with its errors as ``FrontendError`` and the ``Dim`` names recorded on
    the program, for :func:`from_torch` and :func:`save_pt2`. Needs torch."""
    from .torch.frontend import export_module as impl
    return impl(module, _args_tuple(args), kwargs, dynamic_shapes=dynamic_shapes, strict=strict)


def export_decode_step(model: Any, *, batch: int = 2, past: int = 16, static: bool = False,
                       name: str | None = None) -> Graph:
    """The IR graph of one decode step of a transformers causal LM (a KV cache of ``past`` tokens,
    ``batch`` sequences, one new token each; ``static``: a preallocated static cache). Needs torch
    and transformers."""
    from .torch.decode_export import export_decode_step as impl
    return impl(model, batch=batch, past=past, static=static, name=name)
