"""Number formats a deployment chooses separately: weights, activations, GEMM inputs and the KV cache.

Serving stacks quantize them independently: fp8 or int4 weights with bf16 activations
(weight-only: the bytes of the weights shrink, the matmul runs at the activations' rate after a
dequantization in the kernel), fp8 end to end (the chip's fp8 rate), an fp8 KV cache (half the
cache bytes, so twice the batch). None keeps the graph's own format.

A weight format is what the engines quantize: the linear layers' weights. The token embedding, the
output head (``lm_head``, tied or not), norms' scales and biases stay in the model's format: AWQ and
GPTQ checkpoints keep ``lm_head`` and ``embed_tokens`` in fp16 (vLLM builds ``ParallelLMHead`` and
``VocabParallelEmbedding`` without a quantization method unless a checkpoint opts in), and NVIDIA
ModelOpt's FP8/INT4-AWQ configurations exclude ``*lm_head*``. Retyping them too made int4 decode of
Llama-3-8B read its 1 GB head at a quarter of its bytes (about 10% optimistic against AWQ models).
Convolutions' weights are quantized with the linear layers' (ModelOpt's ``QuantLinearConvBase`` is the
one quantized base of ``Linear`` and ``Conv``), so a vision model's ``--weights int8`` is its convs'.
This is the one rule for every command: ``serve``, and ``analyze``/``compare``/``whatif``'s
``--weights`` (which retyped every float weight, the embedding and head too, while ``serve`` kept
them: the same flag was two deployments, 8.03 against 9.08 GB for Llama-3.1-8B in int8).

``gemm_inputs`` is how the engines run FP8 "W8A8": TensorRT-LLM keeps the model in 16 bits and
quantizes only the activation a GEMM reads (its FP8 checkpoints say ``"dtype": "float16"`` beside
``"quant_algo": "FP8"``; Q/DQ around the GEMMs, TensorRT-LLM docs/source/precision.md), vLLM's FP8
W8A8 quantizes each linear layer's input the same way. So with ``gemm_inputs`` set, every value read
only by GEMMs (a norm's output before q/k/v, the SwiGLU product before the down projection, the
attention output before o) is written in that format by its producer (the quantization fused into
it, as the engines fuse it), the GEMM runs at the chip's rate for that format, and everything else
(the residual stream, q/k/v, the GEMM outputs, the tensor-parallel all-reduces) stays in
``activations``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

from ...errors import NarrowpipeError, NarrowpipeWarning
from ...ir import DType, Graph, Node, TensorType, Value, node_subgraphs
from ...ir.ops import Op
from ..costcache import forget
from ..dequant_fusion import WEIGHT_PATH, is_stored_weight
from ..precision import with_precision
from .block_scales import add_block_scales

__all__ = ["Formats", "WeightFormatWarning"]


def _parse(text: DType | str | None, what: str, option: str) -> DType | None:
    """``text`` as a format; a bad one raises naming the keyword and the CLI flag (``option``)."""
    if text is None or text == "":
        return None
    where = f"{option}= / --{option.replace('_', '-')}"
    if isinstance(text, DType):
        dt = text
    else:
        try:
            dt = DType.parse(text)
        except ValueError:
            raise NarrowpipeError(f"unknown {what} format {text!r} ({where}; e.g. bf16, fp16, fp8_e4m3, int8, int4, "
                                  "fp4)") from None
    if not (dt.is_float or dt.is_int):
        raise NarrowpipeError(f"{what} format {dt.value!r} ({where}) is not a number format")
    if option == "gemm_inputs" and dt.is_int and dt.bits > 8:
        raise NarrowpipeError(f"{what} format {dt.value!r} ({where}) is no quantized GEMM input: GEMMs read 8-bit "
                              "inputs (fp8_e4m3, int8) or a float format")
    return dt


@dataclass(frozen=True)
class Formats:
    """The weights', activations', GEMM inputs' and KV cache's formats (None: as the graph has them)."""

    weights: DType | None = None
    activations: DType | None = None
    kv: DType | None = None
    gemm_inputs: DType | None = None

    @classmethod
    def of(cls, weights: DType | str | None = None, activations: DType | str | None = None,
           kv: DType | str | None = None, gemm_inputs: DType | str | None = None) -> Formats:
        return cls(_parse(weights, "weight", "weights"), _parse(activations, "activation", "activations"),
                   _parse(kv, "KV cache", "kv"), _parse(gemm_inputs, "GEMM input", "gemm_inputs"))

    def apply(self, graph: Graph) -> Graph:
        """``graph`` with its weights, activations and GEMM inputs retyped (a copy when anything changes)."""
        if self.weights is None and self.activations is None and self.gemm_inputs is None:
            return graph
        out = with_precision(graph, activations=self.activations)
        if self.weights is not None:
            if quantize_linear_weights(out, self.weights):
                out.meta["precision"] = {**out.meta.get("precision", {}), "weights": self.weights.value}
            else:
                warnings.warn(_weights_not_applied(out, self.weights), WeightFormatWarning, stacklevel=2)
        if self.gemm_inputs is not None:
            gemm_inputs_in(out, self.gemm_inputs)
        forget(out)
        return out

    def applied_to(self, graph: Graph) -> Formats:
        """These formats as :meth:`apply` applied them to ``graph`` (its result): a weight format that
        retyped nothing (an already-quantized model) is dropped, so reports say what was costed."""
        if self.weights is None or graph.meta.get("precision", {}).get("weights") == self.weights.value:
            return self
        return replace(self, weights=None)

    def label(self) -> str:
        parts = [f"{k} {v.value}" for k, v in (("weights", self.weights), ("activations", self.activations),
                                                ("GEMM inputs", self.gemm_inputs), ("KV", self.kv))
                 if v is not None]
        return ", ".join(parts) or "the model's own formats"

    def to_dict(self) -> dict[str, Any]:
        """The report's formats (serving report version 2 added ``gemm_inputs``)."""
        return {k: (v.value if v is not None else None) for k, v in
                (("weights", self.weights), ("activations", self.activations), ("kv", self.kv),
                 ("gemm_inputs", self.gemm_inputs))}


