"""Catalog prices per chip-hour: each equals the cloud list price its source quotes, divided by hand,
and every one is on the same basis (hyperscaler on-demand, US region) unless its file says otherwise.

The verdict of ``compare`` (cheapest per million tokens) reads these, so a price that drifts from its
source, a price of another kind slipped in unmarked (a capacity block, a spot rate, a price-site
midpoint), or a rented chip left unpriced without a word, would mislead it silently.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from narrowpipe.backends import CATALOG_PRICE_BASIS, PRICE_BASES, get_target, source_refs, targets
from narrowpipe.errors import TargetSpecError

#: "derived: $113.9328/h for instance p6-b200.48xlarge with 8 chips, AWS on-demand us-east-1 ... (KEY)"
_PER_INSTANCE = re.compile(r"^derived: \$([\d,]+(?:\.\d+)?)/h for (?:instance|slice|accelerator) (\S+) "
                           r"with (\d+) chips?, (.+?) on-demand (\S+)")
HYPERSCALERS = {"AWS", "Google Cloud", "Azure", "Oracle"}

PRICED = [name for name, _ in targets() if get_target(name).price_per_hour is not None]
#: The chips whose price is knowingly on another basis, and that basis (their notes say why).
OTHER_BASIS = {"h100-pcie": "other-on-demand"}


def _parse(source: str) -> tuple[float, str, int, str, str] | None:
    m = _PER_INSTANCE.match(source)
    if m is None:
        return None
    return float(m.group(1).replace(",", "")), m.group(2), int(m.group(3)), m.group(4), m.group(5).rstrip(",")


def test_the_catalog_basis_is_one_of_the_bases():
    assert CATALOG_PRICE_BASIS == "hyperscaler-on-demand" and CATALOG_PRICE_BASIS in PRICE_BASES


def test_every_rented_chip_is_priced():
    assert {"a100-sxm-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "mi300x", "mi355x", "tpu-v4",
            "tpu-v5e", "tpu-v5p", "tpu-v6e", "trainium2", "v100-sxm2", "t4", "p100-pcie"} == set(PRICED)


@pytest.mark.parametrize("name", PRICED)
def test_every_price_is_on_the_catalog_basis_unless_listed(name):
    assert get_target(name).price_basis == OTHER_BASIS.get(name, CATALOG_PRICE_BASIS)


@pytest.mark.parametrize("name", sorted(OTHER_BASIS))
def test_a_price_on_another_basis_says_so_in_its_notes(name):
    notes = get_target(name).notes.lower()
    assert "price" in notes and "basis" in notes and "not a hyperscaler" in notes


@pytest.mark.parametrize("name", PRICED)
def test_every_price_names_its_instance_chips_provider_and_region(name):
    target = get_target(name)
    source = target.source("price_per_hour")
    parsed = _parse(source)
    assert parsed is not None, source
    per_instance, _instance, chips, provider, region = parsed
    assert target.price_per_hour == pytest.approx(per_instance / chips, rel=1e-9)
    assert region.startswith("us-"), "the catalog basis is a US region"
    assert (provider in HYPERSCALERS) == (target.price_basis == CATALOG_PRICE_BASIS), provider
    keys = re.findall(r"\(([A-Z][A-Z0-9-]+)", source)
    assert keys and set(keys) <= set(source_refs()), keys


def test_no_price_rests_on_a_capacity_block_spot_rate_or_price_site():
    for name in PRICED:
        source = get_target(name).source("price_per_hour")
        assert "AWS-CB" not in source and "2ND" not in source and "midpoint" not in source, (name, source)


def test_list_prices_by_hand():
    # AWS-OD: p5.48xlarge $55.04/h, p5en.48xlarge $63.296/h, p4de.24xlarge $27.44705/h, 8 GPUs each.
    assert get_target("h100-sxm").price_per_hour == pytest.approx(6.88)
    assert get_target("h200").price_per_hour == pytest.approx(7.912)
    assert get_target("a100-sxm-80gb").price_per_hour == pytest.approx(3.43088125)
    # SKY-AWS: p6-b200.48xlarge $113.9328/h, 8 GPUs.
    assert get_target("b200").price_per_hour == pytest.approx(14.2416)
    # AWS-TRN2-OD: trn2.48xlarge $35.76/h on demand, 16 Trainium2 chips.
    assert get_target("trainium2").price_per_hour == pytest.approx(2.235)
    # SKY-OCI: BM.GPU.MI355X.8 $68.80/h, BM.GPU.MI300X.8 $48/h (8 GPUs); BM.GPU.GB200.4 $64/h (4 GPUs).
    assert get_target("mi355x").price_per_hour == pytest.approx(8.60)
    assert get_target("mi300x").price_per_hour == pytest.approx(6.00)
    assert get_target("gb200").price_per_hour == pytest.approx(16.00)
    # SKY-GCP: tpu-v5p-512 (512 TensorCores = 256 chips) $1,075.20/h.
    assert get_target("tpu-v5p").price_per_hour == pytest.approx(4.20)
    # SKY-GCP: one-chip slices tpu-v5litepod-1 $1.20/h and tpu-v6e-1 $2.70/h; tpu-v4-6144 (3,072
    # chips) $9,891.84/h.
    assert get_target("tpu-v5e").price_per_hour == pytest.approx(1.20)
    assert get_target("tpu-v6e").price_per_hour == pytest.approx(2.70)
    assert get_target("tpu-v4").price_per_hour == pytest.approx(9891.84 / 3072)
    # SKY-LAMBDA: gpu_1x_h100_pcie $3.29/h (another basis: Lambda is not a hyperscaler).
    assert get_target("h100-pcie").price_per_hour == pytest.approx(3.29)
    # SKY-AWS: p3.16xlarge $24.48/h for 8 V100s; g4dn.12xlarge $3.912/h for 4 T4s (us-east-1).
    assert get_target("v100-sxm2").price_per_hour == pytest.approx(3.06)
    assert get_target("t4").price_per_hour == pytest.approx(0.978)
    # SKY-GCP: one nvidia-tesla-p100 $1.46 per GPU-hour in us-central1 (the N1 VM extra).
    assert get_target("p100-pcie").price_per_hour == pytest.approx(1.46)


@pytest.mark.parametrize("name", [n for n in PRICED if " for accelerator " in get_target(n).source("price_per_hour")])
def test_an_accelerator_only_price_says_the_host_is_extra(name):
    # A per-GPU price without its VM is cheaper than the instance prices beside it: the file must
    # say so where the user reads it (notes) and where the number is cited (source).
    target = get_target(name)
    assert "vm" in target.notes.lower() and "billed on top" in target.notes.lower()
    assert "VM" in target.source("price_per_hour") and "on top" in target.source("price_per_hour")


@pytest.mark.parametrize("name", ["groq-lpu", "sambanova-sn40l", "cerebras-wse3", "gaudi3", "tpu-v7",
                                  "xeon-6980p", "epyc-9755", "mi25"])
def test_an_unpriced_chip_says_why_in_its_notes(name):
    target = get_target(name)
    assert target.price_per_hour is None and target.price_basis == ""
    assert "price" in target.notes.lower()


def test_a_basis_must_be_one_of_the_bases_and_needs_a_price():
    with pytest.raises(TargetSpecError, match="price_basis.*expected one of"):
        dataclasses.replace(get_target("h100"), price_basis="spot")
    with pytest.raises(TargetSpecError, match="price_basis.*not set"):
        dataclasses.replace(get_target("gaudi3"), price_basis=CATALOG_PRICE_BASIS)
    assert dataclasses.replace(get_target("h100"), price_basis="").price_basis == ""  # a user file may omit it
