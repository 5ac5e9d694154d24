"""Static-batch generation: prefill plus every decode step as the cache grows."""

import pytest

import narrowpipe
from narrowpipe.costmodel.serving.generate import decode_total, generate, steady_state
from narrowpipe.costmodel.serving.serve import replica_for, serve


@pytest.fixture(scope="module")
def replica():
    g = narrowpipe.transformer(layers=2, hidden=512, heads=8, vocab=1000, ffn=1024, kv_heads=2, gated_mlp=True, seq=8)
    return replica_for(g, "h100")


def test_sampled_decode_sum_matches_every_step_timed(replica):
    exact = sum(replica.step(4, 1, p).time_s for p in range(100, 400))
    total, how = decode_total(replica, 4, 100, 300)
    assert "interpolated" in how
    assert total == pytest.approx(exact, rel=0.005)


def test_e2e_is_prefill_plus_decode_and_rates_follow(replica):
    gen = generate(replica, 4, 64, 10)
    steps = sum(replica.step(4, 1, 64 + i).time_s for i in range(9))   # tokens 2..10
    assert gen.e2e_s == pytest.approx(replica.step(4, 64, 0).time_s + steps)
    r = serve(replica, mode="generate", batch=4, input_len=64, output_len=10, with_crossover=False)
    assert r.e2e_s == pytest.approx(gen.e2e_s)
    assert r.output_tokens_per_s == pytest.approx(4 * 10 / gen.e2e_s)
    assert r.ttft_s == pytest.approx(gen.prefill.time_s)


def test_steady_state_admits_batch_over_output_requests_per_iteration(replica):
    s = steady_state(replica, batch=32, input_len=256, output_len=64)
    assert s.prefill_tokens == pytest.approx(32 * 256 / 64)
    assert s.iteration_s == pytest.approx(s.dense_s + s.decode_attention_s + s.prefill_attention_s)
    # half a prompt an iteration: the one that prefills the request holds its prompt whole (dense layers
    # over the 32 decodes and 256 prompt tokens, its attention), after half an average iteration waited
    first = replica.step(1, 32 + 256, 0).dense_s + s.decode_attention_s + replica.step(1, 256, 0).attention_s
    assert s.ttft_s == pytest.approx(s.iteration_s / 2 + first)
    assert s.ttft_s > 1.5 * s.iteration_s


def test_ttft_takes_the_iteration_that_prefills_the_prompt_with_the_others_admitted_beside_it(replica):
    """QA: at 474 in flight with 128 out, 3.7 prompts of 2,048 are prefilled in each 112 ms iteration,
    yet TTFT read 52.4 ms (one prompt and the decodes timed alone). By hand: a first token comes out at
    the end of the iteration that prefills the prompt; at batch/output >= 1 prompts an iteration that is
    the average iteration, TPOT; an arrival at a random time waits for the running iteration to end,
    half of one on average (mean residual time of a fixed period T: T/2). So TTFT = 1.5 x TPOT."""
    for batch, output in ((256, 64), (474, 128), (64, 64)):
        s = steady_state(replica, batch=batch, input_len=256, output_len=output)
        assert s.ttft_s == pytest.approx(1.5 * s.tpot_s, rel=1e-9)
    # fewer than one prompt an iteration: the prefilling one is longer than the average, TTFT more still
    s = steady_state(replica, batch=8, input_len=256, output_len=64)
    assert s.ttft_s > 1.5 * s.tpot_s


def test_a_context_beyond_the_models_positions_is_refused():
    g = narrowpipe.transformer(layers=1, hidden=64, heads=2, vocab=100, positions="learned", max_positions=256,
                               norm="layer", seq=8)
    with pytest.raises(narrowpipe.NarrowpipeError, match="at most 256 positions"):
        serve(g, "h100", mode="generate", batch=1, input_len=200, output_len=100)
    assert serve(g, "h100", mode="decode", batch=1, context=255, with_crossover=False).tpot_s > 0
