"""How a mixture of experts' routed rows spread over its experts: the expert balance of an analysis.

Which expert a token goes to is data, not shape, so a grouped GEMM (:attr:`~narrowpipe.ir.Op.GROUPED_DOT`)
is costed under an assumed spread. Its FLOPs do not depend on it (every routed row goes through one
expert: ``2 x rows x K x N`` whatever the split), but two things do: which experts' weights are read
at all (an expert no row reaches is not read, so a decode step of one token with top-2 routing reads
two experts, not all of them) and how a grouped kernel's tiles pad and queue per expert (the
execution models time each expert's share).

An :class:`ExpertBalance` names the spread:

* ``random`` (the default): every token picks its ``top_k`` distinct experts uniformly at random,
  independently of the other tokens. ``T`` tokens then reach ``D = E (1 - (1 - k/E)^T)`` distinct
  experts on average (a given expert is missed by one token with probability ``1 - k/E``), and the
  rows spread evenly over them. Decode reads only the experts some token reaches, so this is the
  expected weight read of a step (Mixtral, 8 experts and top-2, at 4 tokens: 5.47 experts, not 8;
  DeepSeek-V3, 256 and top-8, at 32 tokens: 163, not 256). Why it is the default: a trained router's
  per-batch choices look like independent draws over balanced experts, and what a reader wants from
  a predicted step is its expected time; ``balanced`` is the upper bound on the weight read. Once
  the expected unreached experts are a vanishing fraction (``D`` rounds to ``E``: training
  microbatches of thousands of rows) the split is ``balanced``'s and so are the bytes, to the byte
  where ``E (1 - k/E)^T`` of an expert's bytes is below half a byte.
* ``balanced``: ``p_i = 1 / E``, what a router trained with a load-balancing loss aims for, with
  every token's experts chosen to reach as many experts as possible: ``min(E, k T)`` experts read,
  the upper bound on a step's weight read (and the most rows spread thinnest);

The others name shares ``p_i`` of the routed rows, hottest expert first:

* ``zipf:S``: ``p_i`` proportional to ``1 / i**S`` (``S >= 0``; ``S = 0`` is balanced, ``S = 1`` gives the
  hottest of 8 experts 37% of the rows);
* ``hot:F``: the hottest expert takes the fraction ``F`` of the routed rows (``0 < F <= 1``; an ``F``
  below ``1/E`` would make it the coldest, and is taken as ``1/E``, balanced), the other experts share
  the rest evenly.

Rows per expert (:func:`expert_rows`) are ``rows x p_i``, capped at one row per token (with ``top_k``
known, ``rows / top_k`` tokens each pick ``top_k`` *different* experts, so no expert takes more rows
than there are tokens; the excess goes to the others in proportion to their shares), then rounded to
integers by largest remainder (ties to the hotter expert) so they sum to ``rows`` exactly. Balanced
routing of ``N`` rows therefore gives ``N mod E`` experts ``N // E + 1`` rows and the others ``N // E``.
Random routing splits the rows so over ``round(D)`` experts (a kernel runs whole experts' tiles), while
the weights read are ``D`` experts' bytes (:func:`reached_experts`), the expected value, not rounded.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import floor

from ..errors import NarrowpipeError, NarrowpipeWarning
from ..ir import Node, Op, Value

__all__ = ["ExpertBalance", "BALANCED", "RANDOM", "DEFAULT", "expert_rows", "active_experts", "routing_notes",
           "node_expert_rows", "expert_parallel_rows", "reached_experts", "expected_reached", "node_reached_experts",
           "expert_parallel_reached", "cap_note", "node_received_rows",
           "node_row_share"]

_KINDS = ("random", "balanced", "zipf", "hot")


@dataclass(frozen=True)
class ExpertBalance:
    """An assumed spread of routed rows over experts (module docstring): ``kind`` and its parameter."""

    kind: str = "random"
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise NarrowpipeError(f"expert balance {self.kind!r}: choose random, balanced, zipf:S or hot:F")
        if self.kind == "zipf" and not self.value >= 0:
            raise NarrowpipeError(f"expert balance zipf:{self.value}: the exponent must be >= 0")
        if self.kind == "hot" and not 0 < self.value <= 1:
            raise NarrowpipeError(f"expert balance hot:{self.value}: the hot expert's fraction must be in (0, 1]")

    @classmethod
    def parse(cls, spec: str | ExpertBalance | None) -> ExpertBalance:
        """``"random"``, ``"balanced"``, ``"zipf:1.2"`` or ``"hot:0.5"`` (``=`` works in place of ``:``);
        None is the default, random."""
        if spec is None:
            return DEFAULT
        if isinstance(spec, ExpertBalance):
            return spec
        text = str(spec).strip().lower().replace("=", ":")
        kind, _, arg = text.partition(":")
        if kind in ("random", "balanced") and not arg:
            return RANDOM if kind == "random" else BALANCED
        if kind not in ("zipf", "hot") or not arg:
            raise NarrowpipeError(f"expert balance {spec!r}: write random, balanced, zipf:S (e.g. zipf:1.0) or hot:F "
                                  "(e.g. hot:0.5, the hottest expert's share of the routed rows)")
        try:
            value = float(arg)
        except ValueError:
            raise NarrowpipeError(f"expert balance {spec!r}: {arg!r} is not a number") from None
        return cls(kind, value)

    def shares(self, experts: int) -> list[float]:
        """The fraction of routed rows each expert takes, hottest first (they sum to 1)."""
        if self.kind == "zipf":
            w = [1.0 / (i + 1) ** self.value for i in range(experts)]
        elif self.kind == "hot" and experts > 1:
            hot = max(self.value, 1.0 / experts)
            w = [hot] + [(1.0 - hot) / (experts - 1)] * (experts - 1)
        else:
            w = [1.0] * experts
        total = sum(w)
        return [x / total for x in w]

    def __str__(self) -> str:
        return self.kind if self.kind in ("random", "balanced") else f"{self.kind}:{self.value:g}"


BALANCED = ExpertBalance("balanced")
RANDOM = ExpertBalance("random")
#: The analyses' default (module docstring: the expected weight read of a step).
DEFAULT = RANDOM


def expected_reached(tokens: float, experts: int, top_k: int = 1) -> float:
    """``E (1 - (1 - k/E)^T)``: the expected distinct experts ``tokens`` tokens reach when each picks
    ``top_k`` distinct experts uniformly and independently (each expert is missed by one token with
    probability ``1 - k/E``); never more than the ``k T`` rows could reach."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    k = min(max(top_k, 1), experts)
    return min(experts * (1.0 - (1.0 - k / experts) ** tokens), k * tokens)


