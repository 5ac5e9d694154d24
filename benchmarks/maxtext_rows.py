"""MaxText's published TPU training tables as data: each single-slice row, the run script that produced
it, the model those scripts built, and MaxText's own count of model FLOPs (benchmarks/maxtext_validate.py).

Why the publication commit and not the snapshot's head: the three tables (configs/{v4,v5e,v5p}/README.md)
were committed on 2023-12-15 (76bd53b0f, "Refactor MaxText/configs/ and documentation") and no number in
them has changed since (the snapshot e591f30 moved and relicensed the files only: ``git diff
76bd53b0f:MaxText/configs/v5p/README.md e591f30:src/maxtext/configs/tpu/v5p/README.md`` changes no table
row). The scripts and the model did change: in December 2023 base.yml built a parallel block (attention
and MLP on one RMS norm, added), a ReLU MLP of one up-projection, head_dim 256, multi-head attention with
RMS norms on q, k and v, tied embeddings and a 32,768 vocabulary; the head's base.yml builds a Llama-2
block (two norms, SwiGLU, head_dim 128, untied, 32,000). Batch sizes moved too (v5p 32B: 8 per chip then,
6 now). A table is the measurement of the scripts and the model of its own commit, so those are what is
planned; the head's scripts are planned beside them (``HEAD_*``) to show how much the choice moves.

MaxText's MFU in December 2023 (train.py ``calculate_training_tflops``, PaLM's appendix B): per chip and
step ``6 N s b + 6 H L d s^2 b`` with N every parameter of the pytree (the tied embedding once, norms
included), H query heads, d head_dim, s sequence, b per-chip batch: the attention term is the causal half of
``12 H L d s^2 b``. Divided by the step and the chip's bf16 peak (459 v5p, 197 v5e, 275 v4 TFLOP/s:
328 / 0.7147 = 459). The head's ``calculate_tflops_training_per_device`` counts the same two parts from the
dims (weights' matmuls x 3 with the unembedding, the lookup not; causal attention halved since 2025-07-18,
a4c01726e "correct mask flops").
"""

from __future__ import annotations

from dataclasses import dataclass

import narrowpipe

MAXTEXT = "github.com/AI-Hypercomputer/maxtext"
PUBLISHED_AT = "76bd53b0f44caf989c88189afadeb1062f9254f0"     # tables, scripts and model, 2023-12-15
SNAPSHOT = "e591f30cbbf217ed67ef71263ec0538239f9c3b8"         # the stored snapshot; tables unchanged
SEQ = 2048
PEAK = {"tpu-v5p": 459e12, "tpu-v5e": 197e12, "tpu-v4": 275e12}   # MaxText's MFU denominators (tables)


@dataclass(frozen=True)
class Dims:
    """A MaxText decoder: width, query heads (= kv heads), head_dim, MLP width, layers, vocabulary, and
    the block of its commit (``parallel``: Dec 2023's; else the Llama-2 block of the head)."""

    emb: int
    heads: int
    head_dim: int
    mlp: int
    layers: int
    vocab: int
    parallel: bool

    def params(self) -> int:
        """Every parameter of MaxText's pytree (what ``calculate_num_params_from_pytree`` counts)."""
        e, q, m, layers = self.emb, self.heads * self.head_dim, self.mlp, self.layers
        if self.parallel:     # q, k, v, o; wi, wo; one norm; q/k/v norms over head_dim; tied table; final norm
            return layers * (4 * e * q + 2 * e * m + e + 3 * self.head_dim) + self.vocab * e + e
        return layers * (4 * e * q + 3 * e * m + 2 * e) + 2 * self.vocab * e + e

    def model(self, name: str) -> narrowpipe.Graph:
        if self.parallel:
            return narrowpipe.transformer(self.layers, self.emb, self.heads, self.vocab, seq=SEQ, ffn=self.mlp,
                                          head_dim=self.head_dim, activation="relu", parallel_block=True,
                                          qk_norm=True, tie_embeddings=True, norm="rms", dtype="bf16", name=name)
        return narrowpipe.transformer(self.layers, self.emb, self.heads, self.vocab, seq=SEQ, ffn=self.mlp,
                                      head_dim=self.head_dim, gated_mlp=True, activation="silu", norm="rms",
                                      dtype="bf16", name=name)


