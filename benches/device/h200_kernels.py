"""Kernel timings on one NVIDIA GPU, the way AIConfigurator times the runtimes' kernels: each
kernel replayed from a CUDA graph (no host launch inside), weights rotated through copies
larger than L2 so they are read from device memory, the mean over several replays.

What it measures (torch only; no runtime is installed on the machine):
- gemm.csv: bf16 GEMMs through torch.nn.functional.linear (cuBLAS: vLLM's unquantized linear
  layer calls it), and fp8 GEMMs through torch._scaled_mm (cuBLASLt, per-tensor scales, bf16 out),
  over an (m, n, k) grid drawn from AIConfigurator's GEMM tables;
- attention.csv: torch scaled_dot_product_attention, causal prefill and one-token decode, on its
  flash (FlashAttention-2) and cuDNN backends, GQA head layouts;
- copy.csv: a device-to-device copy (bytes read plus written over the time);
- env.txt: the device, driver, clocks and library versions.

Usage on the device machine: python3 benches/device/h200_kernels.py OUT_DIR [BUDGET_S]; then, here,
python benches/device/h200_kernels.py --tables OUT_DIR data/benchmarks/measured/h200_sxm writes the
timings as AIConfigurator-layout tables (its columns, latency in ms per call) that ridgeline's
kernel importers read (ridgeline.calibration.kernels).
"""

import csv
import functools
import math
import os
import subprocess
import sys
import time

if sys.argv[1:2] != ["--tables"]:
    import torch
    import torch.nn.functional as F

OUT = sys.argv[1]
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] != "--tables" else 300.0
T0 = time.time()
L2_BYTES = 256 << 20  # rotate operands through at least this much memory (L2 is 50-60 MB)
dev = torch.device("cuda") if sys.argv[1:2] != ["--tables"] else None


def left():
    return BUDGET - (time.time() - T0)


