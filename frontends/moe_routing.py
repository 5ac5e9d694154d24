"""The top-k of a grouped GEMM's router, found in the lowered graph; shared by the torch and ONNX frontends.

A grouped GEMM's rows are ``top_k x tokens`` routed rows, and no expert can take more rows than there
are tokens (a token picks ``top_k`` different experts). The op itself only sees ``S`` rows and an
``offsets`` tensor, so the frontends look for the router that made the offsets: Hugging Face's
grouped experts build them as ``cumsum(histc(sort(top_k_index.flatten())))`` (ONNX: the same
through ``CumSum``/``ReduceSum``/``OneHot``). Following the first operand up from the offsets to a
``TOPK`` node reads its ``k``; anything else (no router in reach) leaves ``top_k`` unknown, which
only drops the one-row-per-token cap.
"""

from __future__ import annotations

from ..ir import Op, Value

__all__ = ["routed_top_k", "MAX_STEPS"]

#: producers followed up from the offsets (Hugging Face's chain is 5 to 8 ops long)
MAX_STEPS = 16


def routed_top_k(offsets: Value | None) -> int | None:
    """The ``k`` of the ``TOPK`` whose indices the ``offsets`` were counted from, or None."""
    v = offsets
    for _ in range(MAX_STEPS):
        node = v.producer if v is not None else None
        if node is None:
            return None
        if node.op is Op.TOPK:
            k = node.attrs.get("k")
            return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
        v = next((x for x in node.inputs if x is not None), None)
    return None