def _random_reached(rows: int, experts: int, top_k: int | None) -> float:
    k = top_k or 1
    return expected_reached(rows / k, experts, k)


def expert_rows(rows: int, experts: int, top_k: int | None = None,
                balance: ExpertBalance = BALANCED) -> tuple[int, ...]:
    """Rows each of ``experts`` experts takes out of ``rows`` routed rows, hottest first (module docstring).

    The result sums to ``rows``; with ``top_k``, no expert exceeds ``ceil(rows / top_k)`` (one row per token).
    """
    if experts <= 0:
        return ()
    if rows <= 0:
        return (0,) * experts
    if balance.kind == "random":   # rows spread evenly over the expected reached experts, rounded
        reached = min(experts, rows, max(1, floor(_random_reached(rows, experts, top_k) + 0.5)))
        return expert_rows(rows, reached, top_k, BALANCED) + (0,) * (experts - reached)
    cap = -(-rows // top_k) if top_k else rows
    cap = max(cap, -(-rows // experts))   # a cap below the even share cannot hold every row
    quota = _capped_quotas(float(rows), balance.shares(experts), float(cap))
    counts = [min(floor(q), cap) for q in quota]
    left = rows - sum(counts)
    # largest remainder first, the hotter expert first among equals; never past the cap
    order = sorted(range(experts), key=lambda i: (-(quota[i] - counts[i]), i))
    while left > 0:
        for i in order:
            if left and counts[i] < cap:
                counts[i] += 1
                left -= 1
    return tuple(counts)


def _capped_quotas(rows: float, shares: list[float], cap: float) -> list[float]:
    """``rows x shares`` with every quota at most ``cap``: capped experts' excess goes to the
    uncapped ones in proportion to their shares (water-filling), so the quotas still sum to ``rows``."""
    capped: set[int] = set()
    while True:
        free = [i for i in range(len(shares)) if i not in capped]
        weight = sum(shares[i] for i in free)
        budget = rows - cap * len(capped)
        quota = [cap if i in capped else (budget * shares[i] / weight if weight else 0.0)
                 for i in range(len(shares))]
        over = {i for i in free if quota[i] > cap * (1 + 1e-12)}
        if not over:
            return quota
        capped |= over


def _shard(attrs: Mapping[str, object]) -> tuple[int, int] | None:
    """A serving shard's ``expert_parallel`` (ep, dp) (:mod:`narrowpipe.models.moe`), or None."""
    ep = attrs.get("expert_parallel")
    if isinstance(ep, (tuple, list)) and len(ep) == 2 and int(ep[0]) > 1:
        return int(ep[0]), int(ep[1])
    return None


def node_received_rows(attrs: Mapping[str, object], rows: int) -> int:
    """Routed rows a grouped GEMM's experts take: its ``rows`` (the tokens it routes x top-k), or on an
    expert-parallel serving shard (``expert_parallel`` = (ep, dp)) the group's share per device. The
    ``dp`` data-parallel ranks route distinct tokens (the ``ep / dp`` tensor-parallel ranks of one hold
    the same ones), so the group routes ``dp x rows`` rows and each of the ``ep`` devices receives
    ``dp x rows / ep`` of them on average (rounded up)."""
    shard = _shard(attrs)
    if shard is None or rows <= 0:
        return rows
    ep, dp = shard
    return -(-rows * dp // ep)


def node_row_share(attrs: Mapping[str, object]) -> float:
    """The fraction of a grouped GEMM's ``rows`` its experts take on average: 1, or on an
    expert-parallel serving shard ``dp / ep`` (:func:`node_received_rows`, before rounding up: what
    FLOPs and bytes count, the expected work, while the busiest device's kernel runs whole rows)."""
    shard = _shard(attrs)
    return 1.0 if shard is None else shard[1] / shard[0]


def node_expert_rows(attrs: Mapping[str, object], rows: int, experts: int, balance: ExpertBalance) -> tuple[int, ...]:
    """A grouped GEMM's rows per expert: the split its node fixes (``expert_rows``: expert-parallel
    sharding fixes the local experts of the most loaded device), an expert-parallel serving shard's
    busiest device's (:func:`expert_parallel_rows` of the group's ``experts x ep``), else the analysis'
    balance."""
    fixed = attrs.get("expert_rows")
    if isinstance(fixed, tuple):
        return fixed
    if attrs.get("capacity"):                       # capacity buckets: every expert padded to C rows
        return expert_rows(rows, experts, None, BALANCED)
    top_k = attrs.get("top_k")
    shard = _shard(attrs)
    if shard is not None:
        return expert_parallel_rows(node_received_rows(attrs, rows), experts * shard[0], shard[0],
                                    top_k if isinstance(top_k, int) else None, balance)
    return expert_rows(rows, experts, top_k if isinstance(top_k, int) else None, balance)


def reached_experts(rows: int, experts: int, top_k: int | None = None, balance: ExpertBalance = DEFAULT) -> float:
    """Experts whose weights ``rows`` routed rows read: under random routing the expected count
    (:func:`expected_reached`, fractional), else those :func:`expert_rows` gives a row."""
    if balance.kind == "random":
        return _random_reached(rows, experts, top_k) if rows > 0 else 0.0
    return float(active_experts(expert_rows(rows, experts, top_k, balance)))


def node_reached_experts(attrs: Mapping[str, object], rows: int, experts: int, balance: ExpertBalance) -> float:
    """A grouped GEMM's reached experts (whose weights it reads): a fixed split's own count
    (``reached_experts`` where expert parallelism stated the expected one), else the balance's."""
    fixed = attrs.get("expert_rows")
    if isinstance(fixed, tuple):
        reached = attrs.get("reached_experts")
        return float(reached) if isinstance(reached, (int, float)) else float(active_experts(fixed))
    top_k = attrs.get("top_k")
    shard = _shard(attrs)
    if shard is not None and balance.kind == "random":     # the group's dp x rows rows, exact: 1/ep of theirs
        ep, dp = shard
        return reached_experts(rows * dp, experts * ep, top_k if isinstance(top_k, int) else None, balance) / ep
    if shard is not None:
        return expert_parallel_reached(node_received_rows(attrs, rows), experts * shard[0], shard[0],
                                       top_k if isinstance(top_k, int) else None, balance)
    return reached_experts(rows, experts, top_k if isinstance(top_k, int) else None, balance)


def expert_parallel_reached(rows: int, experts: int, ep: int, top_k: int | None = None,
                            balance: ExpertBalance = DEFAULT) -> float:
    """Local experts the busiest of ``ep`` devices reads (:func:`expert_parallel_rows`). Random
    routing spreads the ``D`` experts the group's ``ep x rows`` rows reach evenly over the devices
    (each holds ``E/ep`` of them, every one equally likely): ``D / ep`` each, not ``D`` packed on one."""
    if balance.kind == "random":
        return reached_experts(rows * ep, experts, top_k, balance) / ep
    return float(active_experts(expert_parallel_rows(rows, experts, ep, top_k, balance)))


def expert_parallel_rows(rows: int, experts: int, ep: int, top_k: int | None = None,
                         balance: ExpertBalance = BALANCED) -> tuple[int, ...]:
    """Rows of each local expert on the most loaded of ``ep`` expert-parallel devices.

    Each device routes ``rows`` rows, so the group routes ``ep x rows`` over all ``experts``
    (:func:`expert_rows`); device ``d`` holds experts ``d E/ep .. (d+1) E/ep - 1`` (Megatron-Core's and
    DeepSpeed-MoE's contiguous placement) and receives their rows. Which experts are hot is data, so
    the shares are placed hottest first: the hottest ``E/ep`` experts share a device, an upper bound
    on the busiest device's rows (a load-aware placement such as DeepSeek-V3's redundant experts
    lowers it). Balanced routing gives every device ``rows`` rows when ``ep x rows`` divides by ``E``;
    random routing gives each its expected ``rows`` rows over its share of the reached experts
    (:func:`expert_parallel_reached`)."""
    if ep < 1 or experts % ep:
        raise NarrowpipeError(f"expert parallelism: ep={ep} does not divide the {experts} experts")
    per = experts // ep
    if balance.kind == "random":   # each device gets rows rows on average, over D / ep of its experts
        reached = min(per, rows, max(1, floor(expert_parallel_reached(rows, experts, ep, top_k, balance) + 0.5)))
        return expert_rows(rows, reached, top_k, BALANCED) + (0,) * (per - reached) if rows > 0 else (0,) * per
    split = expert_rows(rows * ep, experts, top_k, balance)
    return max((split[d * per:(d + 1) * per] for d in range(ep)), key=sum)


def cap_note(experts: int, top_k: int | None, balance: ExpertBalance) -> str | None:
    """What the one-row-per-token cap changed, or None: a balance whose hottest share exceeds
    ``1 / top_k`` is costed as the capped split (``hot:0.9`` and ``hot:0.5`` are the same top-2 split),
    which the user should be told rather than find out from identical numbers."""
    if not top_k or top_k < 2:
        return None
    hottest = balance.shares(experts)[0]
    if hottest <= 1.0 / top_k * (1 + 1e-9):
        return None
    return (f"{balance} routing asks the hottest expert for {hottest:.0%} of the routed rows, but with top-{top_k} "
            f"each token picks {top_k} different experts, so no expert takes more than 1/{top_k} "
            f"({1 / top_k:.0%}) of them: costed at that cap, the excess spread over the other experts")


def active_experts(rows: tuple[int, ...]) -> int:
    """Experts that receive at least one row: only their weights are read."""
    return sum(1 for r in rows if r > 0)


def routing_notes(nodes: Iterable[Node], shapes: Mapping[Value, tuple[int, ...]],
                  balance: ExpertBalance) -> list[str]:
    """One line per distinct grouped GEMM shape saying how its rows were spread, so a report's bytes
    and times can be traced to the assumption (and the user knows it can be changed)."""
    nodes = list(nodes)
    if balance not in (BALANCED, RANDOM) and not any(node.op is Op.GROUPED_DOT for node in nodes):
        # a skew for a dense model changes nothing: say so (it was accepted silently)
        warnings.warn(f"--expert-balance {balance}: the model has no experts (no grouped GEMM), so it changes "
                      "nothing", NarrowpipeWarning, stacklevel=2)
    seen: dict[tuple[int, int, int | None], int] = {}
    for node in nodes:
        if node.op is not Op.GROUPED_DOT or "expert_rows" in node.attrs:
            continue                   # a fixed split (expert-parallel sharding) is stated where it was made
        if node.inputs[0] is not None and node.inputs[1] is not None:
            stack = node.outputs[0] if node.attrs.get("role") == "grad_weight" else node.inputs[1]
            key = (shapes[node.inputs[0]][0], shapes[stack][0], node.attrs.get("top_k"))
            seen[key] = seen.get(key, 0) + 1
    out = []
    for (rows, experts, top_k), count in seen.items():
        split = expert_rows(rows, experts, top_k, balance)
        tokens = f" ({rows // top_k} tokens x top-{top_k})" if top_k else ""
        reached = reached_experts(rows, experts, top_k, balance)
        read = f"{reached:.0f}" if abs(reached - round(reached)) < 0.005 else f"{reached:.2f}"
        most = active_experts(expert_rows(rows, experts, top_k, BALANCED))
        bound = (f" on average (balanced routing, the upper bound, reads {most})"
                 if balance.kind == "random" and most > round(reached) else "")
        out.append(f"experts ({count} grouped GEMM(s)): {rows} routed rows{tokens} over {experts} experts, "
                   f"{balance} routing: hottest expert {split[0] if split else 0} rows, "
                   f"{read} of {experts} experts read{bound} (--expert-balance / expert_balance=)")
        capped = cap_note(experts, top_k if isinstance(top_k, int) else None, balance)
        if capped and capped not in out:
            out.append(capped)
    return out