def scaled(scale: int, emb: int, heads: int, mlp: int, layers: int, head_dim: int, vocab: int,
           parallel: bool) -> Dims:
    """``global_parameter_scale``: pyconfig's ``get_individual_scales`` (the same code at both commits):
    log2(scale) = 3q + r doubles heads and MLP q + (r > 0) times, the width q + (r > 1), layers q."""
    log2 = scale.bit_length() - 1
    assert 1 << log2 == scale, scale
    q, r = divmod(log2, 3)
    hm, e = q + (r > 0), q + (r > 1)
    return Dims(emb << e, heads << hm, head_dim, mlp << hm, layers << q, vocab, parallel)


def base_2023(scale: int) -> Dims:
    """base.yml at 76bd53b0f: emb 2560, 8 heads of 256, MLP 8192 (relu), 16 layers, vocab 32,768, tied."""
    return scaled(scale, 2560, 8, 8192, 16, 256, 32768, True)


def base_head(scale: int) -> Dims:
    """base.yml at e591f30: emb 2048, 16 heads of 128, MLP 7168 (silu x linear), 16 layers, vocab 32,000."""
    return scaled(scale, 2048, 16, 7168, 16, 128, 32000, False)


@dataclass(frozen=True)
class Row:
    """One single-slice table row: model, chip, chips (TensorCores / 2 on v4 and v5p), the published
    TFLOP/s per chip and MFU, and the run script's settings at the publication commit and at the head
    (per-chip batch, remat policy, tensor parallelism; FSDP takes the other chips)."""

    model: str
    target: str
    slice_name: str
    chips: int
    tflops: float
    mfu: float
    script: str
    dims: Dims
    batch: int
    remat: str
    tp: int
    head_dims: Dims
    head_batch: int
    head_remat: str
    held_out: bool
    head_tp: int = 0          # 0: as ``tp``

    @property
    def tp_head(self) -> int:
        return self.head_tp or self.tp

    @property
    def name(self) -> str:
        return f"{self.model} 1x {self.slice_name}"

    def source(self, head: bool = False) -> str:
        commit = SNAPSHOT if head else PUBLISHED_AT
        folder = "src/maxtext/configs/tpu" if head else "MaxText/configs"
        return f"{MAXTEXT} {folder}/{self.script} and README.md beside it @ {commit[:9]}"


def _v5p(model: str, slice_name: str, chips: int, tflops: float, mfu: float, scale: int, batch: int, remat: str,
         tp: int, head_batch: int, head_remat: str, head_tp: int = 0) -> Row:
    return Row(model, "tpu-v5p", slice_name, chips, tflops, mfu, f"v5p/{scale}b.sh", base_2023(scale), batch, remat,
               tp, base_head(scale), head_batch, head_remat, held_out=False, head_tp=head_tp)


def _v5e(model: str, tflops: float, mfu: float, scale: int, batch: int, tp: int, head_remat: str) -> Row:
    return Row(model, "tpu-v5e", "v5e-256", 256, tflops, mfu, f"v5e/{scale}b.sh", base_2023(scale), batch, "full", tp,
               base_head(scale), batch, head_remat, held_out=True)


# v4's scripts set the dims themselves (head_dim from base.yml: 256 then, 128 now; vocab likewise)
_V4_22B = dict(emb=6144, heads=24, mlp=24576, layers=48)
_V4_52B = dict(emb=12288, heads=32, mlp=49152, layers=32)

