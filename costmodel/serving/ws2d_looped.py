"""Looped CollectiveEinsum (Wang et al., ASPLOS 2023) as Pope et al.'s released code runs it: a
reduce-scatter or all-gather over one torus axis cut into collective-permutes that run under the
chunks of the matmul beside it.

The forms and their step counts are those of ``collectives.py`` in the released implementation
(google-research ``scaling_transformer_inference_efficiency``, POPE-CODE in
backends/catalog/SOURCES.toml); the functions below take the model's own costs of one matmul chunk and
one permute (a chunk and the permute issued beside it run at the same time, so each loop step costs
the longer of the two) and give the pair's time:

* ``latency`` (``matmul_reducescatter_latency``, ``allgather_matmul_latency``,
  ``reducescatter_latency``): ``k // 2`` chunks; each step sends half of a partial sum (or one
  activation shard) each way round the ring, so a permute carries ``1 / k`` of the output. The
  reduce-scatter sends its last partial sums after the last chunk; the gather first fetches the
  neighbour's shard, before any chunk can start. Decode steps use these (``latency_collectives``).
* ``oneway`` (``matmul_reducescatter_oneway``, ``allgather_matmul_one_way``): ``k`` chunks, one
  direction, each permute under the next chunk and none after the last: the parallel layer's forms
  without latency collectives (prefill, ``usage/run_benchmark.py``).
* ``throughput`` (``matmul_reducescatter_throughput``, ``reducescatter_throughput``): ``k`` chunks,
  the partial sums halved and sent both ways: the serial layer's forms without latency collectives
  (``layers/layers_serial.py``).

The latency and throughput forms send both ways at once: on a torus axis each shift has its own links,
on a line without wraparound both shifts' buffers share every link direction (``pair_s``).

The accumulating adds between chunks are assumed to fuse into each chunk's matmul (XLA's output
fusion) and are not costed apart.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Form", "loop_steps", "reduce_scatter_matmul", "all_gather_matmul", "ring_reduce_scatter",
           "reduce_scatter_permute_bytes", "all_gather_permute_bytes"]

Form = Literal["latency", "oneway", "throughput"]


def loop_steps(form: Form, k: int) -> int:
    """Matmul chunks (and loop steps) over an axis of ``k``: ``k // 2`` for the latency forms, else ``k``."""
    return max(k // 2, 1) if form == "latency" else max(k, 1)


def reduce_scatter_matmul(form: Form, chunk_s: float, permute_s: float, k: int, pair_s: float | None = None) -> float:
    """A matmul whose output is reduce-scattered over ``k`` devices inside it: the first chunk, then
    each further chunk beside the permute of the partial sums so far; the latency form's last
    partial sums go out after the last chunk, one way. ``pair_s``: a loop step's permutes where the
    form sends both ways at once and that takes longer than one permute (:meth:`.Fabric.pair`)."""
    if k <= 1:
        return chunk_s
    steps = loop_steps(form, k)
    step = permute_s if form == "oneway" or pair_s is None else pair_s
    t = chunk_s + (steps - 1) * max(chunk_s, step)
    return t + permute_s if form == "latency" else t


def all_gather_matmul(form: Form, chunk_s: float, permute_s: float, k: int, pair_s: float | None = None) -> float:
    """A matmul whose input is all-gathered over ``k`` devices inside it: each chunk beside the permute
    that brings the next shard, the last chunk alone; the latency form first fetches the neighbour's
    shard, one way (its first chunk multiplies two shards). ``pair_s`` as for :func:`reduce_scatter_matmul`."""
    if k <= 1:
        return chunk_s
    steps = loop_steps(form, k)
    step = permute_s if form == "oneway" or pair_s is None else pair_s
    t = (steps - 1) * max(chunk_s, step) + chunk_s
    return permute_s + t if form == "latency" else t


def ring_reduce_scatter(form: Form, permute_s: float, k: int, pair_s: float | None = None) -> float:
    """A reduce-scatter written as permutes with no matmul beside them (``reducescatter_latency``:
    ``k // 2`` steps in turn, both ways but the last; the one-way and throughput forms ``k - 1``)."""
    if k <= 1:
        return 0.0
    step = permute_s if form == "oneway" or pair_s is None else pair_s
    return (loop_steps(form, k) - 1) * step + permute_s if form == "latency" else (k - 1) * step


def reduce_scatter_permute_bytes(form: Form, out_bytes: float, k: int) -> float:
    """Bytes one permute of a looped reduce-scatter carries in one direction, for ``out_bytes`` of
    partial sums before the scatter: a chunk's output (``out / steps``), halved where the form sends
    both ways (latency, throughput)."""
    chunk = out_bytes / loop_steps(form, k)
    return chunk if form == "oneway" else chunk / 2


def all_gather_permute_bytes(form: Form, shard_bytes: float) -> float:
    """Bytes one permute of a looped all-gather carries in one direction: a whole shard (the latency
    form sends one each way at once; the one-way form one), half a shard in the throughput form."""
    return shard_bytes / 2 if form == "throughput" else shard_bytes
