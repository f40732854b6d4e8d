"""How the Gated DeltaNet closed forms track AIConfigurator's measured GDN kernels (a structure
check, not a fit): each gdn_perf row's latency divided by its roofline bound at the catalog's bf16
peak and HBM bandwidth, quantiles per device, runtime, phase and kernel. The scan's FLOPs come from
the engine (`ridgeline._core.chunked_scan_flops`, the chunk from data/constants.csv); the bytes are
the scan's inputs and output in bf16 plus each sequence's fp32 state read and written once.
A steady ratio across shapes means the counts scale right; its value is what a fit would absorb.

    python benches/linear_attention_kernels.py [AIC_DIR]   (default ../shared/data/aic)
"""

import glob
import sys

import numpy as np
import polars as pl
from ridgeline import _core
from ridgeline.catalog.store import default_catalog

DEVICES = {"h100_sxm": "H100_SXM", "b200_sxm": "B200"}


def ratios(path: str, peak: float, bw: float, chunk: float) -> pl.DataFrame:
    d = pl.read_parquet(path).filter(~pl.col("kernel_source").str.contains("conv"))
    ctx = d["phase"] == "context"
    new = np.where(ctx.to_numpy(), d["seq_len"].to_numpy(), 1).astype(np.uint64)
    kh, vh, dk, dv = (d[c].to_numpy() for c in ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"))
    # one engine call per head geometry, over all its rows' sequence lengths
    flops = np.empty(d.height)
    for shape in set(zip(vh, dk, dv)):
        rows = (vh == shape[0]) & (dk == shape[1]) & (dv == shape[2])
        flops[rows] = _core.chunked_scan_flops("gated_delta", new[rows], chunk, *map(float, shape))
    flops *= d["batch_size"].to_numpy()
    io = d["num_tokens"].to_numpy() * (2 * kh * dk + 2 * vh * dv + 2 * vh) * 2
    state = d["batch_size"].to_numpy() * 2 * vh * dk * dv * 4
    bound_ms = np.maximum(flops / peak, (io + state) / bw) * 1e3
    return d.select("phase", "kernel_source").with_columns(ratio=d["latency"].to_numpy() / bound_ms)


def main(root: str) -> None:
    cat = default_catalog()
    chunk = cat.constant("linear_attention_chunk")
    for system, name in DEVICES.items():
        dev = cat.get(name)
        for f in sorted(glob.glob(f"{root}/{system}/linear_attention/*/*/gdn_perf.parquet")):
            runtime = f.split("/")[-3]
            r = ratios(f, dev.tflops_bf16 * 1e12, dev.memory_bw_gbs * 1e9, chunk)
            q = r.group_by("phase", "kernel_source").agg(
                n=pl.len(),
                p10=pl.col("ratio").quantile(0.1),
                p50=pl.col("ratio").median(),
                p90=pl.col("ratio").quantile(0.9),
            )
            for row in q.sort("phase").iter_rows(named=True):
                print(
                    f"{name:9s} {runtime:7s} {row['phase']:10s} {row['kernel_source'][:40]:40s} n={row['n']:5d} "
                    f"measured/bound p10 {row['p10']:.2f} p50 {row['p50']:.2f} p90 {row['p90']:.2f}"
                )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/aic")
