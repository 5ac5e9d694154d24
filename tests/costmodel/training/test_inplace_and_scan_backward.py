"""Training steps through in-place writes into views and through scans, against ``FlopCounterMode``
over torch's own forward and ``out.sum().backward()``.

The facts under test are torch's: a value written into a view (``out[:, t] = y``) reaches the base,
so the layer that produced it gets its gradient (narrowpipe dropped the write: 12288 FLOPs for the
first model where torch counts 20480, the first Linear without gradient); a cumsum's backward is a
reverse cumsum of the same shape (every cumsum step failed with a reshape to the reduced shape).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402
from tests.torch_counts import counter as grouped_wgrad_counter  # noqa: E402

_MATMUL = ("contraction", "convolution", "attention")


def _torch_step(model, args, kwargs=None):
    model.zero_grad(set_to_none=True)
    with grouped_wgrad_counter() as counter:      # torch's count, a grouped conv's dW mended
        out = model(*args, **(kwargs or {}))
        out = out if isinstance(out, torch.Tensor) else out[0]
        out.float().sum().backward()
    return counter.get_total_flops()


def _narrowpipe_step(model, args, kwargs=None):
    step = build_training_graph(narrowpipe.from_torch(model, args, kwargs), loss="sum")
    report = narrowpipe.analyze(step)
    return sum(r.flops for r in report.ops if r.group in _MATMUL), report, step


class _WriteBetweenLinears(torch.nn.Module):
    """Two Linears with a write (``kind``, the subclass's :meth:`write`) of the first one's output
    into a zeros buffer between them: the second reads the buffer, so the first gets a gradient
    only through the write."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16, bias=False)
        self.b = torch.nn.Linear(16, 16, bias=False)
        self.kind = kind

    def write(self, k: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x):
        k = self.a(x)
        return self.b(self.write(k, torch.zeros_like(k)))


class _Writes(_WriteBetweenLinears):
    """Writes through views (in place)."""

    def write(self, k: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.kind == "select_loop":             # RWKV's CPU WKV loop
            for t in range(k.shape[1]):
                out[:, t] = k[:, t] * 2
        elif self.kind == "slice":
            out[:, 1:3] = k[:, 1:3]
        elif self.kind == "select_of_slice":       # a view of a view
            out[:, 1:3][:, 0] = k[:, 1]
        elif self.kind == "add_into_select":       # an in-place op other than copy_ on a view
            out[:, 2].add_(k[:, 2])
        elif self.kind == "narrow":
            out.narrow(1, 0, 2).copy_(k[:, :2])
        elif self.kind == "transposed":            # a permuted view: the write goes back transposed
            out.transpose(0, 1)[1] = k[:, 1]
        elif self.kind == "broadcast":             # copy_ broadcasts its source
            out[:, 1] = k[:, 1].sum(0, keepdim=True)
        return out


@pytest.mark.parametrize("kind", ["select_loop", "slice", "select_of_slice", "add_into_select", "narrow",
                                  "transposed", "broadcast"])
def test_a_write_into_a_view_reaches_the_base_and_gets_its_gradient(kind):
    torch.manual_seed(0)
    model, x = _Writes(kind), torch.randn(2, 4, 16)
    flops, report, step = _narrowpipe_step(model, (x,))
    assert flops == _torch_step(model, (x,)) == 20480      # 2 forward mm + dW_b, dX_b, dW_a
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []


class _Cumsum(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16, bias=False)
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(self.a(x), dim=self.dim)


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_a_cumsum_backward_is_a_reverse_cumsum_of_the_input_shape(dim):
    torch.manual_seed(0)
    model, x = _Cumsum(dim), torch.randn(2, 4, 16)
    flops, report, step = _narrowpipe_step(model, (x,))
    assert flops == _torch_step(model, (x,)) == 8192
    grads = [r for r in report.ops if r.phase == "backward" and r.op == "cumsum"]
    # hand count: one [2, 4, 16] fp32 scan, 128 adds, reads and writes 512 B
    assert [(r.flops, r.bytes) for r in grads] == [(128, 1024)]


transformers = pytest.importorskip("transformers")
_V = 300


def _mamba2():
    return transformers.Mamba2ForCausalLM(transformers.Mamba2Config(
        vocab_size=_V, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, head_dim=8, num_heads=8,
        n_groups=1, conv_kernel=4, chunk_size=4))


def _rwkv():
    return transformers.RwkvForCausalLM(transformers.RwkvConfig(
        vocab_size=_V, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32, intermediate_size=64,
        context_length=64))


@pytest.mark.parametrize("make", [_mamba2, _rwkv], ids=["mamba2-cumsum", "rwkv-slice-writes"])
def test_recurrent_models_training_step_matches_torch(make):
    """Mamba2's segment sums are cumsums (its step failed); RWKV's CPU loop writes each step's output
    into a slice of a zeros buffer (its step counted 3036160 where torch counts 3363840)."""
    torch.manual_seed(0)
    model = make().eval()
    kwargs = {"input_ids": torch.randint(3, _V, (2, 10)), "use_cache": False}
    flops, _, _ = _narrowpipe_step(model, (), kwargs)
    assert flops == _torch_step(model, (), kwargs)


class _Repeat(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16, bias=False)
        self.kind = kind

    def forward(self, x):
        k = self.a(x)
        if self.kind == "repeat":
            return k.repeat(1, 2, 1)
        if self.kind == "tile":
            return torch.tile(k, (2, 1))
        return k.repeat_interleave(2, dim=1)


@pytest.mark.parametrize("kind", ["repeat", "tile", "repeat_interleave"])
def test_a_repeat_backward_sums_the_copies_back_onto_the_input(kind):
    """torch: forward 2*2*4*16*16 = 4096, dW 4096 (no dX: x needs none); the repeat's backward is a
    sum, no matmul. Hand count of that sum, fp32: reads dy [2, 8, 16] (or [4, 4, 16]) 1024 B, writes
    dx [2, 4, 16] 512 B, one add per dy element (256)."""
    torch.manual_seed(0)
    model, x = _Repeat(kind), torch.randn(2, 4, 16)
    flops, report, step = _narrowpipe_step(model, (x,))
    assert flops == _torch_step(model, (x,)) == 8192
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []
    sums = [r for r in report.ops if r.phase == "backward" and r.op == "reduce_sum"]
    assert [(r.flops, r.bytes) for r in sums] == [(256, 1024 + 512)]


class _Scatters(_WriteBetweenLinears):
    """Writes by index or mask (out of place)."""

    def write(self, k: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        if self.kind == "scatter":
            idx = torch.arange(4).flip(0).view(1, 4, 1).expand(2, 4, 16)
            out = base.scatter(1, idx, k)
        elif self.kind == "scatter_add":
            idx = torch.arange(4).flip(0).view(1, 4, 1).expand(2, 4, 16)
            out = base.scatter_add(1, idx, k)
        elif self.kind == "index_put":
            out = base.index_put((torch.tensor([0, 1]),), k[[1, 0]])
        else:                                        # LLaVA's image features into the text embeddings
            mask = (torch.arange(4) % 2 == 0).view(1, 4, 1).expand(2, 4, 16)
            out = base.masked_scatter(mask, k)
        return out


@pytest.mark.parametrize("kind", ["scatter", "scatter_add", "index_put", "masked_scatter"])
def test_scatter_backwards_reach_data_and_updates(kind):
    """torch: 2 forward mm + dW_b, dX_b, dW_a = 20480 (the written values carry the gradient to ``a``)."""
    torch.manual_seed(0)
    model, x = _Scatters(kind), torch.randn(2, 4, 16)
    flops, report, step = _narrowpipe_step(model, (x,))
    assert flops == _torch_step(model, (x,)) == 20480
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []


def test_a_scatter_gradient_gathers_the_updates_rows():
    """Hand count, fp32 [2, 4, 16], int64 index [2, 4, 16]: the updates' gradient gathers 512 B of
    the output gradient by 1024 B of indices and writes 512 B."""
    torch.manual_seed(0)
    _, report, _ = _narrowpipe_step(_Scatters("scatter"), (torch.randn(2, 4, 16),))
    rows = [r for r in report.ops if r.phase == "backward" and r.op == "gather_elements"]
    assert [(r.flops, r.bytes) for r in rows] == [(0, 1024 + 512 + 512)]


class _Upsample(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16, bias=False)
        self.mode = mode

    def forward(self, x):
        k = self.a(x).view(1, 2, 4, 4)
        return torch.nn.functional.interpolate(k, scale_factor=2, mode=self.mode)


@pytest.mark.parametrize("mode, flops", [("bilinear", 1024), ("nearest", 0)])
def test_an_upsample_backward_reads_the_output_gradient_and_writes_the_input_gradient(mode, flops):
    """torch: forward 2*2*16*16 = 1024, dW 1024. Hand count of the upsample's backward, fp32: dy
    [1, 2, 8, 8] 512 B read, dx [1, 2, 4, 4] 128 B written; bilinear: each of dy's 128 elements
    multiply-adds into 2 x 2 taps, 8 FLOPs each (nearest: a copy-add, counted as none like its forward)."""
    torch.manual_seed(0)
    model, x = _Upsample(mode), torch.randn(2, 16)
    total, report, step = _narrowpipe_step(model, (x,))
    assert total == _torch_step(model, (x,)) == 2048
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []
    grads = [r for r in report.ops if r.phase == "backward" and r.op == "resize"]
    assert [(r.flops, r.bytes) for r in grads] == [(flops, 512 + 128)]
