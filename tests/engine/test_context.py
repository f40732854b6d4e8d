"""estimate --max-context (issue 46): the longest prompt is the last that fits (one more token does
not), the model's max_model_len caps it, and an FP8 KV cache holds about twice the KV tokens."""

import json

import ridgeline
from conftest import run
from ridgeline.engine.context import max_context

BIG = "meta-llama/Llama-3.1-70B"


def test_the_longest_prompt_is_the_last_that_fits():
    c = max_context(BIG, "H100_SXM", tp=2, batch=16, output=256)
    n = c["prompt_tokens"]
    assert c["limit"] == "memory" and 0 < n < c["max_model_len"]
    fits = [ridgeline.estimate(BIG, "H100_SXM", tp=2, batch=16, prompt=p, allow_no_fit=True).fits for p in (n, n + 1)]
    assert fits == [True, False]
    # FP8 halves the KV bytes a token (the activations, which grow with the prompt, stay): a longer one fits
    fp8 = c["alternatives"]["fp8"]
    kv = [ridgeline.estimate(BIG, "H100_SXM", tp=2, batch=16, prompt=n, kv_dtype=d).memory["kv_bytes"]
          for d in ("bf16", "fp8")]  # fmt: skip
    assert kv[1] * 2 == kv[0] and fp8 > 1.3 * n
    assert ridgeline.estimate(BIG, "H100_SXM", tp=2, batch=16, prompt=fp8, kv_dtype="fp8").fits


def test_the_model_caps_it_and_a_plan_that_cannot_fit_says_zero():
    c = max_context("meta-llama/Llama-3.1-8B", "H100_SXM", output=512)
    assert c == {**c, "limit": "model", "prompt_tokens": c["max_model_len"] - 512, "alternatives": {}}
    none = max_context(BIG, "H100_SXM", tp=1)
    assert none["prompt_tokens"] == 0 and none["limit"] == "memory"


def test_the_cli_prints_and_gives_it_as_json():
    r = run("estimate", "-m", BIG, "-H", "H100_SXM", "--tp", "2", "--batch", "16", "--max-context")
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("max context"))
    assert "bound: memory, KV bf16" in line and "with --kv-dtype fp8" in line
    d = json.loads(run("estimate", "-m", BIG, "-H", "H100_SXM", "--tp", "2", "--batch", "16", "--max-context",
                       "--json").stdout)  # fmt: skip
    assert d["max_context"] == max_context(BIG, "H100_SXM", tp=2, batch=16)


def test_bad_input_is_a_typed_error_naming_it():
    import pytest
    from ridgeline.errors import PlanError

    for kw, match in (({"output": "x"}, "output"), ({"output": 0}, "output"), ({"foo": 1}, "foo: not a plan setting")):
        with pytest.raises(PlanError, match=match):
            max_context("meta-llama/Llama-3.1-8B", "H100_SXM", **kw)
