//! The operator graph of one step, per device after TP sharding (spec 30).
//!
//! Every operator's FLOPs and bytes are affine in `k`, the keys one decode
//! query attends (`k = min(L, window)` at context `L`); operators that do
//! not attend have zero slope. A prefill or mixed step is the special case
//! with all slopes zero and the exact pair/key counts folded into the
//! constant terms. One builder serves both, so decode sums and step prices
//! can never disagree on structure.

use crate::attention::{causal_pairs, distinct_keys};
use crate::collectives::{self, Collective, Link, ProtocolTable};
use crate::model::{Attention, Ffn, LayerGroup, Model};

/// Group index of operators outside the decoder layers.
pub const MODEL_LEVEL: u16 = u16::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Embedding,
    PositionEmbedding,
    EmbeddingAllReduce,
    Norm,
    QkvProj,
    QkNorm,
    Rotary,
    KvCacheWrite,
    Attention,
    OutProj,
    AttnAllReduce,
    FfnUp,
    FfnAct,
    FfnDown,
    Router,
    ExpertUp,
    ExpertAct,
    ExpertDown,
    SharedExpertUp,
    SharedExpertAct,
    SharedExpertDown,
    FfnAllReduce,
    FinalNorm,
    LmHead,
    LogitsAllGather,
    LayerOverhead,
    StepOverhead,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Embedding => "embedding",
            OpKind::PositionEmbedding => "position_embedding",
            OpKind::EmbeddingAllReduce => "embedding_allreduce",
            OpKind::Norm => "norm",
            OpKind::QkvProj => "qkv_proj",
            OpKind::QkNorm => "qk_norm",
            OpKind::Rotary => "rotary",
            OpKind::KvCacheWrite => "kv_cache_write",
            OpKind::Attention => "attention",
            OpKind::OutProj => "o_proj",
            OpKind::AttnAllReduce => "attn_allreduce",
            OpKind::FfnUp => "ffn_up",
            OpKind::FfnAct => "ffn_act",
            OpKind::FfnDown => "ffn_down",
            OpKind::Router => "router",
            OpKind::ExpertUp => "expert_up",
            OpKind::ExpertAct => "expert_act",
            OpKind::ExpertDown => "expert_down",
            OpKind::SharedExpertUp => "shared_expert_up",
            OpKind::SharedExpertAct => "shared_expert_act",
            OpKind::SharedExpertDown => "shared_expert_down",
            OpKind::FfnAllReduce => "ffn_allreduce",
            OpKind::FinalNorm => "final_norm",
            OpKind::LmHead => "lm_head",
            OpKind::LogitsAllGather => "logits_allgather",
            OpKind::LayerOverhead => "layer_overhead",
            OpKind::StepOverhead => "step_overhead",
        }
    }

    pub fn is_comm(self) -> bool {
        matches!(
            self,
            OpKind::EmbeddingAllReduce
                | OpKind::AttnAllReduce
                | OpKind::FfnAllReduce
                | OpKind::LogitsAllGather
        )
    }
}

/// One operator of a step: `repeat` invocations (layers of its group), each
/// launching `launches` kernels, with FLOPs `f0 + f1 k` and bytes `b0 + b1 k`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub group: u16,
    pub repeat: f64,
    pub launches: f64,
    /// Dense peak (FLOP/s) of the operator's compute dtype, at efficiency 1.
    pub peak: f64,
    pub f0: f64,
    pub f1: f64,
    pub b0: f64,
    pub b1: f64,
    /// Bytes of `b0` that are activations (not weights, not KV cache).
    pub act_bytes: f64,
    /// Attention window capping `k` in decode.
    pub window: Option<u64>,
    /// Communication time per invocation (comm operators only).
    pub comm_s: f64,
}

/// Tokens of one kind in a step: `count` sequences, each adding `new`
/// tokens on top of `prefix` cached ones; `samples` when they emit a token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    pub count: u64,
    pub new: u64,
    pub prefix: u64,
    pub samples: bool,
}

