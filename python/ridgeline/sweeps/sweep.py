"""Sweeps: a grid of plans evaluated in the Rust core across all cores.

Categorical axes (model, hardware, dtypes, weight formats, runtime) are looped here; the
numeric axes (tp, pp, ep, dp, chunk, batch, prompt, output) are expanded and
evaluated inside Rust in chunks, so memory stays bounded and the result does
not depend on the thread count. Invalid combinations are kept as rows with
the reason in ``error``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .. import _checks, _core
from .._checks import MAX_EXACT, flag, whole
from ..catalog.store import Catalog, default_catalog
from ..errors import InternalError, PlanError
from ..models.config import Model
from .cluster import RunReport, check_backend, fingerprint, run_tasks
from .summary import summary as summary  # re-exported: the CLI and tests take it from here

if TYPE_CHECKING:
    from ..engine.plan import Plan

NUMERIC_AXES = ("tp", "pp", "ep", "dp", "chunk", "batch", "prompt", "output")
CATEGORICAL_AXES = ("model", "hardware", "dtype", "weight_dtype", "kv_dtype", "runtime", "speculative",
                    "draft_tokens", "acceptance")  # fmt: skip
#: The axes that matter only to a plan that speculates: a plan that does not takes their first values.
_SPECULATION_AXES = ("draft_tokens", "acceptance")
DEFAULTS: dict[str, list[Any]] = {
    "tp": [1], "pp": [1], "ep": [1], "dp": [1], "chunk": [0], "batch": [1], "prompt": [1024], "output": [256],
    "dtype": ["bf16"], "weight_dtype": [None], "kv_dtype": [None], "runtime": [None], "speculative": [None],
    "draft_tokens": [None], "acceptance": [None],
}  # fmt: skip

#: Every output column, with its unit.
SWEEP_COLUMNS = {
    "model": "model (Hugging Face id or path)",
    "hardware": "catalog device name",
    "dtype": "activation dtype",
    "weights": "weight format label (quantisation or dtype)",
    "kv_dtype": "KV-cache dtype",
    "runtime": (
        "runtime whose way of running and calibration price the plan: the grid's, else the one estimate picks for "
        "the device (null: none, the plan as written at the efficiency-1 bound)"
    ),
    "speculative": "speculative decoding method (eagle3, mtp, ngram, draft:MODEL; null: none)",
    "draft_tokens": "tokens drafted a sequence each step (null without speculation)",
    "acceptance_length": "tokens a verification step keeps on average, the bonus included (null without speculation)",
    "acceptance": "where the acceptance length comes from: a curve measured on the model, borrowed from its family, "
    "or the grid's file (null without speculation)",
    "tp": "tensor-parallel degree",
    "pp": "pipeline stages",
    "ep": "expert-parallel degree",
    "dp": "data-parallel replicas",
    "chunk": (
        "chunked-prefill budget in tokens (0: one prefill step); without a chunk axis the runtime's, llama.cpp's "
        "n_ubatch, and with one, llama.cpp's -ub (its sliding-window ring holds that many cells more)"
    ),
    "batch": "concurrent sequences",
    "prompt": "prompt tokens per sequence",
    "output": "output tokens per sequence",
    "devices": "devices the plan occupies (tp x pp x dp)",
    "ttft_s": "time to first token, s",
    "tpot_s": "mean time per output token after the first, s (NaN with one output token)",
    "e2e_s": "request latency, s",
    "throughput_tok_s": "output tokens per second over all replicas",
    "prefill_tok_s": "prompt tokens per second during prefill",
    "memory_gb": "memory per device, GB (1e9 bytes)",
    "fits": "whether the plan fits in device memory x gpu_memory_utilization",
    "mfu_prefill": "prefill FLOP/s over the dense peak (<= 1)",
    "mbu_decode": "decode bytes/s over the memory bandwidth (<= 1)",
    "power_prefill_w": "watts per device over prefill (spec 60; null: the device has no sourced idle or TDP power)",
    "power_decode_w": "watts per device over decode (null as power_prefill_w)",
    "energy_per_token_j": "joules per output token over a request round, prefill included, all of a replica's devices",
    "usd_per_million_output_tokens": (
        "USD per million output tokens at the device's cheapest published on-demand price per device-hour "
        "(data/hardware/hardware_cost.csv), or with amortise_years its cheapest purchase price spread over them "
        "(data/hardware/hardware_purchase.csv); null where none is published"
    ),
    "usd_per_million_tokens": (
        "USD per million tokens in and out (prompt + output) at that price: usd_per_million_output_tokens x "
        "output / (prompt + output); null as it"
    ),
    "calibration": (
        "calibration label: the device's own fit, the runtime's profile, or uncalibrated (an optimistic bound)"
    ),
    "basis": (
        "what the numbers rest on: measured (the device's own fit), borrowed (a fit of other devices: its "
        "architecture's or the runtime's profile) or bound (no calibration: the efficiency-1 bound, an optimistic "
        "upper bound on speed); the summary ranks measured and borrowed plans and counts bound ones apart"
    ),
    "estimated": "true when the device row is not vendor-verified",
    "error": "why the plan cannot be priced (null when it can)",
}

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*(?::\s*([x*+])\s*(\d+))?\s*$")


#: Values one grid axis may hold (a range is counted before it is expanded): a bound on the work
#: and memory of one sweep call's axis lists, not on the grid, whose plans stream in chunks.
MAX_AXIS_VALUES = 1 << 24


def parse_axis(name: str, value: Any) -> list[Any]:
    """Values of one axis from a list, a comma list, or a range 'a..b[:xk|:+k]'.

    >>> parse_axis("prompt", "128..1024:x2")
    [128, 256, 512, 1024]
    """
    items: list[Any] = list(value) if isinstance(value, (list, tuple)) else [value]
    out: list[Any] = []
    for item in items:
        if name not in NUMERIC_AXES:
            if item is None:  # null in a grid file: the axis's default (for runtime: the device's)
                out.append(None)
                continue
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise PlanError(f"{name}: expected names, got {item!r}")
            parts = [str(x).strip() for x in str(item).split(",")]
            if not all(parts):
                raise PlanError(f"{name}: an empty name in {item!r}")
            out.extend(parts)
            continue
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise PlanError(f"{name}: expected whole numbers, got {item!r}")
        if isinstance(item, int):
            out.append(item)
            continue
        for part in str(item).split(","):
            m = _RANGE.match(part)
            if m:
                lo, hi, op, step = int(m.group(1)), int(m.group(2)), m.group(3) or "+", int(m.group(4) or 1)
                if hi < lo or step < 1 or (op in "x*" and step < 2):
                    raise PlanError(f"{name}: bad range '{part}' (use a..b, a..b:+k or a..b:xk with k >= 2 for x)")
                if hi > MAX_EXACT:
                    raise PlanError(f"{name}: range '{part}' ends past 2^53 = {MAX_EXACT:,}")
                count = (
                    (math.floor(math.log(hi / lo, step)) + 2 if lo > 0 else 1) if op in "x*" else (hi - lo) // step + 1
                )
                if len(out) + count > MAX_AXIS_VALUES:
                    raise PlanError(f"{name}: range '{part}' holds {count:,} values; an axis takes at most "
                                    f"{MAX_AXIS_VALUES:,} (use a coarser step)")  # fmt: skip
                v = lo
                while v <= hi:
                    out.append(v)
                    if op in "x*" and v == 0:
                        break
                    v = v * step if op in "x*" else v + step
            else:
                try:
                    out.append(int(part))
                except ValueError:
                    raise PlanError(f"{name}: cannot read '{part}'; use 8, 1,8,64 or 128..32768:x2") from None
        if len(out) > MAX_AXIS_VALUES:
            raise PlanError(f"{name}: an axis takes at most {MAX_AXIS_VALUES:,} values")
    if not out:
        raise PlanError(f"{name}: the axis has no values")
    if name in NUMERIC_AXES:
        floor = 0 if name == "chunk" else 1
        bad = [v for v in out if not floor <= v <= MAX_EXACT]
        if bad:
            raise PlanError(f"{name}: values must be whole numbers in {floor}..2^53, got {bad[0]}")
    return out


def normalise_grid(grid: Mapping[str, Any]) -> dict[str, list[Any]]:
    if not isinstance(grid, Mapping):
        raise PlanError(f"grid: a mapping of axis names to values, e.g. {{'model': [...], 'hardware': [...]}}, "
                        f"got {type(grid).__name__}")  # fmt: skip
    unknown = set(grid) - set(NUMERIC_AXES) - set(CATEGORICAL_AXES)
    if unknown:
        raise PlanError(
            f"grid: unknown axis {', '.join(sorted(unknown))}; axes: {', '.join(CATEGORICAL_AXES + NUMERIC_AXES)}"
        )
    out = {k: list(v) for k, v in DEFAULTS.items()}
    for k, v in grid.items():
        if v is None:
            continue
        out[k] = parse_axis(k, v)
    # "none": a plan that does not speculate; depths are whole numbers
    out["speculative"] = [None if x is None or str(x).lower() == "none" else x for x in out["speculative"]]
    out["draft_tokens"] = [None if x is None else whole("draft_tokens", _int(x), 1) for x in out["draft_tokens"]]
    for k in ("model", "hardware"):
        if not out.get(k):
            raise PlanError(f"grid: needs at least one {k}")
    return out


def load_grid_file(path: str | Path) -> dict[str, Any]:
    """A grid from a JSON or YAML file: {axis: value or list or 'a..b:x2'}. A file that is not
    one (missing, a directory, not UTF-8, empty, bad syntax, not a mapping) is a PlanError
    naming it.

    >>> load_grid_file("/no/such/grid.yaml")
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: grid file /no/such/grid.yaml: not found
    """
    from .._io import load_json, load_yaml, read_text

    what = f"grid file {path}"
    shape = "a grid file holds one mapping of axis names to values, e.g. {model: ..., hardware: ..., batch: 1..64:x2}"
    text = read_text(path, what="grid file", error=PlanError)
    yaml_file = str(path).endswith((".yaml", ".yml"))
    if yaml_file:
        data = load_yaml(text, what=what)
    elif not text.strip():
        data = None
    else:
        data = load_json(text, what=what, hint="a .yaml or .yml file is read as YAML")
    if data is None:
        raise PlanError(f"{what}: empty; {shape}")
    if not isinstance(data, dict):
        raise PlanError(f"{what}: holds a {type(data).__name__}; {shape}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        axes = ", ".join(CATEGORICAL_AXES + NUMERIC_AXES)
        raise PlanError(f"{what}: axis name {bad[0]!r} is not text; axes: {axes}")
    return data


def grid_size(grid: Mapping[str, Any]) -> int:
    g = normalise_grid(grid)
    return len(_combinations(g)) * math.prod(len(g[k]) for k in NUMERIC_AXES)


def iter_sweep(
    grid: Mapping[str, Any],
    *,
    threads: int = 0,
    chunk_size: int = 1 << 18,
    catalog: Optional[Catalog] = None,
    progress: Optional[Callable[[int], None]] = None,
    calibrated: bool = True,
    amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None,
    parts: Optional[Sequence[tuple[int, int, int]]] = None,
) -> Iterator[Any]:
    """Yields the sweep as Polars DataFrames of at most ``chunk_size`` rows, in grid order.

    Each plan runs under the runtime ``estimate`` chooses for its device (``choose_runtime``)
    unless the grid names one ("none": the plan as written at the bound). A runtime prices each
    plan as ``estimate(..., runtime=...)`` does: with the shipped
    calibration the lookup picks (the device's own fit, else the runtime's profile, else none,
    said in ``calibration``) and run the way that runtime runs it (``runtime_execution``: for
    llama.cpp the prompt in n_ubatch steps unless the grid has a ``chunk`` axis, which is then
    its n_ubatch, padded KV reads, one-token decode steps replayed from a CUDA graph).

    ``parts`` (from ``sweep_parts``): only these pieces of the grid, each (index of the
    categorical combination in grid order, first and past-the-last numeric plan), one frame
    each, in grid order; ``chunk_size`` is then not used."""
    import numpy as np

    from ..engine.cost import price_of
    from ..engine.estimate import prepare, pricing
    from ..engine.fits import basis
    from ..engine.runtimes import runtime_execution

    _checks.threads(threads)
    whole("chunk_size", chunk_size, 1)
    cat = catalog or default_catalog()
    g = normalise_grid(grid)
    calibrated = flag("calibrated", calibrated)
    tp, pp, ep, dp, chunk, batch, prompt, output = (np.asarray(g[k], dtype=np.int64) for k in NUMERIC_AXES)
    n_numeric = int(np.prod([len(g[k]) for k in NUMERIC_AXES]))
    combos = _combinations(g)
    ranges: dict[int, list[tuple[int, int]]] = {}
    if parts is None:
        for ci in range(len(combos)):
            ranges[ci] = [(a, min(a + chunk_size, n_numeric)) for a in range(0, n_numeric, chunk_size)]
    else:
        for ci, a, b in sorted(parts):
            if not (0 <= ci < len(combos) and 0 <= a < b <= n_numeric):
                raise PlanError(f"parts: ({ci}, {a}, {b}) is not a part of this grid (sweep_parts lists them)")
            ranges.setdefault(ci, []).append((a, b))
    models = {name: Model.from_config(name) for name in {combos[ci][0] for ci in ranges}}
    devices = {name: cat.get(name) for name in {combos[ci][1] for ci in ranges}}
    for ci, todo in ranges.items():
        name, hw, dtype, wdt, kvdt, rt, spec, depth, acc = combos[ci]
        # everything but the numbers, prepared as estimate prepares it (the runtime it would
        # take for the device unless the grid names one, its calibration, weights and links)
        p = prepare(models[name], devices[hw], catalog, runtime=rt, dtype=dtype, calibrated=calibrated,
                     weight_dtype=None if wdt in (None, "None") else wdt,
                     kv_dtype=None if kvdt in (None, "None") else kvdt, speculative=spec,
                     draft_tokens=None if spec is None else depth,
                     acceptance=None if spec is None else acc)  # fmt: skip
        sp = p.plan_labels.get("speculation") or {}
        rt = p.plan_labels["runtime"]
        p, _ = pricing(p, None, amortise_years, cat, price_tier)
        priced = price_of(None, p.offers)
        price = None if priced is None else priced[0]
        # the runtime's own prompt step where the grid does not sweep one
        own = p.plan_tail["chunk"]
        chunks = chunk if own is None or grid.get("chunk") is not None else np.asarray([own], dtype=np.int64)
        # how the runtime runs a plan: the prepared one's for every plan but the sliding-window
        # ring, which llama.cpp sizes by its prompt step (n_swa + n_ubatch): one ring per chunk
        ways = [runtime_execution(rt, cat, flash_attention=True, ubatch=c or None) for c in chunks.tolist()]
        if any(w[k] != p.plan_head[k] for w in ways for k in ("kv_pad", "kv_skip_masked_tail", "decode_graphs")):
            raise InternalError(f"runtime_execution for {rt} varies with the chunk beyond the sliding-window ring")
        extra = np.asarray([w["swa_cache_extra"] for w in ways], dtype=np.int64)
        dt = p.plan_tail["dtype"]
        consts = {"model": p.model, "hardware": p.dev.name, "dtype": dt, "weights": p.plan_labels["weights"],
                  "kv_dtype": p.plan_tail["kv_dtype"] or dt, "runtime": rt, "calibration": p.label,
                  "basis": basis(p.label), "speculative": sp.get("method"), "draft_tokens": sp.get("draft_tokens"),
                  "acceptance_length": sp.get("acceptance_length"), "acceptance": sp.get("acceptance")}  # fmt: skip
        for start, stop in todo:
            r = _core.sweep_grid(p.core, tp, pp, ep, dp, chunks, batch, prompt, output, threads, start, stop, extra)
            if progress:
                progress(stop - start)
            yield _frame(r, consts, estimated=not p.dev.verified, price=price)


def _int(x: Any) -> Any:
    """A draft depth as a grid gives it (8, or "8" from a comma list) as a whole number where it reads as one."""
    try:
        return int(x) if isinstance(x, str) else x
    except ValueError:
        raise PlanError(f"draft_tokens: cannot read {x!r}; use whole numbers, e.g. 1,2,3") from None


def _combinations(g: Mapping[str, list[Any]]) -> list[tuple[Any, ...]]:
    """The categorical combinations of a normalised grid, in grid order (the outer loop of a sweep):
    a plan that does not speculate once, with the speculation axes' first values."""
    at = [CATEGORICAL_AXES.index(k) for k in _SPECULATION_AXES]
    spec = CATEGORICAL_AXES.index("speculative")
    firsts = [g[k][0] for k in _SPECULATION_AXES]
    return [c for c in itertools.product(*(g[k] for k in CATEGORICAL_AXES))
            if c[spec] is not None or [c[i] for i in at] == firsts]  # fmt: skip


