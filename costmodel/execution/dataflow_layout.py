"""Where a dataflow layout cuts the program into chips, and what each chip then holds.

Kernels go over the chips in program order, contiguously. Each chip takes an equal share of what
the chips before it left (its footprint: the weights it is the first to use and the activations it
produces, scaled to the program's peak: :func:`at_peak`), so no chip holds more than its fast memory
when the chips are ceil(footprint / capacity).
A share rarely ends between two kernels: a weight matrix larger than what is left of a chip (Llama-3's
1.05 GB vocabulary matrix on a 230 MB Groq chip) is split over consecutive chips, as Groq's compiler
splits a tensor over chips; each chip holds its part of the weights and does its part of the work,
and the hop from a chip holding a first part carries the kernel's inputs and the output made so far.
A cut moves, within :data:`_CUT_WINDOW` kernels, to a kernel boundary where fewer bytes cross (a KV
cache stays on the chip of the attention that reads it), only where that leaves no chip empty and
none over its capacity.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...ir import IN_PLACE, Value
from ..interpreter import CostTable
from ..kernels import Kernel
from ..sizes import values_bytes

if TYPE_CHECKING:
    from .dataflow_train import TrainingTerms

__all__ = ["Cut", "Layout", "boundary_bytes", "footprint_parts", "footprints", "place"]

#: Where a chip after the first begins: ``share`` of the way into the kernel at ``index`` (0: at its
#: start; more: that kernel is split, its first ``share`` on the chips before).
Cut = tuple[int, float]

#: How far (in kernels) a chip boundary may move from its equal-footprint place to cross fewer bytes.
_CUT_WINDOW = 8

#: Relative slack on a chip's capacity (float sums of byte counts).
_EPS = 1e-9


@dataclass
class Layout:
    """One way to lay the program out: over ``chips`` chips, streaming weights from the external tier
    or not. ``chip_of`` maps each kernel's name to its chip (a kernel split over several chips: the one
    holding most of it; ``shares`` lists its (chip, fraction) parts). ``cuts`` are where chips 1..
    begin; ``chip_bytes`` and ``chip_weights`` what each chip holds (all of it, and its weights).
    ``fits`` is False when it needs more chips than the device group has; ``inbound`` is set by a
    training step's layout, whose backward runs back over the chips its forward ran on."""

    chips: int
    streaming: bool
    chip_of: dict[str, int] = field(default_factory=dict)
    microbatches: int = 1
    fits: bool = True
    notes: list[str] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    shares: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    chip_bytes: list[float] = field(default_factory=list)
    chip_weights: list[float] = field(default_factory=list)
    #: A training step's layout (:mod:`.dataflow_train`): the bytes each kernel receives from other
    #: chips, paid as a hop before it; None where one hop follows each chip's last kernel.
    inbound: dict[str, float] | None = None
    #: A training step's footprint per kernel (:class:`.dataflow_train.TrainingTerms`), which its timing
    #: and its fit read; None for inference.
    training: TrainingTerms | None = None

    def parts(self, name: str) -> list[tuple[int, float]]:
        """The (chip, fraction) parts of a kernel: one whole part unless it is split."""
        return self.shares.get(name) or [(self.chip_of[name], 1.0)]


def footprint_parts(kernels: list[Kernel], table: CostTable) -> list[tuple[int, int]]:
    """(weights, activations) each kernel places on its chip: the weights it is the first to use and
    the activations it produces. A weight shared by several kernels (a tied embedding and LM head)
    lives in one place, so it is counted once, where the layout first needs it."""
    placed: set[object] = set()
    out = []
    for k in kernels:
        new = [v for v in dict.fromkeys(k.inputs) if v.kind.is_weight and v not in placed]
        placed.update(new)
        out.append((values_bytes(table, new), values_bytes(table, k.outputs)))
    return out


def at_peak(parts: list[tuple[int, int]], peak_activations: float) -> list[tuple[float, float]]:
    """The footprints with their activations scaled, when they add up to more than the program's peak
    of live activations, to that peak: a statically scheduled chip reuses a buffer once its readers
    have run, and the inputs stream through in microbatches, so a layout holds the peak, not every
    tensor a prefill ever makes (Llama-3-8B at 2k tokens and batch 8: ~100 GB of outputs, 1 GB peak)."""
    made = sum(a for _, a in parts)
    scale = peak_activations / made if made > peak_activations else 1.0
    return [(float(w), a * scale) for w, a in parts]


def footprints(kernels: list[Kernel], table: CostTable) -> list[int]:
    """What each kernel places on its chip, weights and activations together (:func:`footprint_parts`)."""
    return [w + a for w, a in footprint_parts(kernels, table)]


def _writers(kernels: list[Kernel]) -> dict[Value, int]:
    written: dict[Value, int] = {}
    for i, k in enumerate(kernels):
        for v in k.outputs:
            written.setdefault(v, i)
    return written


def _last_reads(kernels: list[Kernel], written: dict[Value, int]) -> dict[Value, int]:
    """Each value read after the kernel that writes it: the last kernel that reads it."""
    last_read: dict[Value, int] = {}
    for i, k in enumerate(kernels):
        if not k.is_free:
            for v in k.inputs:
                if written.get(v, i) < i:
                    last_read[v] = i
    return last_read


