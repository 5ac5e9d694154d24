"""The architecture of a decoder-style transformer, as the few numbers a cost model needs.

Why a frozen dataclass rather than keyword soup passed down: the blocks each read a handful of
fields, the builder checks the combination once (heads divide, experts need a top-k), and a spec is
a value that tests and the planner can print, compare and vary with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NarrowpipeError
from ..ir import DType

__all__ = ["TransformerSpec", "NORMS", "ACTIVATIONS", "POSITIONS", "ATTENTION"]

NORMS = ("rms", "layer")
ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "relu")
POSITIONS = ("rotary", "learned", "none")
ATTENTION = ("fused", "eager")


@dataclass(frozen=True)
class TransformerSpec:
    """Sizes and switches of the model; see :func:`narrowpipe.models.transformer` for each field."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int
    kv_heads: int
    head_dim: int
    gated_mlp: bool = False
    activation: str = "gelu"
    experts: int | None = None
    top_k: int | None = None
    moe_renormalize: bool = True
    parallel_block: bool = False
    tie_embeddings: bool = False
    norm: str = "rms"
    positions: str = "rotary"
    max_positions: int | None = None
    attn_bias: bool = False        # q, k and v projections
    out_bias: bool = False         # the attention output projection
    mlp_bias: bool = False
    norm_bias: bool | None = None  # None: a layer norm has a bias, an RMS norm has none
    causal: bool = True
    encoder: bool = False          # BERT's layout: see :func:`narrowpipe.models.transformer`
    type_vocab: int = 0            # token-type (segment) embeddings of an encoder; 0: none
    sliding_window: int | None = None   # every layer attends to the last this-many tokens (Mistral 7B v0.1)
    dtype: DType = DType.BF16
    dropout: float = 0.0           # training: embeddings, attention probabilities, both residual branches
    attention: str = "fused"       # one ATTENTION node, or eager QK^T, scale, mask, softmax, PV

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocab", "ffn", "kv_heads", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise NarrowpipeError(f"transformer: {name} must be positive, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise NarrowpipeError(f"transformer: heads ({self.heads}) must be a multiple of kv_heads "
                                  f"({self.kv_heads})")
        if (self.experts is None) != (self.top_k is None):
            raise NarrowpipeError("transformer: experts and top_k go together (a mixture of experts needs both)")
        if self.experts is not None and self.top_k is not None and not 0 < self.top_k <= self.experts:
            raise NarrowpipeError(f"transformer: top_k ({self.top_k}) must be in 1..experts ({self.experts})")
        if self.norm not in NORMS:
            raise NarrowpipeError(f"transformer: norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            raise NarrowpipeError(f"transformer: activation must be one of {', '.join(ACTIVATIONS)}, "
                                  f"got {self.activation!r}")
        if self.positions not in POSITIONS:
            raise NarrowpipeError(f"transformer: positions must be one of {', '.join(POSITIONS)}, "
                                  f"got {self.positions!r}")
        if self.positions == "learned" and not self.max_positions:
            raise NarrowpipeError("transformer: learned positions need max_positions (the table's rows)")
        if self.encoder and self.causal:
            raise NarrowpipeError("transformer: an encoder attends both ways; pass causal=False")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise NarrowpipeError(f"transformer: sliding_window must be positive, got {self.sliding_window}")
        if self.attention not in ATTENTION:
            raise NarrowpipeError(f"transformer: attention must be one of {', '.join(ATTENTION)}, "
                                  f"got {self.attention!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise NarrowpipeError(f"transformer: dropout must be in [0, 1), got {self.dropout!r}")
        if self.positions == "rotary" and self.head_dim % 2:
            raise NarrowpipeError(f"transformer: rotary embedding needs an even head_dim, got {self.head_dim}")

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def has_norm_bias(self) -> bool:
        return self.norm == "layer" if self.norm_bias is None else self.norm_bias
