"""Which kernels a spatial dataflow compiler runs as kernels of their own, paying a per-kernel latency.

The catalog's per-kernel latency of a dataflow chip (``launch_overhead``: Groq, Cerebras) is the fill
and synchronisation of one step of the chain: a contraction must gather its K dimension, a
normalization or reduction the whole row, attention its softmax, a gather a data-dependent address.
An op that needs none of that rides in its producer's stream and adds no step:

* a layout change (permute, transpose, a copy or cast, a concatenation or split of resident pieces)
  of a tensor resident in SRAM is an address mapping: Groq's switch slices (SXM) shift, permute and
  transpose streams as they flow between functional slices (GROQ-ISCA20), and Cerebras' compiler
  lays a tensor out over the wafer's cores as its consumer reads it (assumption: no Cerebras source
  says how a permute is compiled; on a 2D mesh of cores that hold their own slices it is a routing
  choice, not a pass over the data);
* an elementwise op is chained onto the stream: a functional unit's output feeds the next one's input
  directly (GROQ-ISCA20's "chaining"), the way an epilogue rides a GPU matmul;
* writing one token's K/V row into an SRAM-resident cache (an in-place ``CONCAT``/scatter,
  :data:`~narrowpipe.ir.IN_PLACE`) is a store at the end of the producer's stream (MEM slices write
  streams on Groq), not a launch.

Such a kernel still pays its work (bytes at the SRAM bandwidth, FLOPs at the vector rate); only the
fixed latency is left out. The fit of the latency (``benchmarks/published_decode.py``) counts only the
kernels that pay it, so the two stay consistent.
"""

from __future__ import annotations

from ...ir import IN_PLACE, VIEW_OPS, Node, Op, OpGroup
from ..kernels import Kernel

__all__ = ["in_stream", "STREAM_SOURCE"]

#: Layout changes a dataflow compiler maps into addressing (views are free everywhere): a
#: concatenation or split of resident pieces (RoPE's rotate-half) is where each piece is read from.
_LAYOUT = frozenset({Op.PERMUTE, Op.COPY, Op.CAST, Op.CONCAT, Op.SPLIT})
#: Ops that write into an operand where it lies when they carry ``in_place`` (a KV cache append).
_WRITES = frozenset({Op.CONCAT, Op.SCATTER, Op.SCATTER_ND, Op.SCATTER_ELEMENTS, Op.INDEX_PUT})

STREAM_SOURCE = "GROQ-ISCA20's chaining and stream permutes; an assumption on other dataflow chips"


def _streams(node: Node) -> bool:
    op = node.op
    if op in VIEW_OPS or op in _LAYOUT or node.group is OpGroup.ELEMENTWISE:
        return True
    return op in _WRITES and isinstance(node.attrs.get(IN_PLACE), int)


def in_stream(kernel: Kernel) -> bool:
    """True where every node of ``kernel`` is a layout change, an elementwise op or an in-place
    write: it runs in its producer's stream with no per-kernel latency of its own."""
    return bool(kernel.nodes) and all(_streams(n) for n in kernel.nodes)
