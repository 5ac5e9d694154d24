"""A serving replica's layout: ``tp`` tensor-parallel devices x ``pp`` pipeline stages, and for a
mixture of experts an expert-parallel group of ``ep`` devices.

Expert parallelism is vLLM's ``--enable-expert-parallel``: the experts are spread over every tensor x
data parallel rank, "EP_SIZE = TP_SIZE x DP_SIZE" (https://docs.vllm.ai/en/latest/serving/
expert_parallel_deployment/), while attention stays tensor-parallel within each data-parallel rank.
So ``ep`` is a multiple of ``tp``, and ``dp = ep / tp`` data-parallel ranks each serve their own share
of the replica's sequences (with their own KV cache) and share the experts; one replica is then
``tp x dp x pp`` devices. ``ep = 1``: no expert parallelism (experts split by width over ``tp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import NarrowpipeError

__all__ = ["Layout"]


@dataclass(frozen=True)
class Layout:
    """``tp`` x ``pp`` devices (1 x 1: one device; on a dataflow target: the family's own layout), with
    ``ep`` > 1 the experts over ``ep = tp x dp`` devices (module doc)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1 or self.ep < 1:
            raise NarrowpipeError(f"a layout needs tp, pp and ep >= 1, got tp={self.tp}, pp={self.pp}, ep={self.ep}")
        if self.ep > 1 and self.ep % self.tp:
            raise NarrowpipeError(f"expert parallel {self.ep}: vLLM spreads the experts over all tensor x data "
                                  f"parallel ranks (ep = tp x dp), and {self.ep} is not a multiple of tp={self.tp}")

    @property
    def dp(self) -> int:
        """Data-parallel attention ranks sharing the experts (1 without expert parallelism)."""
        return self.ep // self.tp if self.ep > 1 else 1

    @property
    def devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def label(self) -> str:
        if self.devices == 1:
            return "TP1"
        parts = ([f"TP{self.tp}"] if self.tp > 1 else []) + ([f"PP{self.pp}"] if self.pp > 1 else [])
        parts += ([f"DP{self.dp}"] if self.dp > 1 else []) + ([f"EP{self.ep}"] if self.ep > 1 else [])
        return " x ".join(parts)
