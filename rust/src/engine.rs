//! A whole plan in one call: prefill (one step, or chunk steps), decode
//! summed exactly over every output step, memory footprint and fit.

use crate::collectives::{Link, LinkFits, ProtocolTable, Topology};
use crate::device::{Device, MICRO};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{
    build_draft_step, build_kernels, build_step, step_shape, AttnPhase, BuildCtx, Geometry, Op, OpFlags, OpKind,
    StepShape, MODEL_LEVEL,
};
use crate::model::params::{self, ParamCounts};
use crate::model::{Ffn, Model};
use crate::plan::{Drafter, Efficiency, Offload, Plan};
use crate::roofline::{price, price_range, Cost};
#[cfg(test)]
pub use crate::schedule::prefill_steps;
pub use crate::schedule::PrefillSchedule;
use crate::weights::{Role, N_ROLES};
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
    pub quantized: bool,
    /// The weight role a GEMM reads (None for other operators).
    pub role: Option<Role>,
    /// Routed-expert kernels over more than one token per step (priced at eta_moe).
    pub grouped: bool,
    /// The fused attention kernel (a prefill or a decode step's) of a GQA/MQA attention.
    pub attention: Option<AttnPhase>,
    pub cost: Cost,
}

impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Serialize for AttnPhase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
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
    /// Recurrent state of linear-attention layers (fixed per sequence, whatever its length).
    pub state_bytes: f64,
    pub activation_bytes: f64,
    pub total_bytes: f64,
    pub capacity_bytes: f64,
    pub budget_bytes: f64,
    pub fits: bool,
    pub shortfall_bytes: f64,
    /// What an offloading plan keeps in host memory; None: nothing. `fits` needs it within the
    /// host's memory too.
    pub host: Option<HostMemory>,
}

/// The host's tier of an offloading plan's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HostMemory {
    pub weights_bytes: f64,
    pub kv_bytes: f64,
    pub capacity_bytes: f64,
}

/// One plan's result: its `Numbers` (read through `Deref`: `e.ttft_s`), the labels that say how
/// they were priced, and with a breakdown the per-operator rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub numbers: Numbers,
    pub params: ParamCounts,
    pub gemm_dtype: DType,
    pub attention_dtype: DType,
    /// The KV cache's storage format (`Plan::kv_dtype`: tf32 compute stores fp32).
    pub kv_dtype: DType,
    pub peak_flops: f64,
    pub memory_bw: f64,
    pub warnings: Vec<String>,
    pub breakdown: Vec<BreakdownRow>,
    /// Why `numbers.power` is None (`power::missing`).
    pub power_missing: Option<String>,
}

impl std::ops::Deref for Estimate {
    type Target = Numbers;

    fn deref(&self) -> &Numbers {
        &self.numbers
    }
}

/// How the plan spreads over devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Parallel {
    /// TP x PP x DP.
    pub devices: u64,
    /// Nodes one replica's TP x PP devices occupy (1 when no node size is known).
    pub nodes_per_replica: u64,
    /// Layers of the largest pipeline stage: ceil(L / p).
    pub stage_layers: u64,
    pub microbatches: u64,
    /// Time of one stage over the whole request for one micro-batch (PP), else E2E.
    pub stage_s: f64,
    /// Pipeline round: (m + p - 1) x stage time (GPipe fill and drain), else E2E.
    pub round_s: f64,
}

/// Everything a plan resolves to before any operator is priced.
struct Resolved<'a> {
    ctx: BuildCtx<'a>,
    gemm_dtype: DType,
    attn_dtype: DType,
    peak_max: f64,
    warnings: Vec<String>,
}

