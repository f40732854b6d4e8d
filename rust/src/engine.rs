//! A whole plan in one call: prefill (one step, or chunk steps), decode
//! summed exactly over every output step, memory footprint and fit.

use crate::collectives::{Link, ProtocolTable};
use crate::device::{Device, MICRO};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{build_step, BuildCtx, Geometry, Op, OpKind, Segment, MODEL_LEVEL};
use crate::model::{Ffn, Model};
use crate::params::{self, ParamCounts};
use crate::plan::{Efficiency, Plan};
use crate::roofline::{price, price_range, Cost};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    Decode,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

/// Totals of one phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PhaseTotals {
    pub steps: u64,
    pub flops: f64,
    pub bytes: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    pub comm_s: f64,
    pub overhead_s: f64,
    pub time_s: f64,
    /// Achieved FLOP/s over the dense peak (<= 1 by construction).
    pub mfu: f64,
    /// Achieved bytes/s over the peak memory bandwidth (<= 1 by construction).
    pub mbu: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BreakdownRow {
    pub phase: Phase,
    pub kind: OpKind,
    pub group: u16,
    pub cost: Cost,
}

impl Serialize for OpKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Memory {
    pub weights_bytes: f64,
    pub kv_bytes: f64,
    pub activation_bytes: f64,
    pub total_bytes: f64,
    pub capacity_bytes: f64,
    pub budget_bytes: f64,
    pub fits: bool,
    pub shortfall_bytes: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub ttft_s: f64,
    /// Mean time per output token after the first; None with one output token.
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
    /// Output tokens per second over the whole request (batch x output / e2e).
    pub throughput_tok_s: f64,
    /// Prompt tokens per second during prefill.
    pub prefill_tok_s: f64,
    pub prefill: PhaseTotals,
    pub decode: PhaseTotals,
    pub memory: Memory,
    pub params: ParamCounts,
    pub gemm_dtype: DType,
    pub attention_dtype: DType,
    pub peak_flops: f64,
    pub memory_bw: f64,
    pub warnings: Vec<String>,
    pub breakdown: Vec<BreakdownRow>,
}

/// Everything a plan resolves to before any operator is priced.
struct Resolved<'a> {
    ctx: BuildCtx<'a>,
    gemm_dtype: DType,
    attn_dtype: DType,
    peak_max: f64,
    warnings: Vec<String>,
}

fn resolve<'a>(
    m: &'a Model,
    dev: &Device,
    plan: &Plan,
    proto: ProtocolTable,
) -> Result<Resolved<'a>> {
    let mut warnings = Vec::new();
    let act = plan.dtype;
    let pa = dev.peak(act)?;
    if pa.fell_back() {
        warnings.push(format!(
            "{} has no {} figure in the catalog; priced at its {} peak (fallback chain {})",
            dev.name,
            act.name(),
            pa.used.name(),
            Device::fallback_chain(act)
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(" -> ")
        ));
    }
    let w = plan.weight_dtype();
    let mut gemm = pa;
    if matches!(w, DType::Fp8 | DType::Int8) {
        match dev.tflops(w) {
            Some(t) if t * 1e12 > pa.flops_per_s => {
                gemm = crate::device::Peak { flops_per_s: t * 1e12, requested: w, used: w }
            }
            _ => warnings.push(format!(
                "{} has no {} path faster than {}: {} weights are dequantised and GEMMs run at the {} peak",
                dev.name,
                w.name(),
                pa.used.name(),
                w.name(),
                pa.used.name()
            )),
        }
    }
    let act_b = act.bytes();
    let w_lin_b = w.bytes();
    // Quantised methods keep the embedding table and LM head unquantised.
    let w_emb_b = if w_lin_b < act_b { act_b } else { w_lin_b };
    let link = if plan.tp > 1 {
        let (agg, latency, what) = match (dev.scaleup_bw_gbs, dev.host_link_bw_gbs) {
            (Some(bw), _) => (bw, dev.scaleup_latency_us, "scale-up fabric"),
            (None, Some(bw)) => {
                warnings.push(format!(
                    "{} has no scale-up fabric in the catalog; TP collectives run over the host link ({bw} GB/s bidirectional)",
                    dev.name
                ));
                (bw, None, "host link")
            }
            (None, None) => {
                return Err(Error::plan(
                    "tp",
                    format!("TP {} needs a device link, and the catalog has no scale-up or host-link bandwidth for {}", plan.tp, dev.name),
                ))
            }
        };
        if latency.is_none() {
            warnings.push(format!(
                "{} {what} latency is not in the catalog: collective alpha terms omitted (optimistic)",
                dev.name
            ));
        }
        Some(Link::from_bidirectional_gbs(
            agg,
            latency.unwrap_or(0.0) * MICRO,
        ))
    } else {
        None
    };
    Ok(Resolved {
        ctx: BuildCtx {
            model: m,
            tp: plan.tp,
            act_b,
            kv_b: plan.kv_dtype().bytes(),
            w_lin_b,
            w_emb_b,
            peak_gemm: gemm.flops_per_s,
            peak_act: pa.flops_per_s,
            link,
            proto,
        },
        gemm_dtype: gemm.used,
        attn_dtype: pa.used,
        peak_max: gemm.flops_per_s.max(pa.flops_per_s),
        warnings,
    })
}