/// What a step holds.
#[derive(Clone, Copy, Debug)]
pub enum Geometry<'a> {
    /// Prefill chunks (and later, mixed steps): exact constant counts.
    Segments(&'a [Segment]),
    /// `batch` sequences each decoding one token at a symbolic context.
    Decode { batch: u64 },
}

impl Geometry<'_> {
    fn tokens(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| (x.count * x.new) as f64).sum(),
            Geometry::Decode { batch } => *batch as f64,
        }
    }

    fn samples(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().filter(|x| x.samples).map(|x| x.count as f64).sum(),
            Geometry::Decode { batch } => *batch as f64,
        }
    }

    /// (pairs0, pairs1, keys0, keys1): pair and distinct-key counts as affine
    /// functions of the decode key count `k`.
    fn attention(&self, window: Option<u64>) -> (f64, f64, f64, f64) {
        match self {
            Geometry::Segments(s) => {
                let mut p = 0.0;
                let mut k = 0.0;
                for x in s.iter() {
                    p += x.count as f64 * causal_pairs(x.new, x.prefix, window);
                    k += x.count as f64 * distinct_keys(x.new, x.prefix, window);
                }
                (p, 0.0, k, 0.0)
            }
            Geometry::Decode { batch } => (0.0, *batch as f64, 0.0, *batch as f64),
        }
    }
}

/// Plan-derived constants the builder needs.
#[derive(Clone, Copy, Debug)]
pub struct BuildCtx<'a> {
    pub model: &'a Model,
    pub tp: u64,
    /// Bytes per activation element.
    pub act_b: f64,
    pub kv_b: f64,
    /// Bytes per weight of the linear layers.
    pub w_lin_b: f64,
    /// Bytes per weight of the embedding table and LM head.
    pub w_emb_b: f64,
    pub peak_gemm: f64,
    pub peak_act: f64,
    pub link: Option<Link>,
    pub proto: ProtocolTable,
}

impl BuildCtx<'_> {
    fn comm(&self, op: Collective, msg: f64) -> f64 {
        match self.link {
            Some(link) if self.tp > 1 => collectives::time(op, self.tp, msg, link, &self.proto),
            _ => 0.0,
        }
    }
}

struct Builder<'a, 'b> {
    ctx: &'b BuildCtx<'a>,
    out: &'b mut Vec<Op>,
    group: u16,
    repeat: f64,
}

impl Builder<'_, '_> {
    fn push(
        &mut self,
        kind: OpKind,
        peak: f64,
        f: (f64, f64),
        b: (f64, f64),
        act: f64,
        window: Option<u64>,
    ) {
        self.out.push(Op {
            kind,
            group: self.group,
            repeat: self.repeat,
            launches: 1.0,
            peak,
            f0: f.0,
            f1: f.1,
            b0: b.0,
            b1: b.1,
            act_bytes: act,
            window,
            comm_s: 0.0,
        });
    }