class WeightFormatWarning(NarrowpipeWarning):
    """A weight format that changed no weight (the model's are already quantized, or it has no linear
    layers' float weights): the figures are the model's own weights'."""


def _weights_not_applied(graph: Graph, dtype: DType) -> str:
    """Why a weight format retyped nothing, naming the formats the model's weights are stored in."""
    quantized = sorted({v.type.dtype.value for v in graph.weights if v.type.dtype.is_int and v.type.dtype.bits <= 8
                        and any(u.node.op is Op.DEQUANTIZE for u in v.uses)})
    if quantized:
        return (f"weights {dtype.value}: the model's weights are already quantized ({'/'.join(quantized)} "
                f"dequantized into their GEMMs), so the format was not applied; the figures are for the "
                f"stored weights")
    return (f"weights {dtype.value}: the model has no float weights that only linear layers read, so the "
            f"format was not applied")


_GEMMS = (Op.DOT, Op.GROUPED_DOT)
#: the layers whose weights a weight format quantizes (the module doc says why convolutions too)
_QUANTIZED_LAYERS = (*_GEMMS, Op.CONV)
def _reads_against_weight(node: Node, v: Value) -> bool:
    """``node`` is a GEMM that multiplies ``v`` by a weight (a linear layer, not attention's Q K^T or P V)."""
    return node.op in _GEMMS and any(u is not None and u is not v and is_stored_weight(u) for u in node.inputs)


def _readers_through_weight_path(v: Value, users: dict[Value, list[Node]]) -> list[Node]:
    """The nodes that use weight ``v``, looking through transposes, views, casts and dequantizations."""
    out: list[Node] = []
    todo = [v]
    while todo:
        for node in users.get(todo.pop(), []):
            if node.op in WEIGHT_PATH and node.inputs and node.inputs[0] is not None and node.outputs:
                todo.extend(node.outputs)
            else:
                out.append(node)
    return out


def _vocab_rows(graph: Graph, users: dict[Value, list[Node]]) -> int | None:
    """Rows of the largest table a gather reads: the token embedding's vocabulary (position and
    token-type tables are smaller), so the output head is the GEMM weight with that many rows."""
    rows = [v.type.shape[0] for v in graph.weights if v.type.shape and isinstance(v.type.shape[0], int)
            and any(n.op is Op.GATHER and n.inputs and n.inputs[0] is v for n in users.get(v, []))]
    return max(rows) if rows else None


def quantize_linear_weights(graph: Graph, dtype: DType) -> int:
    """Retype, in place, the float weights only linear layers (GEMMs) and convolutions read, the
    output head excepted (the module doc says why); returns how many."""
    users = graph.users()
    vocab = _vocab_rows(graph, users)
    n = 0
    for v in list(graph.weights):      # block scales add weights as it goes
        if not v.type.dtype.is_float or len(v.type.shape) < 2:
            continue
        readers = _readers_through_weight_path(v, users)
        if not readers or any(r.op not in _QUANTIZED_LAYERS for r in readers):
            continue
        if vocab is not None and vocab in v.type.shape:
            continue
        original = v.type.dtype
        v.type = TensorType(dtype, v.type.shape)
        add_block_scales(graph, v, original)
        n += 1
    for node in graph.nodes:
        for body in node_subgraphs(node):
            n += quantize_linear_weights(body, dtype)
    return n


def gemm_inputs_in(graph: Graph, dtype: DType) -> int:
    """Retype, in place, every float value that nodes produce and only linear layers read (GEMMs
    against a weight: attention's score and value products stay in the activations' format, as
    the module doc says); returns how many."""
    users = graph.users()
    n = 0
    for node in graph.nodes:
        for v in node.outputs:
            readers = users.get(v, [])
            if readers and v.type.dtype.is_float and all(_reads_against_weight(u, v) for u in readers):
                v.type = TensorType(dtype, v.type.shape)
                n += 1
    return n
