"""The fresh bytes the CPU model charges are the pages the OS faults in: an eager forward's minor
page faults (getrusage, Linux) against fresh_bytes of the same module's export; no timing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from narrowpipe.costmodel.execution.fresh_pages import fresh_bytes  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.kernels import fuse  # noqa: E402
from narrowpipe.frontends.torch.frontend import from_torch  # noqa: E402

MIB = 2**20


class Block(torch.nn.Module):
    """A 40 MiB linear output (matmul and bias: one buffer), its 40 MiB GELU, a 10 MiB projection,
    an in-place ReLU on it (no buffer) and a 3x3 convolution over a 36.75 MiB input (copied to
    oneDNN's layout) with a small output."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)
        self.conv = torch.nn.Conv2d(96, 4, 3, padding=1, bias=False)

    def forward(self, x, img):
        y = self.down(torch.nn.functional.gelu(self.up(x)))
        return torch.relu_(y), self.conv(img)


#: the faults of the third forward of :class:`Block`, one thread, in the process it runs in
_MEASURE = """
import importlib.util, resource, sys, torch
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("fresh_page_block", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model = mod.Block().eval()
x, img = torch.randn(40960, 64), torch.randn(8, 96, 112, 112)
with torch.no_grad():
    for _ in range(2):
        model(x, img)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    model(x, img)
    print((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before) * resource.getpagesize())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD and glibc malloc are Linux's")
def test_the_fresh_bytes_are_the_pages_the_forward_faults_in(one_thread):
    model = Block().eval()
    x, img = torch.randn(40960, 64), torch.randn(8, 96, 112, 112)
    table = interpret(from_torch(model, (x, img)), {})
    predicted = sum(fresh_bytes(k, table, 32 * MIB) for k in fuse(table, "none"))
    assert predicted == 2 * 40 * MIB + 8 * 96 * 112 * 112 * 4      # linear, GELU, the conv's input copy
    # in a fresh process: glibc's malloc moves its mmap threshold after large frees, so whether a
    # buffer is mapped fresh depends on what this process (the rest of the test run) allocated before
    faulted = int(subprocess.run([sys.executable, "-c", _MEASURE, __file__], capture_output=True, text=True, check=True,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout.split()[-1])
    assert faulted == pytest.approx(predicted, rel=0.1)