    /// GEMM [m x k] x [k x n]: 2mnk FLOPs; bytes = weights (`weight_sets`
    /// copies of k x n at `w_b` bytes, bias in the activation dtype) + input + output.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        kind: OpKind,
        m: f64,
        k: f64,
        n: f64,
        weight_sets: f64,
        w_b: f64,
        bias: bool,
    ) {
        let c = self.ctx;
        let act = (m * k + m * n) * c.act_b;
        let mut w = weight_sets * k * n * w_b;
        if bias {
            w += weight_sets * n * c.act_b;
        }
        self.push(
            kind,
            c.peak_gemm,
            (2.0 * m * n * k, 0.0),
            (w + act, 0.0),
            act,
            None,
        );
    }

    /// Elementwise op over `elems` outputs, reading `reads` x and writing 1 x.
    fn elementwise(
        &mut self,
        kind: OpKind,
        elems: f64,
        flops_per: f64,
        read_per: f64,
        weight_bytes: f64,
    ) {
        let c = self.ctx;
        let act = elems * (read_per + 1.0) * c.act_b;
        self.push(
            kind,
            c.peak_act,
            (elems * flops_per, 0.0),
            (act + weight_bytes, 0.0),
            act,
            None,
        );
    }

    fn comm(&mut self, kind: OpKind, op: Collective, msg: f64) {
        let s = self.ctx.comm(op, msg);
        self.out.push(Op {
            kind,
            group: self.group,
            repeat: self.repeat,
            launches: 1.0,
            peak: self.ctx.peak_act,
            f0: 0.0,
            f1: 0.0,
            b0: 0.0,
            b1: 0.0,
            act_bytes: msg,
            window: None,
            comm_s: s,
        });
    }

    /// A feed-forward block of width `f` (per rank `f/t`) on `m` token rows,
    /// reading `weight_sets` copies of its weights (1 for dense, the expected
    /// distinct experts for routed experts).
    #[allow(clippy::too_many_arguments)]
    fn mlp(
        &mut self,
        kinds: [OpKind; 3],
        m: f64,
        f: u64,
        gated: bool,
        act_flops: f64,
        bias: bool,
        weight_sets: f64,
    ) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let ft = (f / c.tp) as f64;
        let up = if gated { 2.0 * ft } else { ft };
        self.gemm(kinds[0], m, d, up, weight_sets, c.w_lin_b, bias);
        self.elementwise(
            kinds[1],
            m * ft,
            act_flops,
            if gated { 2.0 } else { 1.0 },
            0.0,
        );
        self.gemm(kinds[2], m, ft, d, weight_sets, c.w_lin_b, bias);
    }

    fn attention(&mut self, a: &Attention, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let hd = a.head_dim as f64;
        let h_t = (a.heads / c.tp) as f64;
        let kv_t = a.kv_heads.div_ceil(c.tp) as f64;
        let norm = c.model.norm;
        self.gemm(
            OpKind::QkvProj,
            t,
            d,
            (h_t + 2.0 * kv_t) * hd,
            1.0,
            c.w_lin_b,
            a.qkv_bias,
        );
        if a.qk_norm {
            let w = 2.0 * hd * c.act_b;
            self.elementwise(
                OpKind::QkNorm,
                t * (h_t + kv_t) * hd,
                norm.flops_per_element(),
                1.0,
                w,
            );
        }
        if a.rotary {
            // x cos + rotate(x) sin: 2 multiplies and 1 add per element.
            self.elementwise(OpKind::Rotary, t * (h_t + kv_t) * hd, 3.0, 1.0, 0.0);
        }
        // New K and V rows into the cache: read in the activation dtype, write in the KV dtype.
        let kv_elems = t * 2.0 * kv_t * hd;
        let kvw = kv_elems * (c.act_b + c.kv_b);
        self.push(
            OpKind::KvCacheWrite,
            c.peak_act,
            (0.0, 0.0),
            (kvw, 0.0),
            kv_elems * c.act_b,
            None,
        );
        // Attention: QK^T and PV over the exact pairs; reads Q, the attended
        // K and V rows (in the KV dtype), writes O. No S x S matrix in memory.
        let (p0, p1, k0, k1) = geo.attention(a.window);
        let per_pair = 4.0 * h_t * hd;
        let per_key = 2.0 * kv_t * hd * c.kv_b;
        let qo = 2.0 * t * h_t * hd * c.act_b;
        self.push(
            OpKind::Attention,
            c.peak_act,
            (per_pair * p0, per_pair * p1),
            (qo + per_key * k0, per_key * k1),
            qo,
            a.window,
        );
        self.gemm(OpKind::OutProj, t, h_t * hd, d, 1.0, c.w_lin_b, a.o_bias);
        if c.tp > 1 {
            self.comm(
                OpKind::AttnAllReduce,
                Collective::AllReduce,
                t * d * c.act_b,
            );
        }
    }

    fn ffn(&mut self, g: &LayerGroup, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        match &g.ffn {
            Ffn::Dense {
                intermediate_size,
                gated,
                activation,
                bias,
            } => {
                let af = activation.flops_per_element(*gated);
                self.mlp(
                    [OpKind::FfnUp, OpKind::FfnAct, OpKind::FfnDown],
                    t,
                    *intermediate_size,
                    *gated,
                    af,
                    *bias,
                    1.0,
                );
            }
            Ffn::Moe {
                num_experts,
                top_k,
                expert_intermediate_size,
                shared_intermediate_size,
                gated,
                activation,
                bias,
                router_bias,
            } => {
                let e = *num_experts as f64;
                let k = *top_k as f64;
                let af = activation.flops_per_element(*gated);
                // Router: a replicated GEMM to E logits, weights in the activation dtype.
                self.gemm(OpKind::Router, t, d, e, 1.0, c.act_b, *router_bias);
                // Expected distinct experts under uniform routing: E (1 - (1 - k/E)^T).
                let distinct = e * (1.0 - (1.0 - k / e).powf(t));
                self.mlp(
                    [OpKind::ExpertUp, OpKind::ExpertAct, OpKind::ExpertDown],
                    t * k,
                    *expert_intermediate_size,
                    *gated,
                    af,
                    *bias,
                    distinct,
                );
                if *shared_intermediate_size > 0 {
                    self.mlp(
                        [
                            OpKind::SharedExpertUp,
                            OpKind::SharedExpertAct,
                            OpKind::SharedExpertDown,
                        ],
                        t,
                        *shared_intermediate_size,
                        *gated,
                        af,
                        *bias,
                        1.0,
                    );
                }
            }
        }
        if c.tp > 1 {
            self.comm(OpKind::FfnAllReduce, Collective::AllReduce, t * d * c.act_b);
        }
    }
}