/// The prefill schedule: `batch` prompts of `prompt` tokens, in steps of at
/// most `chunk` tokens taken in arrival order (vLLM chunked prefill). At most
/// three segments a step: the rest of a started prompt, whole prompts, and
/// the start of the next.
pub fn prefill_steps(batch: u64, prompt: u64, chunk: Option<u64>) -> Vec<Vec<Segment>> {
    let total = batch * prompt;
    let c = chunk.unwrap_or(total).max(1);
    let mut steps = Vec::with_capacity(total.div_ceil(c) as usize);
    let mut pos = 0u64;
    while pos < total {
        let mut budget = c.min(total - pos);
        let mut segs = Vec::with_capacity(3);
        let off = pos % prompt;
        if off > 0 {
            let n = budget.min(prompt - off);
            segs.push(Segment {
                count: 1,
                new: n,
                prefix: off,
                samples: off + n == prompt,
            });
            budget -= n;
            pos += n;
        }
        let whole = budget / prompt;
        if whole > 0 {
            segs.push(Segment {
                count: whole,
                new: prompt,
                prefix: 0,
                samples: true,
            });
            budget -= whole * prompt;
            pos += whole * prompt;
        }
        if budget > 0 {
            segs.push(Segment {
                count: 1,
                new: budget,
                prefix: 0,
                samples: budget == prompt,
            });
            pos += budget;
        }
        steps.push(segs);
    }
    steps
}

struct Acc {
    total: Cost,
    overhead_s: f64,
    steps: u64,
    rows: Option<Vec<BreakdownRow>>,
    phase: Phase,
}

impl Acc {
    fn new(phase: Phase, breakdown: bool) -> Acc {
        Acc {
            total: Cost::default(),
            overhead_s: 0.0,
            steps: 0,
            rows: breakdown.then(Vec::new),
            phase,
        }
    }

    fn add(&mut self, kind: OpKind, group: u16, c: Cost) {
        self.total += c;
        if let Some(rows) = &mut self.rows {
            match rows.iter_mut().find(|r| r.kind == kind && r.group == group) {
                Some(r) => r.cost += c,
                None => rows.push(BreakdownRow {
                    phase: self.phase,
                    kind,
                    group,
                    cost: c,
                }),
            }
        }
    }

    fn overhead(&mut self, layers: u64, steps: u64, eff: &Efficiency) {
        self.steps += steps;
        let per_layer = (layers * steps) as f64 * eff.t_layer_s;
        let per_step = steps as f64 * eff.t_step_s;
        if per_layer > 0.0 {
            self.add(
                OpKind::LayerOverhead,
                MODEL_LEVEL,
                Cost::overhead(per_layer),
            );
        }
        if per_step > 0.0 {
            self.add(OpKind::StepOverhead, MODEL_LEVEL, Cost::overhead(per_step));
        }
        self.overhead_s += per_layer + per_step;
    }

