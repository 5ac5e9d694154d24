"""The all-reduce that keeps a weight held by two pipeline stages in step: tied embeddings.

Why: with ``pp > 1`` a model whose head reads the token embedding (GPT-2, Gemma) has that weight on
the first stage (the lookup) and a copy on the last (the head). Each stage's backward leaves its own
gradient of it, and the runtime sums the two before the optimizer: Megatron-Core's
``finalize_model_grads`` calls ``_allreduce_word_embedding_grads`` (megatron/core/distributed/
finalize_model_grads.py), a ``torch.distributed.all_reduce`` of the weight's ``main_grad`` over the
embedding group (the first and last stage's ranks of one tensor- and data-parallel position). It
runs synchronously once per step, after the data-parallel gradient reduction has finished
(``finish_grad_sync``) and before the optimizer, so nothing overlaps it: it is exposed in full in
every runtime modelled here.

Its buffer is the weight's local gradient: this device's tensor-parallel shard (``vocab/tp x
hidden``, the vocabulary padded as the runtime pads it) in the runtime's gradient dtype
(``Runtime.grad_reduce_dtype``: Megatron's fp32 ``main_grad``), timed on the topology between the
two stages' devices (``(pp - 1) x`` the pipeline stride apart). With one stage (or a device holding
both blocks) the two gradients meet in one buffer and nothing crosses a link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...ir import Op
from .block_cost import BlockCost
from .runtime import Runtime
from .strategy import Parallel

if TYPE_CHECKING:
    from .step import CollectiveTimer

__all__ = ["TiedWeight", "tied_weights", "tied_grad_collectives"]


@dataclass(frozen=True)
class TiedWeight:
    """A weight more than one pipeline device holds: its name, the devices, its local elements."""

    name: str
    devices: tuple[int, ...]
    numel: int


def tied_weights(per_device: Sequence[Sequence[BlockCost]]) -> tuple[TiedWeight, ...]:
    """The weights that two different blocks hold (by name, :attr:`.BlockCost.weights`: the
    embedding and the head), placed on different pipeline devices. One repeated layer's cost stands
    for distinct layers with weights of their own (as in :func:`.block_cost.unique_params`), so its
    names on two devices are not one weight."""
    holders: dict[str, dict[int, int]] = {}        # name -> id(block) -> its device
    numel: dict[str, int] = {}
    for device, blocks in enumerate(per_device):
        for b in blocks:
            for name, n, _ in b.weights:
                holders.setdefault(name, {}).setdefault(id(b), device)
                numel[name] = n
    out = []
    for name, owners in holders.items():
        devices = tuple(sorted(set(owners.values())))
        if len(owners) > 1 and len(devices) > 1:
            out.append(TiedWeight(name, devices, numel[name]))
    return tuple(out)


def tied_grad_collectives(tied: Sequence[TiedWeight], p: Parallel, timer: CollectiveTimer,
                          runtime: Runtime) -> list[tuple[int, int, int, float]]:
    """``(bytes, members, stride, seconds)`` of each tied weight's gradient all-reduce per step
    (see the module doc): the members are the stages holding it, ``stride`` ranks apart."""
    _, pp_stride = p.axis("pp")
    size = runtime.grad_reduce_dtype.nbytes(1)
    out = []
    for t in tied:
        members = len(t.devices)
        apart = pp_stride * (t.devices[-1] - t.devices[0]) // (members - 1)
        nbytes = t.numel * size
        out.append((nbytes, members, apart, timer.seconds(Op.ALL_REDUCE, float(nbytes), members, apart)))
    return out
