"""What a runtime is: where it runs (data/calibration/runtime_platforms.csv), how it runs the
parts of a plan the engine leaves open (``runtime_execution``), which one a plan runs under
(``choose_runtime``, the device's default from the shipped fits) and the runtimes ridgeline has
data for. estimate, sweep, calibrate and snapshot take runtimes from here; it sits below them
(on the catalog, the shipped fits and the weight formats) and imports none of them."""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from .. import _checks, _data
from ..catalog.device import Device
from ..catalog.store import Catalog
from ..errors import PlanError
from ..models import quant
from ..models.quant import runtime_platforms
from . import fits as _fits
from .fits import shipped_fits

#: The runtime name that asks for none: one prefill step, exact KV reads, every kernel launched,
#: priced at the efficiency-1 bound.
NO_RUNTIME = "none"


def choose_runtime(runtime: Any, dev: Device, cat: Catalog, formats: Iterable[str] = ()) -> tuple[Optional[str], str]:
    """The runtime a plan on ``dev`` runs under, and why: the one named, ``"none"`` for none, or
    (None) the default for the device (``calibrate.default_runtime``) among the runtimes that
    store the plan's weight ``formats``. ``estimate``, ``sweep`` and the CLI all choose through
    here, so one plan gets one answer whichever door it takes."""
    formats = tuple(formats)
    if runtime is None:
        rt, why = default_runtime(device=dev, formats=formats)
        return rt, f"{rt}: {why}" if rt else why
    name = _checks.text("runtime", runtime).strip()
    if name.lower() == NO_RUNTIME:
        return None, "none: the plan as written (one prefill step, exact KV reads), priced at the efficiency-1 bound"
    check_runtime(name, cat, dev)
    missing = cannot_store(name, formats)
    if missing:
        raise PlanError(
            f"runtime: {name} has no weight type for {', '.join(missing)} (it stores "
            f"{', '.join(sorted(runtime_formats()[name]))}; data/calibration/runtime_formats.csv); "
            f"name a runtime that runs {missing[0]} weights, or a weight format {name} stores (--weight-dtype)"
        )
    return name, f"{name}: given"


@functools.lru_cache(maxsize=1)
def runtime_formats() -> dict[str, frozenset[str]]:
    """runtime -> the weight formats it stores, for the runtimes data/calibration/runtime_formats.csv
    lists (a runtime it does not list is not restricted)."""
    out: dict[str, set[str]] = {}
    for r in csv.DictReader(_data.read_text("data/calibration/runtime_formats.csv").splitlines()):
        out.setdefault(r["runtime"], set()).add(r["format"])
    return {k: frozenset(v) for k, v in out.items()}


def cannot_store(runtime: str, formats: Iterable[str]) -> list[str]:
    """The weight formats among ``formats`` that ``runtime`` has no type for (sorted)."""
    own = runtime_formats().get(runtime)
    return [] if own is None else sorted(set(formats) - own)


def default_runtime(
    fits: Optional[Sequence[dict[str, Any]]] = None, device: Optional[Device] = None, formats: Iterable[str] = ()
) -> tuple[Optional[str], str]:
    """The runtime an estimate describes when none is named (spec 50): among the runtimes that
    run on ``device`` (runtime_platforms.csv; any device when None) and store the weight
    ``formats`` (runtime_formats.csv), vllm where it has a fitted profile, else the one whose
    profile rests on the most measured rows; None (the bound) when no calibrated runtime runs there."""
    formats = tuple(formats)
    profiles = [f for f in (shipped_fits() if fits is None else fits)
                if f["hardware"] == "*" and f["memory"] == "*" and f["precision"] == "*"]  # fmt: skip
    if not profiles:
        return None, "no runtime has a shipped calibration"
    if device is not None:
        profiles = [f for f in profiles if runs_on(f["runtime"], device)]
        if not profiles:
            return None, (
                f"no runtime with a shipped calibration runs on {device.name} ({device.vendor} {device.kind}): "
                f"the efficiency-1 bound"
            )
    skipped = {f["runtime"]: cannot_store(f["runtime"], formats) for f in profiles}
    unstored = "".join(f"; {rt} stores no {', '.join(m)} weights" for rt, m in sorted(skipped.items()) if m)
    profiles = [f for f in profiles if not skipped[f["runtime"]]]
    if not profiles:
        return None, f"no runtime with a shipped calibration runs these weights{unstored}: the efficiency-1 bound"
    if any(f["runtime"] == "vllm" for f in profiles) and (device is None or is_data_centre(device)):
        return "vllm", "the default runtime on data-centre parts (its profile: measured kernels and serving runs)"
    # elsewhere (consumer and workstation cards, other vendors) the production runtimes' profiles,
    # fitted on NVIDIA data-centre kernels, are not the default
    profiles = [f for f in profiles if f["runtime"] not in KERNEL_RUNTIMES or device is None]
    if not profiles:
        return (
            None,
            f"no runtime with a shipped calibration is the default for {device.name if device else 'it'}"
            f"{unstored}: the efficiency-1 bound",
        )
    best = max(profiles, key=lambda f: (int(f["n_rows"]), f["runtime"]))
    where = f" of those that run on {device.vendor} {device.kind} devices" if device is not None else ""
    return best["runtime"], f"the best-covered runtime{where} ({best['n_rows']} measured rows){unstored}"