fn resolve<'a>(m: &'a Model, dev: &Device, plan: &Plan, proto: ProtocolTable) -> Result<Resolved<'a>> {
    if let Some(what) = m.unpriced_layers() {
        return Err(Error::model(
            "hybrid_override_pattern",
            format!("{what} are not supported by the engine yet; nothing is priced as attention"),
        ));
    }
    if plan.linear_chunk == 0
        && m.layer_groups
            .iter()
            .any(|g| g.recurrent(1).is_some_and(|r| r.chunk == 0))
    {
        return Err(Error::plan(
            "linear_chunk",
            "the model has linear-attention layers: give the chunk size of their scan (>= 1)",
        ));
    }
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
    let formats = plan.weights.resolve(act)?;
    // A GEMM runs in its weights' compute path (W8A8 fp8/int8) only where the
    // device has that path and it is faster; otherwise weights are dequantised
    // and the GEMM runs at the activation dtype's peak (W4A16 at the bf16 peak).
    let mut peaks = [pa.flops_per_s; N_ROLES];
    let mut gemm_dtype = pa.used;
    for (i, f) in formats.iter().enumerate() {
        let Some(c) = f.compute else { continue };
        match dev.tflops(c) {
            Some(t) if t * 1e12 > pa.flops_per_s => {
                peaks[i] = t * 1e12;
                gemm_dtype = c;
            }
            _ => {
                let w = format!(
                    "{} has no {} path faster than {}: {} weights are dequantised and GEMMs run at the {} peak",
                    dev.name,
                    c.name(),
                    pa.used.name(),
                    c.name(),
                    pa.used.name()
                );
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
    }
    let topo = topology(dev, plan, &mut warnings)?;
    if m.is_moe() {
        warnings.push(if plan.routing_skew == 0.0 {
            "MoE weights read per step assume uniform routing: E (1 - (1 - k/E)^T) distinct experts for T tokens"
                .to_string()
        } else {
            format!(
                "MoE weights read per step assume skewed routing: expert popularity Zipf exponent {:.3} \
                 (fewer distinct experts than uniform routing's E (1 - (1 - k/E)^T))",
                plan.routing_skew
            )
        });
    }
    let peak_max = peaks.iter().copied().fold(pa.flops_per_s, f64::max);
    Ok(Resolved {
        ctx: BuildCtx {
            model: m,
            tp: plan.tp,
            ep: plan.ep,
            attention_dp: plan.attention_dp,
            pp: plan.pp,
            identical_sequences: plan.identical_sequences,
            routing_skew: plan.routing_skew,
            attention_score_bytes: plan.attention_score_bytes,
            kv_read: plan.kv_read(),
            act_b: act.bytes(),
            kv_b: plan.kv_dtype().bytes(),
            linear_chunk: plan.linear_chunk as f64,
            formats,
            peaks,
            peak_act: pa.flops_per_s,
            topo,
            proto,
            offload: plan.offload.as_ref().map(|o| o.placement(m)),
        },
        gemm_dtype,
        attn_dtype: pa.used,
        peak_max,
        warnings,
    })
}

/// The links of a multi-device plan (spec 40). Scale-up: the catalog's
/// fabric, else the host link (flagged); scale-out: the caller's explicit
/// topology, else the catalog's, else none (a flat ring, flagged).
fn topology(dev: &Device, plan: &Plan, warnings: &mut Vec<String>) -> Result<Option<Topology>> {
    let group = plan.moe_group() * plan.pp;
    if group <= 1 {
        return Ok(None);
    }
    let (agg, latency, what) = match (dev.scaleup_bw_gbs, dev.host_link_bw_gbs) {
        (Some(bw), _) => (bw, dev.scaleup_latency_us, "scale-up fabric"),
        (None, Some(bw)) => {
            warnings.push(format!(
                "{} has no scale-up fabric in the catalog; collectives run over the host link ({bw} GB/s bidirectional)",
                dev.name
            ));
            (bw, None, "host link")
        }
        (None, None) => {
            return Err(Error::plan(
                if plan.tp > 1 { "tp" } else { "pp" },
                format!(
                    "{group} devices need a link between them, and the catalog has no scale-up or host-link bandwidth for {}",
                    dev.name
                ),
            ))
        }
    };
    if let Some(note) = &dev.links_note {
        warnings.push(format!("{} collectives: {note}", dev.name));
    }
    if latency.is_none() && dev.links.is_empty() {
        warnings.push(format!(
            "{} {what} latency is not in the catalog: collective alpha terms omitted (optimistic)",
            dev.name
        ));
    }
    let t = &plan.topology;
    let scaleout = t
        .scaleout_bw_gbs
        .map(|bw| Link::per_direction(bw * 1e9, t.scaleout_latency_us.unwrap_or(0.0) * MICRO));
    let topo = Topology {
        scaleup: Link::from_bidirectional_gbs(agg, latency.unwrap_or(0.0) * MICRO),
        fits: LinkFits::new(&dev.links),
        devices_per_node: t.devices_per_node,
        scaleout,
    };
    let nodes = topo.nodes(group);
    if nodes > 1 {
        match scaleout {
            None => warnings.push(format!(
                "the {group} devices span {nodes} nodes of {} but no scale-out topology is known: flat ring on the {what}",
                t.devices_per_node.unwrap_or(group)
            )),
            Some(_) if t.scaleout_latency_us.is_none() => {
                warnings.push("scale-out latency unknown: its alpha terms are omitted (optimistic)".to_string())
            }
            Some(_) => {}
        }
    } else if t.devices_per_node.is_none() && scaleout.is_none() {
        warnings.push("no node size known: collectives priced as one flat ring on the scale-up fabric".to_string());
    }
    Ok(Some(topo))
}

#[derive(Clone)]
struct Acc {
    total: Cost,
    /// Pipeline send time within `total`.
    sends_s: f64,
    overhead_s: f64,
    /// The front end's time within `total` (`front_end`).
    front_s: f64,
    /// Steps the phase takes (a speculative decode's are fractional: tokens / acceptance length).
    steps: f64,
    rows: Option<Vec<BreakdownRow>>,
    phase: Phase,
}

impl Acc {
    fn new(phase: Phase, breakdown: bool) -> Acc {
        Acc {
            total: Cost::default(),
            sends_s: 0.0,
            overhead_s: 0.0,
            front_s: 0.0,
            steps: 0.0,
            rows: breakdown.then(Vec::new),
            phase,
        }
    }

    fn add(&mut self, kind: OpKind, group: u16, (quantized, role, grouped, attention): OpFlags, c: Cost) {
        self.total += c;
        if kind == OpKind::PpSend {
            self.sends_s += c.time_s;
        }
        if let Some(rows) = &mut self.rows {
            match rows.iter_mut().find(|r| r.kind == kind && r.group == group) {
                Some(r) => r.cost += c,
                None => rows.push(BreakdownRow {
                    phase: self.phase,
                    kind,
                    group,
                    quantized,
                    role,
                    grouped,
                    attention,
                    cost: c,
                }),
            }
        }
    }

    /// The host's overhead of `steps` steps of `layers` layers each.
    fn overhead(&mut self, layers: u64, steps: f64, eff: &Efficiency) {
        self.steps += steps;
        let per_layer = layers as f64 * steps * eff.t_layer_s;
        let per_step = steps * eff.t_step_s;
        if per_layer > 0.0 {
            self.add(
                OpKind::LayerOverhead,
                MODEL_LEVEL,
                (false, None, false, None),
                Cost::overhead(per_layer),
            );
        }
        if per_step > 0.0 {
            self.add(
                OpKind::StepOverhead,
                MODEL_LEVEL,
                (false, None, false, None),
                Cost::overhead(per_step),
            );
        }
        self.overhead_s += per_layer + per_step;
    }

    /// The per-layer overhead of `layer_passes` layer passes within steps already counted (a
    /// drafter's layers, each pass of them).
    fn layer_overhead(&mut self, layer_passes: f64, eff: &Efficiency) {
        let t = layer_passes * eff.t_layer_s;
        if t > 0.0 {
            self.add(
                OpKind::LayerOverhead,
                crate::graph::DRAFTER,
                (false, None, false, None),
                Cost::overhead(t),
            );
            self.overhead_s += t;
        }
    }

    /// The front end's time of the phase's requests, once: they are parsed and routed side by
    /// side, before the first prefill step (the simulator delays each arrival by it).
    fn front_end(&mut self, eff: &Efficiency) {
        if eff.t_request_s > 0.0 {
            self.add(
                OpKind::RequestOverhead,
                MODEL_LEVEL,
                (false, None, false, None),
                Cost::overhead(eff.t_request_s),
            );
            self.overhead_s += eff.t_request_s;
            self.front_s += eff.t_request_s;
        }
    }

    fn totals(&self, peak: f64, bw: f64) -> PhaseTotals {
        let t = self.total;
        let (mfu, mbu) = if t.time_s > 0.0 {
            (t.flops / (t.time_s * peak), t.bytes / (t.time_s * bw))
        } else {
            (0.0, 0.0)
        };
        PhaseTotals {
            steps: self.steps.round() as u64,
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

/// Weight bytes one TP rank holds, by the same sharding and formats the graph
/// uses: (decoder layers, embedding tables, final norm and LM head).
fn weight_bytes_per_rank(ctx: &BuildCtx) -> (f64, f64, f64) {
    let m = ctx.model;
    let t = ctx.tp as f64;
    let d = m.hidden_size as f64;
    let f = |r: Role, k: f64, n: f64| ctx.format(r).bytes(k, n);
    let act = ctx.act_b;
    let mut total = 0.0;
    for g in &m.layer_groups {
        let mut layer = g.norms as f64 * m.norm.params(m.hidden_size) as f64 * act;
        if let Some(a) = &g.attention {
            let h_t = (a.heads as f64 / t).floor();
            match &a.mla {
                None => {
                    let (hd, vd) = (a.head_dim as f64, a.v_dim() as f64);
                    let kv_t = a.kv_heads.div_ceil(ctx.tp) as f64;
                    let d_in = a.input(m.hidden_size) as f64;
                    layer += f(Role::Q, d_in, h_t * hd) + f(Role::K, d_in, kv_t * hd) + f(Role::V, d_in, kv_t * vd);
                    layer += f(Role::O, h_t * vd, d);
                    if a.qkv_bias {
                        layer += ((h_t + kv_t) * hd + kv_t * vd) * act;
                    }
                }
                Some(x) => {
                    let (kvl, v) = (x.kv_lora_rank as f64, x.v_head_dim as f64);
                    let qk = (x.qk_nope_head_dim + x.qk_rope_head_dim) as f64;
                    layer += match x.q_lora_rank {
                        Some(r) => {
                            let r = r as f64;
                            f(Role::Q, d, r) + r * act + f(Role::Q, r, h_t * qk)
                        }
                        None => f(Role::Q, d, h_t * qk),
                    };
                    layer += f(Role::K, d, x.cache_width() as f64) + kvl * act;
                    layer += f(Role::V, kvl, h_t * (x.qk_nope_head_dim as f64 + v));
                    layer += f(Role::O, h_t * v, d);
                }
            }
            if a.o_bias {
                layer += d * act;
            }
            if a.qk_norm {
                let width = if a.qk_norm_all_heads {
                    h_t + a.kv_heads.div_ceil(ctx.tp) as f64
                } else {
                    2.0
                };
                layer += width * a.head_dim as f64 * act;
            }
            if a.output_gate && a.mla.is_none() {
                layer += f(Role::Q, d, h_t * a.v_dim() as f64);
            }
            if a.sinks {
                layer += h_t * act;
            }
            // the indexer is replicated on every rank; its LayerNorm in the activation dtype
            if let (Some(ix), Some(r)) = (
                a.indexer.as_ref().filter(|i| !i.shared),
                a.mla.as_ref().and_then(|x| x.q_lora_rank),
            ) {
                let [(qk, qn), (kk, kn), (wk, wn)] = ix.matrices(m.hidden_size, r);
                layer += f(Role::Q, qk as f64, qn as f64) + f(Role::K, kk as f64, kn as f64);
                layer += f(Role::K, wk as f64, wn as f64) + 2.0 * ix.head_dim as f64 * act;
            }
        }
        if let Some(r) = g.recurrent(ctx.tp) {
            // heads split over the ranks: the projections by columns / rows, the conv and the
            // per-head vectors by channel
            layer += f(Role::Q, d, r.in_cols) + f(Role::O, r.out_in, d) + r.vectors * act;
            if r.bias {
                layer += (r.in_cols + d) * act;
            }
        }
        let mlp = |up: Role, down: Role, d: f64, width: f64, gated: bool, bias: bool| {
            let n_up = if gated { 2.0 * width } else { width };
            let b = if bias { (n_up + d) * act } else { 0.0 };
            f(up, d, n_up) + f(down, width, d) + b
        };
        layer += match &g.ffn {
            Ffn::None => 0.0,
            Ffn::Dense {
                intermediate_size,
                gated,
                bias,
                ..
            } => mlp(Role::Up, Role::Down, d, *intermediate_size as f64 / t, *gated, *bias),
            Ffn::Moe {
                num_experts,
                shared_intermediate_size,
                gated,
                bias,
                router_bias,
                shared_gate,
                latent,
                ..
            } => {
                let e = *num_experts as f64;
                let projections = latent.map_or(0.0, |l| f(Role::Up, d, l as f64) + f(Role::Down, l as f64, d));
                let experts = projections + routed_expert_bytes(ctx, g);
                let shared = if *shared_intermediate_size > 0 {
                    mlp(
                        Role::Up,
                        Role::Down,
                        d,
                        *shared_intermediate_size as f64 / t,
                        *gated,
                        *bias,
                    )
                } else {
                    0.0
                };
                let gate = if *shared_gate { d } else { 0.0 };
                let router = (d * e + if *router_bias { e } else { 0.0 } + gate) * act;
                experts + shared + router
            }
        };
        total += g.count as f64 * layer;
    }
    let v_t = m.vocab_size as f64 / t;
    let embed = f(Role::Embedding, d, v_t) + f(Role::Embedding, d, m.position_embeddings as f64);
    let mut head = m.norm.params(m.hidden_size) as f64 * act;
    // A tied head shares the embedding table unless a pipeline puts them on different stages.
    if !m.tie_word_embeddings || ctx.pp > 1 {
        head += f(Role::LmHead, d, v_t);
    }
    if m.lm_head_bias {
        head += v_t * act;
    }
    (total, embed, head)
}

/// Bytes of one layer of `g`'s routed experts on one rank: E / EP whole experts, each sharded
/// over the MoE TP (group / EP), in the latent width where there is one; 0 without experts.
fn routed_expert_bytes(ctx: &BuildCtx, g: &crate::model::LayerGroup) -> f64 {
    let Ffn::Moe {
        num_experts,
        expert_intermediate_size,
        gated,
        bias,
        latent,
        ..
    } = &g.ffn
    else {
        return 0.0;
    };
    let d = ctx.model.hidden_size as f64;
    let (ep, moe_tp) = ctx.expert_split();
    let width = latent.map_or(d, |l| l as f64);
    let fe = *expert_intermediate_size as f64 / moe_tp;
    let n_up = if *gated { 2.0 * fe } else { fe };
    let b = if *bias { (n_up + width) * ctx.act_b } else { 0.0 };
    *num_experts as f64 / ep
        * (ctx.format(Role::ExpertUp).bytes(width, n_up) + ctx.format(Role::ExpertDown).bytes(fe, width) + b)
}

/// KV-cache bytes one rank holds for `seqs` sequences of `tokens` tokens; windowed layers hold
/// at most their window. `kv_layers`: (layers, values per token, window) at the plan's TP.
fn kv_bytes_per_rank(kv_layers: &[(u64, u64, Option<u64>)], kv_b: f64, seqs: u64, tokens: u64) -> f64 {
    kv_layers
        .iter()
        .map(|&(count, values, window)| {
            let held = window.map_or(tokens, |w| tokens.min(w));
            count as f64 * seqs as f64 * held as f64 * values as f64 * kv_b
        })
        .sum()
}

/// What every plan with the same model, device, precisions, parallel degrees (TP, PP, EP),
/// links, routing and KV read resolves to before a token is priced: the build context, peaks
/// and warnings, the weight bytes one rank holds and the KV layers. A sweep resolves it once
/// per layout and prices every plan of that layout from it; `estimate` resolves it per plan.
pub struct Layout<'a> {
    r: Resolved<'a>,
    /// Weight bytes per rank: decoder layers, embedding tables, final norm and LM head.
    weights: (f64, f64, f64),
    /// (layers, KV values per token, window) of each layer group with attention, at the plan's TP.
    kv_layers: Vec<(u64, u64, Option<u64>)>,
    /// A speculative drafter that runs on the device, resolved (its model is the plan's).
    draft: Option<DraftLayout>,
    /// Recurrent-state slots a sequence holds: k + 1 when speculating (one per verified
    /// position, `graph::builder`'s linear kernel), else 1.
    state_slots: f64,
    /// What the host holds of the weights (`weights` is the device's part) and of the KV cache.
    host: Option<HostHeld>,
}

/// The weights and the share of the KV cache an offloading plan keeps in host memory.
#[derive(Clone, Copy)]
struct HostHeld {
    weights_bytes: f64,
    kv_share: f64,
    capacity_bytes: f64,
}

/// Splits the weight bytes one device holds, (layers, embeddings, head), between the device and
/// the host by the plan's offload: the host-run layers whole (and then the final norm and LM
/// head), the routed experts of the expert layers, the streamed bytes from the layers.
fn split_weights(
    ctx: &BuildCtx,
    (layers, embed, head): (f64, f64, f64),
    o: &Offload,
) -> Result<((f64, f64, f64), HostHeld)> {
    let p = o.placement(ctx.model);
    let routed: f64 = ctx
        .model
        .layer_groups
        .iter()
        .map(|g| g.count as f64 * routed_expert_bytes(ctx, g))
        .sum();
    let host_layers = (layers - routed) * p.layer_share + routed * p.layer_share.max(p.expert_share);
    let host_head = if p.layer_share > 0.0 { head } else { 0.0 };
    let device_layers = layers - host_layers;
    if o.streamed_bytes > device_layers {
        return Err(Error::plan(
            "streamed_bytes",
            format!(
                "{:.2} GB streamed exceeds the {:.2} GB of layer weights the device would hold",
                o.streamed_bytes / 1e9,
                device_layers / 1e9
            ),
        ));
    }
    let held = HostHeld {
        weights_bytes: host_layers + host_head + o.streamed_bytes,
        kv_share: p.layer_share,
        capacity_bytes: o.host.memory_gb * 1e9,
    };
    Ok(((device_layers - o.streamed_bytes, embed, head - host_head), held))
}

/// A drafter resolved at the plan's TP: its weight formats and GEMM peaks, the weight bytes it
/// adds to a rank (what it does not share with the target), and its own KV layers.
struct DraftLayout {
    formats: [crate::weights::WeightFormat; N_ROLES],
    peaks: [f64; N_ROLES],
    weight_bytes: f64,
    kv_layers: Vec<(u64, u64, Option<u64>)>,
}

impl DraftLayout {
    fn new(d: &Drafter, dev: &Device, plan: &Plan, proto: ProtocolTable, warnings: &mut Vec<String>) -> Result<Self> {
        let dplan = Plan {
            weights: d.weights.clone(),
            pp: 1,
            speculation: None,
            ..plan.clone()
        };
        let r = resolve(&d.model, dev, &dplan, proto)?;
        for w in r.warnings {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        let (layers, embed, head) = weight_bytes_per_rank(&r.ctx);
        let hidden = d.model.hidden_size as f64;
        // the fused-state projection, replicated on every rank (`graph::build_draft_step`)
        let fused = match d.fused_inputs {
            0 => 0.0,
            n => r.ctx.format(Role::O).bytes(n as f64 * hidden, hidden),
        };
        let weight_bytes =
            layers + fused + if d.shares_embedding { 0.0 } else { embed } + if d.shares_head { 0.0 } else { head };
        Ok(DraftLayout {
            formats: r.ctx.formats,
            peaks: r.ctx.peaks,
            weight_bytes,
            kv_layers: d.model.kv_layers(plan.tp),
        })
    }
}

impl<'a> Layout<'a> {
    /// Resolves the layout of `plan` (its batch, lengths, chunk, DP and micro-batches aside).
    pub fn new(m: &'a Model, dev: &Device, plan: &Plan, proto: ProtocolTable) -> Result<Layout<'a>> {
        let mut r = resolve(m, dev, plan, proto)?;
        let (weights, host) = match &plan.offload {
            Some(o) => {
                let (w, h) = split_weights(&r.ctx, weight_bytes_per_rank(&r.ctx), o)?;
                (w, Some(h))
            }
            None => (weight_bytes_per_rank(&r.ctx), None),
        };
        let kv_layers = m.kv_layers(plan.tp);
        let draft = match plan.speculation.as_ref().and_then(|s| s.drafter.as_ref()) {
            Some(d) => Some(DraftLayout::new(d, dev, plan, proto, &mut r.warnings)?),
            None => None,
        };
        let state_slots = plan.speculation.as_ref().map_or(1.0, |s| (s.draft_tokens + 1) as f64);
        Ok(Layout {
            r,
            weights,
            kv_layers,
            draft,
            state_slots,
            host,
        })
    }

    /// The build context of the plan's drafter: its model, formats and peaks, the target's
    /// parallelism and dtypes. None without a drafter on the device.
    fn draft_ctx<'b>(&'b self, d: &'b Drafter) -> Option<BuildCtx<'b>> {
        let dl = self.draft.as_ref()?;
        Some(BuildCtx {
            model: &d.model,
            formats: dl.formats,
            peaks: dl.peaks,
            pp: 1,
            offload: None,
            ..self.r.ctx
        })
    }

    /// Weight bytes the drafter adds to one rank (0 without one).
    pub(crate) fn draft_weight_bytes(&self) -> f64 {
        self.draft.as_ref().map_or(0.0, |d| d.weight_bytes)
    }

    /// The build context every step of the layout is built from.
    pub(crate) fn ctx(&self) -> &BuildCtx<'a> {
        &self.r.ctx
    }

    /// Weight bytes one rank holds without pipeline stages: decoder layers, embeddings, head.
    pub(crate) fn weight_bytes(&self) -> f64 {
        self.weights.0 + self.weights.1 + self.weights.2 + self.draft_weight_bytes()
    }

    /// The share of the decoder layers one of `pp` pipeline stages holds (ceil(layers / pp)).
    pub(crate) fn stage_share(&self, pp: u64) -> f64 {
        let layers = self.r.ctx.model.num_layers();
        layers.div_ceil(pp.max(1)) as f64 / layers as f64
    }

    /// Weight bytes one rank of a pipeline stage holds: its share of the layers and the larger
    /// of the embedding tables and the LM head (as `numbers` counts them); all of them at pp 1.
    pub(crate) fn stage_weight_bytes(&self, pp: u64) -> f64 {
        if pp > 1 {
            self.weights.0 * self.stage_share(pp) + self.weights.1.max(self.weights.2)
        } else {
            self.weight_bytes()
        }
    }

    /// KV-cache bytes one rank holds per token of one sequence, every layer counted at full
    /// length (a sliding-window layer's blocks are not freed behind its window).
    pub(crate) fn kv_bytes_per_token(&self) -> f64 {
        let per_token = |layers: &[(u64, u64, Option<u64>)]| -> f64 {
            layers
                .iter()
                .map(|&(count, values, _)| count as f64 * values as f64 * self.r.ctx.kv_b)
                .sum()
        };
        let drafter = self.draft.as_ref().map_or(0.0, |d| per_token(&d.kv_layers));
        per_token(&self.kv_layers) * self.device_kv_share() + drafter
    }

    /// The share of the target's KV cache the device holds (the host holds its layers' share).
    pub(crate) fn device_kv_share(&self) -> f64 {
        1.0 - self.host.map_or(0.0, |h| h.kv_share)
    }

    /// Recurrent-state bytes one rank holds per sequence (linear-attention layers; 0 without),
    /// every slot a speculating sequence keeps.
    pub(crate) fn state_bytes_per_seq(&self) -> f64 {
        self.r.ctx.model.state_bytes(self.r.ctx.tp, self.r.ctx.act_b) * self.state_slots
    }

    /// The warnings resolving the layout gave.
    pub(crate) fn warnings(&self) -> &[String] {
        &self.r.warnings
    }
}

/// One phase priced: its operators' totals (and rows with a breakdown) and the largest
/// activation workspace a step of it holds.
#[derive(Clone)]
pub struct PhaseRun {
    acc: Acc,
    workspace: f64,
}

/// The prefill of `batch` sequences (one step, or the chunk steps). Steps that hold the same
/// segments cost the same (every sequence's k-th prompt chunk, when chunks do not straddle
/// sequences): each distinct step is priced once and counted as often as it occurs. Steps that
/// hold the same tokens, sampling sequences and sequences (`graph::step_shape`) differ only in
/// their attention kernels (`OpKind::varies_with_segments`): the rest of their graph is built
/// and priced once per shape, and only the kernels per distinct step. Rows keep the order of
/// the first step's operators.
pub fn prefill(l: &Layout, plan: &Plan, batch: u64, eff: &Efficiency, bw: f64, breakdown: bool) -> PhaseRun {
    let ctx = &l.r.ctx;
    let schedule = PrefillSchedule::new(batch, plan.prompt, plan.prefix, plan.chunk);
    // one graph per step shape (tokens, sampling sequences, sequences), with the steps it covers
    let mut shapes: Vec<(StepShape, Vec<Op>, u64)> = Vec::with_capacity(2);
    // each kernel's cost summed over every step, in the order `build_kernels` gives them
    let mut kernels: Vec<(Op, Cost)> = Vec::new();
    let mut step: Vec<Op> = Vec::with_capacity(8);
    let mut workspace = 0.0f64;
    schedule.for_each(|segs, n| {
        let shape = step_shape(segs);
        match shapes.iter_mut().find(|s| s.0 == shape) {
            Some(s) => s.2 += n,
            None => {
                let mut ops = Vec::with_capacity(48);
                build_step(ctx, &Geometry::Segments(segs), &mut ops);
                shapes.push((shape, ops, n));
            }
        }
        build_kernels(ctx, segs, &mut step);
        if kernels.is_empty() {
            kernels = step.iter().map(|op| (*op, Cost::default())).collect();
        }
        for (op, (_, total)) in step.iter().zip(kernels.iter_mut()) {
            workspace = workspace.max(op.act_bytes);
            *total += price(op, 0.0, bw, eff).scaled(n as f64);
        }
    });
    let mut acc = Acc::new(Phase::Prefill, breakdown);
    let mut next_kernel = kernels.iter();
    for (i, (_, ops, count)) in shapes.iter().enumerate() {
        for op in ops {
            if op.kind.varies_with_segments() {
                // a kernel's steps are all summed in; its row sits where the first step has it
                if i == 0 {
                    if let Some((k, total)) = next_kernel.next() {
                        acc.add(k.kind, k.group, k.flags(), *total);
                    }
                }
                continue;
            }
            workspace = workspace.max(op.act_bytes);
            acc.add(
                op.kind,
                op.group,
                op.flags(),
                price(op, 0.0, bw, eff).scaled(*count as f64),
            );
        }
    }
    acc.overhead(ctx.model.num_layers(), schedule.steps() as f64, eff);
    // a drafter runs over each prefill step's tokens after the target (vLLM's proposer takes
    // the step's hidden states): its KV for the prompt, and the first drafts
    if let Some((d, _)) = drafter(l, plan) {
        let mut ops = Vec::with_capacity(48);
        schedule.for_each(|segs, n| {
            draft_segment_ops(l, plan, segs, &mut ops);
            for op in &ops {
                workspace = workspace.max(op.act_bytes);
                acc.add(op.kind, op.group, op.flags(), price(op, 0.0, bw, eff).scaled(n as f64));
            }
        });
        let draft_layers = d.model.num_layers() as f64 * schedule.steps() as f64;
        acc.layer_overhead(draft_layers, eff);
    }
    acc.front_end(eff);
    PhaseRun { acc, workspace }
}

/// The drafter's operators of one speculative decode step of `batch` sequences, each scaled to
/// its passes (`Op::repeat`): with `first`, the pass over the step's k + 1 positions (one of them
/// sampled) and the k - 1 passes of one token; without, the k - 1 alone. Empty without a drafter
/// on the device.
pub(crate) fn draft_decode_ops(l: &Layout, plan: &Plan, batch: u64, first: bool) -> Vec<Op> {
    let (Some((d, dctx)), Some(s)) = (drafter(l, plan), plan.speculation.as_ref()) else {
        return Vec::new();
    };
    let k = s.draft_tokens;
    let later = if d.fuse_first_pass_only { 0 } else { d.fused_inputs };
    let (mut out, mut pass) = (Vec::new(), Vec::with_capacity(48));
    for (queries, passes, fused) in [(k + 1, u64::from(first), d.fused_inputs), (1, k - 1, later)] {
        if passes == 0 {
            continue;
        }
        let geo = Geometry::Decode {
            batch,
            queries,
            sampled: 1,
        };
        build_draft_step(&dctx, fused, &geo, &mut pass);
        out.extend(pass.iter().map(|op| Op {
            repeat: op.repeat * passes as f64,
            ..*op
        }));
    }
    out
}

/// The drafter's layer passes in one speculative step (its layers, k times), which pay the
/// per-layer overhead; 0 without a drafter on the device.
pub(crate) fn draft_layer_passes(l: &Layout, plan: &Plan) -> f64 {
    match (drafter(l, plan), plan.speculation.as_ref()) {
        (Some((d, _)), Some(s)) => d.model.num_layers() as f64 * s.draft_tokens as f64,
        _ => 0.0,
    }
}

/// The drafter's operators of one pass over a step's segments `segs` (its first pass over a
/// step holding prompt chunks) into `out` (cleared); none without a drafter on the device.
pub(crate) fn draft_segment_ops(l: &Layout, plan: &Plan, segs: &[crate::graph::Segment], out: &mut Vec<Op>) {
    out.clear();
    if let Some((d, dctx)) = drafter(l, plan) {
        // its first pass samples one token a sequence, where the target scores a decode's k + 1
        let first: Vec<crate::graph::Segment> = segs
            .iter()
            .map(|s| crate::graph::Segment {
                sampled: s.sampled.min(1),
                ..*s
            })
            .collect();
        build_draft_step(&dctx, d.fused_inputs, &Geometry::Segments(&first), out);
    }
}

/// The drafter's kernels of that pass that vary with where the segments' tokens sit
/// (`graph::build_kernels` on its context) into `out` (cleared); none without a drafter.
pub(crate) fn draft_segment_kernels(l: &Layout, plan: &Plan, segs: &[crate::graph::Segment], out: &mut Vec<Op>) {
    out.clear();
    if let Some((_, dctx)) = drafter(l, plan) {
        build_kernels(&dctx, segs, out);
    }
}

/// The plan's drafter that runs on the device, with its build context.
fn drafter<'b>(l: &'b Layout, plan: &'b Plan) -> Option<(&'b Drafter, BuildCtx<'b>)> {
    let d = plan.speculation.as_ref()?.drafter.as_ref()?;
    Some((d, l.draft_ctx(d)?))
}

/// The operators of one decode step of `batch` sequences, as the plan runs it: a replayed
/// CUDA graph (one-token steps, `decode_graphs`) launches no kernel from the host.
/// With speculation it is the verification step: k + 1 tokens a sequence, each scored.
pub fn decode_ops(l: &Layout, plan: &Plan, batch: u64) -> Vec<Op> {
    let mut ops: Vec<Op> = Vec::with_capacity(48);
    let q = plan.speculation.as_ref().map_or(1, |s| s.draft_tokens + 1);
    let geo = Geometry::Decode {
        batch,
        queries: q,
        sampled: q,
    };
    build_step(&l.r.ctx, &geo, &mut ops);
    if plan.decode_graphs && batch == 1 && q == 1 {
        for op in &mut ops {
            op.launches = 0.0;
        }
    }
    ops
}

/// Every decode step of the plan (contexts prompt+1 ..= prompt+output-1), in closed form, on
/// the operators `ops` of a step of `batch` sequences (`decode_ops`).
///
/// With speculation a step emits `acceptance_length` tokens on average: the steps are
/// (output - 1) / acceptance_length, at contexts that advance that much a step. Each step's
/// costs are affine in the context, so the steps' sum is the per-token sum over the same
/// contexts divided by the acceptance length. A step is the target's verification (`ops`)
/// and the drafter's passes: one over the step's k + 1 positions (one of them sampled), then
/// k - 1 of one token.
#[allow(clippy::too_many_arguments)]
pub fn decode(l: &Layout, plan: &Plan, batch: u64, ops: &[Op], eff: &Efficiency, bw: f64, breakdown: bool) -> PhaseRun {
    let mut acc = Acc::new(Phase::Decode, breakdown);
    let mut workspace = 0.0f64;
    if plan.output > 1 {
        let ctx0 = plan.prefix + plan.prompt;
        let (lo, hi) = (ctx0 + 1, ctx0 + plan.output - 1);
        let per_step = plan.speculation.as_ref().map_or(1.0, |s| 1.0 / s.acceptance_length);
        for op in ops {
            workspace = workspace.max(op.act_bytes);
            acc.add(
                op.kind,
                op.group,
                op.flags(),
                price_range(op, lo, hi, bw, eff).scaled(per_step),
            );
        }
        let steps = (plan.output - 1) as f64 * per_step;
        acc.overhead(l.r.ctx.model.num_layers(), steps, eff);
        for op in draft_decode_ops(l, plan, batch, true) {
            workspace = workspace.max(op.act_bytes);
            acc.add(
                op.kind,
                op.group,
                op.flags(),
                price_range(&op, lo, hi, bw, eff).scaled(per_step),
            );
        }
        acc.layer_overhead(draft_layer_passes(l, plan) * steps, eff);
    }
    PhaseRun { acc, workspace }
}

/// The numbers of one plan (an `Estimate` without its labels and breakdown; a sweep's row).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Numbers {
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
    pub parallel: Parallel,
    /// Power and energy (spec 60); None where the device lacks a sourced idle or TDP power,
    /// the memory-bound share is not fitted, or the plan has PP (`power::missing` says why).
    pub power: Option<crate::power::Power>,
}

/// The numbers of a plan from its priced phases; `micro`: with PP, the prefill and decode of
/// one micro-batch (GPipe's stage time). Every number is checked finite.
pub fn numbers(
    l: &Layout,
    dev: &Device,
    plan: &Plan,
    pre: &PhaseRun,
    dec: &PhaseRun,
    micro: Option<(&PhaseRun, &PhaseRun)>,
) -> Result<Numbers> {
    let (r, ctx) = (&l.r, &l.r.ctx);
    let bw = dev.memory_bw();
    let layers = ctx.model.num_layers();
    let prefill = pre.acc.totals(r.peak_max, bw);
    let decode = dec.acc.totals(r.peak_max, bw);
    // One request's latency: the full pass through every stage plus the p-1 sends.
    let ttft_s = prefill.time_s;
    let tpot_s = (plan.output > 1).then(|| decode.time_s / (plan.output - 1) as f64);
    let e2e_s = ttft_s + decode.time_s;
    let out_tokens = (plan.batch * plan.output) as f64;
    let stage_layers = layers.div_ceil(plan.pp);
    let stage_share = stage_layers as f64 / layers as f64;

    // Throughput: GPipe fill and drain of m micro-batches, (m + p - 1) x stage time.
    let mb = plan.microbatches();
    let (stage_s, round_s) = match micro {
        Some((pm, dm)) if plan.pp > 1 => {
            // a pipeline stage runs the steps, not the front end that precedes them
            let e2e_m = pm.acc.total.time_s - pm.acc.front_s + dm.acc.total.time_s;
            let sends_m = pm.acc.sends_s + dm.acc.sends_s;
            let stage = (e2e_m - sends_m) * stage_share + sends_m / (plan.pp - 1) as f64;
            (stage, (mb + plan.pp - 1) as f64 * stage)
        }
        _ => (e2e_s, e2e_s),
    };
    // each attention-DP group serves its own batch, as each data-parallel replica does
    let throughput_tok_s = (plan.dp * plan.attention_dp) as f64 * out_tokens / round_s;

    let (layer_w, embed_w, head_w) = l.weights;
    let weights = if plan.pp > 1 {
        layer_w * stage_share + embed_w.max(head_w)
    } else {
        layer_w + embed_w + head_w + l.draft_weight_bytes()
    };
    // a speculating sequence holds KV slots for its k drafts beside its tokens (vLLM allocates
    // the lookahead slots of the tokens it verifies)
    let lookahead = plan.speculation.as_ref().map_or(0, |s| s.draft_tokens);
    let tokens = plan.prefix + plan.prompt + plan.output + lookahead;
    let target_kv = kv_bytes_per_rank(&l.kv_layers, ctx.kv_b, plan.batch, tokens) * stage_share;
    let kv = target_kv * l.device_kv_share()
        + l.draft
            .as_ref()
            .map_or(0.0, |d| kv_bytes_per_rank(&d.kv_layers, ctx.kv_b, plan.batch, tokens));
    let state = l.state_bytes_per_seq() * plan.batch as f64 * stage_share;
    let workspace = pre.workspace.max(dec.workspace);
    let total = weights + kv + state + workspace;
    let budget = dev.memory_bytes() * plan.gpu_memory_utilization;
    let host = l.host.map(|h| HostMemory {
        weights_bytes: h.weights_bytes,
        kv_bytes: target_kv * h.kv_share,
        capacity_bytes: h.capacity_bytes,
    });
    let memory = Memory {
        weights_bytes: weights,
        kv_bytes: kv,
        state_bytes: state,
        activation_bytes: workspace,
        total_bytes: total,
        capacity_bytes: dev.memory_bytes(),
        budget_bytes: budget,
        fits: total <= budget && host.is_none_or(|h| h.weights_bytes + h.kv_bytes <= h.capacity_bytes),
        shortfall_bytes: (total - budget).max(0.0),
        host,
    };
    let nodes = ctx.topo.map_or(1, |t| t.nodes(plan.moe_group() * plan.pp));
    let power = crate::power::of(dev, plan, &prefill, &decode);
    let n = Numbers {
        ttft_s,
        tpot_s,
        e2e_s,
        throughput_tok_s,
        prefill_tok_s: (plan.batch * plan.prompt) as f64 / ttft_s,
        prefill,
        decode,
        memory,
        parallel: Parallel {
            devices: plan.devices(),
            nodes_per_replica: nodes,
            stage_layers,
            microbatches: if plan.pp > 1 { mb } else { 1 },
            stage_s,
            round_s,
        },
        power,
    };
    check_finite(&n)?;
    Ok(n)
}

/// The sequences of one pipeline micro-batch (GPipe), for plans with PP.
pub fn micro_batch(plan: &Plan) -> Option<u64> {
    (plan.pp > 1).then(|| plan.batch.div_ceil(plan.microbatches()))
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
    let l = Layout::new(m, dev, plan, proto)?;
    let bw = dev.memory_bw();
    let pre = prefill(&l, plan, plan.batch, eff, bw, breakdown);
    let dec = decode(
        &l,
        plan,
        plan.batch,
        &decode_ops(&l, plan, plan.batch),
        eff,
        bw,
        breakdown,
    );
    let micro = micro_batch(plan).map(|b| {
        let pm = prefill(&l, plan, b, eff, bw, false);
        let dm = decode(&l, plan, b, &decode_ops(&l, plan, b), eff, bw, false);
        (pm, dm)
    });
    let n = numbers(&l, dev, plan, &pre, &dec, micro.as_ref().map(|(p, d)| (p, d)))?;
    let mut rows = Vec::new();
    for run in [pre, dec] {
        rows.extend(run.acc.rows.unwrap_or_default());
    }
    // `numbers` checked the plan's numbers; the breakdown's rows are checked here
    if let Some(v) = rows.iter().flat_map(|r| r.cost.values()).find(|v| !in_range(v)) {
        return Err(out_of_range("breakdown", v));
    }
    let r = l.r;
    Ok(Estimate {
        numbers: n,
        params: params::count(m),
        gemm_dtype: r.gemm_dtype,
        attention_dtype: r.attn_dtype,
        kv_dtype: plan.kv_dtype(),
        peak_flops: r.peak_max,
        memory_bw: bw,
        warnings: r.warnings,
        breakdown: rows,
        power_missing: crate::power::missing(dev, plan),
    })
}

/// Whether a number may reach the user: finite and not negative.
fn in_range(v: &f64) -> bool {
    v.is_finite() && *v >= 0.0
}

fn out_of_range(name: &str, v: f64) -> Error {
    Error::Input(format!("{name} evaluated to {v}; the inputs are out of range"))
}

/// A NaN or infinity is a bug in the physics or an input that slipped
/// validation; it never reaches the user as a number.
fn check_finite(e: &Numbers) -> Result<()> {
    let phase = |p: &PhaseTotals| {
        [
            p.flops,
            p.bytes,
            p.compute_s,
            p.memory_s,
            p.comm_s,
            p.overhead_s,
            p.time_s,
            p.mfu,
            p.mbu,
        ]
    };
    let m = &e.memory;
    let scalars = [
        ("ttft_s", e.ttft_s),
        ("e2e_s", e.e2e_s),
        ("throughput_tok_s", e.throughput_tok_s),
        ("prefill_tok_s", e.prefill_tok_s),
        ("tpot_s", e.tpot_s.unwrap_or(0.0)),
        ("memory.weights_bytes", m.weights_bytes),
        ("memory.kv_bytes", m.kv_bytes),
        ("memory.activation_bytes", m.activation_bytes),
        ("memory.total_bytes", m.total_bytes),
        ("memory.shortfall_bytes", m.shortfall_bytes),
        ("parallel.stage_s", e.parallel.stage_s),
        ("parallel.round_s", e.parallel.round_s),
        ("power.energy_j", e.power.map_or(0.0, |p| p.energy_j)),
        ("power.prefill.watts", e.power.map_or(0.0, |p| p.prefill.watts)),
        ("power.decode.watts", e.power.map_or(0.0, |p| p.decode.watts)),
    ];
    let (pre, dec) = (phase(&e.prefill), phase(&e.decode));
    // every number checked in one pass; the names are looked up only for the error
    if scalars.iter().all(|(_, v)| in_range(v)) && pre.iter().chain(&dec).all(in_range) {
        return Ok(());
    }
    let named = scalars
        .into_iter()
        .chain(pre.into_iter().map(|v| ("prefill", v)))
        .chain(dec.into_iter().map(|v| ("decode", v)));
    let (name, v) = named
        .into_iter()
        .find(|(_, v)| !in_range(v))
        .unwrap_or(("a number", f64::NAN));
    Err(out_of_range(name, v))
}

#[cfg(test)]
mod offload_tests;
#[cfg(test)]
mod spec_tests;
#[cfg(test)]
pub(crate) mod tests;