def _moved_bytes(v: Value, table: CostTable) -> float:
    """Bytes a value sends over a chip boundary. A KV cache appended in place stays in the fast memory
    of the chip whose attention reads it: only the appended rows travel, not the cache."""
    node = v.producer
    if node is not None and IN_PLACE in node.attrs:
        storage = node.inputs[int(node.attrs[IN_PLACE])]
        if storage is not None:
            return float(max(values_bytes(table, [v]) - values_bytes(table, [storage]), 0))
    return float(values_bytes(table, [v]))


def crossing_by_position(kernels: list[Kernel], table: CostTable) -> list[float]:
    """Bytes that cross a cut before each kernel position: values written before it and read at or
    after it (a value from the graph's inputs has no writer and crosses nothing; a cache appended in
    place, only its new rows)."""
    written = _writers(kernels)
    diff = [0.0] * (len(kernels) + 2)
    for v, j in _last_reads(kernels, written).items():
        b = _moved_bytes(v, table)
        diff[written[v] + 1] += b
        diff[j + 1] -= b
    out, run = [], 0.0
    for p in range(len(kernels) + 1):
        run += diff[p]
        out.append(run)
    return out


def produced_for_later(kernels: list[Kernel], table: CostTable) -> list[float]:
    """Bytes of each kernel's outputs that a later kernel reads: what the chip holding a split
    kernel's first part forwards of the output it made."""
    written = _writers(kernels)
    out = [0.0] * len(kernels)
    for v in _last_reads(kernels, written):
        out[written[v]] += _moved_bytes(v, table)
    return out


def _cut_bytes(cut: Cut, crossing: list[float], produced: list[float]) -> float:
    index, share = cut
    return crossing[index] + share * produced[index]


def cuts(sizes: list[float], crossing: list[float], produced: list[float], capacity: float,
         chips: int) -> list[Cut]:
    """Where chips 1 .. ``chips`` - 1 begin (see the module doc). ``chips`` x ``capacity`` must hold
    the sizes; each chip then takes at most ``capacity`` and more than nothing."""
    n = len(sizes)
    prefix = [0.0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    total = prefix[-1]
    room = capacity * (1 + _EPS)
    out: list[Cut] = []
    start = 0.0
    for c in range(chips - 1):
        left = chips - c                                # this chip and the ones after it
        end = start + (total - start) / left
        i = min(max(bisect_right(prefix, end) - 1, 0), n - 1)
        share = min(max((end - prefix[i]) / sizes[i], 0.0), 1.0) if sizes[i] else 0.0
        best = (_cut_bytes((i, share), crossing, produced), 0.0, (i, share))
        for j in range(max(1, i - _CUT_WINDOW), min(n - 1, i + _CUT_WINDOW) + 1):
            held, rest = prefix[j] - start, total - prefix[j]
            if held <= 0 or rest <= 0 or held > room or rest > (left - 1) * room:
                continue
            best = min(best, (crossing[j], abs(j - i - share), (j, 0.0)))
        cut = best[2]
        out.append(cut)
        start = prefix[cut[0]] + cut[1] * sizes[cut[0]]
    return out


def place(kernels: list[Kernel], parts: list[tuple[float, float]], cut_list: list[Cut], chips: int
          ) -> tuple[dict[str, int], dict[str, list[tuple[int, float]]], list[float], list[float]]:
    """(chip_of, shares, chip_bytes, chip_weights) of the kernels cut at ``cut_list`` (:class:`Layout`)."""
    chip_of: dict[str, int] = {}
    shares: dict[str, list[tuple[int, float]]] = {}
    chip_bytes, chip_weights = [0.0] * chips, [0.0] * chips
    chip, c = 0, 0
    for i, (k, (w, a)) in enumerate(zip(kernels, parts)):
        while c < len(cut_list) and cut_list[c] == (i, 0.0):     # chips that begin at this kernel
            chip, c = chip + 1, c + 1
        edges = [0.0]
        while c < len(cut_list) and cut_list[c][0] == i:          # chips that begin inside it
            edges.append(cut_list[c][1])
            c += 1
        edges.append(1.0)
        mine = [(chip + j, edges[j + 1] - edges[j]) for j in range(len(edges) - 1)]
        chip += len(edges) - 2
        for where, f in mine:
            chip_bytes[where] += f * (w + a)
            chip_weights[where] += f * w
        if len(mine) > 1:
            shares[k.name] = mine
        chip_of[k.name] = max(mine, key=lambda p: p[1])[0]
    return chip_of, shares, chip_bytes, chip_weights


def boundary_bytes(kernels: list[Kernel], cut_list: list[Cut], chips: int, table: CostTable) -> list[float]:
    """Bytes each chip boundary carries (index c: from chip c to c + 1; the last chip's is 0): what
    crosses the cut where chip c + 1 begins, every value written on a chip at or before c and read on
    a later one (forwarded through the chips between), and, inside a split kernel, its inputs and the
    share of its output already made."""
    crossing = crossing_by_position(kernels, table)
    produced = produced_for_later(kernels, table)
    return [_cut_bytes(cut, crossing, produced) for cut in cut_list] + [0.0] * (chips - len(cut_list))
