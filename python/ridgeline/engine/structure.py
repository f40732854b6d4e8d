"""The engine's structure version: a fingerprint of its FLOP, byte and parameter counts over a
fixed panel, stamped on every fit so that a fit made against other physics is refused."""

from __future__ import annotations

import hashlib
from typing import Any, Optional

from ..catalog.store import Catalog, default_catalog
from ..errors import PlanError


def structure_version(catalog: Optional[Catalog] = None) -> str:
    """A fingerprint of the engine's physics: parameter, FLOP and byte counts of a
    fixed panel (every bundled priced model, prefill and decode, TP 1 and 2, and at TP 1
    the paths calibration rows take: unfused attention, skewed routing, chunked prefill,
    a sliding-window cache larger than the window at a context beyond it, and that cache
    read as llama.cpp reads it, padded to 256 cells with the masked tail skipped).
    Device peaks do not enter FLOP or byte counts, so catalog edits leave it alone."""
    cat = catalog or default_catalog()
    if cat.fingerprint not in _STRUCTURE:
        _STRUCTURE[cat.fingerprint] = _structure_version(cat)
    return _STRUCTURE[cat.fingerprint]


_STRUCTURE: dict[str, str] = {}


def _probe_device() -> Any:
    """A device whose numbers cancel out: only FLOP, byte and parameter counts
    enter the fingerprint, and those do not depend on peaks or bandwidths."""
    from ..catalog.device import Device

    none = None
    return Device(
        name="PROBE", vendor="-", arch="-", kind="gpu", verified=True, tflops_bf16=1.0, tflops_fp16=none,
        tflops_fp16_acc16=none, tflops_fp8=none, tflops_fp4=none, tflops_int8=none, tflops_tf32=none, tflops_fp32=none,
        memory_gb=1.0, memory_bw_gbs=1.0, memory_type=none, scaleup_bw_gbs=1.0, scaleup_latency_us=none,
        scaleup_latency_source=none, scaleup_domain=none, scaleout_bw_gbs=none, scaleout_latency_us=none,
        host_link=none, host_link_bw_gbs=none, tdp_w=none, idle_w=none, source="structure-version probe",
    )  # fmt: skip


def _structure_version(cat: Catalog) -> str:
    from ..models.config import Model, bundled_names
    from .estimate import estimate

    probe = _probe_device()

    h = hashlib.sha256()
    for name in bundled_names():
        m = Model.from_config(name)
        h.update(f"{name} {m.total_params} {m.active_params}".encode())
        if m.unpriced:
            continue
        variants: tuple[dict[str, Any], ...] = (
            {"tp": 1},
            {"tp": 2},
            {"tp": 1, "flash_attention": False, "routing_skew": 1.0, "chunk": 512},
            {"tp": 1, "prefix": 2000, "swa_cache_extra": 512},
            {"tp": 1, "prefix": 2000, "swa_cache_extra": 512, "kv_pad": 256, "kv_skip_masked_tail": True},
        )
        for v in variants:
            try:
                e = estimate(
                    m,
                    probe,
                    batch=2,
                    prompt=1000,
                    output=3,
                    allow_no_fit=True,
                    breakdown=False,
                    catalog=cat,
                    runtime="none",
                    **v,
                )
            except PlanError:
                continue
            for ph in (e.prefill, e.decode):
                h.update(f"{v['tp']} {ph['flops']:.12e} {ph['bytes']:.12e}".encode())
    return h.hexdigest()[:16]