def sweep_parts(grid: Mapping[str, Any], chunk_size: int = 1 << 18) -> list[tuple[int, int, int]]:
    """The grid cut into pieces of at most ``chunk_size`` plans, in grid order: (index of the
    categorical combination, first and past-the-last numeric plan). ``iter_sweep(grid,
    parts=...)`` prices any of them; together they are the whole grid, each plan once.

    >>> sweep_parts({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM,B200", "batch": "1..8"}, 5)
    [(0, 0, 5), (0, 5, 8), (1, 0, 5), (1, 5, 8)]
    """
    whole("chunk_size", chunk_size, 1)
    g = normalise_grid(grid)
    n = math.prod(len(g[k]) for k in NUMERIC_AXES)
    return [(ci, a, min(a + chunk_size, n)) for ci in range(len(_combinations(g))) for a in range(0, n, chunk_size)]


_STRINGS = ("model", "hardware", "dtype", "weights", "kv_dtype", "runtime")
_FLOATS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "prefill_tok_s")
_POWER = ("power_prefill_w", "power_decode_w", "energy_per_token_j")


def _frame(r: Mapping[str, Any], consts: Mapping[str, Any], *, estimated: bool, price: Optional[float] = None) -> Any:
    """One part of a sweep as a Polars frame in ``SWEEP_COLUMNS`` order: the core's arrays taken
    as they are (no per-plan Python object), the labels a part shares as constant columns, the
    reasons a plan could not be priced gathered from the core's one copy of each. A plan that
    cannot be priced has no numbers: nulls, never NaN."""
    import polars as pl

    from ..engine.cost import usd_per_million

    def text(name: str) -> Any:
        return pl.lit(consts[name], dtype=pl.String).alias(name)

    codes = pl.Series(r["error_code"])
    error = pl.Series("error", r["errors"], dtype=pl.String).gather(codes.replace(-1, None))
    numeric = {k: r[k] for k in (*NUMERIC_AXES, "devices", *_FLOATS, "fits", "mfu_prefill", "mbu_decode", *_POWER)}
    df = pl.DataFrame({**numeric, "memory_gb": r["memory_bytes"] / 1e9, "error": error})
    # at the cheapest published on-demand price per device-hour (Estimate.cost's default); none: null
    usd = usd_per_million(pl.lit(price, dtype=pl.Float64) * pl.col("devices"), pl.col("throughput_tok_s")).alias(
        "usd_per_million_output_tokens"
    )
    blended = (usd * pl.col("output") / (pl.col("prompt") + pl.col("output"))).alias("usd_per_million_tokens")
    speculation = (text("speculative"), pl.lit(consts.get("draft_tokens"), dtype=pl.Int64).alias("draft_tokens"),
                   pl.lit(consts.get("acceptance_length"), dtype=pl.Float64).alias("acceptance_length"),
                   text("acceptance"))  # fmt: skip
    return df.select(
        *(text(k) for k in _STRINGS), *speculation, *NUMERIC_AXES, "devices", *_FLOATS, "memory_gb", "fits",
        "mfu_prefill", "mbu_decode", *_POWER, usd, blended, text("calibration"), text("basis"),
        pl.lit(estimated).alias("estimated"), "error",
    ).with_columns(pl.col(pl.Float64).fill_nan(None))  # fmt: skip


