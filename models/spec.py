"""The architecture of a decoder-style transformer, as the few numbers a cost model needs.

Why a frozen dataclass rather than keyword soup passed down: the blocks each read a handful of
fields, the builder checks the combination once (heads divide, experts need a top-k), and a spec is
a value that tests and the planner can print, compare and vary with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import NarrowpipeError
from ..ir import DType

__all__ = ["TransformerSpec", "NORMS", "ACTIVATIONS", "POSITIONS", "ROUTERS", "ATTENTION"]

NORMS = ("rms", "layer")
ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "relu")
POSITIONS = ("rotary", "learned", "none")
ROUTERS = ("softmax", "sigmoid")
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
    # rotary embedding: the frequency base (Hugging Face's rope_theta; None: unknown) and a scaling of the
    # frequencies beyond the plain one (config.json's rope_scaling, e.g. Llama-3.1's {"rope_type": "llama3",
    # "factor": 8.0, ...}; None: none). Neither changes a FLOP; launch settings need them (Megatron's
    # --rotary-base defaults to 10,000, Llama-3 trains with 500,000).
    rope_theta: float | None = None
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    attn_bias: bool = False        # q, k and v projections
    out_bias: bool = False         # the attention output projection
    mlp_bias: bool = False
    norm_bias: bool | None = None  # None: a layer norm has a bias, an RMS norm has none
    causal: bool = True
    encoder: bool = False          # BERT's layout: see :func:`narrowpipe.models.transformer`
    type_vocab: int = 0            # token-type (segment) embeddings of an encoder; 0: none
    # attention variants
    sliding_window: int | None = None   # keys a windowed layer's query sees, its own included (Mistral, Gemma)
    sliding_layers: tuple[int, ...] | None = None   # the windowed layers; None: all (with sliding_window)
    local_rope: bool = False       # windowed layers have their own rotary tables (Gemma-3's local base)
    attn_scale: float | None = None     # softmax scale; None: 1/sqrt(qk head dim)
    attn_softcap: float | None = None   # Gemma-2: tanh soft-capping of the attention logits
    logit_softcap: float | None = None  # Gemma-2: tanh soft-capping of the final logits
    qk_norm: bool = False          # an RMS norm over each head's q and k (Gemma-3, Qwen3)
    sandwich_norm: bool = False    # Gemma-2/3: a norm after attention and after the MLP too
    embed_scale: bool = False      # Gemma: embeddings scaled by sqrt(hidden)
    # multi-head latent attention (DeepSeek-V2/V3): see narrowpipe.models.mla
    q_lora_rank: int | None = None     # None: a plain q projection
    kv_lora_rank: int | None = None    # set: MLA (head_dim is then qk_nope_head_dim + qk_rope_head_dim)
    qk_rope_head_dim: int = 0
    v_head_dim: int | None = None      # None: head_dim
    mla_absorb: bool = False           # decode as serving engines do (weights absorbed, latent attended)
    # mixture-of-experts variants
    expert_ffn: int | None = None      # a routed expert's intermediate size; None: ffn
    shared_ffn: int | None = None      # the shared expert(s) beside the routed ones (their summed size)
    shared_gate: bool = False          # Qwen2-MoE: sigmoid(Linear(hidden, 1)) scales the shared expert
    dense_layers: tuple[int, ...] = ()  # layers with a dense MLP of ffn instead of experts
    router: str = "softmax"            # "sigmoid": DeepSeek-V3's scores with a correction bias
    expert_groups: tuple[int, int] | None = None   # (groups, groups kept): group-limited routing
    routed_scale: float = 1.0          # DeepSeek's routed_scaling_factor on the routing weights
    router_fp32: bool = False          # DeepSeek: the router's weight and logits stay fp32
    # an expert-parallel device's share, (ep, dp): ep devices hold experts / ep whole experts each, and
    # dp of them (the data-parallel ranks) route distinct tokens (narrowpipe.costmodel.experts; serve --ep)
    expert_parallel: tuple[int, int] | None = None
    dtype: DType = DType.BF16
    dropout: float = 0.0           # training: embeddings, attention probabilities, both residual branches
    attention: str = "fused"       # one ATTENTION node, or eager QK^T, scale, mask, softmax, PV

    def __post_init__(self) -> None:
        # lists from JSON or a caller
        for name in ("sliding_layers", "dense_layers", "expert_groups", "expert_parallel"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(int(i) for i in value))
        for name in ("layers", "hidden", "heads", "vocab", "ffn", "kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):   # 256.0 built, then analyze crashed
                raise NarrowpipeError(f"transformer: {name} must be a whole number, got {value!r}")
            if value <= 0:
                raise NarrowpipeError(f"transformer: {name} must be positive, got {value}")
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
        if self.positions == "rotary" and self.rope_dim % 2:
            raise NarrowpipeError(f"transformer: rotary embedding needs an even head_dim, got {self.rope_dim}")
        if self.rope_theta is not None and not float(self.rope_theta) > 0:
            raise NarrowpipeError(f"transformer: rope_theta must be positive, got {self.rope_theta!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, dict):
            raise NarrowpipeError(f"transformer: rope_scaling must be a dict (config.json's rope_scaling), "
                                  f"got {self.rope_scaling!r}")
        if self.attention not in ATTENTION:
            raise NarrowpipeError(f"transformer: attention must be one of {', '.join(ATTENTION)}, "
                                  f"got {self.attention!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise NarrowpipeError(f"transformer: dropout must be in [0, 1), got {self.dropout!r}")
        self._check_windows()
        self._check_mla()
        self._check_moe()

    def _check_windows(self) -> None:
        if self.sliding_window is not None and self.sliding_window < 2:
            raise NarrowpipeError(f"transformer: sliding_window must be at least 2 (a query and one earlier key), "
                                  f"got {self.sliding_window}")
        if self.sliding_layers is not None:
            if self.sliding_window is None:
                raise NarrowpipeError("transformer: sliding_layers needs a sliding_window")
            bad = [i for i in self.sliding_layers if not 0 <= i < self.layers]
            if bad:
                raise NarrowpipeError(f"transformer: sliding_layers {bad} are not layers (0..{self.layers - 1})")
        if self.sliding_window is not None and not self.causal:
            raise NarrowpipeError("transformer: a sliding window is modelled for causal attention only")
        if self.sliding_window is not None and self.attention == "eager":
            raise NarrowpipeError("transformer: eager attention builds a causal mask only; a sliding window "
                                  "is modelled with fused attention (attention='fused')")

    def _check_mla(self) -> None:
        if self.kv_lora_rank is None:
            if self.q_lora_rank is not None or self.mla_absorb:
                raise NarrowpipeError("transformer: q_lora_rank and mla_absorb belong to latent attention "
                                      "(give kv_lora_rank)")
            return
        if self.kv_lora_rank <= 0 or (self.q_lora_rank is not None and self.q_lora_rank <= 0):
            raise NarrowpipeError("transformer: kv_lora_rank and q_lora_rank must be positive")
        if not 0 < self.qk_rope_head_dim < self.head_dim:
            raise NarrowpipeError(f"transformer: latent attention needs 0 < qk_rope_head_dim < head_dim "
                                  f"(qk_nope + qk_rope), got {self.qk_rope_head_dim} and {self.head_dim}")
        if self.kv_heads != self.heads or self.encoder:
            raise NarrowpipeError("transformer: latent attention is decoder-only with kv_heads == heads")
        if self.sliding_window is not None or self.qk_norm or self.attn_softcap is not None:
            raise NarrowpipeError("transformer: sliding windows, q/k norms and soft-capping are not modelled "
                                  "with latent attention")
        if self.attention == "eager":
            raise NarrowpipeError("transformer: latent attention is built fused (attention='fused'); its eager "
                                  "form is not modelled")

    def _check_moe(self) -> None:
        moe_only = (self.expert_ffn, self.shared_ffn, self.expert_groups)
        if not self.is_moe and (any(x is not None for x in moe_only) or self.shared_gate or self.dense_layers
                                or self.router != "softmax" or self.routed_scale != 1.0 or self.router_fp32):
            raise NarrowpipeError("transformer: expert_ffn, shared_ffn, shared_gate, dense_layers, router, "
                                  "routed_scale, router_fp32 and expert_groups need experts and top_k")
        if self.expert_parallel is not None:
            ep, dp = self.expert_parallel
            if self.experts is None or ep < 1 or dp < 1 or ep % dp or self.experts % ep:
                raise NarrowpipeError(f"transformer: expert_parallel {self.expert_parallel} must place whole experts "
                                      f"(ep dividing the {self.experts} experts) and dp must divide ep")
        if self.shared_gate and self.shared_ffn is None:
            raise NarrowpipeError("transformer: shared_gate scales a shared expert: give shared_ffn")
        if self.router not in ROUTERS:
            raise NarrowpipeError(f"transformer: router must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        bad = [i for i in self.dense_layers if not 0 <= i < self.layers]
        if bad:
            raise NarrowpipeError(f"transformer: dense_layers {bad} are not layers (0..{self.layers - 1})")
        if self.expert_groups is not None and self.experts is not None and self.top_k is not None:
            groups, kept = self.expert_groups
            per = self.experts // groups if groups > 0 else 0
            if (groups <= 0 or self.experts % groups or not 0 < kept <= groups or kept * per < self.top_k
                    or (self.router == "sigmoid" and per < 2)):
                raise NarrowpipeError(f"transformer: expert_groups {self.expert_groups} must split {self.experts} "
                                      f"experts evenly and keep at least top_k ({self.top_k}) of them (and "
                                      f"two per group with the sigmoid router, which scores a group's best two)")

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def rope_dim(self) -> int:
        """Dims of a head that rotary embedding turns: MLA's rope part, else the whole head."""
        return self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s sliding window, or None when it attends to every earlier token."""
        if self.sliding_window is None or (self.sliding_layers is not None and layer not in self.sliding_layers):
            return None
        return self.sliding_window

    def cached_window(self, layer: int) -> int | None:
        """The most past tokens layer ``layer``'s cache holds: ``window - 1`` for a windowed layer (the
        new token makes ``window`` keys; transformers' ``DynamicSlidingWindowLayer`` keeps the last
        ``sliding_window - 1``), None when the cache keeps every token."""
        window = self.window(layer)
        return None if window is None else window - 1

    def layer_is_moe(self, layer: int) -> bool:
        return self.is_moe and layer not in self.dense_layers

    @property
    def has_norm_bias(self) -> bool:
        return self.norm == "layer" if self.norm_bias is None else self.norm_bias