ROWS = [
    _v5p("32B", "v5p-128", 64, 328, 0.7147, 32, 8, "minimal", 4, 6, "minimal"),
    _v5p("64B", "v5p-128", 64, 323, 0.7031, 64, 4, "minimal", 4, 3, "minimal"),
    _v5p("128B", "v5p-256", 128, 315, 0.6868, 128, 2, "minimal", 8, 1, "minimal"),
    _v5p("128B", "v5p-512", 256, 316, 0.6883, 128, 2, "minimal", 8, 1, "minimal"),
    _v5p("256B", "v5p-1024", 512, 308, 0.6709, 256, 2, "minimal", 8, 1, "minimal"),
    _v5p("512B", "v5p-1024", 512, 294, 0.6399, 512, 2, "full", 16, 2, "full", head_tp=8),
    _v5p("1024B", "v5p-2048", 1024, 254, 0.5535, 1024, 2, "full", 16, 2, "full"),
    _v5p("1024B", "v5p-4096", 2048, 297, 0.6480, 1024, 2, "full", 16, 2, "full"),
    _v5e("16B", 120, 0.6110, 16, 6, 1, "full"),
    _v5e("32B", 132, 0.6686, 32, 4, 1, "full"),
    _v5e("64B", 118, 0.5990, 64, 2, 1, "full"),
    _v5e("128B", 110, 0.5606, 128, 1, 16, "qkv_proj_offloaded"),
    Row("22B", "tpu-v4", "v4-128", 64, 156, 0.567, "v4/22b.sh", Dims(**_V4_22B, head_dim=256, vocab=32768,
        parallel=True), 16, "full", 1, Dims(**_V4_22B, head_dim=128, vocab=32000, parallel=False), 13, "full",
        held_out=True),
    Row("52B", "tpu-v4", "v4-384", 192, 154, 0.560, "v4/52b.sh", Dims(**_V4_52B, head_dim=256, vocab=32768,
        parallel=True), 10, "full", 1, Dims(**_V4_52B, head_dim=128, vocab=32000, parallel=False), 7, "full",
        held_out=True),
]

#: the tables' multi-slice rows (2x and more slices joined over DCN): listed, not planned
MULTISLICE = {"v5p": "32B 2x v5p-128, 64B 2x v5p-128, 128B 2x v5p-256 and 2x v5p-512, 256B, 512B and 1024B 2x",
              "v5e": "16B/32B/64B/128B on 2x, 4x, 8x, 16x, 32x v5e-256 (20 rows)",
              "v4": "22B 2x/4x/8x v4-128, 52B 2x v4-384"}


def maxtext_flops_2023(dims: Dims, batch: int) -> float:
    """Model FLOPs per chip and step as MaxText counted them in December 2023 (train.py
    ``calculate_training_tflops``): ``6 N s b`` + the causal half of ``12 H L d s^2 b``."""
    return 6 * dims.params() * SEQ * batch + 6 * dims.heads * dims.layers * dims.head_dim * SEQ ** 2 * batch


def maxtext_flops_head(dims: Dims, batch: int) -> float:
    """The head's ``calculate_tflops_training_per_device`` (dense, MHA): 3 x (MLP + q/k/v/o projections
    + unembedding) + 3 x the causal half of ``4 b s^2 H d`` per layer."""
    b, s, e, q = batch, SEQ, dims.emb, dims.heads * dims.head_dim
    ffn = 2 * b * s * e * dims.mlp * (3 if not dims.parallel else 2)
    qkv = 2 * b * s * e * 3 * q
    proj = 2 * b * s * e * q
    embedding = 2 * b * s * e * dims.vocab
    attention = 4 * b * s * s * q / 2
    return 3 * ((ffn + qkv + proj) * dims.layers + embedding) + 3 * attention * dims.layers


def remat_option(policy: str) -> str:
    """MaxText's remat policy as the plan's recomputation option under the ``maxtext`` runtime (see
    maxtext_validate's docstring): ``minimal`` is JAX's checkpoint_dots_with_no_batch_dims, the plan's
    ``dots``, exactly; ``full`` (policy None) is ``full``; the head's ``qkv_proj_offloaded`` (q/k/v
    projections kept in host memory, the rest recomputed) has no plan option and is planned ``full``."""
    return {"full": "full", "minimal": "dots", "qkv_proj_offloaded": "full"}[policy]
