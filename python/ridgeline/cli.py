"""The ``ridgeline`` command line: one command a function, errors through one handler."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import click

from .errors import RidgelineError, exit_code

GB = 1e9


def _ms(s: Optional[float]) -> str:
    return "n/a" if s is None else f"{s * 1e3:,.3f} ms"


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """ridgeline: how fast, how big and how costly is model M on hardware H under plan P."""
    ctx.obj = {"debug": debug}


DTYPES = "fp32, tf32, bf16, fp16 (weights and KV also fp8, int8)"


@cli.command()
@click.option(
    "--model", "-m", required=True, help="Bundled Hugging Face id, or a path to config.json / a model folder."
)
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias (see `ridgeline catalog list`).")
@click.option("--batch", type=int, default=1, show_default=True, help="Concurrent sequences.")
@click.option("--prompt", type=int, default=1024, show_default=True, help="Prompt tokens per sequence.")
@click.option("--output", type=int, default=256, show_default=True, help="Output tokens per sequence.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel degree (1 or --tp).")
@click.option("--dtype", default="bf16", show_default=True, help=f"Activation/compute dtype: {DTYPES}.")
@click.option(
    "--weight-dtype",
    default=None,
    help="Weight format: a dtype (bf16, fp8, int8), int4/w4a16, gptq, awq, mxfp4, nvfp4 or a GGUF type "
    "(q4_0, q4_k_m, q8_0, ...). Default: the checkpoint's quantization_config, else --dtype.",
)
@click.option("--kv-dtype", default=None, help="KV-cache dtype (default: --dtype).")
@click.option("--chunk", type=int, default=None, help="Chunked-prefill token budget per step.")
@click.option("--runtime", default=None, help="Runtime the numbers should describe (vllm, trtllm, llamacpp, ...).")
@click.option("--breakdown", is_flag=True, help="Print the per-operator breakdown.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (stable keys).")
@click.option("--allow-no-fit", is_flag=True, help="Report a plan that does not fit instead of failing (exit 4).")
def estimate(
    model: str,
    hardware: str,
    batch: int,
    prompt: int,
    output: int,
    tp: int,
    ep: int,
    dtype: str,
    weight_dtype: Optional[str],
    kv_dtype: Optional[str],
    chunk: Optional[int],
    runtime: Optional[str],
    breakdown: bool,
    as_json: bool,
    allow_no_fit: bool,
) -> None:
    """Estimate one plan: TTFT, TPOT, throughput, memory fit."""
    from .estimate import estimate as run

    e = run(
        model,
        hardware,
        batch=batch,
        prompt=prompt,
        output=output,
        tp=tp,
        ep=ep,
        dtype=dtype,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        chunk=chunk,
        runtime=runtime,
        allow_no_fit=allow_no_fit,
        breakdown=breakdown,
    )
    if as_json:
        click.echo(json.dumps(e.to_dict(breakdown=breakdown), indent=2))
        return
    p = e.plan
    mem = e.memory
    ep_text = f", EP {p['ep']}" if p["ep"] > 1 else ""
    click.echo(
        f"{e.model} on {e.hardware}: batch {p['batch']}, prompt {p['prompt']}, output {p['output']}, "
        f"TP {p['tp']}{ep_text}, {p['dtype']} "
        f"(weights {p['weights']} from {p['weights_source']}, KV {p['kv_dtype'] or p['dtype']})"
    )
    rows = [
        ("TTFT", _ms(e.ttft_s)),
        ("TPOT", _ms(e.tpot_s)),
        ("E2E latency", _ms(e.e2e_s)),
        ("throughput", f"{e.throughput_tok_s:,.1f} output tok/s (batch x output / E2E)"),
        ("prefill rate", f"{e.prefill_tok_s:,.0f} prompt tok/s"),
        ("MFU / MBU prefill", f"{e.prefill['mfu']:.3f} / {e.prefill['mbu']:.3f}"),
        ("MFU / MBU decode", f"{e.decode['mfu']:.3f} / {e.decode['mbu']:.3f}"),
        (
            "memory per device",
            f"{mem['total_bytes'] / GB:,.2f} GB = weights {mem['weights_bytes'] / GB:,.2f} "
            f"+ KV {mem['kv_bytes'] / GB:,.2f} + activations {mem['activation_bytes'] / GB:,.2f}",
        ),
        (
            "fits",
            f"{'yes' if e.fits else 'NO'} ({mem['budget_bytes'] / GB:,.1f} GB usable of "
            f"{mem['capacity_bytes'] / GB:,.1f} GB)",
        ),
        (
            "compute",
            f"{e.gemm_dtype} GEMMs, {e.attention_dtype} attention; peak {e.peak_tflops:,.1f} TFLOPS, "
            f"{e.memory_bw_gbs:,.0f} GB/s",
        ),
        ("calibration", f"{e.calibration}: {e.calibration_note}"),
        ("catalog", "verified" if e.verified else "verified = false (estimated: true)"),
    ]
    click.echo(_table(rows))
    for w in e.warnings:
        click.echo(f"  warning: {w}")
    if breakdown:
        click.echo("")
        click.echo(_breakdown_text(e.breakdown_rows()))


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


@cli.group()
def catalog() -> None:
    """The hardware catalog (DuckDB, built from data/hardware/*.csv)."""


def _frame_out(df: Any, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(df.to_dicts(), indent=2, default=str))
    elif fmt == "csv":
        click.echo(df.write_csv(), nl=False)
    else:
        import polars as pl

        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
            click.echo(str(df))


@catalog.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def catalog_list(fmt: str) -> None:
    """List devices with their dense peaks, memory and verified flag."""
    from .catalog import default_catalog

    df = default_catalog().sql(
        "SELECT name, vendor, arch, tflops_bf16, tflops_fp8, tflops_fp32, memory_gb, memory_bw_gbs, "
        "scaleup_bw_gbs, verified FROM hardware ORDER BY vendor, name"
    )
    _frame_out(df, fmt)


@catalog.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def catalog_show(name: str, as_json: bool) -> None:
    """Show one device row with its source."""
    from .catalog import default_catalog

    cat = default_catalog()
    canonical = cat.resolve(name)
    row = cat.sql("SELECT * FROM hardware WHERE name = ?", [canonical]).to_dicts()[0]
    aliases = cat.sql("SELECT alias FROM hardware_alias WHERE name = ? ORDER BY alias", [canonical])["alias"].to_list()
    row["aliases"] = aliases
    if as_json:
        click.echo(json.dumps(row, indent=2, default=str))
        return
    click.echo(_table([(k, "" if v is None else str(v)) for k, v in row.items()]))


@catalog.command("audit")
@click.option(
    "--format", "fmt", type=click.Choice(["summary", "csv", "json", "parquet"]), default="summary", show_default=True
)
@click.option(
    "--out", type=click.Path(dir_okay=False), default=None, help="Write the offending rows here (parquet needs it)."
)
def catalog_audit(fmt: str, out: Optional[str]) -> None:
    """Run every audit query; exit 1 when a must-pass audit returns rows."""
    import polars as pl

    from .catalog import default_catalog

    results = default_catalog().audit()
    failed = [n for n, _, must, df in results if must and df.height > 0]
    frames = []
    for name, question, must, df in results:
        status = "ok" if df.height == 0 else ("FAIL" if must else "info")
        click.echo(f"{name:<32} {df.height:>4} rows  {status:<4}  {question}", err=fmt != "summary")
        if df.height:
            frames.append(
                pl.DataFrame({"audit": [name] * df.height, "row": [json.dumps(r, default=str) for r in df.to_dicts()]})
            )
    allrows = (
        pl.concat(frames)
        if frames
        else pl.DataFrame({"audit": [], "row": []}, schema={"audit": pl.Utf8, "row": pl.Utf8})
    )
    if fmt == "parquet":
        if not out:
            raise click.UsageError("--format parquet needs --out PATH")
        allrows.write_parquet(out)
    elif fmt in ("csv", "json"):
        text = allrows.write_csv() if fmt == "csv" else json.dumps(allrows.to_dicts(), indent=2)
        if out:
            with open(out, "w") as fh:
                fh.write(text)
        else:
            click.echo(text)
    if failed:
        click.echo(f"audits failed: {', '.join(failed)}", err=True)
        sys.exit(1)


@catalog.command("sql")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def catalog_sql(query: str, fmt: str) -> None:
    """Run a read-only SQL query against the catalog database."""
    from .catalog import default_catalog

    _frame_out(default_catalog().sql(query), fmt)


@cli.group()
def model() -> None:
    """Bundled models and their normalised structure."""


@model.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def model_list(fmt: str) -> None:
    """List bundled models: family, parameters, KV bytes per token, max_model_len."""
    import polars as pl

    from .errors import ModelConfigError
    from .models import Model, bundled_names

    rows: list[dict[str, Any]] = []
    for name in bundled_names():
        try:
            m = Model.from_config(name)
        except ModelConfigError as e:
            rows.append({"model": name, "engine": f"config error: {e}"})
            continue
        rows.append(
            {
                "model": name,
                "family": m.model_type,
                "total_params_b": round(m.total_params / 1e9, 3),
                "active_params_b": round(m.active_params / 1e9, 3),
                "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token(2.0)),
                "max_model_len": m.max_model_len,
                "engine": "priced" if m.unpriced is None else f"not priced yet: {m.unpriced}",
            }
        )
    _frame_out(pl.DataFrame(rows), fmt)


@model.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def model_show(name: str, as_json: bool) -> None:
    """Show the normalised structure and parameter counts of a model."""
    from .models import Model

    s = Model.from_config(name).summary()
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    flat = [(k, str(v)) for k, v in s.items() if k not in ("layer_groups", "params")]
    flat += [(f"params.{k}", f"{v:,}") for k, v in s["params"].items()]
    flat += [(f"layer_group[{i}]", json.dumps(g)) for i, g in enumerate(s["layer_groups"])]
    click.echo(_table(flat))


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: every error ends as one line on stderr with its exit code."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="ridgeline", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except RidgelineError as e:
        if debug:
            raise
        click.echo(f"error: {e}", err=True)
        sys.exit(exit_code(e))
    except BaseException as e:  # a Rust panic arrives as PanicException (a BaseException)
        if isinstance(e, (SystemExit, KeyboardInterrupt)) or debug:
            raise
        click.echo(
            f"internal error (please report): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", err=True
        )
        sys.exit(70)


if __name__ == "__main__":
    main()
