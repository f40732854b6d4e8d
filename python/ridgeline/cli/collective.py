"""``ridgeline collective``: one collective's time on a device's links."""

from __future__ import annotations

import json
from typing import Optional

import click

from .group import cli


@cli.command()
@click.option(
    "--op", default="allreduce", show_default=True, help="allreduce, allgather, reducescatter, alltoall, sendrecv."
)
@click.option("--ranks", type=int, required=True, help="Devices in the group.")
@click.option(
    "--size", default="4MiB", show_default=True, help="Message size (the full buffer): 4MiB, 1GiB, 65536, ..."
)
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@click.option("--devices-per-node", type=int, default=None, help="Devices per node (default: catalog).")
@click.option("--scaleout-gbs", type=float, default=None, help="Scale-out GB/s per device per direction.")
@click.option("--scaleout-latency-us", type=float, default=None, help="Scale-out per-hop latency in us.")
@click.option("--sweep-sizes", is_flag=True, help="Sweep sizes 8 B .. 8 GiB by x2, as nccl-tests -b 8 -e 8G -f 2.")
@click.option(
    "--library", default="nccl", show_default=True,
    help="Whose all-reduce: nccl, or a runtime's own kernel measured on the device (vllm, sglang, trtllm).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
def collective(
    op: str,
    ranks: int,
    size: str,
    hardware: str,
    devices_per_node: Optional[int],
    scaleout_gbs: Optional[float],
    scaleout_latency_us: Optional[float],
    sweep_sizes: bool,
    library: str,
    as_json: bool,
) -> None:
    """Time, algBW and busBW of one collective (alpha-beta, NCCL protocol table, the device's
    measured floor, latency and efficiency)."""
    from ..engine.collectives import collective as run
    from ..engine.collectives import parse_size

    sizes = [2**k for k in range(3, 34)] if sweep_sizes else [parse_size(size)]
    r = run(op, ranks, sizes, hardware, devices_per_node=devices_per_node, scaleout_gbs=scaleout_gbs,
            scaleout_latency_us=scaleout_latency_us, library=library)  # fmt: skip
    if as_json:
        out = {k: v for k, v in r.__dict__.items() if k not in ("size_bytes", "time_s", "algbw_gbs", "busbw_gbs")}
        click.echo(json.dumps({**out, "notes": list(r.notes), "rows": r.rows()}, indent=2))
        return
    click.echo(f"{r.op} over {r.ranks} x {r.hardware} ({r.nodes} node{'s' if r.nodes > 1 else ''}, "
               f"{'hierarchical' if r.hierarchical else 'ring'}; topology: {r.topology}; "
               f"link {r.link_gbs_per_direction:g} GB/s per direction)")  # fmt: skip
    click.echo(f"  {'size (B)':>14} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for row in r.rows():
        click.echo(
            f"  {row['size_bytes']:>14,} {row['time_us']:>12.2f} {row['algbw_gbs']:>13.2f} {row['busbw_gbs']:>13.2f}"
        )
    for n in r.notes:
        click.echo(f"  note: {n}")
