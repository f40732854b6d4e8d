"""Cost (spec 60): a published rental price per device-hour, or the user's; per hour, per request and
per million tokens from the plan's own round; never a default price."""

import json

import polars as pl
import pytest
import ridgeline
from conftest import LLAMA
from ridgeline import PlanError


def test_cost_follows_the_round_at_the_cheapest_published_offer():
    cat = ridgeline.Catalog()
    offers = cat.prices("H100_SXM", "on-demand")
    usd = [o["usd_per_device_hour"] for o in offers]
    assert len(offers) >= 5 and usd == sorted(usd)
    assert all(o["source"].startswith("http") and o["as_of"] for o in offers)
    e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", tp=4, batch=32, dp=2)
    c = e.cost
    assert c["usd_per_device_hour"] == usd[0] and c["offer"]["provider"] == offers[0]["provider"]
    assert c["on_demand_usd_per_device_hour"] == {"offers": len(usd), "min": usd[0], "max": usd[-1]}
    # 8 devices for the two replicas; a replica's 4 serve 32 requests a round
    assert c["devices"] == 8 and c["usd_per_hour"] == pytest.approx(8 * usd[0])
    per_request = usd[0] * 4 * e.parallel["round_s"] / 3600 / 32
    assert c["usd_per_request"] == pytest.approx(per_request, rel=1e-12)
    assert c["usd_per_million_output_tokens"] == pytest.approx(per_request / 256 * 1e6, rel=1e-12)
    # the same as the throughput over all replicas at the price of all devices
    assert c["usd_per_million_output_tokens"] == pytest.approx(8 * usd[0] / (e.throughput_tok_s * 3600) * 1e6)
    assert c["usd_per_million_tokens"] == pytest.approx(per_request / (1024 + 256) * 1e6, rel=1e-12)


