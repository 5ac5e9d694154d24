"""``load``: open a model file of any supported format (or a bundled example) as an IR graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import IRError, ModelLoadError, NarrowpipeError
from .ir import Graph, graph_from_dict

__all__ = ["load", "load_model", "SUFFIXES"]

SUFFIXES = (".pt2", ".onnx", ".json")


def load(path: str | Path | Any, **options: Any) -> Graph:
    """Load a ``.pt2`` (torch.export.save or :func:`save_pt2`), ``.onnx`` file or ``onnx.ModelProto``,
    or a graph ``.json`` (:meth:`Graph.save`), or a Hugging Face ``config.json`` (built by
    :func:`narrowpipe.from_config`, no weights). ``.pt2`` takes ``dynamic_shapes=`` (the spec it was
    exported with) to name its dims where the archive does not."""
    if not isinstance(path, (str, Path)):
        if type(path).__name__ == "ModelProto":
            from .frontends.onnx.frontend import from_onnx_model
            return from_onnx_model(path, **options)
        raise ModelLoadError(f"cannot load an object of type {type(path).__name__}")
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".pt2":
        try:
            from .frontends.torch.frontend import load_pt2
        except ImportError as exc:
            raise ModelLoadError("loading .pt2 files needs torch: pip install 'narrowpipe[torch]'",
                                 file=str(p)) from exc
        return load_pt2(p, **options)
    if suffix == ".onnx":
        from .frontends.onnx.frontend import load_onnx
        return load_onnx(p, **options)
    if suffix == ".json":
        if not p.exists():
            raise ModelLoadError("file not found", file=str(p))
        return _load_json(p)
    raise ModelLoadError(f"unknown model format {suffix or '(no suffix)'!r}; expected one of {', '.join(SUFFIXES)}",
                         file=str(p))


def as_graph(model: Any, what: str) -> Graph:
    """The IR graph an API function (``what``) was handed: a graph, or what :func:`load_model` loads
    (a file, a bundled example's name), or an in-memory ONNX ``ModelProto``. A torch module or a raw
    object is a :class:`NarrowpipeError` saying what to call first, not an AttributeError deep inside."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, (str, Path)):
        return load_model(model)
    kind = type(model).__module__.split(".")[0]
    if type(model).__name__ == "ModelProto" and kind == "onnx":
        return load(model)
    if kind == "torch":
        raise NarrowpipeError(f"{what} takes an IR graph, got a torch {type(model).__name__}: lower it first with "
                              "narrowpipe.from_torch(module, args) (or narrowpipe.load('model.pt2'))")
    raise NarrowpipeError(f"{what} takes an IR graph (narrowpipe.load, from_torch, transformer or from_config), a "
                          f"model file or a bundled example's name; got {type(model).__name__}")


def load_model(model: str | Path | Graph) -> Graph:
    """A model argument as the API and CLI take it: a graph, a file (.onnx, .pt2, .json) or the name
    of a bundled example."""
    if isinstance(model, Graph):
        return model
    path = Path(model)
    if path.suffix.lower() in SUFFIXES or path.exists():
        return load(path)
    from .models.examples import load_example
    return load_example(str(model))  # raises with close matches


def _load_json(path: Path) -> Graph:
    """A graph ``.json`` (:meth:`Graph.save`) or a transformers ``config.json`` (it names a
    ``model_type`` and holds no nodes), parsed once and told apart by its contents."""
    import json
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"not a narrowpipe graph JSON: not JSON: {exc}", file=str(path)) from None
    if isinstance(data, dict) and "model_type" in data and "nodes" not in data:
        from .models import from_config  # a Hugging Face config.json: built by the model builder
        return from_config(data)
    if not isinstance(data, dict):
        raise ModelLoadError("not a narrowpipe graph JSON: graph JSON must be an object", file=str(path))
    try:
        return graph_from_dict(data)
    except IRError as exc:   # a format mismatch, a malformed entry or a graph the verifier refuses
        raise ModelLoadError(f"invalid graph JSON: {exc}", file=str(path)) from None