def timed(calls, replays=5):
    """Mean seconds per call of `calls` (a list of closures) replayed from one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls[:3]:
            c()  # warm-up (cuBLAS workspace, kernel selection) outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(replays):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    del g
    return a.elapsed_time(b) * 1e-3 / (replays * len(calls))


def writer(name, cols):
    f = open(os.path.join(OUT, name), "w", newline="")
    w = csv.writer(f)
    w.writerow(cols)
    return f, w


def env(mode="w"):
    with open(os.path.join(OUT, "env.txt"), mode) as f:
        p = torch.cuda.get_device_properties(0)
        f.write(f"device {p.name} sms {p.multi_processor_count} memory {p.total_memory} cc {p.major}.{p.minor}\n")
        f.write(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()}\n")
        for q in (
            "name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
            "clocks.sm,clocks.mem,temperature.gpu,power.draw",
        ):
            r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
            f.write(r.stdout)


def copy_bw():
    f, w = writer("copy.csv", ["bytes", "latency_ms"])
    for gb in (1, 4):
        n = gb << 30
        x = torch.empty(n, dtype=torch.uint8, device=dev)
        y = torch.empty_like(x)
        t = timed([functools.partial(y.copy_, x)] * 4)
        w.writerow([n, t * 1e3])
        del x, y
    f.close()


def gemms():
    f, w = writer("gemm.csv", ["gemm_dtype", "m", "n", "k", "latency_ms", "copies"])
    ms = [
        1,
        2,
        4,
        8,
        16,
        32,
        48,
        64,
        96,
        128,
        160,
        192,
        256,
        384,
        512,
        768,
        1024,
        1536,
        2048,
        3072,
        4096,
        6144,
        8192,
        16384,
    ]
    nk = [128, 256, 512, 1024, 2048, 3072, 4096, 5120, 7168, 8192, 12288, 16384]
    heads = [(m, n, k) for m in ms[:19] for n in (51200, 65536) for k in (1024, 2048, 4096, 5120, 7168, 8192)]
    shapes = [(m, n, k) for m in ms for n in nk for k in nk] + heads
    fp8 = torch.float8_e4m3fn
    for dtype in ("bfloat16", "fp8"):
        for m, n, k in shapes:
            if left() < (0.45 if dtype == "bfloat16" else 0.3) * BUDGET:
                break
            if 2 * m * n * k > 4.4e12:
                continue
            wbytes = n * k * (2 if dtype == "bfloat16" else 1)
            copies = max(1, min(64, math.ceil(L2_BYTES / max(wbytes + m * k * 2, 1))))
            try:
                xs = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(min(copies, 4))]
                ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
                if dtype == "bfloat16":
                    calls = [functools.partial(F.linear, xs[i % len(xs)], ws[i]) for i in range(copies)]
                else:
                    xq = [x.to(fp8) for x in xs]
                    wq = [wt.to(fp8) for wt in ws]
                    del ws
                    one = torch.ones((), device=dev, dtype=torch.float32)
                    calls = [
                        functools.partial(
                            torch._scaled_mm,
                            xq[i % len(xq)],
                            wq[i].t(),
                            scale_a=one,
                            scale_b=one,
                            out_dtype=torch.bfloat16,
                        )
                        for i in range(copies)
                    ]
                reps = max(1, math.ceil(10 / copies))
                t = timed(calls * reps)
                w.writerow([dtype, m, n, k, t * 1e3, copies])
            except Exception as e:  # a shape the library refuses: recorded, not timed
                w.writerow([dtype, m, n, k, "", f"error: {type(e).__name__}"])
            finally:
                xs = ws = calls = xq = wq = None
                torch.cuda.empty_cache()
        f.flush()
    f.close()


def attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    f, w = writer(
        "attention.csv",
        ["phase", "backend", "batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "latency_ms"],
    )
    heads = [(32, 8, 128), (64, 8, 128), (32, 32, 128), (16, 2, 128), (128, 8, 128), (32, 8, 64), (16, 4, 256)]
    prefill = [
        (b, s)
        for b in (1, 4, 16, 64)
        for s in (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
        if b * s <= 65536
    ]
    decode = [
        (b, L)
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        for L in (16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
    ]
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for phase, grid in (("context", prefill), ("generation", decode)):
        for h, kvh, hd in heads:
            for b, s in grid:
                if left() < (0.15 * BUDGET if phase == "context" else 10):
                    break
                q_len, kv_len = (s, s) if phase == "context" else (1, s)
                kv_bytes = 2 * b * kvh * kv_len * hd * 2
                copies = max(1, min(8, math.ceil(L2_BYTES / kv_bytes)))
                if kv_bytes * copies > 24 << 30:
                    continue
                for name, be in backends:
                    try:
                        qs = [torch.randn(b, h, q_len, hd, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
                        ks = [torch.randn(b, kvh, kv_len, hd, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
                        vs = [torch.randn(b, kvh, kv_len, hd, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
                        causal = phase == "context"
                        with sdpa_kernel([be]):
                            calls = [
                                functools.partial(
                                    F.scaled_dot_product_attention,
                                    qs[i],
                                    ks[i],
                                    vs[i],
                                    is_causal=causal,
                                    enable_gqa=(h != kvh),
                                )
                                for i in range(copies)
                            ]
                            t = timed(calls * max(1, math.ceil(8 / copies)))
                        w.writerow([phase, name, b, q_len, kv_len if phase == "generation" else 0, h, kvh, hd, t * 1e3])
                    except Exception as e:
                        w.writerow([phase, name, b, q_len, 0, h, kvh, hd, f"error: {type(e).__name__}: {e}"[:200]])
                    finally:
                        qs = ks = vs = calls = None
                        torch.cuda.empty_cache()
            f.flush()
    f.close()


def tables(raw, root, device="NVIDIA H200", version="2.11.0"):
    """The raw CSVs of a run as AIConfigurator-layout Parquet tables under ``root``."""
    import shutil

    import polars as pl

    def head(op):
        return [
            pl.lit("torch").alias("framework"),
            pl.lit(version).alias("version"),
            pl.lit(device).alias("device"),
            pl.lit(op).alias("op_name"),
        ]

    g = pl.read_csv(os.path.join(raw, "gemm.csv"))
    os.makedirs(os.path.join(root, "gemm", "torch", version), exist_ok=True)
    g.select(
        *head("gemm"),
        pl.when(pl.col("gemm_dtype") == "bfloat16")
        .then(pl.lit("torch_linear_cublas"))
        .otherwise(pl.lit("torch_scaled_mm_cublaslt"))
        .alias("kernel_source"),
        "gemm_dtype",
        "m",
        "n",
        "k",
        pl.col("latency_ms").alias("latency"),
        pl.col("copies").cast(pl.Int64).alias("weight_copies"),
    ).write_parquet(os.path.join(root, "gemm", "torch", version, "gemm_perf.parquet"))
    a = pl.read_csv(os.path.join(raw, "attention.csv"), infer_schema_length=None)
    a = a.with_columns(pl.col("latency_ms").cast(pl.Float64, strict=False)).drop_nulls("latency_ms")
    os.makedirs(os.path.join(root, "attention", "torch", version), exist_ok=True)
    for phase in ("context", "generation"):
        a.filter(pl.col("phase") == phase).select(
            *head(f"{phase}_attention"),
            ("torch_sdpa_" + pl.col("backend")).alias("kernel_source"),
            "batch_size",
            "isl",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            pl.lit(1).alias("beam_width"),
            pl.lit("bfloat16").alias("attn_dtype"),
            pl.lit("bfloat16").alias("kv_cache_dtype"),
            "step",
            pl.lit(0).alias("window_size"),
            pl.col("latency_ms").alias("latency"),
        ).write_parquet(os.path.join(root, "attention", "torch", version, f"{phase}_attention_perf.parquet"))
    shutil.copy(os.path.join(raw, "env.txt"), os.path.join(root, "env.txt"))


if __name__ == "__main__" and sys.argv[1] == "--tables":
    tables(sys.argv[2], sys.argv[3])
elif __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    env()
    copy_bw()
    print(f"copy done {time.time() - T0:.0f}s", flush=True)
    gemms()
    print(f"gemm done {time.time() - T0:.0f}s", flush=True)
    attention()
    print(f"attention done {time.time() - T0:.0f}s", flush=True)
    env("a")  # clocks after the load
    with open(os.path.join(OUT, "env.txt"), "a") as f:
        f.write(f"elapsed_s {time.time() - T0:.1f}\n")
