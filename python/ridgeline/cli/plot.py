"""``ridgeline plot``: figures of plans (roofline, waterfall, scaling, compare)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .group import cli
from .options import plan_options

#: The plan settings the plot commands share with estimate (the plan, not the runtime's knobs).
PLOT_PLAN = (
    "batch",
    "prompt",
    "output",
    "tp",
    "ep",
    "pp",
    "dtype",
    "weight_dtype",
    "kv_dtype",
    "runtime",
    "calibrated",
)


def _plot_plan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The model, the plan settings of ``PLOT_PLAN`` (from ``Plan``, as estimate shows them) and the figure."""
    opts = [
        click.option("--model", "-m", required=True, help="Bundled Hugging Face id, or a path to config.json."),
        plan_options("estimate", only=PLOT_PLAN),
        click.option("--out", "-o", required=True, help="The figure: a .png or .svg path."),
        click.option("--force", is_flag=True, help="Replace an existing --out file."),
        click.option("--allow-no-fit", is_flag=True,
                     help="Draw a plan that does not fit (its title says so) instead of failing (exit 4)."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


def _plot_estimate(hardware: str, kw: dict[str, Any], breakdown: bool = True) -> Any:
    from ..engine.estimate import estimate as run

    plan = {k: kw[k] for k in PLOT_PLAN}
    return run(kw["model"], hardware, **plan, breakdown=breakdown, allow_no_fit=kw["allow_no_fit"])


@cli.group()
def plot() -> None:
    """Figures of plans: roofline, decode waterfall, scaling curves, a comparison (PNG or SVG)."""


@plot.command("roofline")
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@_plot_plan_options
def plot_roofline(hardware: str, **kw: Any) -> None:
    """Each operator's arithmetic intensity and achieved FLOP/s, prefill and decode, under the device's roofs."""
    from .. import plot as figures

    click.echo(f"wrote {figures.save(figures.roofline(_plot_estimate(hardware, kw)), kw['out'], force=kw['force'])}")


@plot.command("waterfall")
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True)
@_plot_plan_options
def plot_waterfall(hardware: str, phase: str, **kw: Any) -> None:
    """A decode step's time (TPOT) by operator class, communication and overheads included."""
    from .. import plot as figures

    fig = figures.waterfall(_plot_estimate(hardware, kw), phase)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")


@plot.command("scaling")
@click.option("--hardware", "-H", "hardware", multiple=True, required=True, help="Device(s): one line each.")
@click.option("--over", type=click.Choice(["batch", "prompt", "output", "tp"]), required=True, help="The x axis.")
@click.option("--values", required=True, help="Its values: a list (1,2,4) or a range (1..256:x2).")
@_plot_plan_options
def plot_scaling(hardware: tuple[str, ...], over: str, values: str, **kw: Any) -> None:
    """TTFT, TPOT and throughput over batch, prompt, output or TP, one line per device."""
    from .. import plot as figures
    from ..sweeps.sweep import parse_axis

    plan = {k: kw[k] for k in PLOT_PLAN if k != over}
    fig = figures.scaling(kw["model"], list(hardware), over, parse_axis(over, values), **plan)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")


@plot.command("compare")
@click.option("--hardware", "-H", required=True, help="Device of the base plan.")
@click.option(
    "--vs", "plans", multiple=True, required=True,
    help="A plan to compare: KEY=VALUE[,KEY=VALUE] over the base plan (hardware, batch, prompt, output, tp, ep, "
    "pp, dtype, weight_dtype, kv_dtype, runtime); give it once for base-vs-one, or more.",
)  # fmt: skip
@_plot_plan_options
def plot_compare(hardware: str, plans: tuple[str, ...], **kw: Any) -> None:
    """Plans side by side: TTFT, TPOT, throughput and memory per device."""
    from .. import plot as figures
    from ..errors import PlanError

    ints = ("batch", "prompt", "output", "tp", "ep", "pp")
    keys = ("hardware", *ints, "dtype", "weight_dtype", "kv_dtype", "runtime")
    estimates = [_plot_estimate(hardware, kw, breakdown=False)]
    for spec in plans:
        over: dict[str, Any] = {}
        for item in filter(None, spec.split(",")):
            k, sep, v = item.partition("=")
            k = k.strip().replace("-", "_")
            if not sep or k not in keys:
                raise PlanError(f"--vs: '{item}' must be KEY=VALUE with KEY one of {', '.join(keys)}")
            try:
                over[k] = int(v) if k in ints else v.strip()
            except ValueError:
                raise PlanError(f"--vs: {k} takes a whole number, got {v!r}") from None
        hw = over.pop("hardware", hardware)
        estimates.append(_plot_estimate(hw, {**kw, **over}, breakdown=False))
    fig = figures.compare(estimates)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")
