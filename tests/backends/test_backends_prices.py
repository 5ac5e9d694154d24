"""Catalog prices per chip-hour: each equals the cloud list price its source quotes, divided by hand.

The verdict of ``compare`` (cheapest per million tokens) reads these, so a price that drifts from its
source, or a rented chip left unpriced without a word, would mislead it silently.
"""

from __future__ import annotations

import re

import pytest

from narrowpipe.backends import get_target, targets

#: "derived: $113.9328/h for instance p6-b200.48xlarge with 8 chips" -> (113.9328, 8)
_PER_INSTANCE = re.compile(r"^derived: \$([\d,]+(?:\.\d+)?)/h for \w+ .*? with (\d+) chips")


def _instance_price(source: str) -> tuple[float, int] | None:
    match = _PER_INSTANCE.match(source)
    return (float(match.group(1).replace(",", "")), int(match.group(2))) if match else None


DERIVED = [name for name, _ in targets()
           if get_target(name).price_per_hour is not None
           and _instance_price(get_target(name).source("price_per_hour"))]


def test_the_instance_priced_chips_are_the_ones_expected():
    assert {"b200", "gb200", "trainium2", "mi355x", "tpu-v5p"} <= set(DERIVED)


@pytest.mark.parametrize("name", DERIVED)
def test_a_price_derived_from_an_instance_is_that_price_over_its_chips(name):
    target = get_target(name)
    parsed = _instance_price(target.source("price_per_hour"))
    assert parsed is not None
    per_instance, chips = parsed
    assert target.price_per_hour == pytest.approx(per_instance / chips, rel=1e-9)


def test_new_list_prices_by_hand():
    # AWS-TRN2-OD: trn2.48xlarge $35.76/h on demand, 16 Trainium2 chips.
    assert get_target("trainium2").price_per_hour == pytest.approx(2.235)
    # SKY-OCI: BM.GPU.MI355X.8 $68.80/h, 8 GPUs.
    assert get_target("mi355x").price_per_hour == pytest.approx(8.60)
    # SKY-GCP: tpu-v5p-512 (512 TensorCores = 256 chips) $1,075.20/h.
    assert get_target("tpu-v5p").price_per_hour == pytest.approx(4.20)
    # SKY-GCP: one-chip slices tpu-v5litepod-1 $1.20/h and tpu-v6e-1 $2.70/h; tpu-v4-6144 (3,072
    # chips) $9,891.84/h.
    assert get_target("tpu-v5e").price_per_hour == pytest.approx(1.20)
    assert get_target("tpu-v6e").price_per_hour == pytest.approx(2.70)
    assert get_target("tpu-v4").price_per_hour == pytest.approx(9891.84 / 3072)


@pytest.mark.parametrize("name", ["groq-lpu", "sambanova-sn40l", "cerebras-wse3", "gaudi3", "tpu-v7",
                                  "xeon-6980p", "epyc-9755"])
def test_an_unpriced_chip_says_why_in_its_notes(name):
    target = get_target(name)
    assert target.price_per_hour is None
    assert "price" in target.notes.lower()
