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

A sliding window is one attribute too, :data:`WINDOW`, on an ``ATTENTION`` node (and, beside
:data:`CAUSAL`, on eager attention's mask step when the frontend proved the mask a sliding window): the number of keys
a query may attend to, itself included (transformers' and Mistral's ``sliding_window``: query ``i``
sees keys ``i - window + 1 .. i``; FlashAttention's and onnxruntime's ``local_window_size`` left window
is ``window - 1``). The keys the node is handed are what it costs (as torch counts a masked attention);
the window says how many of them a fused kernel that skips masked blocks would touch, and bounds what
a decode cache must hold. Frontends hand a windowed attention the keys its window reaches (the model
builder a cache capped at ``window - 1``, the ONNX frontend a view of the last ``window - 1 + new``
keys of a GroupQueryAttention's full buffer), so a decode step costs at most ``window`` keys.

A value operand that is a prefix of the key operand is one attribute too, :data:`V_IN_K`: the
values are the first ``dv`` columns of each key row, one tensor in memory, as absorbed latent
attention caches ``[latent | rotary key]`` and reads it once (FlashMLA's and vLLM's
``kv_c_and_k_pe_cache``: V is K's first ``kv_lora_rank`` columns). The cost rule then reads V's
bytes as part of K's, never twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .graph import Node
from .ops import Op

__all__ = ["CAUSAL", "WINDOW", "V_IN_K", "AttentionDims", "attention_dims", "attention_operands", "attention_window",
           "is_causal"]

#: The attribute that marks attention (or eager attention's mask step) as causal.
CAUSAL = "causal"
#: The attribute holding a sliding-window attention's window (keys per query, the query's own included).
WINDOW = "window"
#: The attribute that declares an attention's V a view of the first ``dv`` columns of its K (one
#: tensor read once; absorbed MLA's shared latent cache).
V_IN_K = "v_in_k"


@dataclass(frozen=True, slots=True)
class AttentionDims:
    """Batch, query and key/value heads, query and key lengths, qk and v head dims, and the sliding
    window (None: every key handed is in reach)."""

    batch: int
    heads: int
    kv_heads: int
    sq: int
    sk: int
    d: int
    dv: int
    window: int | None = None


def attention_operands(node: Node) -> int:
    """Index of q among ``node``'s inputs (the backward op takes the output gradient first)."""
    return 1 if node.op is Op.ATTENTION_BACKWARD else 0


def attention_dims(attrs: Mapping[str, Any], q: Sequence[int], k: Sequence[int],
                   v: Sequence[int]) -> AttentionDims:
    """Decode concrete q, k, v shapes in the node's layout."""
    window = attrs.get(WINDOW)
    w = int(window) if window is not None else None
    if attrs.get("layout", "bhsd") == "bsd":
        hq = int(attrs["num_heads"])
        hk = int(attrs.get("kv_num_heads", hq))
        return AttentionDims(q[0], hq, hk, q[1], k[1], q[2] // hq, v[2] // hk, w)
    return AttentionDims(q[0], q[1], k[1], q[2], k[2], q[3], v[3], w)


def attention_window(node: Node) -> int | None:
    """The sliding window of an attention ``node`` (keys per query), or None when it has none."""
    window = node.attrs.get(WINDOW)
    return int(window) if window is not None else None


def is_causal(node: Node) -> bool:
    """Whether the frontend marked ``node`` causal (an attention op or an eager mask step)."""
    return bool(node.attrs.get(CAUSAL))
