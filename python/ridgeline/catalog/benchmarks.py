"""Importers for the measured rows under data/benchmarks/: each source format,
recognised by its header, becomes rows of the unified ``benchmarks`` schema
(spec 50) with the row's source kept. The files themselves stay verbatim."""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterable
from typing import Any, Callable, Optional

from .. import _data, names
from ..errors import CatalogError, UnknownNameError
from ..models import quant

COLUMNS = (
    "id", "source", "file", "file_hardware", "hardware", "runtime", "runtime_version", "model", "weight_quant",
    "kv_dtype", "tp", "pp", "ep", "batch", "prompt_tokens", "output_tokens", "depth", "op", "ranks", "nodes",
    "devices_per_node", "size_bytes", "phase", "dtype", "gemm_m", "gemm_n", "gemm_k", "metric", "value", "unit",
    "flags", "notes", "not_priced",
)  # fmt: skip
FILE_MODEL = "file_model"

Row = dict[str, Any]


@functools.lru_cache(maxsize=1)
def hardware_map() -> dict[str, tuple[str, str]]:
    """File hardware names -> (catalog name, note), from data/benchmarks/hardware_map.csv."""
    text = _data.read_text("data/benchmarks/hardware_map.csv")
    return {r["file_hardware"]: (r["name"], r["note"]) for r in csv.DictReader(io.StringIO(text))}


@functools.lru_cache(maxsize=1)
def model_map() -> dict[str, tuple[str, str, str]]:
    """File model names -> (bundled model, note, GGUF mixture where the quant name alone does
    not give it), from data/benchmarks/model_map.csv."""
    text = _data.read_text("data/benchmarks/model_map.csv")
    return {r["file_model"]: (r["model"], r["note"], r["gguf_mixture"]) for r in csv.DictReader(io.StringIO(text))}


def _row(file: str, i: int, **kw: Any) -> Row:
    """A row of the unified schema; its model resolved (model_map.csv, else the name as people
    write it: ``models.identify``), its device left to ``import_file`` (which has the catalog)."""
    from ..models.config import Model, identify

    out: Row = {c: None for c in COLUMNS}
    file_model = kw.pop(FILE_MODEL, None)
    out.update(kw)
    out["id"] = f"{file.rsplit('/', 1)[-1][:-4]}:{i}"
    out["file"] = file
    if file_model is not None:
        mapped = model_map().get(str(file_model))
        why = named = None
        if mapped is None:
            try:
                found, named = identify(str(file_model))
                named = quant.named_format(Model.from_config(found), named)
                mapped = (found, "", "")
            except UnknownNameError as e:
                why = str(e)
        out["model"] = mapped[0] if mapped else None
        if mapped and mapped[2] and quant.mixtures_table()[mapped[2]]["default"][0] == out["weight_quant"]:
            # the file's GGUF refines its quant (data/gguf_mixtures.csv has the file-size check)
            out["weight_quant"] = mapped[2]
        if named and out["weight_quant"] is None:
            out["weight_quant"] = named
        elif named and named != out["weight_quant"]:
            why = f"model '{file_model}' says {named} weights, the row's precision {out['weight_quant']}"
        if why and not out["not_priced"]:
            out["not_priced"] = why
        out["notes"] = "; ".join(x for x in (f"model {file_model}", out["notes"]) if x)
    return out


def _int(v: str) -> Optional[int]:
    v = (v or "").strip()
    return int(float(v)) if re.fullmatch(r"[0-9.]+", v) else None


# llama.cpp and TensorRT-LLM precision names -> ridgeline weight formats (data/quant_formats.csv).
# TensorRT-LLM's perf overview writes its quantised checkpoints "FP8 (ModelOpt checkpoint)" and
# "FP4 (ModelOpt checkpoint)": ModelOpt's FP8 and NVFP4 (its FP4 format on Blackwell) weights.
_QUANT = {"F16": "fp16", "FP16": "fp16", "BF16": "bf16", "Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_K_M": "q4_k_m",
          "FP8": "fp8", "MXFP4": "gguf_mxfp4", "FP4": "nvfp4", "NVFP4": "nvfp4"}  # fmt: skip


