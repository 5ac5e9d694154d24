"""What a notebook user hands the top-level API by mistake gets a narrowpipe error saying what to do
(it was an AttributeError or TypeError deep inside), and names the API accepts elsewhere work here too."""

from __future__ import annotations

import inspect

import pytest
import torch

import narrowpipe
from narrowpipe import NarrowpipeError


@pytest.mark.parametrize("call", ["analyze", "compare", "serve"])
def test_a_torch_module_is_refused_with_what_to_call_first(call: str) -> None:
    fn = getattr(narrowpipe, call)
    args = (torch.nn.Linear(4, 4),) + (() if call == "analyze" else (["h100"] if call == "compare" else "h100",))
    with pytest.raises(NarrowpipeError, match="from_torch"):
        fn(*args)


def test_a_bundled_example_name_is_a_model_as_plan_takes_it() -> None:
    by_name = narrowpipe.analyze("gpt2", dims={"batch": 1, "seq": 16})
    assert by_name.flops == narrowpipe.analyze(narrowpipe.load_model("gpt2"), dims={"batch": 1, "seq": 16}).flops


def test_dims_must_be_a_mapping_and_builder_sizes_whole_numbers() -> None:
    g = narrowpipe.transformer(2, 64, 4, 100, seq=8)
    with pytest.raises(NarrowpipeError, match="mapping"):
        narrowpipe.analyze(g, dims=[1, 128])
    for bad in ("256", 256.0, True):
        with pytest.raises(NarrowpipeError, match="whole number"):
            narrowpipe.transformer(2, bad, 4, 100, seq=8)


def test_one_example_tensor_is_the_positional_inputs() -> None:
    g = narrowpipe.from_torch(torch.nn.Linear(4, 8), torch.zeros(2, 4))
    assert narrowpipe.analyze(g).flops_by_group["contraction"] == 2 * 2 * 4 * 8


def test_the_torch_wrappers_show_their_signature_and_docstring_without_importing_torch_first() -> None:
    for fn in (narrowpipe.from_torch, narrowpipe.export, narrowpipe.save_pt2, narrowpipe.export_decode_step):
        assert "*args" not in str(inspect.signature(fn)) and len(inspect.getdoc(fn) or "") > 80


def test_the_builder_keeps_the_name_it_is_given() -> None:
    assert narrowpipe.transformer(2, 64, 4, 100, seq=8, name="tiny").name == "tiny"
    assert narrowpipe.transformer(2, 64, 4, 100, seq=8).name == "transformer"
