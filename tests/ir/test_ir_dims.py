import pytest

from narrowpipe.errors import UnboundDimError
from narrowpipe.ir import DType, Sym, TensorType


def test_expression_dims_evaluate_and_compare_by_canonical_text():
    d = Sym("2*seq +  1")
    assert d.symbols == {"seq"}
    assert d.evaluate({"seq": 5}) == 11
    assert Sym("2 * seq + 1") == d


def test_torch_helper_functions_evaluate():
    assert Sym("FloorDiv(s0, 2)").evaluate({"s0": 7}) == 3
    assert Sym("Max(1, s0 - 4)").evaluate({"s0": 2}) == 1
    assert Sym("CeilToInt(IntTrueDiv(s0, 4))").evaluate({"s0": 9}) == 3
    assert Sym("ModularIndexing(s0, 2, 3)").evaluate({"s0": 10}) == 2


def test_names_that_are_not_expressions_are_atoms():
    d = Sym("batch size")
    assert d.symbols == {"batch size"}
    assert d.evaluate({"batch size": 4}) == 4
    e = Sym("__import__('os')")  # calls of unknown functions are not evaluated, only named
    assert e.symbols == {"__import__('os')"}


def test_unbound_symbol_raises_naming_it():
    with pytest.raises(UnboundDimError, match="seq"):
        Sym("seq*2").evaluate({})


def test_rename_keeps_structure():
    assert Sym("s72*s70 + 1").rename({"s72": "batch", "s70": "seq"}) == Sym("batch*seq + 1")


def test_tensor_type_bytes_round_sub_byte_types_up():
    assert TensorType(DType.INT4, (3,)).nbytes() == 2
    assert TensorType(DType.FP4, (4, 4)).nbytes() == 8
    assert TensorType(DType.BF16, (Sym("n"), 8)).nbytes({"n": 3}) == 48


def test_dtype_parse_accepts_framework_spellings():
    assert DType.parse("bfloat16") is DType.BF16
    assert DType.parse("float8_e4m3fn") is DType.FP8_E4M3
    with pytest.raises(ValueError):
        DType.parse("float7")