def trtllm_precision(label: str) -> tuple[Optional[str], Optional[str]]:
    """A TensorRT-LLM table's precision label as (weight format, why not): its name with a
    parenthesised note set aside ("FP4 (ModelOpt checkpoint)": nvfp4); a label ridgeline does not
    read is (None, the reason), never the activation dtype.

    >>> trtllm_precision("FP4 (ModelOpt checkpoint)"), trtllm_precision("FP16")
    (('nvfp4', None), ('fp16', None))
    >>> trtllm_precision("W4A8")[1]
    "precision 'W4A8' is not a weight format ridgeline reads (FP16, BF16, FP8, FP4, with or without a note)"
    """
    key = re.sub(r"\s*\(.*\)\s*$", "", label.strip()).upper()
    fmt = _QUANT.get(key)
    if fmt is None:
        read = "FP16, BF16, FP8, FP4, with or without a note"
        return None, f"precision {label!r} is not a weight format ridgeline reads ({read})"
    return fmt, None


# The precisions whose TensorRT-LLM rows run an FP8 KV cache (the FP8 rows, as before); an FP4
# checkpoint's KV dtype is not stated by its label (nvidia's NVFP4 checkpoints hold an FP8 KV
# scheme in some configs and none in others): the plan's default
_FP8_KV = ("fp8",)


def _llamacpp_test(test: str) -> tuple[Optional[str], int]:
    m = re.fullmatch(r"(pp|tg)(\d+)", test.strip())
    return (None, 0) if not m else ("prefill" if m.group(1) == "pp" else "decode", int(m.group(2)))


def _llamacpp_runtime(backend: str) -> tuple[Optional[str], Optional[str]]:
    """The runtime of a llama.cpp row by its backend column, and why the row cannot be priced
    where ridgeline has no runtime for that backend (data/calibration/runtime_platforms.csv lists
    llama.cpp's CUDA and Metal backends): a Vulkan, ROCm or SYCL run is not a CUDA one, on any card."""
    name = f"llamacpp-{backend.strip().lower()}"
    if name in quant.runtime_platforms():
        return name, None
    known = ", ".join(sorted(r for r in quant.runtime_platforms() if r.startswith("llamacpp-")))
    return None, (
        f"llama.cpp {backend.strip() or '(no backend)'} backend: ridgeline has no runtime profile for it "
        f"(it has {known}; data/calibration/runtime_platforms.csv)"
    )


