"""``narrowpipe targets`` says which chips are Google's TPUs and which are other vendors' systolic
chips timed by the TPU model (QA: Gaudi 3 and Trainium2 were listed as family "tpu")."""

from __future__ import annotations

from rich.console import Console

from narrowpipe.backends import get_target
from narrowpipe.render.catalog_table import catalog_table


def test_other_vendors_systolic_chips_are_listed_as_timed_by_the_tpu_model():
    console = Console(record=True, width=200)
    console.print(catalog_table())
    rows = {line.split()[0]: line.split()[1] for line in console.export_text().splitlines()
            if len(line.split()) > 1}
    for name in ("gaudi3", "trainium2"):
        assert get_target(name).family == "tpu"     # the execution model that times them is unchanged
        assert rows[name] == "tpu-like"
    for name in ("tpu-v5e", "tpu-v6e"):
        assert rows[name] == "tpu"


def test_at_80_columns_every_price_keeps_its_basis_mark():
    """The family label is no wider than "dataflow": at 80 columns "3.29*" was cut to "3.2..."."""
    console = Console(record=True, width=80)
    console.print(catalog_table())
    rows = {line.split()[0]: line.split()[-1] for line in console.export_text().splitlines() if line.split()}
    assert rows["h100-pcie"] == "3.29*" and rows["b200"] == "14.24"
