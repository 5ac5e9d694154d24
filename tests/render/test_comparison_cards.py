"""The comparison card's lines can be told apart: a module path repeated names the op, then the kernel."""

from types import SimpleNamespace

from narrowpipe.costmodel.report import Bottleneck
from narrowpipe.render.comparison import _tops


def _b(kernel: str, op: str, scope: str) -> Bottleneck:
    return Bottleneck(kernel, op, "overhead", 1e-4, 0.08, scope, 160)


def test_top_kernels_under_one_module_path_name_their_op_and_then_their_kernel():
    attn = "model.layers.*.self_attn"
    top = [_b("mul_5", "elementwise", attn), _b("mul_7", "elementwise", attn), _b("transpose_1", "copy", attn),
           _b("down_proj", "dot", "model.layers.*.mlp")]
    lines = _tops(SimpleNamespace(top=top)).splitlines()
    assert len(set(lines)) == 4
    assert lines == ["model.layers.*.self_attn x160 (elementwise mul_5) O 8%",
                     "model.layers.*.self_attn x160 (elementwise mul_7) O 8%",
                     "model.layers.*.self_attn x160 (copy) O 8%", "model.layers.*.mlp x160 O 8%"]


def test_the_models_own_notes_print_once_for_every_target():
    """An expert-routing note is the model's: every target's report has it; compare printed none."""
    from narrowpipe.render.comparison import shared_notes
    routing = "experts: zipf:1 routing: hottest expert 1 rows"
    c = SimpleNamespace(reports=[SimpleNamespace(notes=[routing, "h100 only"]), SimpleNamespace(notes=[routing])])
    assert shared_notes(c) == [routing]
    assert shared_notes(SimpleNamespace(reports=[])) == []
