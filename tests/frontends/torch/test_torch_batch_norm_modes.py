"""torch's batch norm mode decides its fusion: in eval mode (``_native_batch_norm_legit_no_training``
or ``batch_norm(training=False)``) it is a per-channel affine that joins the conv's kernel, as
Inductor and XLA fuse it; in train mode it reduces over the batch and stays a kernel of its own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _kernel_of(module: torch.nn.Module) -> dict[str, str]:
    g = narrowpipe.from_torch(module, (torch.randn(2, 4, 16, 16),))
    return {row.op: row.kernel for row in narrowpipe.analyze(g, "h100", fusion="full").ops}


def test_eval_batch_norm_fuses_into_the_conv():
    k = _kernel_of(Block().eval())
    assert k["batch_norm"] == k["conv"] == k["relu"]


def test_train_batch_norm_is_its_own_kernel():
    k = _kernel_of(Block().train())
    assert k["batch_norm"] != k["conv"]