#: Product families whose parts serve from data centres (data/hardware/devices.csv `family`):
#: there a plan runs under vLLM by default, elsewhere under the best-covered runtime.
_DATA_CENTRE_FAMILIES = ("nvidia_dc", "nvidia_superchip")


def is_data_centre(dev: Device) -> bool:
    return (dev.family or "").startswith(_DATA_CENTRE_FAMILIES)


#: How a plan runs when no runtime says otherwise: every prompt token in one prefill step, each
#: decode step reads exactly the cells it attends, and every kernel is launched from the host.
_NO_RUNTIME_EXECUTION: Mapping[str, Any] = {
    "swa_cache_extra": 0, "kv_pad": 1, "kv_skip_masked_tail": False, "decode_graphs": False, "chunk": None,
}  # fmt: skip

#: Runtimes that all-reduce tensor-parallel activations with their own kernel on one node, by
#: default: vLLM's CustomAllreduce (vllm/distributed/device_communicators/custom_all_reduce.py;
#: off with --disable-custom-all-reduce), SGLang's custom all-reduce (sglang/srt/distributed/
#: device_communicators/custom_all_reduce.py), TensorRT-LLM's AllReduce op (tensorrt_llm/_torch/
#: distributed/ops.py, AllReduceStrategy.AUTO). Each name is also the library of their measured
#: tables in data/hardware/link_collectives.csv; where a device has none, NCCL's rows price it.
_CUSTOM_ALL_REDUCE = frozenset({"vllm", "sglang", "trtllm"})

#: The production runtimes (calibrated from their kernels: ``_fits.KERNEL_RUNTIMES``).
KERNEL_RUNTIMES = _fits.KERNEL_RUNTIMES


def collective_library(runtime: Optional[str]) -> str:
    """Whose all-reduce a plan under ``runtime`` runs: the runtime's own kernel, else NCCL's
    (llama.cpp has no measured collective kernel of its own: NCCL's rows price its transfers)."""
    return runtime if runtime in _CUSTOM_ALL_REDUCE else "nccl"


def runtime_execution(
    runtime: Optional[str], cat: Catalog, *, flash_attention: bool, ubatch: Optional[int] = None
) -> dict[str, Any]:
    """How ``runtime`` runs the parts of a plan the engine leaves open: the prompt's step size
    (``chunk``), the KV cells a decode step reads (``swa_cache_extra``, ``kv_pad``,
    ``kv_skip_masked_tail``) and whether decode replays a captured graph (``decode_graphs``).
    The one place both ``estimate`` and the calibration take them from, so an estimate for a
    runtime is priced the way that runtime's rows were fitted. ``ubatch``: llama.cpp's physical
    batch (``-ub``) where the run states it, else its default (``llamacpp_n_ubatch``)."""
    if runtime is None or not runtime.startswith("llamacpp"):
        return dict(_NO_RUNTIME_EXECUTION)
    ub = ubatch or int(cat.constant("llamacpp_n_ubatch"))
    cuda = runtime == "llamacpp-cuda"
    return {
        # llama.cpp evaluates the prompt tokens of all sequences n_ubatch at a time
        "chunk": ub,
        # its sliding-window KV cache holds n_swa + n_ubatch cells per sequence, and a decode step
        # attends over all of them (llama-kv-cache-iswa.cpp sizes it so)
        "swa_cache_extra": ub,
        # its decode reads the cache view padded to kv_pad cells
        "kv_pad": int(cat.constant("llamacpp_kv_pad")),
        # CUDA flash attention over several sequences (one KV stream each: llama-batched-bench's
        # default, not unified) stops each stream's read at its last tile holding an attended cell
        # (the engine applies it at batch > 1)
        "kv_skip_masked_tail": cuda and flash_attention,
        # ggml-cuda replays a one-token step from a CUDA graph (it disables graphs when a node has
        # batch > 1; the engine applies it at batch 1): one sequence's decode launches no kernel
        "decode_graphs": cuda,
    }


def known_runtimes(cat: Catalog) -> list[str]:
    """Runtimes ridgeline knows from its data: measured rows, GEMM paths, the platforms it runs
    on (runtime_platforms.csv) or a calibration."""
    measured = set(cat.measured_runtimes())  # the export's: no DuckDB on an estimate's path
    paths = {rt for rt, _ in quant.runtime_paths()}
    return sorted(measured | paths | set(runtime_platforms()) | {f["runtime"] for f in shipped_fits()})


def runs_on(runtime: str, dev: Device) -> bool:
    """Whether ``runtime`` runs on ``dev`` (its vendor, in any case, and kind: CUDA on NVIDIA GPUs,
    Metal on Apple)."""
    return (dev.vendor.lower(), dev.kind.lower()) in runtime_platforms().get(runtime, frozenset())


def check_runtime(runtime: Any, cat: Catalog, dev: Optional[Device] = None) -> None:
    known = cat.memo("known_runtimes", known_runtimes)
    if runtime not in known:
        raise PlanError(f"runtime: unknown runtime {runtime!r}; ridgeline has data for {', '.join(known)}")
    if dev is not None and not runs_on(runtime, dev):
        others = [r for r in known if runs_on(r, dev)]
        which = f"runtimes that do: {', '.join(others)}" if others else "no runtime ridgeline knows runs on it"
        raise PlanError(
            f"runtime: {runtime} does not run on {dev.name} ({dev.vendor} {dev.kind}); {which} "
            f"(data/calibration/runtime_platforms.csv)"
        )
