"""narrowpipe: find the narrowest pipe (compute, memory, interconnect) of a model on real hardware.

Public API::

    g = narrowpipe.from_torch(model, args, kwargs)      # or narrowpipe.load("model.onnx" / ".pt2")
    r = narrowpipe.analyze(g, batch=8, seq=2048)        # counts: r.flops, r.bytes, r.params, r.ops
"""

from __future__ import annotations

from .costmodel.analyze import analyze
from .costmodel.report import OpRow, Report, Unmodeled
from .errors import (FrontendError, IRError, ModelLoadError, NarrowpipeError, ShapeError,
                     TargetSpecError, UnboundDimError, UnknownTargetError, UnsupportedOpError,
                     VerificationError)
from .frontends import from_torch
from .ir import Graph
from .loading import load

__version__ = "0.1.0"

__all__ = [
    "from_torch", "load", "analyze", "Graph", "Report", "OpRow", "Unmodeled", "NarrowpipeError",
    "FrontendError", "ModelLoadError", "UnsupportedOpError", "ShapeError", "IRError",
    "VerificationError", "UnboundDimError", "TargetSpecError", "UnknownTargetError", "__version__",
]
