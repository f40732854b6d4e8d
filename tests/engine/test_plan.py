"""One Plan (issue 43): a plan's settings written once, as ``ridgeline.Plan``'s fields. The API's
keywords and the CLI's options are derived from them, and a Plan and its keywords give one
answer."""

import dataclasses
import inspect

import pytest
import ridgeline
from conftest import LLAMA
from ridgeline import Plan, PlanError
from ridgeline.cli import cli
from ridgeline.cli.options import PLAN_FIELD
from ridgeline.engine.plan import FIELDS, SIMULATE, setting

MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"


@pytest.mark.parametrize(
    ("model", "hardware", "settings"),
    [
        (LLAMA, "H100_SXM", {"tp": 2, "batch": 8}),
        (LLAMA, "L40S", {"prompt": 4000, "output": 64, "weight_dtype": "fp8", "calibrated": False}),
        (MIXTRAL, "H200_SXM", {"tp": 4, "ep": 4, "batch": 32, "routing_skew": 0.5, "price_per_hour": 3.0}),
        (LLAMA, "RTX_4090", {"runtime": "llamacpp-cuda", "weight_dtype": "q4_k_m", "kv_pad": 128, "prefix": 100}),
    ],
)
def test_a_plan_and_its_keywords_give_one_estimate(model, hardware, settings):
    a = ridgeline.estimate(model, hardware, plan=Plan(**settings))
    b = ridgeline.estimate(model, hardware, **settings)
    assert a.to_dict() == b.to_dict()
    # a keyword beside the plan that agrees with it, or is left at its default, changes nothing
    c = ridgeline.estimate(model, hardware, plan=Plan(**settings), **dict(list(settings.items())[:1]))
    assert c.to_dict() == a.to_dict()


def test_a_plan_field_beside_a_keyword_that_disagrees_is_refused():
    with pytest.raises(PlanError, match=r"tp: given as 4 beside plan= whose tp is 2"):
        ridgeline.estimate(LLAMA, "H100_SXM", plan=Plan(tp=2), tp=4)
    with pytest.raises(PlanError, match="plan: expected a ridgeline.Plan, got dict"):
        ridgeline.estimate(LLAMA, "H100_SXM", plan={"tp": 2})


def test_a_plan_checks_each_field_when_made():
    with pytest.raises(PlanError, match=r"tp: must be a whole number >= 1, got 0"):
        Plan(tp=0)
    with pytest.raises(PlanError, match="calibrated: must be True or False"):
        Plan(calibrated="no")
    with pytest.raises(PlanError, match="scaleout_gbs: must be a finite number > 0"):
        Plan(scaleout_gbs=0.0)
    p = Plan(batch=8.0, dtype="bfloat16", kv_dtype="FP8")
    assert (p.batch, type(p.batch), p.dtype, p.kv_dtype) == (8, int, "bf16", "fp8")
    assert p.changed() == {"batch": 8, "kv_dtype": "fp8"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tp = 2  # type: ignore[misc]


def test_every_plan_field_is_a_keyword_of_estimate_with_the_same_default():
    sig = inspect.signature(ridgeline.estimate).parameters
    assert {f.name: f.default for f in FIELDS} == {f.name: sig[f.name].default for f in FIELDS}
    sim = inspect.signature(ridgeline.simulate).parameters
    assert {k: sim[k].default for k in SIMULATE} == {f.name: f.default for f in FIELDS if f.name in SIMULATE}


def test_simulate_takes_a_plan_and_refuses_what_it_decides_itself():
    kw = {"concurrency": 2, "requests": 6, "prompt": 300, "output": 20}
    a = ridgeline.simulate(LLAMA, "H100_SXM", plan=Plan(tp=2, dtype="bf16", calibrated=False), **kw)
    b = ridgeline.simulate(LLAMA, "H100_SXM", tp=2, calibrated=False, **kw)
    assert a.to_dict() == b.to_dict()
    with pytest.raises(PlanError, match="plan: simulate does not take batch, dp"):
        ridgeline.simulate(LLAMA, "H100_SXM", plan=Plan(batch=4, dp=2), **kw)
    # pipeline stages it runs itself, as the plan's
    c = ridgeline.simulate(LLAMA, "H100_SXM", plan=Plan(pp=2, calibrated=False), **kw)
    assert c.devices == 2 and c.cluster["pools"][0]["pp"] == 2


def test_sweep_takes_a_plan_as_one_value_axes():
    grid = {"model": LLAMA, "hardware": "H100_SXM", "batch": [1, 8]}
    a = ridgeline.sweep(grid, plan=Plan(tp=2, weight_dtype="fp8", calibrated=False))
    b = ridgeline.sweep({**grid, "tp": [2], "weight_dtype": ["fp8"]}, calibrated=False)
    assert a.equals(b) and a.height == 2
    with pytest.raises(PlanError, match="plan: batch is set by both the grid and plan="):
        ridgeline.sweep(grid, plan=Plan(batch=4))
    with pytest.raises(PlanError, match="plan: sweep does not take kv_pad"):
        ridgeline.sweep(grid, plan=Plan(kv_pad=64))


def _options(command: str):
    ctx = cli.make_context("ridgeline", [command, "--help"], resilient_parsing=True)
    cmd = cli.get_command(ctx, command)
    return {p.name: p for p in cmd.params}


@pytest.mark.parametrize("command", ["estimate", "simulate", "sweep"])
def test_the_cli_options_of_a_plan_are_generated_from_its_fields(command):
    opts = _options(command)
    fields = [f for f in FIELDS if command in setting(f.name).commands]
    assert len(fields) >= (25 if command == "estimate" else 9)
    for f in fields:
        o = opts[f.name]
        s = setting(f.name)
        assert getattr(o, PLAN_FIELD, None) == f.name, f"--{f.name} of {command} is not generated from Plan"
        want = s.off_flag[1] if s.off_flag else (s.axis_help if command == "sweep" and s.axis_help else s.help)
        assert o.help.startswith(want)
        if command == "estimate":
            assert o.default == f.default
        if command == "simulate":
            assert o.default is None  # a scenario file's value stands unless the flag is given
        if command == "sweep" and s.axis_help:
            assert o.multiple
    # and no option of the command spells a plan field by hand
    hand = [n for n, o in opts.items() if n in {f.name for f in FIELDS} and not getattr(o, PLAN_FIELD, None)]
    assert hand == [] or (command == "simulate" and set(hand) == {"prompt", "output"})  # length distributions
