"""Type stubs of the compiled core (checked against the binary by mypy.stubtest)."""

from typing import Any, Callable, Optional, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_EXPERTS",
    "MAX_LAYERS",
    "CalibRows",
    "CatalogError",
    "CoreDevice",
    "CoreEstimate",
    "CoreModel",
    "DoesNotFitError",
    "HardwareError",
    "InternalError",
    "ModelConfigError",
    "PlanError",
    "Prepared",
    "RidgelineError",
    "UnknownNameError",
    "__version__",
    "chunked_scan_flops",
    "collective",
    "data_file",
    "data_files",
    "data_hash",
    "distinct_experts",
    "estimate_many",
    "estimate_prepared",
    "parse_dtype",
    "phase_power",
    "simulate_prepared",
    "sweep_grid",
]

__version__: str
MAX_LAYERS: int
MAX_EXPERTS: int

class RidgelineError(ValueError): ...
class PlanError(RidgelineError): ...
class ModelConfigError(RidgelineError): ...
class HardwareError(RidgelineError): ...
class UnknownNameError(RidgelineError): ...
class DoesNotFitError(RidgelineError): ...
class CatalogError(RidgelineError): ...
class InternalError(RidgelineError): ...

@final
class CoreModel:
    def __new__(cls, json: str) -> CoreModel: ...
    def params(self) -> dict[str, int]: ...
    def num_layers(self) -> int: ...
    def unpriced_layers(self) -> Optional[str]: ...
    def kv_layers(self, tp: int = 1) -> list[tuple[int, int, Optional[int]]]: ...

@final
class CalibRows:
    def __new__(
        cls,
        len: npt.NDArray[np.int64],
        compute: npt.NDArray[np.float64],
        memory: npt.NDArray[np.float64],
        expert: npt.NDArray[np.bool_],
        quant: npt.NDArray[np.bool_],
        fmt: npt.NDArray[np.int64],
        moe_w: npt.NDArray[np.float64],
        moe_t: npt.NDArray[np.float64],
        moe_d0: npt.NDArray[np.float64],
        moe_group: npt.NDArray[np.int64],
        moe_ek: list[tuple[int, int]],
        fixed: npt.NDArray[np.float64],
        launches: npt.NDArray[np.float64],
        steps: npt.NDArray[np.float64],
        work: npt.NDArray[np.float64],
        time_ms: npt.NDArray[np.bool_],
        observed: npt.NDArray[np.float64],
        formats: int,
    ) -> CalibRows: ...
    def predict(
        self, params: npt.NDArray[np.float64], formats: npt.NDArray[np.float64], ratio: bool = False
    ) -> npt.NDArray[np.float64]: ...
    def rms(self, params: npt.NDArray[np.float64], formats: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
    def __len__(self) -> int: ...

@final
class Prepared:
    def __new__(
        cls, model: CoreModel, device: CoreDevice, plan_json: str, efficiency_json: str, protocol_json: str
    ) -> Prepared: ...

@final
class CoreEstimate:
    @property
    def ttft_s(self) -> float: ...
    @property
    def tpot_s(self) -> Optional[float]: ...
    @property
    def e2e_s(self) -> float: ...
    @property
    def throughput_tok_s(self) -> float: ...
    @property
    def prefill_tok_s(self) -> float: ...
    @property
    def fits(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class CoreDevice:
    def __new__(cls, json: str) -> CoreDevice: ...
    @property
    def name(self) -> str: ...

def simulate_prepared(
    prepared: Prepared,
    cluster_json: str,
    workload_json: str,
    options_json: str,
    progress: Optional[Callable[[int, int], Any]] = None,
) -> dict[str, Any]: ...
def estimate_prepared(
    prepared: Prepared,
    batch: int,
    prompt: int,
    output: int,
    prefix: int,
    tp: int,
    ep: int,
    pp: int,
    dp: int,
    microbatches: Optional[int],
    breakdown: bool = True,
) -> CoreEstimate: ...
def estimate_many(
    prepared: Prepared,
    batch: npt.NDArray[np.int64],
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    tp: npt.NDArray[np.int64],
    threads: int = 0,
) -> dict[str, Any]: ...
def sweep_grid(
    prepared: Prepared,
    tp: npt.NDArray[np.int64],
    pp: npt.NDArray[np.int64],
    ep: npt.NDArray[np.int64],
    dp: npt.NDArray[np.int64],
    chunk: npt.NDArray[np.int64],
    batch: npt.NDArray[np.int64],
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    threads: int = 0,
    start: int = 0,
    stop: Optional[int] = None,
    chunk_extra: Optional[npt.NDArray[np.int64]] = None,
) -> dict[str, Any]: ...
def collective(
    op: str,
    ranks: int,
    sizes: npt.NDArray[np.float64],
    scaleup_bw_gbs: float,
    scaleup_latency_us: float,
    protocol_json: str,
    devices_per_node: Optional[int] = None,
    scaleout_bw_gbs: Optional[float] = None,
    scaleout_latency_us: Optional[float] = None,
    links_json: Optional[str] = None,
) -> dict[str, Any]: ...
def parse_dtype(field: str, name: str) -> str: ...
def data_files() -> list[str]: ...
def data_file(path: str) -> bytes: ...
def data_hash() -> str: ...
def chunked_scan_flops(
    scan: str,
    new: npt.NDArray[np.uint64],
    chunk: float,
    heads: float,
    dk: float,
    dv: float,
    groups: float = 1.0,
) -> npt.NDArray[np.float64]: ...
def phase_power(
    compute_s: npt.NDArray[np.float64],
    memory_s: npt.NDArray[np.float64],
    time_s: npt.NDArray[np.float64],
    idle_w: npt.NDArray[np.float64],
    tdp_w: npt.NDArray[np.float64],
    rho: float,
) -> npt.NDArray[np.float64]: ...
def distinct_experts(
    num_experts: int, top_k: int, tokens: npt.NDArray[np.float64], skew: float
) -> npt.NDArray[np.float64]: ...
