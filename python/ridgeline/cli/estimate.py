"""``ridgeline estimate``: one plan, and the text that reports it."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from .._fmt import ms as _ms
from .._fmt import pct, sig
from .._fmt import table as _table
from .group import GB, cli
from .options import plan_options


@cli.command()
@click.option(
    "--model",
    "-m",
    required=True,
    help="Bundled model: its Hugging Face id or a name as written ('LLaMA 3.1 70B'; a suffix such as -FP8 sets "
    "the weights), or a path to config.json / a model folder.",
)
@click.option(
    "--hardware",
    "-H",
    required=True,
    help="Catalog device name or alias, or a name as written ('NVIDIA H100 SXM5 80GB') that names one device "
    "(see `ridgeline catalog list`).",
)
@plan_options("estimate")
@click.option("--breakdown", is_flag=True, help="Print the per-operator breakdown.")
@click.option(
    "--verbose", "-v", is_flag=True, help="Also print utilisation, the memory parts and the fitted parameters."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (stable keys).")
@click.option("--allow-no-fit", is_flag=True, help="Report a plan that does not fit instead of failing (exit 4).")
@click.option(
    "--max-context",
    is_flag=True,
    help="Also find the longest prompt that fits at this batch and output (and with an FP8 KV cache).",
)
@click.option("--emit", "emit_dir", default=None,
              help="Write this plan's launch files here: the runtime's serve command with the plan's TP, EP, "
                   "attention DP, formats and speculation, its batch as the clients, and a manifest "
                   "(as plan --emit).")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace existing --emit files.")
def estimate(
    model: str, hardware: str, breakdown: bool, verbose: bool, as_json: bool, allow_no_fit: bool,
    max_context: bool, emit_dir: Optional[str], force: bool, **plan: Any,
) -> None:  # fmt: skip
    """Estimate one plan: TTFT, TPOT, throughput, memory fit."""
    from ..engine.context import context_text
    from ..engine.context import max_context as longest
    from ..engine.estimate import estimate as run

    if emit_dir is not None:
        from ..launch import check_emit_dir

        check_emit_dir(emit_dir, force=force)
    e = run(model, hardware, allow_no_fit=allow_no_fit, breakdown=breakdown, **plan)
    ctx = longest(model, hardware, **plan) if max_context else None
    if emit_dir is not None:
        _emit(model, hardware, e, plan, emit_dir, force=force, quiet=as_json)
    if as_json:
        click.echo(json.dumps(e.to_dict(breakdown=breakdown) | ({"max_context": ctx} if ctx else {}), indent=2))
        return
    click.echo(_estimate_text(e, verbose))
    if ctx is not None:
        click.echo(f"  {'max context':12s} {context_text(ctx)}")
    if breakdown:
        click.echo("")
        click.echo(_breakdown_text(e.breakdown_rows()))


def _estimate_text(e: Any, verbose: bool) -> str:
    """The answer first (TTFT, TPOT, throughput, memory fit), then the plan, the runtime and the
    calibration one line each; the details and the fitted parameters under ``verbose``."""
    p, mem, held = e.plan, e.memory, e.held_out
    ep_text = "".join(f", {k.upper()} {p[k]}" for k in ("ep", "pp", "dp") if p[k] > 1)

    def ranged(phase: str, key: str, t: Optional[float]) -> str:
        if phase not in held or t is None:
            return _ms(t)
        lo, hi = held[phase][key]
        return f"{_ms(t)}   (80% of held-out rows: {sig(lo * 1e3)}-{sig(hi * 1e3)} ms)"

    fits = "fits" if e.fits else "does NOT fit"
    used, usable = sig(mem["total_bytes"] / GB), sig(mem["budget_bytes"] / GB)
    rows = [
        ("TTFT", ranged("prefill", "ttft_s", e.ttft_s)),
        ("TPOT", ranged("decode", "tpot_s", e.tpot_s)),
        *([("decode", f"{sig(e.decode_tok_s_per_user)} tok/s per user, {sig(e.decode_tok_s_per_gpu)} tok/s per "
                      "device (1 / TPOT; x the requests decoding together / devices)")]
          if e.decode_tok_s_per_user is not None and e.decode_tok_s_per_gpu is not None else []),
        ("throughput", f"{sig(e.throughput_tok_s)} output tok/s ({_throughput_basis(e)} {_ms(e.e2e_s)})"),
        ("memory", f"{used} GB per device of {usable} GB usable: {fits}" + _host_text(mem.get("host"))),
        ("power", _power_text(e.power)),
        ("cost", _cost_text(e.cost)),
        ("plan", f"batch {p['batch']}, prompt {p['prompt']}, output {p['output']}, TP {p['tp']}{ep_text}, "
                 f"{p['dtype']}; weights {p['weights']} ({p['weights_source']}), KV {p['kv_dtype'] or p['dtype']}"),
        ("runtime", f"{e.runtime_note}; --runtime chooses, --uncalibrated gives the bound"),
        *([("speculation", _speculation_text(p["speculation"]))] if p.get("speculation") else []),
        *([("offload", p["offload"]["label"])] if p.get("offload") else []),
        ("calibration", f"{e.calibration}: {e.calibration_note}" + (f"; {_held_out_text(held)}" if held else "")),
        ("catalog", "verified" if e.verified else "verified = false (estimated: true)"),
    ]  # fmt: skip
    if verbose:
        rows[4:4] = [
            ("E2E latency", _ms(e.e2e_s)),
            ("prefill rate", f"{sig(e.prefill_tok_s)} prompt tok/s"),
            ("MFU / MBU prefill", f"{pct(e.prefill['mfu'])} / {pct(e.prefill['mbu'])}"),
            ("MFU / MBU decode", f"{pct(e.decode['mfu'])} / {pct(e.decode['mbu'])}"),
            ("memory parts", f"{sig(mem['total_bytes'] / GB)} GB = weights {sig(mem['weights_bytes'] / GB)} "
             f"+ KV {sig(mem['kv_bytes'] / GB)}"
             + (f" + linear-attention state {sig(mem['state_bytes'] / GB)}" if mem.get("state_bytes") else "")
             + f" + activations {sig(mem['activation_bytes'] / GB)}; {sig(mem['budget_bytes'] / GB)} GB usable of "
             f"{sig(mem['capacity_bytes'] / GB)} GB = {sig(mem['capacity_bytes'] / 2**30)} GiB"),
            ("compute", f"{e.gemm_dtype} GEMMs, {e.attention_dtype} attention; peak {sig(e.peak_tflops, 4)} TFLOPS, "
             f"{sig(e.memory_bw_gbs, 4)} GB/s"),
        ]  # fmt: skip
        if e.plan["from_runtime"]:
            rows.insert(rows.index(next(r for r in rows if r[0] == "runtime")) + 1, ("execution", _execution_text(e)))
        at = rows.index(next(r for r in rows if r[0] == "calibration")) + 1
        rows[at:at] = [(f"  {name}", value) for name, value in e.fitted]
        if held:
            rows.insert(at + len(e.fitted), ("held out", _held_out_counts(held)))
    lines = [f"{e.model} on {e.hardware}", _table(rows)]
    lines += [f"  warning: {w}" for w in e.warnings]
    return "\n".join(lines)


def _host_text(h: Any) -> str:
    """The host's tier of an offloading plan's memory ("" without one)."""
    if not h:
        return ""
    kv = f" + KV {sig(h['kv_bytes'] / GB)} GB" if h["kv_bytes"] else ""
    return f"; host memory {sig(h['weights_bytes'] / GB)} GB of weights{kv} (of {sig(h['capacity_bytes'] / GB)} GB)"


def _speculation_text(s: Any) -> str:
    """The method, its drafter, its depth and its acceptance length with where it comes from."""
    by = f" by {s['drafter']}" if s["drafter"] else " (drafts looked up on the host, not priced)"
    return (f"{s['method']}{by}, {s['draft_tokens']} draft tokens a step, acceptance length "
            f"{s['acceptance_length']:.3g} ({s['acceptance']})")  # fmt: skip


def _cost_text(c: Any) -> str:
    """Cost per million output tokens and per request at the price used, and where it came from."""
    if "missing" in c:
        return f"missing: {c['missing']}"
    from ..engine.cost import offer_text

    o = c.get("offer")
    where = offer_text(o)
    rng = c.get("on_demand_usd_per_device_hour")
    spread = f"; {rng['offers']} on-demand offers ${sig(rng['min'])}-{sig(rng['max'])}" if rng and o else ""
    keys = ("usd_per_million_output_tokens", "usd_per_million_tokens", "usd_per_request", "usd_per_device_hour")
    per_m, per_all, per_req, price = (sig(c[k]) for k in keys)
    return (f"${per_m} per million output tokens (${per_all} per million tokens in and out), ${per_req} a request, "
            f"at ${price} per device-hour x "
            f"{c['devices']} ({where}{spread})")  # fmt: skip


def _power_text(pw: Any) -> str:
    """Watts per device per phase and joules per output token, or why power is missing."""
    if "missing" in pw:
        return f"missing: {pw['missing']}"
    return (f"{sig(pw['prefill']['watts'])} W prefill, {sig(pw['decode']['watts'])} W decode per device "
            f"(idle {sig(pw['idle_w'])}, TDP {sig(pw['tdp_w'])}); {sig(pw['energy_per_output_token_j'])} J per "
            "output token; `ridgeline validate --power` for its error")  # fmt: skip


def _held_out_text(held: Any) -> str:
    """Where the TTFT and TPOT ranges come from, in words."""
    runtime = next(iter(held.values()))["runtime"]
    from ..engine.runtimes import KERNEL_RUNTIMES

    if runtime in KERNEL_RUNTIMES:
        return f"ranges: where 80% of {runtime}'s serving runs fell, each device priced with the other's step overhead"
    return f"ranges: where 80% of {runtime}'s measured rows fell on devices left out of its fit"


def _held_out_counts(held: Any) -> str:
    """The rows and devices behind the held-out ranges, and their file."""
    from ..engine.runtimes import KERNEL_RUNTIMES

    counts = [
        f"{held[ph]['rows']} {ph} rows on {held[ph]['devices']} devices" for ph in ("prefill", "decode") if ph in held
    ]
    kernel = next(iter(held.values()))["runtime"] in KERNEL_RUNTIMES
    return f"{', '.join(counts)} (data/calibration/{'kernel_holdout' if kernel else 'holdout'}.csv)"


def _execution_text(e: Any) -> str:
    """What the plan took from its runtime's way of running (``runtime_execution``)."""
    p = e.plan
    said = {
        "chunk": f"prompt in {p['chunk']}-token steps",
        "kv_pad": f"decode reads the KV cache padded to {p['kv_pad']} cells",
        "swa_cache_extra": f"sliding-window cache window + {p['swa_cache_extra']} cells",
        "kv_skip_masked_tail": "over several sequences trailing masked KV tiles skipped",
        "decode_graphs": "one-token decode steps replayed from a CUDA graph",
    }
    parts = [said[k] for k in p["from_runtime"]]
    return f"{p['runtime']}: {', '.join(parts)}; a flag given overrides"


