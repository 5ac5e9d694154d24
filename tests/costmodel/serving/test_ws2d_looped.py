"""The released schedule's Looped CollectiveEinsum and per-step stack, by hand: the forms of
collectives.py on tiny numbers, then each looped term and stack term of a PaLM step from its chunk's
kernel time, the permute's hop and bytes, and the torus figures."""

from dataclasses import replace

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.serving import ws2d_looped as lp
from narrowpipe.costmodel.serving.ws2d import ws2d_decode, ws2d_prefill
from narrowpipe.costmodel.serving.ws2d_graph import kernels_s, matmul_graph
from narrowpipe.ir import DType
from narrowpipe.models.spec import TransformerSpec

SERVED = TransformerSpec(layers=118, hidden=18432, heads=64, vocab=256000, ffn=73728, kv_heads=1, head_dim=256,
                         gated_mlp=True, activation="silu", parallel_block=True, tie_embeddings=True, norm="layer")
LINK, HOP = 221e9 / 6, 1.45e-6       # the 4x4x4 system's achievable ICI rate per link (one way); per hop
V4 = get_target("tpu-v4")
LO = V4.launch_overhead


def _chunk(rows: int, k: int, n: int, w: DType) -> float:
    return kernels_s(matmul_graph(rows, k, n, w, DType.BF16), V4, TimingOptions())[0]


def _permute(nbytes: float) -> float:
    return LO + HOP + nbytes / LINK


def test_the_latency_form_sends_the_last_partial_sums_after_the_last_chunk():
    # x = 4: two chunks; the second runs beside the first permute, the last permute is exposed
    assert lp.reduce_scatter_matmul("latency", 10.0, 4.0, 4) == 10 + 10 + 4
    assert lp.reduce_scatter_matmul("latency", 10.0, 14.0, 4) == 10 + 14 + 14
    # x = 2: one chunk, then its permute; x = 8: four chunks
    assert lp.reduce_scatter_matmul("latency", 10.0, 4.0, 2) == 14
    assert lp.reduce_scatter_matmul("latency", 10.0, 4.0, 8) == 10 + 3 * 10 + 4
    # one-way and throughput forms, x = 4: four chunks, each permute under the next, none after the last
    assert lp.reduce_scatter_matmul("oneway", 10.0, 4.0, 4) == 40
    assert lp.reduce_scatter_matmul("throughput", 10.0, 12.0, 4) == 10 + 3 * 12
    assert lp.reduce_scatter_matmul("latency", 10.0, 4.0, 1) == 10          # no axis: the matmul alone


def test_the_gathers_latency_form_fetches_the_neighbours_shard_first():
    assert lp.all_gather_matmul("latency", 10.0, 4.0, 4) == 4 + 10 + 10
    assert lp.all_gather_matmul("latency", 10.0, 14.0, 4) == 14 + 14 + 10
    assert lp.all_gather_matmul("oneway", 10.0, 4.0, 4) == 40
    assert lp.all_gather_matmul("oneway", 3.0, 4.0, 4) == 3 * 4 + 3


def test_a_reduce_scatter_of_permutes_alone_and_the_bytes_each_permute_carries():
    # reducescatter_latency over z = 4: two permutes in turn; one-way/throughput: z - 1
    assert lp.ring_reduce_scatter("latency", 5.0, 4) == 10
    assert lp.ring_reduce_scatter("throughput", 5.0, 4) == 15
    assert lp.ring_reduce_scatter("latency", 5.0, 1) == 0
    # 1200 bytes of partial sums over 4: latency halves each of 2 chunks, one-way sends whole chunks of 4
    assert lp.reduce_scatter_permute_bytes("latency", 1200, 4) == 300
    assert lp.reduce_scatter_permute_bytes("oneway", 1200, 4) == 300
    assert lp.reduce_scatter_permute_bytes("throughput", 1200, 4) == 150
    assert lp.reduce_scatter_permute_bytes("latency", 1200, 8) == 150
    assert lp.all_gather_permute_bytes("latency", 800) == 800
    assert lp.all_gather_permute_bytes("throughput", 800) == 400


