"""At which sizes the ONNX frontend evaluates a mask's subgraph, and what it feeds it there.

Why a module of its own: :mod:`.masks` cuts the subgraph out and runs it; this says with what. The
small probes set every dim to each of :data:`~..mask_pattern.SIZES`. A sliding window longer than
those looks like the plain causal triangle there (:mod:`..mask_pattern`), so a window candidate (a
scalar integer constant of the subgraph at least as long as the probes' keys: the ``4096`` of
``Sub(q_idx, 4096)``) gets two long probes: the sequence and KV-length dims just past it, every other
dim at :data:`~..mask_pattern.PROBE_BATCH`. Which dim is which comes from the graph inputs' dim names
and positions (:mod:`..dim_roles`), as the frontend tags them. The window is what the long probes
show, never the constant itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from ...ir import Sym
from ...ir.roles import plain_name
from ..dim_roles import is_cache_input, role_at, role_from_name
from ..mask_pattern import LONG_ROLES, window_probes

__all__ = ["Dims", "Sizes", "every", "at", "fill", "long_dims", "window_candidates", "long_probes",
           "scalar_initializer"]

#: the dims a leaf is fed at: numbers, symbolic dims (every symbol takes the size being tried) and
#: ``None`` (a graph input's unknown dim, which takes it too)
Dims = tuple[int | Sym | None, ...]
#: the size of each dim name in one evaluation (``""`` for a graph input's unknown dim)
Sizes = Callable[[str], int]


def every(size: int) -> Sizes:
    """A small probe: every dim at ``size``."""
    return lambda _: size


def at(d: int | Sym | None, sizes: Sizes) -> int:
    """A dim with every symbol (and an unknown dim) at its probe size."""
    if d is None:
        return sizes("")
    return d if isinstance(d, int) else d.evaluate({s: sizes(s) for s in d.symbols})


def fill(name: str, elem_type: int | None, dims: Dims, sizes: Sizes) -> np.ndarray:
    """A leaf at the probe's sizes: a tensor read only for its sizes zeros, an integer or boolean
    input ones (no padding), a ``*position*`` input an arange along its last dim."""
    shape = tuple(at(d, sizes) for d in dims)
    if elem_type is None:
        return np.zeros(shape, dtype=np.float32)
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    if "position" in name and shape and dtype != np.bool_:
        return np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
    return np.ones(shape, dtype=dtype)


def long_dims(inputs: Mapping[str, Dims | None]) -> frozenset[str]:
    """The dim names of the graph inputs that are sequence or KV lengths, by their own names or their
    inputs' (Hugging Face's: dim 1 of ``input_ids``, dim 2 of a past key)."""
    cached = any(is_cache_input(n) for n in inputs)
    out: set[str] = set()
    for name, dims in inputs.items():
        for axis, d in enumerate(dims or ()):
            sym = plain_name(d) if isinstance(d, Sym) else None
            if sym is not None and (role_from_name(sym) or role_at(name, axis, len(dims or ()),
                                                                   cached=cached)) in LONG_ROLES:
                out.add(sym)
    return frozenset(out)


def window_candidates(nodes: Iterable[NodeProto], scalars: Iterable[np.ndarray], longer_than: int) -> list[int]:
    """The scalar integers of the subgraph (``Constant`` nodes, and the scalar initializers in
    ``scalars``) longer than ``longer_than`` keys, shortest first."""
    found = [np.asarray(a) for a in scalars]
    for node in nodes:
        if node.op_type != "Constant":
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.type == attr.TENSOR:
                found.append(numpy_helper.to_array(attr.t))
            elif attr.name == "value_int":
                found.append(np.asarray(attr.i))
    ints = {int(a.reshape(-1)[0]) for a in found if a.size == 1 and np.issubdtype(a.dtype, np.integer)}
    return sorted(i for i in ints if i > longer_than)


def long_probes(candidates: list[int], long: frozenset[str]) -> Iterator[list[Sizes]]:
    """For each candidate window, the two probes that would show it."""
    for w in candidates:
        yield list(window_probes(long, w))



def scalar_initializer(t: TensorProto) -> bool:
    """An initializer that may hold a window: one integer."""
    return len(t.dims) == 0 or (len(t.dims) == 1 and t.dims[0] == 1)