    fn totals(&self, peak: f64, bw: f64) -> PhaseTotals {
        let t = self.total;
        let (mfu, mbu) = if t.time_s > 0.0 {
            (t.flops / (t.time_s * peak), t.bytes / (t.time_s * bw))
        } else {
            (0.0, 0.0)
        };
        PhaseTotals {
            steps: self.steps,
            flops: t.flops,
            bytes: t.bytes,
            compute_s: t.compute_s,
            memory_s: t.memory_s,
            comm_s: t.comm_s,
            overhead_s: self.overhead_s,
            time_s: t.time_s,
            mfu,
            mbu,
        }
    }
}

/// Weight bytes one TP rank holds, by the same sharding the graph uses.
fn weight_bytes_per_rank(ctx: &BuildCtx) -> f64 {
    let m = ctx.model;
    let t = ctx.tp;
    let d = m.hidden_size;
    let mut lin = 0u64; // sharded linear-layer parameters per rank
    let mut rep = 0u64; // replicated small tensors (norms, router) in the activation dtype
    for g in &m.layer_groups {
        let a = &g.attention;
        let h_t = a.heads / t;
        let kv_t = a.kv_heads.div_ceil(t);
        let mut attn = d * h_t * a.head_dim * 2 + 2 * d * kv_t * a.head_dim;
        if a.qkv_bias {
            attn += (h_t + 2 * kv_t) * a.head_dim;
        }
        if a.o_bias {
            attn += d;
        }
        let ffn = match &g.ffn {
            Ffn::Dense {
                intermediate_size,
                gated,
                bias,
                ..
            } => params::mlp_params(d, intermediate_size / t, *gated, *bias),
            Ffn::Moe {
                num_experts,
                expert_intermediate_size,
                shared_intermediate_size,
                gated,
                bias,
                router_bias,
                ..
            } => {
                rep += g.count * (d * num_experts + if *router_bias { *num_experts } else { 0 });
                num_experts * params::mlp_params(d, expert_intermediate_size / t, *gated, *bias)
                    + params::mlp_params(d, shared_intermediate_size / t, *gated, *bias)
            }
        };
        lin += g.count * (attn + ffn);
        rep += g.count * (g.norms * m.norm.params(d) + if a.qk_norm { 2 * a.head_dim } else { 0 });
    }
    rep += m.norm.params(d);
    let vocab_rows = m.vocab_size as f64 / t as f64;
    let mut emb = vocab_rows * d as f64 + (m.position_embeddings * d) as f64;
    if !m.tie_word_embeddings {
        emb += vocab_rows * d as f64;
    }
    if m.lm_head_bias {
        emb += vocab_rows;
    }
    lin as f64 * ctx.w_lin_b + emb * ctx.w_emb_b + rep as f64 * ctx.act_b
}

/// KV-cache bytes one rank holds for `seqs` sequences of `tokens` tokens.
fn kv_bytes_per_rank(ctx: &BuildCtx, seqs: u64, tokens: u64) -> f64 {
    ctx.model
        .layer_groups
        .iter()
        .map(|g| {
            let a = &g.attention;
            let held = a.window.map_or(tokens, |w| tokens.min(w));
            (g.count * seqs * held * 2 * a.kv_heads.div_ceil(ctx.tp) * a.head_dim) as f64 * ctx.kv_b
        })
        .sum()
}

