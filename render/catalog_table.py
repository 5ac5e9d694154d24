"""``narrowpipe targets``: the hardware catalog as one table, a row per chip."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

__all__ = ["catalog_table"]


def _family(family: str, target: Any) -> str:
    """The family as the table says it: a Gaudi 3 or Trainium2 listed as "tpu" read as a Google TPU
    (QA); no wider than "dataflow", so at 80 columns no price loses its "*"; their family key stays
    "tpu" because it picks the execution model that times them."""
    if family == "tpu" and str(getattr(target, "vendor", "")).lower() != "google":
        return "tpu-like"
    return family


def catalog_table() -> Any:
    """One row per chip. Names never wrap or get cut (they are what every other command takes);
    the peak is one dtype for every row, the dense bf16 rate the cost model uses for a bf16
    model, so the column compares like with like (it used to show each chip's highest rate: fp4
    next to int4 next to bf16)."""
    from rich import box
    from rich.table import Table

    from ..backends import CATALOG_PRICE_BASIS, get_target, targets
    from ..costmodel.execution.common import matrix_rate
    from ..ir import DType
    from . import nbytes, si
    rows = [(name, family, get_target(name)) for name, family in targets()]
    caption = ("bf16 dense: the matrix peak a bf16 model runs at, FLOP/s "
               "(a chip without bf16 runs it as the type in brackets); $/h: hyperscaler on-demand list "
               "price per chip (* on another basis: targets --show NAME says which); tpu-like: a systolic chip "
               "of another vendor, timed by the TPU execution model (matrix engines, XLA-style fusion)")
    tab = Table(title="hardware targets", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                caption=caption)
    tab.add_column("name", no_wrap=True, min_width=max(len(n) for n, _, _ in rows))
    tab.add_column("family", justify="left", no_wrap=True)
    for col in ("bf16 dense", "memory", "bandwidth", "TDP", "$/h"):
        tab.add_column(col, justify="right", no_wrap=True, min_width=5 if col == "$/h" else None)
    for name, family, t in rows:
        rate = matrix_rate(t, DType.BF16)
        peak = si(rate.flops_per_s) + ("" if rate.dtype == "bf16" else escape(f" [{rate.dtype}]"))
        price = "-" if t.price_per_hour is None else f"{t.price_per_hour:.2f}" + (
            "" if t.price_basis == CATALOG_PRICE_BASIS else "*")
        tab.add_row(name, _family(family, t), peak, nbytes(t.memory_capacity), si(t.memory_bandwidth, "B/s"),
                    f"{t.tdp:.0f} W" if t.tdp else "-", price)
    return tab
