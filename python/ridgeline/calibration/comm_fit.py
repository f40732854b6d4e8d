"""Fits of measured collectives to the engine's collective model (spec 40), per device,
collective library and collective: a per-call floor, a per-hop latency and, per rank
count, the share of the protocol rate (the NCCL beta table times the catalog link) the
collective reaches. The model is the engine's own (``_core.collective``); the fit only
chooses its three numbers, so what is fitted is what an estimate prices.

``ridgeline calibrate --comm`` writes the fits to ``data/hardware/link_collectives.csv``;
the catalog gives each device its own rows, or the median of the measured devices of the
same vendor and fabric where it has none (and says so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional

from .. import _core
from .._io import csv_text
from ..catalog.device import LINK_FIT_KEYS, Device
from ..catalog.store import Catalog, default_catalog
from ..engine.collectives import protocol_json
from ..errors import PlanError
from .acceptance import within_share

LINKS_FILE = "data/hardware/link_collectives.csv"
LINK_COLUMNS = ("name", "fabric", "library", "version", "op", "ranks", "floor_us", "latency_us", "bw_efficiency",
                "n_rows", "within_1_5x", "source")  # fmt: skip
# The fit's bounds: a floor of up to 1 ms, a hop of up to 100 us, an efficiency of 0.1% to 4x
# the protocol rate (above 1: in-switch reduction beats a ring, as NVLS does on NVSwitch).
_BOUNDS = ((0.0, 1000.0), (0.0, 100.0), (1e-3, 4.0))


def fabric(dev: Device) -> tuple[str, float]:
    """The link a device's collectives run over on one node, and its bidirectional GB/s."""
    if dev.scaleup_bw_gbs:
        return "scaleup", dev.scaleup_bw_gbs
    if dev.host_link_bw_gbs:
        return "host_link", dev.host_link_bw_gbs
    raise PlanError(f"hardware: {dev.name} has no scale-up or host-link bandwidth in the catalog")


def predict(
    op: str, ranks: int, sizes: Sequence[float], dev: Device, links: Sequence[dict[str, Any]], cat: Catalog
) -> Any:
    """Seconds per call the engine prices for ``op`` over ``ranks`` at each size (bytes), with
    ``links`` (link measurements of this op) in place of the device's own."""
    import numpy as np

    _, gbs = fabric(dev)
    r = _core.collective(
        op, ranks, np.asarray(sizes, dtype=float), gbs, 0.0, protocol_json(cat),
        links_json=json.dumps([{k: x[k] for k in LINK_FIT_KEYS} for x in links]),
    )  # fmt: skip
    return r["time_s"]