def _throughput_basis(e: Any) -> str:
    p, par = e.plan, e.parallel
    if p["pp"] > 1:
        basis = f"GPipe: {par['microbatches']} micro-batches over {p['pp']} stages of {par['stage_layers']} layers"
    else:
        basis = "batch x output / E2E"
    return basis + (f", x {p['dp']} replicas" if p["dp"] > 1 else "")


def _breakdown_text(rows: list[dict[str, Any]]) -> str:
    head = (
        f"  {'phase':<8} {'op':<20} {'layers':<34} {'GFLOP':>12} {'MB':>12} {'time ms':>10} {'bound':<8} {'FLOP/B':>8}"
    )
    lines = [head]
    for r in rows:
        inten = "" if r["intensity"] is None else f"{r['intensity']:.1f}"
        lines.append(
            f"  {r['phase']:<8} {r['op']:<20} {r['layer_group']:<34} {r['flops'] / 1e9:>12,.2f} "
            f"{r['bytes'] / 1e6:>12,.2f} {r['time_s'] * 1e3:>10.4f} {r['bound']:<8} {inten:>8}"
        )
    return "\n".join(lines)


def _emit(model: str, hardware: str, e: Any, plan: dict[str, Any], emit_dir: str, *, force: bool, quiet: bool) -> None:
    """The plan's launch files: one replica serving ``batch`` clients (its copies: ``dp``), through
    the simulator so the scheduler's settings are the runtime's."""
    from ..engine.plan import SIMULATE
    from ..errors import PlanError
    from ..launch import launch_config

    if plan.get("offload") is not None:
        raise PlanError("--emit: an offloading plan's launch files are not written (the host placement has no "
                        "serve flags here); drop --offload or --emit")  # fmt: skip
    kw = {k: v for k, v in plan.items() if k in SIMULATE and v is not None}
    batch = int(e.plan["batch"])
    lc = launch_config(model, hardware, copies=int(e.plan.get("dp", 1)), concurrency=batch,
                       requests=max(32, 3 * batch), **kw)  # fmt: skip
    paths = lc.write(emit_dir, force=force)
    click.echo(f"{lc.runtime} {lc.version} launch files in {paths[0].parent}", err=quiet)