def _lazy(frames: Callable[[], Iterator[Any]], schema: Any) -> Any:
    """A Polars LazyFrame whose rows are ``frames()``'s, produced as a sink or collect pulls them
    (the frames of a sweep stream from the core to the file, never all in memory)."""
    from polars.io.plugins import register_io_source

    def source(with_columns: Optional[list[str]], predicate: Any, n_rows: Optional[int], batch_size: Any) -> Any:
        left = n_rows
        for df in frames():
            if predicate is not None:
                df = df.filter(predicate)
            if with_columns is not None:
                df = df.select(with_columns)
            if left is not None:
                df = df.head(left)
                left -= df.height
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(source, schema=schema)


def _part(grid: Mapping[str, Any], part: tuple[int, int, int], threads: int, calibrated: bool,
          amortise_years: Optional[float], price_tier: Optional[str] = None) -> tuple[int, bytes]:  # fmt: skip
    """One part of a sweep as Parquet bytes, with its rows: a task of the backend (``cluster``),
    on a worker or here."""
    import io

    df = next(iter_sweep(grid, threads=threads, parts=[part], calibrated=calibrated, amortise_years=amortise_years,
                         price_tier=price_tier))  # fmt: skip
    buf = io.BytesIO()
    # zstd at its fastest level, as the local sink writes
    df.write_parquet(buf, compression="zstd", compression_level=1)
    return df.height, buf.getvalue()