/// Estimates one plan. `breakdown` keeps per-operator rows.
pub fn estimate(
    m: &Model,
    dev: &Device,
    plan: &Plan,
    eff: &Efficiency,
    proto: ProtocolTable,
    breakdown: bool,
) -> Result<Estimate> {
    plan.validate(m)?;
    dev.validate()?;
    eff.validate()?;
    let r = resolve(m, dev, plan, proto)?;
    let ctx = &r.ctx;
    let bw = dev.memory_bw();
    let layers = m.num_layers();
    let mut ops: Vec<Op> = Vec::with_capacity(48);

    // Prefill: one step holding every prompt, or the chunk steps.
    let mut pre = Acc::new(Phase::Prefill, breakdown);
    let mut workspace = 0.0f64;
    let steps = prefill_steps(plan.batch, plan.prompt, plan.chunk);
    for segs in &steps {
        build_step(ctx, &Geometry::Segments(segs), &mut ops);
        for op in &ops {
            workspace = workspace.max(op.act_bytes);
            pre.add(op.kind, op.group, price(op, 0.0, bw, eff));
        }
    }
    pre.overhead(layers, steps.len() as u64, eff);

    // Decode: contexts prompt+1 ..= prompt+output-1, every step, in closed form.
    let mut dec = Acc::new(Phase::Decode, breakdown);
    if plan.output > 1 {
        let (lo, hi) = (plan.prompt + 1, plan.prompt + plan.output - 1);
        build_step(ctx, &Geometry::Decode { batch: plan.batch }, &mut ops);
        for op in &ops {
            workspace = workspace.max(op.act_bytes);
            dec.add(op.kind, op.group, price_range(op, lo, hi, bw, eff));
        }
        dec.overhead(layers, plan.output - 1, eff);
    }

    let prefill = pre.totals(r.peak_max, bw);
    let decode = dec.totals(r.peak_max, bw);
    let ttft_s = prefill.time_s;
    let tpot_s = (plan.output > 1).then(|| decode.time_s / (plan.output - 1) as f64);
    let e2e_s = ttft_s + decode.time_s;
    let out_tokens = (plan.batch * plan.output) as f64;

    let weights = weight_bytes_per_rank(ctx);
    let kv = kv_bytes_per_rank(ctx, plan.batch, plan.prompt + plan.output);
    let total = weights + kv + workspace;
    let budget = dev.memory_bytes() * plan.gpu_memory_utilization;
    let memory = Memory {
        weights_bytes: weights,
        kv_bytes: kv,
        activation_bytes: workspace,
        total_bytes: total,
        capacity_bytes: dev.memory_bytes(),
        budget_bytes: budget,
        fits: total <= budget,
        shortfall_bytes: (total - budget).max(0.0),
    };

    let mut rows = Vec::new();
    if let Some(p) = pre.rows {
        rows.extend(p);
    }
    if let Some(d) = dec.rows {
        rows.extend(d);
    }
    let est = Estimate {
        ttft_s,
        tpot_s,
        e2e_s,
        throughput_tok_s: out_tokens / e2e_s,
        prefill_tok_s: (plan.batch * plan.prompt) as f64 / ttft_s,
        prefill,
        decode,
        memory,
        params: params::count(m),
        gemm_dtype: r.gemm_dtype,
        attention_dtype: r.attn_dtype,
        peak_flops: r.peak_max,
        memory_bw: bw,
        warnings: r.warnings,
        breakdown: rows,
    };
    check_finite(&est)?;
    Ok(est)
}

/// A NaN or infinity is a bug in the physics or an input that slipped
/// validation; it never reaches the user as a number.
fn check_finite(e: &Estimate) -> Result<()> {
    let vals = [
        ("ttft_s", e.ttft_s),
        ("e2e_s", e.e2e_s),
        ("throughput_tok_s", e.throughput_tok_s),
        ("tpot_s", e.tpot_s.unwrap_or(0.0)),
        ("memory.total_bytes", e.memory.total_bytes),
        ("prefill.mfu", e.prefill.mfu),
        ("decode.mfu", e.decode.mfu),
    ];
    for (name, v) in vals {
        if !v.is_finite() || v < 0.0 {
            return Err(Error::Input(format!(
                "{name} evaluated to {v}; the inputs are out of range"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