@pytest.fixture(scope="module")
def int8_b64():
    return ws2d_decode(SERVED, V4, Topology.of_system(get_system("tpu-v4-4x4x4")), 64, batch=64, context=2048,
                       weights=DType.INT8, axes=(4, 16))


def test_a_decode_steps_input_matmul_reduce_scatters_over_x_in_two_chunks(int8_b64):
    """540B, 64 rows, x = 4: q, gate and up (64 x 256 + 2 x 73728 = 163840 columns, 10240 per yz chip) in
    two chunks of 5120; each permute carries half a chunk's output (64 x 2560 bf16) one hop."""
    chunk = _chunk(64, 4608, 5120, DType.INT8)
    perm = _permute(64 * 2560 * 2)
    assert chunk > perm
    assert int8_b64.per_layer["w_in, reduce-scatter x looped"] == pytest.approx(chunk + chunk + perm, rel=1e-9)


def test_a_decode_steps_output_matmul_gathers_over_x_one_shard_ahead(int8_b64):
    """down and o (73728 + 16384 rows, 5632 per yz chip) in two chunks of 2816 rows; first the
    neighbour's shard (64 x 90112 / 64 chips in bf16), then the second chunk beside the next permute."""
    chunk = _chunk(64, 2816, 4608, DType.INT8)
    perm = _permute(64 * 1408 * 2)
    assert int8_b64.per_layer["w_out, all-gather x looped"] == pytest.approx(perm + max(chunk, perm) + chunk,
                                                                               rel=1e-9)
    # the step's compute counts the chunks, its collectives only what the chunks do not hide
    assert int8_b64.per_layer["kernels"] == pytest.approx(
        sum(v for k, v in int8_b64.layer_kernels.items() if k not in ("layer_w_in", "layer_w_out")), rel=1e-12)


def test_a_prefill_loops_the_one_way_forms_in_x_chunks():
    """540B int8 prefill, 2048 rows: four chunks of 2560 columns, each partial sum (2048 x 2560 bf16,
    10.5 MB) sent one way under the next chunk; the permutes outlast the chunks."""
    s = ws2d_prefill(SERVED, V4, Topology.of_system(get_system("tpu-v4-4x4x4")), 64, batch=1, seq=2048,
                     weights=DType.INT8, axes=(4, 16))
    chunk, perm = _chunk(2048, 4608, 2560, DType.INT8), _permute(2048 * 2560 * 2)
    assert perm > chunk
    assert s.per_layer["w_in, reduce-scatter x looped"] == pytest.approx(chunk + 3 * perm, rel=1e-9)


def test_a_serial_layers_output_matmul_reduce_scatters_over_y_inside_it():
    """layers_serial.py at batch 512: the MLP's down matmul (73728 / 16 = 4608 rows of K) in y // 2 = 2
    chunks of half of E/x; each permute carries half a chunk's output (512 x 1152 bf16)."""
    s = ws2d_decode(replace(SERVED, parallel_block=False), V4, Topology.of_system(get_system("tpu-v4-4x4x4")), 64,
                    batch=512, context=2048, weights=DType.BF16, axes=(4, 16))
    chunk, perm = _chunk(512, 4608, 2304, DType.BF16), _permute(512 * 1152 * 2)
    assert s.per_layer["mlp w_out, reduce-scatter y looped"] == pytest.approx(
        chunk + max(chunk, perm) + perm, rel=1e-9)


