"""torch's FlopCounterMode with one formula mended: a grouped convolution's weight gradient.

torch 2.13's ``conv_backward_flop`` counts the weight gradient as an ungrouped conv over the
transposed tensors, ``groups`` x the work done (pytorch/pytorch PR 183405 divides it); narrowpipe
counts the work. Tests that compare whole training steps with the counter use this mapping, so the
rest of the count stays torch's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop, conv_flop_count

__all__ = ["GROUPED_WGRAD", "counter"]


#: torch's own formula on shapes (the registered one is wrapped to take tensors)
_TORCH_FORMULA = conv_backward_flop.__wrapped__


def _t(shape: Any) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def _conv_backward(grad_out_shape: Any, x_shape: Any, w_shape: Any, bias: Any, stride: Any, padding: Any,
                   dilation: Any, transposed: bool, output_padding: Any, groups: int, output_mask: Any,
                   out_shape: Any, **kwargs: Any) -> int:
    count = _TORCH_FORMULA(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                               output_padding, groups, [output_mask[0], False, False], out_shape)
    if output_mask[1]:
        wgrad = out_shape[1]
        if transposed:
            full = conv_flop_count(_t(grad_out_shape), _t(x_shape), _t(wgrad), transposed=False)
        else:
            full = conv_flop_count(_t(x_shape), _t(grad_out_shape), _t(wgrad), transposed=False)
        count += full // groups
    return count


GROUPED_WGRAD = {torch.ops.aten.convolution_backward: _conv_backward}


def counter() -> FlopCounterMode:
    """A FlopCounterMode whose grouped weight gradients count the work done."""
    return FlopCounterMode(display=False, custom_mapping=dict(GROUPED_WGRAD))
