"""The longest prompt a plan admits (``estimate --max-context``): the largest prompt whose weights,
KV cache and activations fit each device at the plan's batch and output, found on the same
estimate every door uses (a bisection over the prompt, each step an ``estimate``), capped by the
model's own ``max_model_len``; and the same with a KV format that holds more tokens (FP8, where
the plan's KV is wider), so a user sees what would make a longer one fit."""

from __future__ import annotations

from typing import Any, Optional

from ..errors import PlanError
from ..models.config import Model

#: KV formats tried beside the plan's, narrowest last: what would let a longer prompt fit.
KV_ALTERNATIVES = ("fp8",)


def max_context(model: Any, hardware: Any, **plan: Any) -> dict[str, Any]:
    """``{"prompt_tokens", "limit", "max_model_len", "kv_dtype", "alternatives"}``: the longest prompt
    that fits with the plan's output and batch (0 where even one token does not), whether memory or
    the model's ``max_model_len`` bounds it, and for each narrower KV format its own longest prompt.

    >>> c = max_context("meta-llama/Llama-3.1-8B", "H100_SXM")
    >>> c["limit"], c["prompt_tokens"] + 256 == c["max_model_len"]
    ('model', True)
    """
    from .. import _checks
    from .estimate import estimate
    from .plan import NAMES

    unknown = sorted(set(plan) - set(NAMES) - {"catalog"})
    if unknown:
        raise PlanError(f"{unknown[0]}: not a plan setting (estimate's plan keywords: see ridgeline.Plan)")
    m = model if isinstance(model, Model) else Model.from_config(model)
    out_tokens = _checks.whole("output", plan.get("output", 256), 1)
    cap = int(m.max_model_len) - out_tokens
    if cap < 1:
        raise PlanError(f"output: {out_tokens} tokens leave no prompt within max_model_len {m.max_model_len}")
    plan = {k: v for k, v in plan.items() if k != "prompt"}

    def longest(kv: Optional[str]) -> tuple[int, str]:
        def fits(n: int) -> bool:
            kw = {**plan, "kv_dtype": kv} if kv is not None else plan
            return bool(estimate(m, hardware, prompt=n, allow_no_fit=True, **kw).fits)

        if fits(cap):
            return cap, "model"
        if not fits(1):
            return 0, "memory"
        lo, hi = 1, cap  # fits(lo), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo, "memory"

    base = estimate(m, hardware, prompt=1, allow_no_fit=True, **plan)
    kv_now = str(base.plan.get("kv_dtype") or base.plan.get("dtype"))
    tokens, limit = longest(plan.get("kv_dtype"))
    alternatives = {}
    if limit == "memory":
        for kv in KV_ALTERNATIVES:
            if kv != kv_now and not kv_now.startswith(kv):
                alternatives[kv] = longest(kv)[0]
    return {"prompt_tokens": tokens, "output_tokens": out_tokens, "batch": int(base.plan["batch"]), "limit": limit,
            "max_model_len": int(m.max_model_len), "kv_dtype": kv_now, "alternatives": alternatives}  # fmt: skip


def context_text(c: dict[str, Any]) -> str:
    """One line: the longest prompt, what bounds it, and what a narrower KV format would hold."""
    if c["prompt_tokens"] == 0:
        head = f"no prompt fits at batch {c['batch']} with {c['output_tokens']} output tokens"
    else:
        bound = (f"the model's max_model_len {c['max_model_len']:,}" if c["limit"] == "model"
                 else f"memory, KV {c['kv_dtype']}")  # fmt: skip
        head = (f"{c['prompt_tokens']:,} prompt tokens at batch {c['batch']} with {c['output_tokens']} output "
                f"tokens (bound: {bound})")  # fmt: skip
    alt = "; ".join(f"with --kv-dtype {k}: {v:,}" for k, v in c["alternatives"].items())
    return head + (f"; {alt}" if alt else "")
