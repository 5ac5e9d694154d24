"""The one reading of an attention node's layout and of the causal attribute.

Why: attention reaches the IR in two layouts. torch's SDPA gives ``[B, H, S, D]`` tensors
(``layout="bhsd"``, the default); onnxruntime's contrib ops give ``[B, S, H*D]`` with the head
counts as attributes (``layout="bsd"``, ``num_heads``, ``kv_num_heads``). Cost rules, the GEMM view
of fused kernels and the verifier all need the same six numbers, so they decode them here and
nowhere else.

Causality is one attribute, :data:`CAUSAL`, wherever the frontend proved it: on an ``ATTENTION``
node (the op's flag, or a materialised mask proven causal) and on the ``ADD``/``WHERE`` that applies
a proven causal mask in eager attention (``QK^T -> mask -> softmax -> PV``), so a fused eager
attention kernel is causal when one of its nodes says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .graph import Node
from .ops import Op

__all__ = ["CAUSAL", "AttentionDims", "attention_dims", "attention_operands", "is_causal"]

#: The attribute that marks attention (or eager attention's mask step) as causal.
CAUSAL = "causal"


@dataclass(frozen=True, slots=True)
class AttentionDims:
    """Batch, query and key/value heads, query and key lengths, qk and v head dims."""

    batch: int
    heads: int
    kv_heads: int
    sq: int
    sk: int
    d: int
    dv: int


def attention_operands(node: Node) -> int:
    """Index of q among ``node``'s inputs (the backward op takes the output gradient first)."""
    return 1 if node.op is Op.ATTENTION_BACKWARD else 0


def attention_dims(attrs: Mapping[str, Any], q: Sequence[int], k: Sequence[int],
                   v: Sequence[int]) -> AttentionDims:
    """Decode concrete q, k, v shapes in the node's layout."""
    if attrs.get("layout", "bhsd") == "bsd":
        hq = int(attrs["num_heads"])
        hk = int(attrs.get("kv_num_heads", hq))
        return AttentionDims(q[0], hq, hk, q[1], k[1], q[2] // hq, v[2] // hk)
    return AttentionDims(q[0], q[1], k[1], q[2], k[2], q[3], v[3])


def is_causal(node: Node) -> bool:
    """Whether the frontend marked ``node`` causal (an attention op or an eager mask step)."""
    return bool(node.attrs.get(CAUSAL))
