"""estimate takes the host's step overhead and a request's front-end time as simulate does
(step_overhead_us, request_overhead_us): the same answer for a lone request (rule 7)."""

import pytest
import ridgeline
from ridgeline.errors import PlanError

LLAMA = "meta-llama/Llama-3.1-8B"


def test_a_given_step_overhead_is_paid_once_a_step():
    kw = {"prompt": 100, "output": 11, "runtime": "vllm"}
    a = ridgeline.estimate(LLAMA, "H100_SXM", step_overhead_us=0.0, **kw)
    b = ridgeline.estimate(LLAMA, "H100_SXM", step_overhead_us=1000.0, **kw)
    # one prefill step and ten decode steps, 1 ms each
    assert b.e2e_s - a.e2e_s == pytest.approx(11e-3, rel=1e-9)
    assert b.tpot_s - a.tpot_s == pytest.approx(1e-3, rel=1e-9)
    assert "step overhead given" in b.calibration_note
    c0 = ridgeline.estimate(LLAMA, "H100_SXM", request_overhead_us=0.0, **kw)
    c = ridgeline.estimate(LLAMA, "H100_SXM", request_overhead_us=5000.0, **kw)
    assert c.ttft_s - c0.ttft_s == pytest.approx(5e-3, rel=1e-9)


def test_estimate_and_simulate_agree_for_a_lone_request_at_a_given_overhead():
    kw = {"runtime": "vllm", "step_overhead_us": 700.0, "request_overhead_us": 2000.0}
    e = ridgeline.estimate(LLAMA, "H100_SXM", prompt=512, output=64, **kw)
    s = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=1, prompt=512, output=64, **kw)
    assert s.ttft_s["p50"] == pytest.approx(e.ttft_s, rel=1e-9)
    assert s.tpot_s["p50"] == pytest.approx(e.tpot_s, rel=1e-9)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True, "1"])
def test_a_step_overhead_that_is_not_a_time_is_refused_by_name(bad):
    with pytest.raises(PlanError, match="step_overhead_us"):
        ridgeline.estimate(LLAMA, "H100_SXM", step_overhead_us=bad)
