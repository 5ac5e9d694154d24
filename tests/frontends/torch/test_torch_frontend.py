from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.errors import FrontendError, ModelLoadError, UnsupportedOpError  # noqa: E402
from narrowpipe.ir import problems  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3))).softmax(-1)


def _flops(module, *args):
    with FlopCounterMode(display=False) as c, torch.no_grad():
        module(*args)
    return c.get_total_flops()


def test_module_export_counts_and_verifies():
    m, x = Net().eval(), torch.randn(2, 3, 8, 8)
    g = narrowpipe.from_torch(m, (x,))
    assert problems(g) == []
    r = narrowpipe.analyze(g)
    assert r.modeled_flops == _flops(m, x)
    assert r.params == sum(p.numel() for p in m.parameters())
    assert {w.kind.value for w in g.weights} == {"param", "buffer"}  # BN running stats are buffers


def test_symbolically_traced_graph_module():
    m, x = Net().eval(), torch.randn(2, 3, 8, 8)
    gm = torch.fx.symbolic_trace(m)
    assert narrowpipe.analyze(narrowpipe.from_torch(gm, (x,))).modeled_flops == _flops(m, x)


def test_aten_graph_module_from_exported_program():
    m, x = Net().eval(), torch.randn(2, 3, 8, 8)
    gm = torch.export.export(m, (x,)).module()
    r = narrowpipe.analyze(narrowpipe.from_torch(gm, (x,)))
    assert r.modeled_flops == _flops(m, x)
    assert r.params == sum(p.numel() for p in m.parameters())


def test_exported_program_and_pt2_file(tmp_path):
    m, x = Net().eval(), torch.randn(2, 3, 8, 8)
    ep = torch.export.export(m, (x,))
    path = tmp_path / "net.pt2"
    torch.export.save(ep, str(path))
    assert narrowpipe.analyze(narrowpipe.load(path)).modeled_flops == _flops(m, x)
    assert narrowpipe.analyze(narrowpipe.from_torch(ep)).modeled_flops == _flops(m, x)


def test_bad_pt2_file_is_a_model_load_error(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="bad.pt2"):
        narrowpipe.load(bad)
    with pytest.raises(ModelLoadError, match="not found"):
        narrowpipe.load(tmp_path / "missing.pt2")


@torch.library.custom_op("narrowpipe_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class UsesMystery(torch.nn.Module):
    def forward(self, x):
        return mystery(mystery(x) + 1)


def test_op_without_rule_is_listed_with_count_and_strict_raises():
    g = narrowpipe.from_torch(UsesMystery(), (torch.randn(4),))
    r = narrowpipe.analyze(g)
    assert [(u.op, u.count) for u in r.unmodeled] == [("narrowpipe_test.mystery.default", 2)]
    with pytest.raises(UnsupportedOpError, match="mystery"):
        narrowpipe.analyze(g, strict=True)
    with pytest.raises(UnsupportedOpError, match="mystery"):
        narrowpipe.from_torch(UsesMystery(), (torch.randn(4),), strict=True)


def test_export_failure_is_a_frontend_error():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x
    with pytest.raises(FrontendError, match="torch.export failed"):
        narrowpipe.from_torch(DataDependent(), (torch.randn(3),))


def test_meta_device_model_needs_no_weights():
    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    x = torch.empty(8, 4096, device="meta")
    r = narrowpipe.analyze(narrowpipe.from_torch(m, (x,)))
    assert r.modeled_flops == 2 * 8 * 4096 * 4096 + 2 * 8 * 4096 * 1024
    assert r.params == 4096 * 4096 + 4096 + 4096 * 1024 + 1024