def _groups(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["excluded"] is None:
            out.setdefault((r["hardware"], r["library"], r["version"], r["op"]), []).append(r)
    return out


def _ratio(rows: Sequence[dict[str, Any]], dev: Device, links: Sequence[dict[str, Any]], cat: Catalog) -> Any:
    """observed / predicted of each row, in the order given."""
    import numpy as np

    out = np.empty(len(rows))
    for n in sorted({r["ranks"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["ranks"] == n]
        t = predict(rows[idx[0]]["op"], n, [rows[i]["size_bytes"] for i in idx], dev, links, cat)
        out[idx] = np.array([rows[i]["time_s"] for i in idx]) / t
    return out


def fit_group(rows: Sequence[dict[str, Any]], dev: Device, cat: Catalog) -> list[dict[str, Any]]:
    """Floor, latency and per-rank-count efficiency of one (device, library, op) group, fitted in
    log space (every size weighs the same: a 512 B call and a 512 MiB one)."""
    import numpy as np
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    ranks = sorted({r["ranks"] for r in rows})
    op = rows[0]["op"]

    def links(p: Any) -> list[dict[str, Any]]:
        return [
            {"op": op, "ranks": n, "floor_us": p[0], "latency_us": p[1], "bw_efficiency": p[2 + i]}
            for i, n in enumerate(ranks)
        ]

    lo = [_BOUNDS[0][0], _BOUNDS[1][0], *[_BOUNDS[2][0]] * len(ranks)]
    hi = [_BOUNDS[0][1], _BOUNDS[1][1], *[_BOUNDS[2][1]] * len(ranks)]
    start = [5.0, 1.0, *[0.8] * len(ranks)]
    fit = least_squares(lambda p: np.log(_ratio(rows, dev, links(p), cat)), start, bounds=(lo, hi))
    p = [float(f"{x:.4g}") for x in fit.x]  # four digits: what the file keeps is what is checked
    out = links(p)
    for x in out:
        mine = [r for r in rows if r["ranks"] == x["ranks"]]
        x["n_rows"] = len(mine)
        x["within_1_5x"] = round(within_share(_ratio(mine, dev, out, cat)), 3)
    return out


def fit_links(rows: Sequence[dict[str, Any]], catalog: Optional[Catalog] = None) -> list[dict[str, Any]]:
    """The link measurements of every (device, library, op) in ``rows`` (``kernels.comm_rows``)."""
    cat = catalog or default_catalog()
    out = []
    for (hw, lib, ver, _op), g in sorted(_groups(rows).items()):
        dev = cat.get(hw)
        kind, _ = fabric(dev)
        files = sorted({r["file"] for r in g})
        for x in fit_group(g, dev, cat):
            out.append({
                "name": hw, "fabric": kind, "library": lib, "version": ver, **x,
                "source": f"fit by `ridgeline calibrate --comm` (floor + hops x latency + bytes / (link x NCCL beta x "
                          f"efficiency), log least squares) to {x['n_rows']} CUDA-graph timings in "
                          f"data/benchmarks/aic/{', '.join(files)} (AIConfigurator, Apache-2.0)",
            })  # fmt: skip
    return out


def links_csv(fits: Sequence[dict[str, Any]]) -> str:
    return csv_text(fits, LINK_COLUMNS)


def pooled(fits: Sequence[dict[str, Any]], vendor: str, kind: str, cat: Catalog,
           exclude: Optional[str] = None) -> list[dict[str, Any]]:  # fmt: skip
    """The median floor, latency and efficiency, per (library, op, ranks), over the measured
    devices of one vendor and fabric (the catalog's transfer to a device without rows)."""
    import statistics

    keyed: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for f in fits:
        dev = cat.get(f["name"])
        if f["name"] == exclude or dev.vendor != vendor or fabric(dev)[0] != kind:
            continue
        keyed.setdefault((f["library"], f["op"], int(f["ranks"])), []).append(f)
    return [
        {
            "library": lib,
            "op": op,
            "ranks": n,
            **{k: statistics.median(float(x[k]) for x in g) for k in ("floor_us", "latency_us", "bw_efficiency")},
            "from": sorted(x["name"] for x in g),
        }
        for (lib, op, n), g in sorted(keyed.items())
    ]


def peers(fits: Sequence[dict[str, Any]], dev: Device, library: str, op: str, cat: Catalog) -> list[dict[str, Any]]:
    """What ``dev`` gets when held out: the pooled fits of ``library``'s ``op`` over the other
    measured devices of its vendor and fabric."""
    pool = pooled(fits, dev.vendor, fabric(dev)[0], cat, exclude=dev.name)
    return [p for p in pool if p["library"] == library and p["op"] == op]


def holdout(rows: Sequence[dict[str, Any]], fits: Sequence[dict[str, Any]],
            catalog: Optional[Catalog] = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each measured device held out in turn: its rows priced by the median of the other
    devices' fits of the same vendor and fabric (what a device without rows gets)."""
    import numpy as np

    cat = catalog or default_catalog()
    out = []
    for (hw, lib, _ver, op), g in sorted(_groups(rows).items()):
        dev = cat.get(hw)
        held = peers(fits, dev, lib, op, cat)
        rec: dict[str, Any] = {"hardware": hw, "library": lib, "op": op, "rows": len(g)}
        if not held:
            reason = f"no other {dev.vendor} {fabric(dev)[0]} device"
            rec.update(within_1_5x=None, median_obs_over_pred=None, reason=reason)
        else:
            ratio = _ratio(g, dev, held, cat)
            rec.update(within_1_5x=round(within_share(ratio), 3), peers=held[0]["from"], reason=None,
                       median_obs_over_pred=round(float(np.median(ratio)), 3))  # fmt: skip
        out.append(rec)
    return out
