"""A parallel strategy: how many ways each mesh axis splits the work, and the runtime choices that go with it.

Why one frozen value: the sharding pass, the step-time model, the memory model, the search and the
plan all read the same few numbers, and a strategy must be printable, comparable, hashable (the
search caches layer costs by it) and round-trip through JSON. The mesh is Megatron-LM's rank order
(``tp`` innermost, then ``cp``, ``dp``, ``pp``; expert parallelism is carved out of the data-parallel
ranks next to ``cp``), so a group's *stride* says whether it stays inside a scale-up domain: a ``tp``
group of 8 on 8-GPU nodes is one node, a ``dp`` group with stride 8 puts one member in each node.
Experts are split over ``ep`` consecutive data-parallel ranks and tensor-parallel like the dense
layers (Megatron-Core up to v0.9, whose expert tensor parallelism is ``tp``), so an expert's weights
are data-parallel over ``dp x cp / ep`` replicas (the ``edp`` group, ``ep x tp x cp`` ranks apart):
their gradients are reduced and their optimizer states sharded over it, not over ``dp``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...errors import PlanError

__all__ = ["Parallel", "RECOMPUTE", "AXES", "parse_switch", "warmup_chunk_forwards"]

RECOMPUTE = ("none", "selective", "dots", "full")
#: Mesh axes from the innermost (adjacent ranks) to the outermost.
AXES = ("tp", "cp", "dp", "pp")
_SIZES = ("tp", "pp", "dp", "cp", "ep", "interleave", "microbatch", "global_batch")
_SWITCH = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def parse_switch(name: str, value: object) -> bool:
    """``value`` of an on/off field as a bool: True/False, or on/off, true/false, yes/no, 1/0 in any
    case. Why strict: ``bool("off")`` is True, and a misspelt switch silently read as off plans
    something the user did not ask for; anything else raises :class:`~narrowpipe.PlanError`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _SWITCH:
        return _SWITCH[value.strip().lower()]
    raise PlanError(f"{name} must be on or off (True/False, on/off, true/false, yes/no, 1/0), got {value!r}")


@dataclass(frozen=True)
class Parallel:
    """One strategy. ``global_batch`` and ``microbatch`` count sequences; ``interleave`` is the number
    of model chunks per pipeline device (``v``; above 1 the schedule is interleaved 1F1B);
    ``recompute`` is ``none``, ``selective`` (attention's softmax region, Korthikanti et al. 2022),
    ``dots`` (all but the weights' matmul outputs, JAX's ``dots_with_no_batch_dims_saveable``) or
    ``full`` (every layer's forward again in backward); ``zero`` 1/2/3 shards optimizer states /
    gradients / parameters over the data-parallel ranks (3 is FSDP)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    interleave: int = 1
    microbatch: int = 1
    global_batch: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    zero: int = 0

    def __post_init__(self) -> None:
        for name in _SIZES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"parallel: {name} must be a positive integer, got {value!r}")
        if self.recompute not in RECOMPUTE:
            raise PlanError(f"parallel: recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.zero not in (0, 1, 2, 3):
            raise PlanError(f"parallel: zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)   # nothing to split the sequence over
        if self.interleave > 1 and self.pp == 1:
            raise PlanError(f"parallel: interleave={self.interleave} needs pipeline stages (pp > 1)")
        if self.dp % self.ep:
            raise PlanError(f"parallel: ep={self.ep} must divide dp={self.dp} (experts are split over "
                            "data-parallel ranks)")
        replicas = self.dp * self.microbatch
        if self.global_batch % replicas:
            raise PlanError(f"parallel: global_batch={self.global_batch} is not a multiple of dp x microbatch "
                            f"= {self.dp} x {self.microbatch}")
        if self.interleave > 1 and self.microbatches % self.pp:
            raise PlanError(f"parallel: the interleaved schedule needs the microbatch count ({self.microbatches}) "
                            f"to be a multiple of pp={self.pp} (Megatron-LM asserts it)")

    # -- derived sizes ---------------------------------------------------------------------------
    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """Microbatches each pipeline (data-parallel replica) runs per step."""
        return self.global_batch // (self.dp * self.microbatch)

    @property
    def schedule(self) -> str:
        if self.pp == 1:
            return "none"
        return "interleaved-1f1b" if self.interleave > 1 else "1f1b"

    def axis(self, name: str) -> tuple[int, int]:
        """``(size, stride)`` of a mesh axis: members of one group are ``stride`` ranks apart."""
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}
        if name == "ep":
            return self.ep, self.tp * self.cp
        if name == "edp":              # expert data parallelism: the replicas of one expert shard
            return self.dp * self.cp // self.ep, self.tp * self.cp * self.ep if self.ep > 1 else self.tp
        if name == "dp_cp":            # the gradient-reduction group: data and context ranks together
            return self.dp * self.cp, self.tp
        if name not in sizes:
            raise PlanError(f"unknown mesh axis {name!r}; axes are {', '.join((*AXES, 'ep', 'edp'))}")
        stride = 1
        for inner in AXES[:AXES.index(name)]:
            stride *= sizes[inner]
        return sizes[name], stride

    def replace(self, **changes: Any) -> Parallel:
        return dataclasses.replace(self, **changes)

    # -- text and JSON ---------------------------------------------------------------------------
    def describe(self) -> str:
        """``tp8 pp8 (v2) dp24 mb1 x96 sp recompute=full zero1``: what a table row shows."""
        parts = [f"tp{self.tp}", f"pp{self.pp}" + (f" (v{self.interleave})" if self.interleave > 1 else ""),
                 f"dp{self.dp}"]
        parts += [f"cp{self.cp}"] if self.cp > 1 else []
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts.append(f"mb{self.microbatch} x{self.microbatches}")
        parts += ["sp"] if self.sequence_parallel else []
        parts += [f"recompute={self.recompute}"] if self.recompute != "none" else []
        parts += [f"zero{self.zero}"] if self.zero else []
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Parallel:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanError(f"parallel: unknown field(s) {', '.join(unknown)}; fields are {', '.join(sorted(known))}")
        return cls(**data)


def warmup_chunk_forwards(p: Parallel, stage: int) -> int:
    """Model-chunk forwards pipeline device ``stage`` runs before its first backward on the
    interleaved 1F1B schedule (Megatron-LM's ``(p - rank - 1) * 2 + (v - 1) * p`` warmup and the
    first steady-state forward), at most its ``m v`` chunk passes."""
    return min((p.pp - stage - 1) * 2 + (p.interleave - 1) * p.pp + 1, p.microbatches * p.interleave)