def _llamacpp_bench(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """llama-bench ppN / tgN rows (Apple silicon discussion 4167, GPU scoreboards):
    ppN = a prefill of N tokens on the stated depth; tgN = N decode steps from it."""
    for i, r in enumerate(rows, start=2):
        phase, n = _llamacpp_test(r["test"])
        hw = r["hardware"] + (f" ({r['gpu_cores']}-core GPU)" if r.get("gpu_cores") else "")
        runtime, why = _llamacpp_runtime(r["backend"])
        out = _row(
            file, i, source=r["source"], file_hardware=hw, file_model=r["model"], runtime=runtime,
            runtime_version=r.get("llamacpp_build") or None, weight_quant=_QUANT.get(r["quant"], r["quant"].lower()),
            batch=_int(r["batch"]) or 1, depth=_int(r["kv_depth_tokens"]) or 0, phase=phase,
            prompt_tokens=n if phase == "prefill" else 0, output_tokens=n if phase == "decode" else 0,
            metric=f"{phase}_tok_s" if phase else "unknown", value=float(r["value"]), unit=r["unit"],
            flags="flash_attn" if r.get("flash_attn") == "1" else None, notes=r.get("note") or None,
        )  # fmt: skip
        if phase is None:
            out["not_priced"] = f"unrecognised llama-bench test '{r['test']}'"
        out["not_priced"] = why or out["not_priced"]
        yield out


def _dgx_spark(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """llama.cpp benches/dgx-spark.md: llama-bench pp2048/tg32 at depth 0-32k, and
    llama-batched-bench (B prompts of PP tokens, then B sequences decode TG tokens)."""
    for i, r in enumerate(rows, start=2):
        batched = "batched" in r["tool"]
        metric = r["metric"]
        pp, tg, b, d = _int(r["prompt_tokens"]) or 0, _int(r["gen_tokens"]) or 0, _int(r["batch"]) or 1, _int(
            r["kv_depth_tokens"]) or 0  # fmt: skip
        runtime, why = _llamacpp_runtime(r["backend"])
        kw: dict[str, Any] = dict(
            source=r["source"], file_hardware=r["hardware"], file_model=r["model"], runtime=runtime,
            weight_quant=_QUANT.get(r["quant"], r["quant"].lower()), batch=b, value=float(r["value"]), unit=r["unit"],
            flags=",".join(f for f, on in (("flash_attn", "fa=1" in r["tool"]), ("batched-bench", batched)) if on)
            or None,
            notes=f"{r['tool']}; {r['note']}",
        )  # fmt: skip
        if metric == "prefill_throughput":
            kw.update(phase="prefill", prompt_tokens=pp, output_tokens=0, depth=d, metric="prefill_tok_s")
        elif metric in ("decode_throughput", "decode_throughput_aggregate"):
            # batched-bench decodes after its own prompts: depth = PP
            kw.update(phase="decode", prompt_tokens=0, output_tokens=tg, depth=pp if batched else d,
                      metric="decode_tok_s")  # fmt: skip
        else:
            kw.update(
                phase="prefill" if "prefill" in metric else "decode",
                metric=metric,
                prompt_tokens=pp,
                output_tokens=tg,
                depth=d,
                not_priced="a time row; its throughput twin is the priced row",
            )
        out = _row(file, i, **kw)
        out["not_priced"] = why or out["not_priced"]
        yield out


def _xiongjiedai(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """XiongjieDai GPU-Benchmarks-on-LLM-Inference: llama.cpp decode of N tokens from an empty
    context and prefill of N tokens; multi-GPU rows are llama.cpp's layer split (a pipeline)."""
    for i, r in enumerate(rows, start=2):
        n_gpu = _int(r["num_gpus"]) or 1
        hw = r["hardware"]  # "3090 24GB * 2": the count is checked against the plan (import_file)
        runtime, why = _llamacpp_runtime(r["backend"])
        decode = r["metric"] == "decode_throughput"
        n = _int(r["gen_tokens"]) if decode else _int(r["prompt_tokens"])
        out = _row(
            file, i, source=r["source"], file_hardware=hw, file_model=r["model"],
            runtime=runtime, weight_quant=_QUANT.get(r["quant"]),
            batch=1, tp=1, pp=n_gpu, depth=0, phase="decode" if decode else "prefill",
            prompt_tokens=0 if decode else n, output_tokens=n if decode else 0,
            metric="decode_tok_s" if decode else "prefill_tok_s", value=float(r["value"]) if r["value"] else 0.0,
            unit=r["unit"], flags="layer-split" if n_gpu > 1 else None, notes=f"{r['table']}; {r['parallelism']}",
        )  # fmt: skip
        if r["status"] != "ok":
            out["not_priced"] = f"status {r['status']} (the run failed)"
        out["not_priced"] = why or out["not_priced"]
        yield out


def _trt_source(r: dict[str, str]) -> str:
    return f"{r['source_repo']} {r['source_path']} @ {r['source_commit']}"


# The serving tables' metric names -> the unified metric and its phase (times in ms). A name may
# carry its statistic ("mean_itl_ms"): the mean, median or p50 is the typical step a plan prices.
_SERVING_METRICS = (
    (("ttft", "time_to_first_token", "first_token_latency"), "ttft_ms", "prefill"),
    (("tpot", "itl", "inter_token_latency", "time_per_output_token"), "tpot_ms", "decode"),
    (("e2e_latency", "e2el", "total_latency", "request_latency", "latency"), "e2e_latency_ms", "e2e"),
    (("request_throughput", "requests_per_second", "request_rate"), "request_throughput_req_s", "e2e"),
    (("output_token_throughput", "output_throughput", "output_tokens_per_second", "token_throughput",
      "throughput"), "throughput_tok_s", "e2e"),
)  # fmt: skip
_TYPICAL = ("mean", "median", "avg", "average", "p50")
_TTFT_UNDER_LOAD = (
    "TTFT under concurrency (staggered arrivals, chunked prefill among running decodes): needs the serving simulator"
)
_TO_MS = {"ms": 1.0, "s": 1e3, "us": 1e-3}


def _serving_metric(name: str, unit: str, value: float) -> tuple[str, str, float, str, Optional[str]]:
    """A serving table's metric as the unified (metric, phase, value, unit), and why it cannot be
    priced where a static plan does not say it (None: it can, at the run's concurrency)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    stat = words[0] if words and (words[0] in _TYPICAL or re.fullmatch(r"p\d+|max|min|std", words[0])) else None
    base = "_".join(w for w in words[1 if stat else 0 :] if w not in _TO_MS)
    metric, phase = next(((m, p) for spelled, m, p in _SERVING_METRICS if base in spelled), (name, "e2e"))
    if metric == name:
        return name, phase, value, unit, f"unrecognised metric '{name}'"
    why = None if stat in (None, *_TYPICAL) else f"a {stat} statistic; a plan prices the typical request"
    if metric.endswith("_ms"):
        scale = _TO_MS.get(unit.strip().lower())
        if scale is None:
            return metric, phase, value, unit, f"{name} in '{unit}', not a time unit"
        return metric, phase, value * scale, "ms", why
    return metric, phase, value, unit, why


def _trtllm_latency(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """TensorRT-LLM serving and latency tables: each row's metric as what it is (TTFT, TPOT/ITL,
    end-to-end latency, request or token throughput; ``_serving_metric``). The batch-1 first-token
    latency (v0.5: an engine run with one output token) and a closed loop's TPOT (the steady decode
    step at its concurrency) are priced; a request stream (a request rate), TTFT under
    concurrency and a serving run's latency or throughput need the serving simulator."""
    for i, r in enumerate(rows, start=2):
        metric, phase, value, unit, why = _serving_metric(r["metric"], r["unit"], float(r["value"]))
        c = _int(r["batch_or_concurrency"]) or 1
        rate = (r.get("request_rate_qps") or "").strip()
        if why is None and rate and rate.lower() not in ("inf", "max"):
            why = f"serving run at {rate} requests/s (arrivals, runtime-chosen batching): needs the serving simulator"
        elif why is None and metric == "ttft_ms" and c > 1:
            why = _TTFT_UNDER_LOAD
        elif why is None and metric not in ("ttft_ms", "tpot_ms"):
            why = f"a serving run's {r['metric'].replace('_', ' ')}: needs the serving simulator"
        fmt, unread = trtllm_precision(r["precision"])
        yield _row(
            file, i, source=_trt_source(r), file_hardware=r["hardware"],
            file_model=r["model"], runtime="trtllm", runtime_version=r["trtllm_version"],
            weight_quant=fmt, tp=_int(r["tp"]) or 1, batch=c,
            kv_dtype="fp8" if fmt in _FP8_KV else None,
            prompt_tokens=_int(r["input_tokens"]), output_tokens=_int(r["output_tokens"]), depth=0, phase=phase,
            metric=metric, value=value, unit=unit, notes=r["scenario"], not_priced=unread or why,
        )  # fmt: skip


def _trtllm_throughput(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """TensorRT-LLM throughput: offline max throughput (runtime-chosen batch: not priced by a
    static plan) and fixed-batch throughput (priced: batch x output / E2E)."""
    for i, r in enumerate(rows, start=2):
        fixed = "fixed batch" in r["scenario"]
        fmt, unread = trtllm_precision(r["precision"])
        out = _row(
            file, i, source=_trt_source(r), file_hardware=r["hardware"],
            file_model=r["model"], runtime="trtllm", runtime_version=r["trtllm_version"],
            weight_quant=fmt, tp=_int(r["tp"]) or 1, pp=_int(r["pp"]) or 1,
            kv_dtype="fp8" if fmt in _FP8_KV else None, not_priced=unread,
            batch=_int(r["batch"]), prompt_tokens=_int(r["input_tokens"]), output_tokens=_int(r["output_tokens"]),
            depth=0, phase="e2e", metric="throughput_tok_s", value=float(r["value"]), unit=r["unit"],
            notes=r["scenario"],
        )  # fmt: skip
        if not fixed and not unread:
            out["not_priced"] = "offline max throughput with a runtime-chosen batch: needs the serving simulator"
        elif "per GPU" in r["unit"]:
            out["flags"] = "per_gpu"
        yield out


def _vllm(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """vLLM benchmark tables: serving runs with a runtime-chosen batch (not priced yet)."""
    for i, r in enumerate(rows, start=2):
        out = _row(
            file, i, source=r["source"], file_hardware=r["hardware"], file_model=r["model"], runtime="vllm",
            runtime_version=r["vllm_version"] or None, tp=_int(r["tp"]) or 1, prompt_tokens=_int(r["input_tokens"]),
            output_tokens=_int(r["output_tokens"]), batch=_int(r["concurrency_or_batch"]), depth=0, phase="e2e",
            metric=r["metric"], value=float(r["value"]), unit=r["unit"], notes=r["note"],
        )  # fmt: skip
        burst = re.match(r"--num-prompts (\d+) \(all sent", r["concurrency_or_batch"])
        if not out["not_priced"] and burst and (out["prompt_tokens"] is None or out["output_tokens"] is None):
            # an infinite request rate: a burst the simulator replays (every request at t = 0) once
            # its lengths are known; here they are not, and none is assumed
            out["not_priced"] = (f"a burst of {burst.group(1)} requests at an infinite rate whose prompt and output "
                                 "lengths are not stated: not replayable")  # fmt: skip
        if not out["not_priced"]:
            out["not_priced"] = (
                "serving benchmark (request stream, runtime-chosen batching): needs the serving simulator"
            )
        yield out


# AIConfigurator's quant modes -> ridgeline weight formats (data/quant_formats.csv)
_AIC_QUANT = {"fp8": "fp8", "fp8_block": "fp8_block128", "nvfp4": "nvfp4", "int4_wo": "int4_g128"}


@functools.cache
def _ships_quantized(model: str) -> Optional[str]:
    """The checkpoint's own quantisation method (None: unquantised)."""
    from ..models.config import Model

    q = Model.from_config(model).quantization
    return str(q.get("quant_method") or "unknown") if q else None


def _keeps_checkpoint_formats(model: str, label: str) -> bool:
    """Whether a run labelled ``label`` by AIConfigurator ran the checkpoint's own formats: yes for
    a quantised checkpoint, except an nvfp4 run of one not in mxfp4. AIC labels gpt-oss's MXFP4
    experts nvfp4; the NVFP4 runs of DeepSeek-R1/V3, MiniMax-M2.5 and Kimi-K2.5 ran NVIDIA's NVFP4
    checkpoints of them (nvidia/*-NVFP4 in shared/data/aic/model_configs), not the fp8 / int4 ones."""
    method = _ships_quantized(model)
    if method is None:
        return False
    return not (label == "nvfp4" and method != "mxfp4")


@functools.cache
def _is_moe(model: str) -> bool:
    from ..models.config import Model

    return bool(Model.from_config(model).is_moe)


def silicon_concurrency(r: dict[str, str]) -> tuple[Optional[int], Optional[str]]:
    """A silicon_calibration.csv run's concurrency (requests in flight), or why it cannot be read.
    The benchmark's own record, ``silicon_concurrency`` in the source, is the concurrency;
    ``batch_size`` states the same figure (the file's README), except in attention-DP runs where it
    is one DP rank's batch (silicon_concurrency = batch_size x attention_dp_size in 137 of the 138
    such runs shipped; the other states the concurrency in both). Where the two disagree otherwise,
    as in 13 TensorRT-LLM runs whose silicon_concurrency is 2-32x batch_size with attention_dp_size
    blank or 1, the run's layout is not stated and it is left unpriced, never given a default; so
    is a run stating neither."""
    m = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
    sc, bs, adp = int(m.group(1)) if m else None, _int(r["batch_size"]), r["attention_dp_size"].strip()
    if sc is None and bs is None:
        return None, "concurrency not stated (batch_size blank and no silicon_concurrency in its source)"
    if sc is None or bs is None or sc == bs or (adp and sc == bs * int(adp)):
        return (sc if sc is not None else bs), None
    return None, (f"concurrency stated twice and disagreeing: silicon_concurrency {sc}, batch_size {bs}, "
                  f"attention_dp_size {adp or 'blank'}")  # fmt: skip


def _silicon(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """AIConfigurator's silicon_calibration.csv: closed-loop serving runs (batch_size requests in
    flight, each isl prompt and osl output tokens). One row per measured metric: ttft_ms and
    tpot_ms. TPOT is priced as the steady-state decode step at the run's concurrency with the
    contexts spread over isl .. isl+osl (the plan's decode average); TTFT only at concurrency 1
    (above it, arrivals and chunked prefill among running decodes set it: the serving simulator)."""
    for i, r in enumerate(rows, start=2):
        moe = (r["moe_quant_mode"] or "").strip()
        gemm = (r["gemm_quant_mode"] or "").strip()
        adp, mtp, mep, tp = (_int(r[k]) or 1 for k in ("attention_dp_size", "moe_tp_size", "moe_ep_size", "tp_size"))
        conc, why = silicon_concurrency(r)
        if why is None and r["mode"] != "agg":
            why = "prefill/decode-disaggregated run (mode disagg): needs the serving simulator"
        # attention DP: tp_size ranks a group, attention_dp_size groups each serving its share of
        # the concurrency, the routed experts over all of them (moe_tp x moe_ep = tp x adp)
        moe_split = None if mtp * mep == tp * adp else (
            f"MoE TP {mtp} x EP {mep} under attention TP {tp} x DP {adp}: the engine's MoE spans the group"
        )  # fmt: skip
        base = {
            "source": f"AIConfigurator silicon_calibration.csv ({r['silicon_data_source']})",
            "file_hardware": r["system"], "file_model": r["model_path"], "runtime": r["backend"],
            "runtime_version": r["backend_version"] or None, "tp": tp, "pp": _int(r["pp_size"]) or 1,
            "ep": mep if mep > 1 else None, "prompt_tokens": _int(r["isl"]),
            # one attention-DP rank's share of the requests in flight
            "batch": None if conc is None else -(-conc // adp),
            "flags": f"attention_dp={adp}" if adp > 1 else None,
            "output_tokens": _int(r["osl"]), "depth": 0,
            # the checkpoint's own formats where the model ships quantised weights of its own kind
            "weight_quant": _AIC_QUANT.get(moe or gemm) if (moe or gemm) else None,
            "notes": f"AIC run {r['id']}; concurrency {conc or '-'}; precision {r['precision'] or '-'}, "
                     f"gemm {gemm or '-'}, moe {moe or '-'}; "
                     f"KV dtype not stated (the plan's default)",
        }  # fmt: skip
        for metric, col in (("ttft_ms", "silicon_ttft_ms"), ("tpot_ms", "silicon_tpot_ms")):
            out = _row(file, i, **base, phase="prefill" if metric == "ttft_ms" else "decode", metric=metric,
                       value=float(r[col]), unit="ms")  # fmt: skip
            out["id"] += f":{metric}"
            if out["model"] and _keeps_checkpoint_formats(out["model"], moe or gemm):
                # the checkpoint's own formats (gpt-oss: MXFP4 experts), not AIC's label for them
                out["weight_quant"] = None
            if why is None and moe_split and out["model"] and _is_moe(out["model"]):
                why_row: Optional[str] = moe_split
            elif why is None and metric == "ttft_ms" and conc is not None and conc > 1:
                why_row = _TTFT_UNDER_LOAD
            else:
                why_row = why
            if why_row and not out["not_priced"]:
                out["not_priced"] = why_row
            yield out


def _gemm(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """GEMM throughput: best-shape MAMF and per-shape linear-layer kernel times."""
    for i, r in enumerate(rows, start=2):
        dtype = {"fp8_e4m3fn": "fp8"}.get(r["dtype"], r["dtype"])
        yield _row(
            file, i, source=r["source"], file_hardware=r["hardware"], runtime="torch", phase="op", dtype=dtype,
            gemm_m=_int(r["M"]), gemm_n=_int(r["N"]), gemm_k=_int(r["K"]), op="gemm", metric="gemm_tflops",
            value=float(r["achieved_TFLOPS"]), unit="TFLOPS", notes=f"{r['op_context']}; {r['note']}",
        )  # fmt: skip


def _allreduce(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """op_allreduce_busbw.csv: nccl-tests / torch all_reduce bus bandwidth vs size."""
    for i, r in enumerate(rows, start=2):
        m = re.search(r"devices_per_node=(\d+)", r["interconnect"])
        ranks, nodes = int(r["num_gpus"]), int(r["num_nodes"])
        dpn = int(m.group(1)) if m else (ranks // nodes)
        yield _row(
            file, i, source=r["source"], file_hardware=r["hardware"], op="allreduce", ranks=ranks, nodes=nodes,
            devices_per_node=dpn, size_bytes=float(r["size_bytes"]), metric="allreduce_busbw_gbs",
            value=float(r["busbw_GBps"]), unit="GB/s", runtime=r["library_tool"],
            notes=f"{r['interconnect']}; {r['dtype']}; time {r['time_us']} us; {r['note']}",
        )  # fmt: skip


_COPY_KINDS = (
    ("device_to_device_bidirectional", "copy_bidirectional_gbs"),
    ("device_to_device_memcpy", "link_unidirectional_gbs"),
    ("device_to_device", "copy_gbs"),
    ("host_to_device", "host_link_gbs"),
    ("device_to_host", "host_link_gbs"),
    ("send/recv", "sendrecv_busbw_gbs"),
)


def _memory_link(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """op_memory_link_bandwidth.csv: bandwidthTest / nvbandwidth / nccl sendrecv."""
    for i, r in enumerate(rows, start=2):
        kind = r["direction_or_kernel"]
        metric = next((m for k, m in _COPY_KINDS if kind.startswith(k)), None)
        size = float(r["transfer_size_bytes"]) if r["transfer_size_bytes"] else None
        out = _row(
            file, i, source=r["source"], file_hardware=r["hardware"], op=kind, size_bytes=size,
            metric=metric or "unknown", value=float(r["value"]), unit=r["unit"], runtime=r["test"],
            notes=r["note"], ranks=2 if metric in ("link_unidirectional_gbs", "copy_bidirectional_gbs",
                                                  "sendrecv_busbw_gbs") else None,
        )  # fmt: skip
        if metric is None:
            out["not_priced"] = f"unrecognised kernel '{kind}'"
        elif "C2C" in kind:
            out["op"] = kind
        yield out


_INT_COLUMNS = frozenset({"tp", "pp", "ep", "batch", "prompt_tokens", "output_tokens", "depth", "ranks", "nodes",
                          "devices_per_node", "gemm_m", "gemm_n", "gemm_k"})  # fmt: skip


def _unified(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """Rows already in the unified schema (``COLUMNS``; the ``benchmarks`` table written out, or
    a user's own): ``hardware`` a device name (``import_file`` resolves it), ``model``
    a bundled model; a row's own ``id`` and ``not_priced`` are kept."""
    for i, r in enumerate(rows, start=2):
        out: Row = {c: None for c in COLUMNS}
        for c in COLUMNS:
            v = (r.get(c) or "").strip()
            if v == "":
                continue
            if c in _INT_COLUMNS:
                out[c] = _int(v)
                if out[c] is None:
                    out["not_priced"] = f"{c}: '{v}' is not a whole number"
            elif c in ("value", "size_bytes"):
                try:
                    out[c] = float(v)
                except ValueError:
                    out["not_priced"] = f"{c}: '{v}' is not a number"
            else:
                out[c] = v
        out["id"] = out["id"] or f"{file.rsplit('/', 1)[-1].rsplit('.', 1)[0]}:{i}"
        out["file"] = file
        out["file_hardware"] = out["file_hardware"] or out["hardware"]
        if out["value"] is None and not out["not_priced"]:
            out["not_priced"] = "no value"
        yield out


# Header fingerprints -> importer.
FORMATS: dict[frozenset[str], Callable[[str, Iterable[dict[str, str]]], Iterable[Row]]] = {
    frozenset({"num_gpus", "num_nodes", "busbw_GBps", "size_bytes"}): _allreduce,
    frozenset({"direction_or_kernel", "transfer_size_bytes", "value", "unit"}): _memory_link,
    frozenset({"test", "kv_depth_tokens", "quant", "gen_tokens"}): _llamacpp_bench,
    frozenset({"tool", "kv_depth_tokens", "metric", "params_B"}): _dgx_spark,
    frozenset({"table", "num_gpus", "parallelism", "status"}): _xiongjiedai,
    frozenset({"trtllm_version", "batch_or_concurrency", "request_rate_qps"}): _trtllm_latency,
    frozenset({"trtllm_version", "ep_note", "scenario"}): _trtllm_throughput,
    frozenset({"vllm_version", "concurrency_or_batch", "request_rate"}): _vllm,
    frozenset({"M", "N", "K", "achieved_TFLOPS"}): _gemm,
    frozenset({"silicon_ttft_ms", "silicon_tpot_ms", "backend", "mode"}): _silicon,
    # last: the source formats above share some of these names, none has all of them
    frozenset({"hardware", "runtime", "model", "metric", "value", "unit", "phase"}): _unified,
}


def import_file(path: str, text: Optional[str] = None, catalog: Any = None) -> list[Row]:
    """Rows of one benchmark file in the unified schema; the format is recognised by its header,
    each row's device resolved in ``catalog`` (default: the shipped one; ``_identify_devices``).

    A file that is not a table of rows (empty, a header alone, a row wider or narrower than
    the header, a cell its importer cannot read) is a CatalogError naming the file and line.

    >>> import_file("mine.csv", "hardware,runtime,model,metric,value,unit,phase\\n")
    Traceback (most recent call last):
    ...
    ridgeline.errors.CatalogError: mine.csv: a header and no rows
    """
    from ..errors import RidgelineError

    text = _data.read_text(path) if text is None else text
    unified = ", ".join(sorted(next(k for k, f in FORMATS.items() if f is _unified)))
    if not text.strip():
        raise CatalogError(f"{path}: empty; a rows file is a CSV whose header has at least {unified}")
    reader = csv.DictReader(io.StringIO(text))
    try:
        names = list(reader.fieldnames or [])
    except csv.Error as e:
        raise CatalogError(f"{path}: line {reader.line_num}: not CSV ({e})") from None
    header = set(names)
    for keys, importer in FORMATS.items():
        if keys <= header:
            try:
                rows = list(importer(path, _even_rows(path, reader, len(names))))
            except RidgelineError:
                raise
            except csv.Error as e:
                raise CatalogError(f"{path}: line {reader.line_num}: not CSV ({e})") from None
            except KeyError as e:
                raise CatalogError(f"{path}: line {reader.line_num}: no column {e.args[0]!r}") from None
            except (ValueError, TypeError, IndexError) as e:
                raise CatalogError(f"{path}: line {reader.line_num}: cannot read the row ({e})") from None
            if not rows:
                raise CatalogError(f"{path}: a header and no rows")
            _identify_devices(rows, catalog)
            return rows
    shown = [repr(h) if not h.isprintable() else h for h in sorted(header)[:20]]
    more = f", ... ({len(header)} names)" if len(header) > 20 else ""
    raise CatalogError(
        f"{path}: unrecognised benchmark format (header: {', '.join(shown)}{more}); a user's rows file "
        f"has at least the columns {unified} (the unified schema)"
    )


def _even_rows(path: str, reader: Any, width: int) -> Iterable[dict[str, str]]:
    """The rows of a CSV reader, refusing one with more or fewer fields than the header."""
    for r in reader:
        extra = r.get(None)
        if extra or any(v is None for k, v in r.items() if k is not None):
            n = width + len(extra) if extra else sum(v is not None for k, v in r.items() if k is not None)
            raise CatalogError(f"{path}: line {reader.line_num} has {n} fields, the header {width}")
        yield r


def identify_device(file_hardware: str, catalog: Any = None) -> tuple[Optional[str], Optional[int], str]:
    """The catalog device a benchmark file's device name names, the device count written with
    it, and why not where none: hardware_map.csv's curated names (a source's own judgement,
    with its note), else the catalog's names (``names.DeviceIndex.identify``: a name or alias,
    or a name as people write it that names one device whose stated fields agree; never a
    closest match). ``catalog``: a ``Catalog`` (default: the shipped one)."""
    index = names.shipped_devices() if catalog is None else catalog.name_index
    try:
        name, count = index.identify(file_hardware, _curated_hardware())
    except UnknownNameError as e:
        return None, None, str(e)
    return name, count, ""


@functools.lru_cache(maxsize=1)
def _curated_hardware() -> dict[str, str]:
    return {k: v[0] for k, v in hardware_map().items()}


def _identify_devices(rows: list[Row], catalog: Any) -> None:
    """Resolves each row's device (a unified row's ``hardware``, else the file's name for it):
    a row whose name names none is not priced, with the resolver's reason; a name resolved other
    than by a curated or catalog name says so in the notes; a device count written with the name
    ("3090 24GB * 2") must be the plan's (TP x PP) where the row is a model run."""
    index = names.shipped_devices() if catalog is None else catalog.name_index
    curated = _curated_hardware()
    for r in rows:
        given = str(r["hardware"] or r["file_hardware"])
        name, count, why = identify_device(given, catalog)
        r["hardware"] = name
        if name is None:
            r["not_priced"] = r["not_priced"] or why
            continue
        body = names.split_count(given)[0]
        if body not in curated and index.find(body) is None:
            said = f"hardware '{given}' matched by name to {name}"
            r["notes"] = "; ".join(x for x in (r["notes"], said) if x)
        plan = (r["tp"] or 1) * (r["pp"] or 1)
        if count is not None and r["op"] is None and r["model"] is not None and count != plan and not r["not_priced"]:
            r["not_priced"] = f"hardware '{given}' states {count} devices, the row's plan {plan} (TP x PP)"


@functools.lru_cache(maxsize=1)
def exclusions() -> dict[str, str]:
    """Row id -> why it is kept out of fitting and validation (data/benchmarks/exclusions.csv)."""
    text = _data.read_text("data/benchmarks/exclusions.csv")
    return {r["id"]: r["reason"] for r in csv.DictReader(io.StringIO(text))}


SIDE_FILES = ("hardware_map.csv", "model_map.csv", "exclusions.csv", "trtllm_bench_requests.csv", "power_mlenergy.csv")


def trtllm_bench_requests() -> dict[tuple[int, int], int]:
    """(input, output tokens) -> the requests TensorRT-LLM's throughput tables were measured with
    (data/benchmarks/trtllm_bench_requests.csv, from its perf-overview)."""
    text = _data.read_text("data/benchmarks/trtllm_bench_requests.csv")
    return {(int(r["input_tokens"]), int(r["output_tokens"])): int(r["num_requests"])
            for r in csv.DictReader(io.StringIO(text))}  # fmt: skip


def shipped_rows() -> list[Row]:
    out = []
    for path in sorted(_data.list_files("data/benchmarks/")):
        if path.endswith(".csv") and not path.endswith(SIDE_FILES):
            out.extend(import_file(path))
    excluded = exclusions()
    for r in out:
        if r["id"] in excluded and not r["not_priced"]:
            r["not_priced"] = f"excluded: {excluded[r['id']]}"
    return out