def test_the_per_step_stack_by_hand(int8_b64):
    """embed_unembed_topp at batch 64 on 4 x 4 x 4: the embedding (64 rows of E/x, bf16) all-reduced over
    y and z (2 x (2 + 2) hops, twice 15/16 over four links); the final norm's two statistics over x; fp32
    logits (64 x 256000 / 16) reduce-scattered over x; for sampling the logits, padded to 16 rows of
    V/yz, exchanged over y and z in turn (per axis all of the buffer over its ring's two cuts) and 64
    int32 tokens gathered over the cube (6 hops, 63/64 over six links)."""
    st = int8_b64.per_step
    assert st["embedding: all-reduce yz (B x E/x)"] == pytest.approx(
        8 * HOP + 2 * 15 / 16 * 64 * 4608 * 2 / (4 * LINK) + LO, rel=1e-6)
    assert st["final norm: all-reduce x (statistic)"] == pytest.approx(
        4 * HOP + 2 * 3 / 4 * 64 * 2 * 4 / (2 * LINK) + LO, rel=1e-6)
    assert st["logits: reduce-scatter x (fp32)"] == pytest.approx(
        2 * HOP + 3 / 4 * 64 * 16000 * 4 / (2 * LINK) + LO, rel=1e-6)
    assert st["sampling: all-to-all yz (logits)"] == pytest.approx(
        4 * HOP + 2 * 16 * 16000 * 4 / (2 * LINK) + LO, rel=1e-6)
    assert st["sampling: all-gather tokens"] == pytest.approx(6 * HOP + 63 / 64 * 64 * 4 / (6 * LINK) + LO, rel=1e-6)
    # the table is read in bf16 whatever the layers' format: its 16000 x 4608 slice, 2 bytes each
    head = ws2d_decode(SERVED, V4, Topology.of_system(get_system("tpu-v4-4x4x4")), 64, batch=64, context=2048,
                       weights=DType.INT8, axes=(4, 16), parts=frozenset({"split", "kv", "looped"}))
    assert int8_b64.weight_bytes_per_chip - head.weight_bytes_per_chip == 16000 * 4608


def test_a_loop_step_that_sends_both_ways_takes_the_pairs_time():
    # x = 8, latency: four chunks; three steps beside a pair of permutes, the last permute one way
    assert lp.reduce_scatter_matmul("latency", 10.0, 4.0, 8, pair_s=12.0) == 10 + 3 * 12 + 4
    assert lp.all_gather_matmul("latency", 10.0, 4.0, 8, pair_s=12.0) == 4 + 3 * 12 + 10
    assert lp.reduce_scatter_matmul("throughput", 10.0, 4.0, 4, pair_s=12.0) == 10 + 3 * 12
    assert lp.reduce_scatter_matmul("oneway", 10.0, 4.0, 4, pair_s=12.0) == 40     # one way: no pairs
    assert lp.ring_reduce_scatter("latency", 5.0, 8, pair_s=7.0) == 3 * 7 + 5
    assert lp.ring_reduce_scatter("throughput", 5.0, 4, pair_s=7.0) == 3 * 7


def test_on_a_mesh_the_two_way_permutes_share_every_link():
    """layers_serial.py on the 2x2x4 slice (a mesh: no wraparound), PaLM 62B, batch 512, x, y, z = 2, 4, 2:
    the MLP's down matmul (32768 / 8 = 4096 rows of K) reduce-scatters over the 4-long y line inside it in
    y // 2 = 2 chunks of E/x / 2 = 2048 columns; each permute carries half a chunk's output (512 x 1024
    bf16) over the line's 3 hops. The step between the chunks shifts both ways at once: on a line each
    link direction carries a buffer of each shift (37 GB/s per link: 148 GB/s over 4 links), so the
    pair outlasts the chunk beside it."""
    palm_62b = replace(SERVED, layers=64, hidden=8192, heads=32, ffn=32768, parallel_block=False)
    s = ws2d_decode(palm_62b, V4, Topology.of_system(get_system("tpu-v4-2x2x4")), 16, batch=512, context=2048,
                    weights=DType.BF16, axes=(2, 8))
    assert (s.x, s.y, s.z) == (2, 4, 2)
    chunk = _chunk(512, 4096, 2048, DType.BF16)
    one_way = LO + 3 * HOP + 512 * 1024 * 2 / 37e9
    pair = LO + 3 * HOP + 2 * 512 * 1024 * 2 / 37e9
    assert pair > chunk
    assert s.per_layer["mlp w_out, reduce-scatter y looped"] == pytest.approx(chunk + pair + one_way, rel=1e-9)
