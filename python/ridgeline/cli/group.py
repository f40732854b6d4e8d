"""The ``ridgeline`` command group every command module adds its commands to, and what they share."""

from __future__ import annotations

from typing import Optional

import click

GB = 1e9


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """ridgeline: how fast, how big and how costly is model M on hardware H under plan P."""
    ctx.obj = {"debug": debug}


def _ray_backend(ray_address: Optional[str]) -> str:
    """The backend an ``--ray`` gives; with one, Ray is importable (else how to install it, exit 2)."""
    if ray_address is None:
        return "local"
    from ..sweeps.cluster import import_ray

    import_ray()
    return "ray"
