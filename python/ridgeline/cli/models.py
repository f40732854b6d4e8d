"""``ridgeline model``: the bundled models listed and shown."""

from __future__ import annotations

import json
from typing import Any

import click

from .._fmt import table as _table
from .catalog import _frame_out
from .group import cli


@cli.group()
def model() -> None:
    """Bundled models and their normalised structure."""


@model.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def model_list(fmt: str) -> None:
    """List bundled models: family, architecture, parameters, KV bytes per token, max_model_len,
    whether the engine prices them and the towers (vision, audio) left out of the counts."""
    import polars as pl

    from ..errors import ModelConfigError
    from ..models.config import Model, bundled_names

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
                "architecture": m.architecture_class,
                "total_params_b": round(m.total_params / 1e9, 3),
                "active_params_b": round(m.active_params / 1e9, 3),
                "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token(2.0)),
                "max_model_len": m.max_model_len,
                "engine": "priced" if m.unpriced is None else f"not priced yet: {m.unpriced}",
                "not_counted": "; ".join(m.towers) or None,
            }
        )
    _frame_out(pl.DataFrame(rows), fmt)


@model.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def model_show(name: str, as_json: bool) -> None:
    """Show the normalised structure and parameter counts of a model."""
    from ..models.config import Model

    s = Model.from_config(name).summary()
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    flat = [(k, str(v)) for k, v in s.items() if k not in ("layer_groups", "params")]
    flat += [(f"params.{k}", f"{v:,}") for k, v in s["params"].items()]
    flat += [(f"layer_group[{i}]", json.dumps(g)) for i, g in enumerate(s["layer_groups"])]
    click.echo(_table(flat))
