"""--price-tier (issue 46): a cost from the cheapest on-demand offer of one tier (hyperscaler,
neocloud, marketplace), each offer's tier from data/hardware/providers.csv, through every door."""

import csv
from pathlib import Path

import pytest
import ridgeline
from conftest import run
from ridgeline.catalog.store import PRICE_TIERS, price_tier_of
from ridgeline.errors import PlanError

REPO = Path(__file__).resolve().parents[2]
LLAMA = "meta-llama/Llama-3.1-8B"


def _cheapest(device: str, tier: str) -> float:
    """The cheapest on-demand offer of ``tier`` for ``device``, read from the CSV here."""
    rows = csv.DictReader((REPO / "data" / "hardware" / "hardware_cost.csv").open())
    mine = [r for r in rows if r["name"] == device and r["tier"] == "on-demand"]
    return min(float(r["usd_per_device_hour"]) for r in mine if price_tier_of(r["provider"], r["sku"]) == tier)


def test_every_offer_has_a_tier():
    rows = list(csv.DictReader((REPO / "data" / "hardware" / "hardware_cost.csv").open()))
    assert {price_tier_of(r["provider"], r["sku"]) for r in rows} == set(PRICE_TIERS)


@pytest.mark.parametrize("tier", PRICE_TIERS)
def test_each_door_prices_the_cheapest_offer_of_the_tier(tier):
    want = _cheapest("H100_SXM", tier)
    e = ridgeline.estimate(LLAMA, "H100_SXM", price_tier=tier)
    assert e.cost["usd_per_device_hour"] == want and e.cost["offer"]["price_tier"] == tier
    assert tier in e.cost["basis"]
    df = ridgeline.sweep({"model": LLAMA, "hardware": "H100_SXM", "batch": [1, 8]}, price_tier=tier)
    for r in df.iter_rows(named=True):
        c = ridgeline.estimate(LLAMA, "H100_SXM", batch=r["batch"], price_tier=tier).cost
        assert r["usd_per_million_output_tokens"] == pytest.approx(c["usd_per_million_output_tokens"], rel=1e-12)
        assert r["usd_per_million_tokens"] == pytest.approx(c["usd_per_million_tokens"], rel=1e-12)
    s = ridgeline.simulate(LLAMA, "H100_SXM", rate=2, requests=20, price_tier=tier)
    assert s.cost["usd_per_device_hour"] == want


def test_a_tier_without_offers_is_missing_and_bad_input_refused():
    c = ridgeline.estimate(LLAMA, "MI300X", price_tier="marketplace").cost
    assert "no published marketplace price for MI300X" in c["missing"]
    with pytest.raises(PlanError, match="price_tier: one of hyperscaler, neocloud, marketplace"):
        ridgeline.estimate(LLAMA, "H100_SXM", price_tier="cheap")
    with pytest.raises(PlanError, match="amortise_years"):
        ridgeline.estimate(LLAMA, "H100_SXM", price_tier="neocloud", amortise_years=3)
    with pytest.raises(PlanError, match="price_per_hour"):
        ridgeline.estimate(LLAMA, "H100_SXM", price_tier="neocloud", price_per_hour=2)


def test_recommend_ranks_by_the_tier_and_the_cli_shows_it():
    r = ridgeline.recommend(LLAMA, rate=2, slo_ttft_ms=1000, slo_tpot_ms=50, hardware=["H100_SXM", "L40S"],
                            requests=100, price_tier="hyperscaler")  # fmt: skip
    assert r.plans and all(p["hardware"] == "H100_SXM" for p in r.plans)  # L40S has no hyperscaler offer here
    assert all(p["usd_per_device_hour"] == _cheapest("H100_SXM", "hyperscaler") for p in r.plans)
    out = run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--price-tier", "neocloud").stdout
    assert ", neocloud, 20" in next(ln for ln in out.splitlines() if ln.strip().startswith("cost"))


@pytest.mark.parametrize("device", ["B300", "GB300", "MI355X"])
def test_devices_without_a_published_price_say_so_and_take_one(device):
    # no dated offer for these was found in a readable source (issue 46): cost is missing, never guessed
    c = ridgeline.estimate("meta-llama/Llama-3.1-70B", device, tp=2).cost
    assert c["missing"].startswith(f"no published price for {device}") and "--price-per-hour" in c["missing"]
    given = ridgeline.estimate("meta-llama/Llama-3.1-70B", device, tp=2, price_per_hour=6.0).cost
    assert given["usd_per_device_hour"] == 6.0


def test_gh200_has_its_published_price():
    c = ridgeline.estimate(LLAMA, "GH200_96GB").cost
    assert (
        c["usd_per_device_hour"] == 2.29 and c["offer"]["provider"] == "Lambda" and c["offer"]["as_of"] == "2026-09-20"
    )