def test_no_price_is_missing_and_a_given_one_is_used(tmp_path):
    # the A30 (24 GB) has no published rental or purchase price
    assert ridgeline.Catalog().prices("A30") == [] == ridgeline.Catalog().purchases("A30")
    c = ridgeline.estimate(LLAMA, "A30").cost
    assert "no published price for A30" in c["missing"] and "price_per_hour" in c["missing"]
    g = ridgeline.estimate(LLAMA, "A30", price_per_hour=0.5).cost
    assert g["basis"].startswith("given") and g["usd_per_device_hour"] == 0.5 and "offer" not in g
    with pytest.raises(PlanError, match="price_per_hour"):
        ridgeline.estimate(LLAMA, "A30", price_per_hour=0)
    # the sweep's column is the estimate's cost at the same price; null where none is published
    df = ridgeline.sweep({"model": LLAMA, "hardware": ["H100_SXM", "A30"], "batch": [1, 16]})
    assert df.filter(pl.col("hardware") == "A30")["usd_per_million_output_tokens"].null_count() == 2
    for r in df.filter(pl.col("hardware") == "H100_SXM").iter_rows(named=True):
        want = ridgeline.estimate(LLAMA, "H100_SXM", batch=r["batch"]).cost["usd_per_million_output_tokens"]
        assert r["usd_per_million_output_tokens"] == pytest.approx(want, rel=1e-12)
    from conftest import run

    out = run("estimate", "-m", LLAMA, "-H", "A30", "--price-per-hour", "0.5", cwd=tmp_path).stdout
    assert "at $0.500 per device-hour x 1 (the price given)" in out
    d = json.loads(run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--json", cwd=tmp_path).stdout)
    assert d["cost"]["offer"]["as_of"] and d["cost"]["usd_per_million_output_tokens"] > 0
    r = run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--price-per-hour", "-2", cwd=tmp_path)
    assert r.returncode == 2 and "--price-per-hour" in r.stderr


def test_every_price_row_is_dated_sourced_and_names_a_catalog_device():
    rows = ridgeline.Catalog().sql("SELECT * FROM hardware_cost").to_dicts()
    names = set(ridgeline.Catalog().sql("SELECT name FROM hardware")["name"])
    assert len(rows) >= 90
    for r in rows:
        assert r["name"] in names and r["as_of"] is not None and r["source"].startswith("http"), r
        assert r["tier"] in ("on-demand", "spot", "reserved-1y", "reserved-3y") and r["usd_per_device_hour"] > 0


def test_a_simulated_fleet_costs_its_devices_over_its_output_rate():
    s = ridgeline.simulate("meta-llama/Llama-3.1-70B", "H100_SXM", tp=4, instances=2, rate=4, requests=100,
                           prompt=512, output=64, max_model_len=576)  # fmt: skip
    c = s.cost
    price = ridgeline.Catalog().prices("H100_SXM", "on-demand")[0]["usd_per_device_hour"]
    assert s.devices == c["devices"] == 8 and c["usd_per_hour"] == pytest.approx(8 * price)
    assert c["usd_per_million_output_tokens"] == pytest.approx(8 * price / (s.output_tok_s * 3600) * 1e6)
    assert s.to_dict()["cost"] == json.loads(json.dumps(c)) and "offers" not in s.to_dict()
    assert "cost         $" in s.summary()
    mine = ridgeline.simulate(
        LLAMA, "A30", rate=1, requests=20, prompt=128, output=16, runtime="vllm", max_model_len=144
    )
    assert "no published price" in mine.cost["missing"]
    given = ridgeline.simulate(LLAMA, "A30", rate=1, requests=20, prompt=128, output=16, runtime="vllm",
                               max_model_len=144, price_per_hour=0.3)  # fmt: skip
    assert given.cost["usd_per_hour"] == pytest.approx(0.3) and given.cost["offer"] is None


def test_a_purchase_price_amortised_over_the_years_given():
    # the RTX 4090's launch list price, $1,599, over 3 years of 8766 hours
    cat = ridgeline.Catalog()
    (buy,) = cat.purchases("RTX_4090")
    assert (buy["usd_per_device"], buy["kind"], buy["as_of"]) == (1599.0, "launch list price", "2022-09-21")
    e = ridgeline.estimate(LLAMA, "RTX_4090", amortise_years=3)
    c = e.cost
    assert c["usd_per_device_hour"] == pytest.approx(1599 / (3 * 365.25 * 24), rel=1e-12)
    assert c["basis"] == "the cheapest published purchase price over 3 years" and c["offer"]["tier"] == "purchase"
    assert c["purchase_usd_per_device_hour"]["offers"] == 1
    rent = ridgeline.estimate(LLAMA, "RTX_4090").cost
    ratio = rent["usd_per_million_output_tokens"] / c["usd_per_million_output_tokens"]
    assert ratio == pytest.approx(rent["usd_per_device_hour"] / c["usd_per_device_hour"], rel=1e-12)
    # twice the years, half the price per hour; the sweep and the simulator reckon it the same way
    assert ridgeline.estimate(LLAMA, "RTX_4090", amortise_years=6).cost["usd_per_device_hour"] == pytest.approx(
        c["usd_per_device_hour"] / 2, rel=1e-12
    )
    df = ridgeline.sweep({"model": LLAMA, "hardware": "RTX_4090", "batch": 1}, amortise_years=3)
    assert df["usd_per_million_output_tokens"][0] == pytest.approx(c["usd_per_million_output_tokens"], rel=1e-9)
    s = ridgeline.simulate(LLAMA, "RTX_4090", rate=1, requests=10, prompt=128, output=16, runtime="vllm",
                           max_model_len=144, amortise_years=3)  # fmt: skip
    assert s.cost["usd_per_device_hour"] == pytest.approx(c["usd_per_device_hour"], rel=1e-12)
    # a device without a purchase price says so; a price and years together are refused
    assert "no published purchase price for A30" in ridgeline.estimate(LLAMA, "A30", amortise_years=3).cost["missing"]
    with pytest.raises(PlanError, match="price_per_hour: give a price per device-hour, or amortise_years"):
        ridgeline.estimate(LLAMA, "RTX_4090", amortise_years=3, price_per_hour=1.0)
    with pytest.raises(PlanError, match="amortise_years"):
        ridgeline.estimate(LLAMA, "RTX_4090", amortise_years=0)


def test_every_purchase_row_is_dated_sourced_and_names_a_catalog_device():
    cat = ridgeline.Catalog()
    names = set(cat.sql("SELECT name FROM hardware")["name"])
    rows = cat.sql("SELECT * FROM hardware_purchase").to_dicts()
    assert len(rows) >= 8
    for r in rows:
        assert r["name"] in names and r["as_of"] is not None and r["source"].startswith("http"), r


def test_the_workstation_and_data_centre_parts_have_two_providers_or_more():
    # issue 22: at least two providers for each of these, every row dated and sourced
    cat = ridgeline.Catalog()
    for name in ("H100_SXM", "H200_SXM", "B200", "A100_SXM_80GB", "L40S", "L4", "MI300X", "RTX_4090", "RTX_5090",
                 "RTX_6000_ADA", "RTX_PRO_6000", "RTX_A6000"):  # fmt: skip
        providers = {o["provider"].split(" (")[0] for o in cat.prices(name, "on-demand")}
        assert len(providers) >= 2, (name, providers)
