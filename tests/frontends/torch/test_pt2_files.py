"""``.pt2`` files: Dim names survive save/load, and archives torch cannot load give one
ModelLoadError (no logged torch traceback)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
from torch.export import Dim  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.errors import ModelLoadError  # noqa: E402
from narrowpipe.ir import DimRole  # noqa: E402


class Proj(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.l(x)


X = torch.randn(2, 4, 8)
SPEC = {"x": {0: Dim("batch"), 1: Dim("seq", max=64)}}


def test_dim_names_survive_save_pt2_and_load(tmp_path):
    ep = narrowpipe.export(Proj(), (X,), dynamic_shapes=SPEC)
    assert set(narrowpipe.from_torch(ep).dims) == {"batch", "seq"}      # in memory too
    path = narrowpipe.save_pt2(ep, tmp_path / "sub" / "proj.pt2")
    g = narrowpipe.load(path)
    assert set(g.dims) == {"batch", "seq"}
    assert g.dims["seq"].max == 64 and g.dims["batch"].role is DimRole.BATCH
    assert narrowpipe.analyze(g, batch=3, seq=5).dims == {"batch": 3, "seq": 5}


def test_plain_torch_archive_takes_its_names_from_the_export_spec(tmp_path):
    """torch.export drops Dim names; the spec the program was exported with gives them back."""
    ep = torch.export.export(Proj(), (X,), dynamic_shapes=SPEC)
    path = tmp_path / "plain.pt2"
    torch.export.save(ep, str(path))
    assert set(narrowpipe.load(path).dims) == {"x_0", "x_1"}             # named by input, never s77
    assert set(narrowpipe.load(path, dynamic_shapes=SPEC).dims) == {"batch", "seq"}
    assert set(narrowpipe.from_torch(ep, dynamic_shapes=SPEC).dims) == {"batch", "seq"}
    saved = narrowpipe.save_pt2(ep, tmp_path / "p.pt2", dynamic_shapes=(SPEC["x"],))   # positional spec
    assert set(narrowpipe.load(saved).dims) == {"batch", "seq"}


@dataclasses.dataclass
class _Out:
    logits: torch.Tensor


class _ReturnsOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _Out(self.l(x))


def test_unregistered_output_type_is_one_model_load_error(tmp_path, capfd):
    """As when a ModelOutput program is loaded in a process that has not imported transformers."""
    import torch.utils._pytree as pytree
    pytree.register_dataclass(_Out, serialized_type_name="narrowpipe_test.Out")
    try:
        path = tmp_path / "out.pt2"
        torch.export.save(torch.export.export(_ReturnsOut(), (torch.randn(2, 4),)), str(path))
    finally:
        pytree._deregister_pytree_node(_Out)
    capfd.readouterr()
    with pytest.raises(ModelLoadError) as info:
        narrowpipe.load(path)
    msg = str(info.value)
    assert "out.pt2" in msg and "narrowpipe_test.Out" in msg and "not registered" in msg
    assert "import" in msg and "Traceback" not in capfd.readouterr().err


class _ReturnsModelOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.output_type(last_hidden_state=self.l(x))


def test_a_transformers_output_type_loads_in_a_fresh_process(tmp_path):
    """transformers registers its ModelOutput pytrees when ``transformers.modeling_outputs`` is imported,
    which a lazy ``import transformers`` does not do (and the CLI cannot do): the loader imports it."""
    outputs = pytest.importorskip("transformers.modeling_outputs")
    import subprocess
    import sys
    path = tmp_path / "hf_out.pt2"
    module = _ReturnsModelOutput()
    module.output_type = outputs.BaseModelOutput
    torch.export.save(torch.export.export(module, (torch.randn(2, 4),)), str(path))
    code = ("import narrowpipe, sys; g = narrowpipe.load(sys.argv[1]); "
            "print(narrowpipe.analyze(g).flops_by_group['contraction'])")
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == str(2 * 2 * 4 * 4)    # one Linear: 2 rows x 4 in x 4 out, 2 FLOPs each
    assert "Traceback" not in run.stderr
