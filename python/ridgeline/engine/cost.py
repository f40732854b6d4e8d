"""A plan's cost: the price per device-hour it is reckoned at (a published offer, a price given, or a
purchase spread over years) and the cost per request and per million tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional


def price_of(
    price_per_hour: Optional[float], offers: Sequence[Mapping[str, Any]]
) -> Optional[tuple[float, Optional[dict[str, Any]]]]:
    """The price per device-hour a cost is reckoned at, and the offer it came from: the one given
    (no offer), else the cheapest published on-demand offer; None where there is neither."""
    if price_per_hour is not None:
        return float(price_per_hour), None
    if offers:
        return float(offers[0]["usd_per_device_hour"]), dict(offers[0])
    return None


def usd_per_million(usd_per_hour: Any, tok_s: Any) -> Any:
    """USD per million tokens produced at ``tok_s`` tokens/s by devices costing ``usd_per_hour``
    together (numbers or Polars expressions alike)."""
    return usd_per_hour / (tok_s * 3600) * 1e6


def cost_of(
    plan: Mapping[str, Any],
    parallel: Mapping[str, Any],
    offers: Sequence[Mapping[str, Any]],
    price_per_hour: Optional[float],
    device: str,
    amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None,
) -> dict[str, Any]:
    """A plan's cost from its round (``parallel.round_s``: a replica serves ``batch x attention_dp``
    requests in it) at a price per device-hour: the one given, else the cheapest offer (on-demand,
    or a purchase price amortised over ``amortise_years``)."""
    priced = price_of(price_per_hour, offers)
    if priced is None:
        return {"missing": missing_price(device, amortise_years, price_tier)}
    price, offer = priced
    tier = f" {price_tier}" if price_tier else ""
    basis = ("given (price_per_hour)" if offer is None else f"the cheapest published on-demand{tier} offer"
             if amortise_years is None
             else f"the cheapest published purchase price over {amortise_years:g} years")  # fmt: skip
    devices = int(parallel["devices"])
    replica = devices // int(plan["dp"])
    requests = int(plan["batch"]) * int(plan.get("attention_dp", 1))
    per_request = price * replica * float(parallel["round_s"]) / 3600 / requests
    out: dict[str, Any] = {
        "usd_per_device_hour": price, "basis": basis, "devices": devices, "usd_per_hour": price * devices,
        "usd_per_request": per_request,
        "usd_per_million_output_tokens": per_request / int(plan["output"]) * 1e6,
        "usd_per_million_tokens": per_request / (int(plan["prompt"]) + int(plan["output"])) * 1e6,
    }  # fmt: skip
    if offer is not None:
        out["offer"] = offer
    if offers:
        usd = [float(o["usd_per_device_hour"]) for o in offers]
        key = "on_demand" if amortise_years is None else "purchase"
        out[f"{key}_usd_per_device_hour"] = {"offers": len(usd), "min": min(usd), "max": max(usd)}
    return out


def offer_text(offer: Optional[Mapping[str, Any]]) -> str:
    """Where a price came from, in words: the offer's provider, SKU, tier and date, or the price given.

    >>> offer_text({"provider": "Lambda", "sku": "1x GH200", "price_tier": "neocloud", "as_of": "2026-09-20"})
    'Lambda 1x GH200, neocloud, 2026-09-20'
    """
    if not offer:
        return "the price given"
    tier = f", {offer['price_tier']}" if offer.get("price_tier") else ""
    return f"{offer['provider']} {offer['sku']}{tier}, {offer['as_of']}"


def missing_price(device: str, amortise_years: Optional[float], price_tier: Optional[str] = None) -> str:
    """Why a cost is missing: no published price of the kind asked for."""
    if price_tier is not None:
        return (f"no published {price_tier} price for {device} (data/hardware/hardware_cost.csv, tiers by "
                "data/hardware/providers.csv); another --price-tier, none, or --price-per-hour gives one")  # fmt: skip
    if amortise_years is None:
        return (f"no published price for {device} (data/hardware/hardware_cost.csv); --price-per-hour (CLI) or "
                "price_per_hour= (Python) gives one")  # fmt: skip
    return (f"no published purchase price for {device} (data/hardware/hardware_purchase.csv); --price-per-hour "
            "(CLI) or price_per_hour= (Python) gives a price per device-hour")  # fmt: skip
