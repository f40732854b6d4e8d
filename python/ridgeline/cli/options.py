"""The options several commands share, each declared once: the plan's settings, generated from the
fields of ``ridgeline.Plan`` (their help, unit, default and type), and the few switches of the
commands themselves (``--json``, ``--force``, ``--ray``, ``--include-bound``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, TypeVar

import click

from ..engine.plan import FIELDS, Setting

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute a generated option carries: the Plan field it came from (tests compare them).
PLAN_FIELD = "ridgeline_plan_field"

_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str}

#: vLLM's spellings of plan options (its engine arguments, docs.vllm.ai "Engine Arguments":
#: --tensor-parallel-size, --pipeline-parallel-size, --data-parallel-size, --quantization,
#: --kv-cache-dtype), taken as the same options for people coming from ``vllm serve``.
VLLM_ALIASES = {"tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size", "dp": "--data-parallel-size",
                "weight_dtype": "--quantization", "kv_dtype": "--kv-cache-dtype"}  # fmt: skip


def _type_of(f: dataclasses.Field[Any]) -> Any:
    """The click type of a field from its annotation (``Optional[int]`` and ``int`` are ints)."""
    ann = str(f.type)
    for name, t in _TYPES.items():
        if ann in (name, f"Optional[{name}]"):
            return t
    raise TypeError(f"plan field {f.name}: no CLI type for {ann}")  # a new field of a new kind: add it here


def plan_option(f: dataclasses.Field[Any], command: str) -> Callable[[F], F]:
    """The option of one plan field for ``command``: ``estimate`` shows the field's default;
    ``simulate`` leaves it unset (None) so a scenario file's value stands unless the flag is given;
    ``sweep`` takes several values, an axis."""
    s: Setting = f.metadata["setting"]
    decl = "--" + f.name.replace("_", "-")
    unset = command == "simulate"
    default = None if unset else f.default
    help = s.help
    # the unit names what the option takes: --prompt TOKENS, --scaleout-gbs GB/S
    unit = {"metavar": s.unit.upper()} if s.unit else {}
    if unset and f.default is not None and not isinstance(f.default, bool):
        help = f"{help} Default: {f.default}."
    kw: dict[str, Any]
    if command == "sweep" and s.axis_help is not None:
        kw = {"multiple": True, "help": s.axis_help or help, **unit}
    elif s.off_flag is not None:
        decl, off_help = s.off_flag
        kw = {"is_flag": True, "flag_value": False, "default": None if unset else True, "help": off_help}
    elif isinstance(f.default, bool):
        kw = {"is_flag": True, "default": None if unset else f.default, "help": help}
    elif str(f.type) == "Optional[bool]":
        decl = f"{decl}/--no-{decl[2:]}"
        kw = {"default": None, "help": help}
    else:
        kw = {"type": _type_of(f), "default": default, "show_default": default is not None, "help": help, **unit}
    alias = VLLM_ALIASES.get(f.name)
    option = click.option(decl, *((alias,) if alias and s.off_flag is None else ()), f.name, **kw)

    def mark(fn: F) -> F:
        out = option(fn)
        params: list[click.Parameter] = getattr(out, "__click_params__", [])
        setattr(params[-1], PLAN_FIELD, f.name)
        return out

    return mark


def plan_options(command: str, only: Optional[tuple[str, ...]] = None) -> Callable[[F], F]:
    """Every plan field ``command`` takes (``Setting.commands``), or the fields ``only``, as options
    in the Plan's order."""
    chosen = [f for f in FIELDS if (command in f.metadata["setting"].commands if only is None else f.name in only)]

    def apply(fn: F) -> F:
        for f in reversed(chosen):  # click lists options in the order their decorators are written
            fn = plan_option(f, command)(fn)
        return fn

    return apply


#: The rankings' option (sweep's summary, recommend): plans that rest on no calibration are kept
#: apart from calibrated ones unless asked.
INCLUDE_BOUND = click.option(
    "--include-bound", is_flag=True,
    help="Rank plans that rest on no calibration (basis bound: the efficiency-1 bound, an optimistic upper bound "
         "on speed) beside calibrated ones, marked; by default they are counted apart.",
)  # fmt: skip


#: The option of the commands whose work can run on a Ray cluster (sweep, simulate, recommend).
RAY = click.option(
    "--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
    help='Run the work as tasks on a Ray cluster: --ray alone starts one on this machine, --ray auto joins the '
         'running one (or RAY_ADDRESS), --ray HOST:PORT that one. Needs pip install "ridgeline[ray]".',
)  # fmt: skip