def _task_threads(backend: str, threads: int) -> int:
    """Core threads a part runs on: all the caller asked for here; one on Ray, which runs as many
    parts at once as the cluster has CPUs (a task holds one)."""
    return threads if backend == "local" else 1


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A sweep written to a dataset folder (``parts``): its rows, its part files in grid order,
    and where the parts were computed (``report``: tasks per node, times, parts a resumed run
    found complete and skipped). ``frame()`` reads it back as one Polars frame."""

    folder: str
    rows: int
    files: list[str]
    report: RunReport

    def frame(self) -> Any:
        import polars as pl

        return pl.read_parquet(self.files) if self.files else pl.DataFrame()


def write_folder(
    grid: Mapping[str, Any],
    folder: str | Path,
    *,
    backend: str = "local",
    ray_address: Optional[str] = None,
    force: bool = False,
    threads: int = 0,
    chunk_size: int = 1 << 18,
    calibrated: bool = True,
    amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> Dataset:
    """Evaluates a grid into a dataset folder of Parquet parts (``ridgeline.parts``), one per
    ``chunk_size`` plans of a categorical combination, here or on a Ray cluster
    (``backend="ray"``; ``ray_address`` as ``cluster.run_tasks``). The rows are those of
    ``sweep(grid)``, in the same order across the parts, whatever ran them. A rerun into the same
    folder resumes: parts already complete and verified are not computed again. ``progress`` is
    called with the plans of each part as it lands (a resumed run's kept parts first).

    >>> import tempfile
    >>> d = write_folder({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM", "batch": "1..4"},
    ...                  tempfile.mkdtemp() + "/plans", chunk_size=3)
    >>> d.rows, [f.rsplit("/", 1)[1] for f in d.files]
    (4, ['part-000000.parquet', 'part-000001.parquet'])
    """
    from .._version import __version__
    from .parts import Folder, run_key

    check_backend(backend, ray_address)
    _checks.threads(threads)
    calibrated = flag("calibrated", calibrated)
    force = flag("force", force)
    pieces = sweep_parts(grid, chunk_size)
    g = normalise_grid(grid)
    # the axes the grid names, beside their values: without a chunk axis each runtime takes its own
    spec = {"what": "sweep", "grid": g, "axes": sorted(k for k, v in grid.items() if v is not None),
            "chunk_size": chunk_size, "calibrated": calibrated,
            "amortise_years": amortise_years, "price_tier": price_tier, "ridgeline": __version__,
            **{f"fingerprint_{k}": v
            for k, v in fingerprint().items()}}  # fmt: skip
    out = Folder.open(folder, run_key(spec), len(pieces), spec, force=force)
    if progress:
        for i in out.done:
            progress(pieces[i][2] - pieces[i][1])
    todo = [i for i in range(len(pieces)) if i not in out.done]
    n_threads = _task_threads(backend, threads)

    def landed(j: int, value: tuple[int, bytes]) -> None:
        rows, data = value
        out.write(todo[j], rows, data)
        if progress:
            progress(rows)

    _, report = run_tasks(_part, [(dict(grid), pieces[i], n_threads, calibrated, amortise_years, price_tier)
                                 for i in todo],
                          backend=backend, ray_address=ray_address, on_result=landed, keep=False,
                          skipped=len(pieces) - len(todo))  # fmt: skip
    rows = out.finish()
    return Dataset(str(out.path), rows, [str(f) for f in out.files()], report)


def gather(
    grid: Mapping[str, Any],
    *,
    backend: str = "ray",
    ray_address: Optional[str] = None,
    chunk_size: int = 1 << 18,
    calibrated: bool = True,
    amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> tuple[Any, RunReport]:
    """The sweep's parts computed as tasks (``backend``, as ``write_folder``) and gathered here
    into one frame in grid order, with where they ran: for a grid that fits in memory."""
    import io

    import polars as pl

    check_backend(backend, ray_address)
    calibrated = flag("calibrated", calibrated)
    threads = _task_threads(backend, 0)

    def landed(_i: int, value: tuple[int, bytes]) -> None:
        if progress:
            progress(value[0])

    tasks = [(dict(grid), p, threads, calibrated, amortise_years, price_tier) for p in sweep_parts(grid, chunk_size)]
    values, report = run_tasks(_part, tasks, backend=backend, ray_address=ray_address, on_result=landed)
    frames = [pl.read_parquet(io.BytesIO(b)) for _, b in values]
    return (pl.concat(frames) if frames else pl.DataFrame()), report


def is_folder(out: str) -> bool:
    """Whether an ``out`` names a dataset folder (``write_folder``) rather than one file: it ends
    in a path separator, is a folder already, or has no suffix at all.

    >>> is_folder("plans/"), is_folder("plans.parquet"), is_folder("plans.duckdb:t")
    (True, False, False)
    """
    p = Path(out)
    return out.endswith(("/", os.sep)) or p.is_dir() or (out != "" and p.suffix == "" and ":" not in p.name)


def with_plan(
    grid: Mapping[str, Any],
    plan: Plan,
    calibrated: bool,
    amortise_years: Optional[float],
    price_tier: Optional[str] = None,
) -> tuple[dict[str, Any], bool, Optional[float], Optional[str]]:
    """A grid with a plan's settings: its axes set by the plan (each one value; an axis the grid
    has too is refused), and the sweep's ``calibrated`` and ``amortise_years``."""
    if not isinstance(grid, Mapping):
        raise PlanError(f"grid: expected a mapping of axis names to values, got {type(grid).__name__}")
    axes = frozenset(NUMERIC_AXES + CATEGORICAL_AXES)
    from ..engine.plan import merged

    kw = merged(plan, {"calibrated": calibrated, "amortise_years": amortise_years, "price_tier": price_tier}, "sweep",
                axes | {"calibrated", "amortise_years", "price_tier"})  # fmt: skip
    both = sorted(k for k in plan.changed() if k in axes and k in grid)
    if both:
        raise PlanError(f"plan: {', '.join(both)} is set by both the grid and plan=; give each in one place")
    out = {**grid, **{k: [v] for k, v in plan.changed().items() if k in axes}}
    return out, kw["calibrated"], kw["amortise_years"], kw["price_tier"]


def sweep(
    grid: Mapping[str, Any],
    *,
    threads: int = 0,
    catalog: Optional[Catalog] = None,
    calibrated: bool = True,
    lazy: bool = False,
    amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None,
    backend: str = "local",
    ray_address: Optional[str] = None,
    plan: Optional[Plan] = None,
) -> Any:
    """Evaluates a grid of plans and returns a Polars DataFrame (columns in ``SWEEP_COLUMNS``).

    ``plan`` gives the grid's settings that do not vary as one ``Plan``: each field it sets that is
    an axis (batch, tp, dtype, runtime, ...) is that axis's one value, unless the grid has the axis
    too (refused); its ``calibrated`` and ``amortise_years`` are those keywords (a keyword set
    beside it must agree); a field that is not an axis (prefix, kv_pad, ...) is refused.

    Each plan runs under the runtime ``estimate`` would choose for its device unless the grid
    has a ``runtime`` axis ("none": the plan as written at the bound); ``calibrated=False``
    prices the same plans at the efficiency-1 bound. ``lazy=True`` returns a Polars LazyFrame
    instead, computed in parts as it is consumed: ``sweep(g, lazy=True).sink_parquet(path)``
    streams a grid of any size to a file in bounded memory (the grid is checked first; a
    ``collect()`` computes the plans again each time). ``amortise_years`` prices the cost
    column from each device's cheapest published purchase price spread over that many years, and
    ``price_tier`` from its cheapest on-demand offer of that tier (hyperscaler, neocloud, marketplace).
    ``backend="ray"`` computes the grid's parts as tasks on a Ray cluster (``ray_address``:
    none or ``"local"`` starts one on this machine, ``"auto"`` joins the running one, or
    host:port); the frame is the same, row for row. A grid too big to hold goes to a dataset
    folder instead (``write_folder``), which a rerun resumes.

    >>> df = sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM", "batch": [1, 8], "tp": [1, 2]})
    >>> df.height
    4
    """
    import polars as pl

    if plan is not None:
        grid, calibrated, amortise_years, price_tier = with_plan(grid, plan, calibrated, amortise_years, price_tier)
    kw: dict[str, Any] = {"threads": threads, "catalog": catalog, "calibrated": calibrated,
                          "amortise_years": amortise_years, "price_tier": price_tier}  # fmt: skip
    if check_backend(backend, ray_address) == "ray":
        if flag("lazy", lazy):
            raise PlanError("lazy: a lazy sweep is computed here as it is read; with backend='ray' write the grid "
                            "to a dataset folder (write_folder), which streams the parts to disk")  # fmt: skip
        if catalog is not None:
            raise PlanError("catalog: Ray workers use their own default catalog (set RIDGELINE_HARDWARE on every "
                            "node for extra devices); leave catalog unset with backend='ray'")  # fmt: skip
        _checks.threads(threads)
        return gather(grid, backend=backend, ray_address=ray_address, calibrated=calibrated,
                      amortise_years=amortise_years)[0]  # fmt: skip
    if not flag("lazy", lazy):
        frames = list(iter_sweep(grid, **kw))
        return pl.concat(frames) if frames else pl.DataFrame()
    # the first part is priced now, so a grid that cannot run fails here, not inside Polars
    first = next(iter_sweep(grid, chunk_size=1, **kw))
    return _lazy(lambda: iter_sweep(grid, **kw), first.schema)


def _out_target(out: str) -> tuple[str, Optional[str]]:
    """The file and (DuckDB) the table an ``out`` names; refused when it names neither."""
    if out == "":
        raise PlanError("out: an empty path")
    if out.endswith(".csv"):
        return out, None
    if ":" in out and out.rsplit(":", 1)[0].endswith(".duckdb"):
        target, table = out.rsplit(":", 1)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
            raise PlanError(f"out: table name '{table}' must be a plain identifier (letters, digits and _)")
        return target, table
    if not out.endswith(".parquet"):
        raise PlanError(f"out: '{out}' must end in .parquet or .csv, be file.duckdb:table, or name a folder (results/)")
    return out, None


def _has_table(target: str, table: str) -> bool:
    """Whether the DuckDB file ``target`` holds ``table`` (no file: no table)."""
    from .._io import check_output, duckdb_readonly, has_table

    check_output(target, force=True, what="out")
    with duckdb_readonly(target, what="out") as con:
        return con is not None and has_table(con, table)


def _create_table(target: str, table: str, parts: Sequence[Path], *, force: bool) -> None:
    """The one change a sweep makes to a DuckDB file: CREATE TABLE (CREATE OR REPLACE with
    ``force``) from the finished parts; a file this created is removed again when it fails."""
    import duckdb

    created = not Path(target).exists()
    try:
        con = duckdb.connect(target)
        try:
            con.execute("SET preserve_insertion_order = true")
            verb = "CREATE OR REPLACE TABLE" if force else "CREATE TABLE"
            con.execute(f'{verb} "{table}" AS SELECT * FROM read_parquet(?)', [[str(p) for p in parts]])
        finally:
            con.close()
    except BaseException as e:
        if created:
            for f in (target, f"{target}.wal"):
                Path(f).unlink(missing_ok=True)
        if isinstance(e, duckdb.Error):
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise PlanError(f"out: cannot create table '{table}' in '{target}' ({first})") from None
        raise


def write(frames: Iterator[Any], out: str, *, force: bool = False) -> int:
    """Streams frames to ``x.parquet``, ``x.csv`` or ``x.duckdb:table``; returns the row count.

    Nothing is lost: an existing file (for DuckDB, an existing table) is refused unless
    ``force``, before the first plan is priced; the output appears only once every frame is
    written, so a sweep that fails (an unknown model, an interrupt) leaves the target byte for
    byte as it was. A DuckDB file is changed once, by CREATE TABLE (CREATE OR REPLACE with
    ``force``), after every part is computed.

    >>> write(iter([]), "plans.txt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: out: 'plans.txt' must end in .parquet or .csv, be file.duckdb:table, or ...
    """
    from .._io import FORCE_HINT, atomic_output, check_output

    target, table = _out_target(out)
    if table is None:
        check_output(target, force=force, what="out")
    elif _has_table(target, table) and not force:
        raise PlanError(f"out: table '{table}' exists in '{target}'; {FORCE_HINT}")
    # the first frame is priced before anything is created: a grid that fails at once
    # (an unknown model, a bad plan) leaves no trace
    frames = iter(frames)  # a list of frames too
    first = next(frames, None)
    if first is None:
        raise PlanError("the grid has no plans")
    frames = itertools.chain([first], frames)
    rows = 0
    if table is None and target.endswith(".csv"):
        with atomic_output(target, force=force, what="out") as tmp, open(tmp, "w") as fh:
            for i, df in enumerate(frames):
                df.write_csv(fh, include_header=i == 0)
                rows += df.height
        return rows
    # one pass: each part goes from the core through Polars' streaming sink into the one file,
    # in row groups, never all in memory
    counted = _Counted(frames)
    lf = _lazy(lambda: iter(counted), first.schema)
    if table is None:
        with atomic_output(target, force=force, what="out") as dest:
            counted.sink(lf, dest)
        return counted.rows
    with tempfile.TemporaryDirectory(prefix=".ridgeline-sweep-", dir=Path(target).parent) as tmp_dir:
        part = Path(tmp_dir) / "sweep.parquet"
        counted.sink(lf, part)
        _create_table(target, table, [part], force=force)
    return counted.rows


class _Counted:
    """The frames of a sweep, iterated once inside a Polars sink: counts the rows that pass, and
    keeps an error a part raises so that it reaches the caller as itself (a PlanError stays a
    PlanError with its exit code), not wrapped by Polars."""

    def __init__(self, frames: Iterator[Any]) -> None:
        self.frames, self.rows = frames, 0
        self.error: Optional[BaseException] = None

    def __iter__(self) -> Iterator[Any]:
        try:
            for df in self.frames:
                self.rows += df.height
                yield df
        except Exception as e:  # re-raised by sink, after Polars has stopped
            self.error = e

    def sink(self, lf: Any, path: str | Path) -> None:
        # zstd at its fastest level: 20% less time than Polars' default level for 4% more bytes
        lf.sink_parquet(path, compression="zstd", compression_level=1)
        if self.error is not None:
            raise self.error


def describe_columns() -> Sequence[tuple[str, str]]:
    return list(SWEEP_COLUMNS.items())