/// Appends the operators of one step to `out` (cleared first).
pub fn build_step(ctx: &BuildCtx, geo: &Geometry, out: &mut Vec<Op>) {
    out.clear();
    let m = ctx.model;
    let d = m.hidden_size as f64;
    let t = geo.tokens();
    let samples = geo.samples();
    let tpf = ctx.tp as f64;
    let norm = m.norm;
    let norm_w = |n: f64| n * norm.params(1) as f64 * ctx.act_b;

    let mut b = Builder {
        ctx,
        out,
        group: MODEL_LEVEL,
        repeat: 1.0,
    };
    // Embedding lookup (vocab-parallel under TP): read T rows, write T x d.
    let act = t * d * ctx.act_b;
    b.push(
        OpKind::Embedding,
        ctx.peak_act,
        (0.0, 0.0),
        (t * d * ctx.w_emb_b / tpf + act, 0.0),
        act,
        None,
    );
    if m.position_embeddings > 0 {
        // Learned absolute positions: read T rows, add to the hidden state.
        let act = 2.0 * t * d * ctx.act_b;
        b.push(
            OpKind::PositionEmbedding,
            ctx.peak_act,
            (t * d, 0.0),
            (t * d * ctx.w_emb_b + act, 0.0),
            act,
            None,
        );
    }
    if ctx.tp > 1 {
        b.comm(
            OpKind::EmbeddingAllReduce,
            Collective::AllReduce,
            t * d * ctx.act_b,
        );
    }
    for (gi, g) in m.layer_groups.iter().enumerate() {
        b.group = gi as u16;
        b.repeat = g.count as f64;
        let n = g.norms as f64;
        b.elementwise(
            OpKind::Norm,
            n * t * d,
            norm.flops_per_element(),
            1.0,
            norm_w(n * d),
        );
        b.attention(&g.attention, geo, t);
        b.ffn(g, t);
    }
    b.group = MODEL_LEVEL;
    b.repeat = 1.0;
    b.elementwise(
        OpKind::FinalNorm,
        t * d,
        norm.flops_per_element(),
        1.0,
        norm_w(d),
    );
    if samples > 0.0 {
        let v = m.vocab_size as f64 / tpf;
        b.gemm(
            OpKind::LmHead,
            samples,
            d,
            v,
            1.0,
            ctx.w_emb_b,
            m.lm_head_bias,
        );
        if ctx.tp > 1 {
            b.comm(
                OpKind::LogitsAllGather,
                Collective::AllGather,
                samples * m.vocab_size as f64 * ctx.act_b,
            );
        }
    }
}
