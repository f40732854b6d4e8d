//! The operator graph of one step, per device after TP sharding (spec 30).
//!
//! Every operator's FLOPs and bytes are affine in `k`, the keys one decode
//! query attends (`k` at context `L`, as `attention::DecodeKeys` reads the cache); operators that do
//! not attend have zero slope. A prefill or mixed step is the special case
//! with all slopes zero and the exact pair/key counts folded into the
//! constant terms. One builder serves both, so decode sums and step prices
//! can never disagree on structure.

use crate::attention::{causal_pairs, chunked_keys, chunked_pairs, distinct_keys, DecodeKeys};
use crate::collectives::{Collective, ProtocolTable, Topology};
use crate::model::{Attention, Ffn, LayerGroup, Mla, Model, NormKind, Recurrent, Scan};
use crate::weights::{Role, WeightFormat, N_ROLES};

/// The keys of an operator whose cost does not depend on the context.
const NO_KEYS: DecodeKeys = DecodeKeys::exact(None);

/// Group index of operators outside the decoder layers.
pub const MODEL_LEVEL: u16 = u16::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Embedding,
    PositionEmbedding,
    EmbeddingAllReduce,
    Norm,
    QkvProj,
    QLoraProj,
    KvLoraProj,
    LatentNorm,
    KvUpProj,
    QAbsorb,
    VUnabsorb,
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
    /// Dispatch and combine of routed tokens between attention-DP groups (all-to-all).
    ExpertDispatch,
    ActQuant,
    /// The input quantisation of MLA's per-key up-projection: it varies with the step's segments.
    KvUpActQuant,
    ExpertUp,
    ExpertAct,
    ExpertDown,
    SharedExpertUp,
    SharedExpertAct,
    SharedExpertDown,
    FfnAllReduce,
    FinalNorm,
    PpSend,
    LmHead,
    LogitsAllGather,
    /// The sigmoid output gate of gated attention (Qwen3-Next / Qwen3.5).
    AttnGate,
    /// A latent MoE's projections into and out of the experts' width (Nemotron-3).
    MoeLatentProj,
    /// The sparse-attention indexer's projections (wq_b, wk, weights_proj).
    IndexerProj,
    /// The indexer's key-cache write.
    IndexerCacheWrite,
    /// The indexer scoring every cached key for each query (and picking the top-k).
    IndexerScores,
    /// Gated DeltaNet: the input projection (q, k, v, z, b, a).
    LinearInProj,
    /// Gated DeltaNet: the short causal depthwise convolution and its SiLU.
    ShortConv,
    /// Gated DeltaNet: the gated delta rule over the recurrent state (chunked scan in prefill).
    LinearAttention,
    /// Gated DeltaNet: the gated RMSNorm of the output.
    GatedNorm,
    /// Gated DeltaNet: the output projection.
    LinearOutProj,
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
            OpKind::QLoraProj => "q_lora_proj",
            OpKind::KvLoraProj => "kv_lora_proj",
            OpKind::LatentNorm => "latent_norm",
            OpKind::KvUpProj => "kv_up_proj",
            OpKind::QAbsorb => "q_absorb",
            OpKind::VUnabsorb => "v_unabsorb",
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
            OpKind::ExpertDispatch => "expert_dispatch_combine",
            OpKind::ActQuant => "act_quant",
            OpKind::KvUpActQuant => "kv_up_act_quant",
            OpKind::ExpertUp => "expert_up",
            OpKind::ExpertAct => "expert_act",
            OpKind::ExpertDown => "expert_down",
            OpKind::SharedExpertUp => "shared_expert_up",
            OpKind::SharedExpertAct => "shared_expert_act",
            OpKind::SharedExpertDown => "shared_expert_down",
            OpKind::FfnAllReduce => "ffn_allreduce",
            OpKind::FinalNorm => "final_norm",
            OpKind::PpSend => "pp_send",
            OpKind::LmHead => "lm_head",
            OpKind::LogitsAllGather => "logits_allgather",
            OpKind::AttnGate => "attn_gate",
            OpKind::MoeLatentProj => "moe_latent_proj",
            OpKind::IndexerProj => "indexer_proj",
            OpKind::IndexerCacheWrite => "indexer_cache_write",
            OpKind::IndexerScores => "indexer_scores",
            OpKind::LinearInProj => "linear_in_proj",
            OpKind::ShortConv => "short_conv",
            OpKind::LinearAttention => "linear_attention",
            OpKind::GatedNorm => "gated_norm",
            OpKind::LinearOutProj => "linear_out_proj",
            OpKind::LayerOverhead => "layer_overhead",
            OpKind::StepOverhead => "step_overhead",
        }
    }

    /// The operators of a prefill step whose cost depends on where its tokens sit in their
    /// sequences (the attended pairs and keys), not only on how many tokens, sampling
    /// sequences and sequences the step holds: what `build_kernels` builds.
    pub fn varies_with_segments(self) -> bool {
        matches!(
            self,
            OpKind::Attention
                | OpKind::KvUpProj
                | OpKind::KvUpActQuant
                | OpKind::IndexerScores
                | OpKind::LinearAttention
        )
    }

    /// The operators of a decode step whose cost grows with the context (they read the cache).
    pub fn reads_context(self) -> bool {
        matches!(self, OpKind::Attention | OpKind::IndexerScores)
    }

    /// The routed-expert kernels (their memory efficiency may be fitted apart).
    pub fn is_routed_expert(self) -> bool {
        matches!(self, OpKind::ExpertUp | OpKind::ExpertAct | OpKind::ExpertDown)
    }

    pub fn is_comm(self) -> bool {
        matches!(
            self,
            OpKind::EmbeddingAllReduce
                | OpKind::ExpertDispatch
                | OpKind::AttnAllReduce
                | OpKind::FfnAllReduce
                | OpKind::LogitsAllGather
                | OpKind::PpSend
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
    /// The keys a decode step reads at context `L` (`k`, for `f1` and `b1`).
    pub keys: DecodeKeys,
    /// Communication time per invocation (comm operators only).
    pub comm_s: f64,
    /// A GEMM on weights stored below 16 bits (its kernels are fitted apart: eta_compute_quant).
    pub quantized: bool,
    /// The weight role whose storage format a GEMM reads (a fused GEMM: its first part's); a
    /// quantized GEMM takes its format's fitted efficiency where one is given.
    pub role: Option<Role>,
    /// A routed-expert kernel over more than one token of a step: tokens are gathered per
    /// expert into grouped GEMMs (eta_moe). With one token the selected experts are read by
    /// the same GEMV kernels as dense weights (eta_mem).
    pub grouped: bool,
    /// A fused (flash) attention kernel of a GQA/MQA layer, and which of the runtime's kernels
    /// runs it: a prefill step's (chunks on their prefixes) or a decode step's (one query per
    /// sequence). A runtime with attention kernels of its own fitted prices it with them
    /// (`Efficiency::attention`).
    pub attention: Option<AttnPhase>,
    /// The kernel's work items per invocation: sequences x KV heads on the rank (a fused
    /// attention kernel schedules its thread blocks per sequence and KV head).
    pub items: f64,
}

/// What the breakdown keeps of an operator besides its cost (`Op::flags`).
pub type OpFlags = (bool, Option<Role>, bool, Option<AttnPhase>);

/// Which fused attention kernel runs an attention operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttnPhase {
    Prefill,
    Decode,
}

impl AttnPhase {
    pub fn name(self) -> &'static str {
        match self {
            AttnPhase::Prefill => "prefill",
            AttnPhase::Decode => "decode",
        }
    }
}

/// Tokens of one kind in a step: `count` sequences, each adding `new`
/// tokens on top of `prefix` cached ones; `samples` when they emit a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub count: u64,
    pub new: u64,
    pub prefix: u64,
    pub samples: bool,
}

/// What a step holds.
#[derive(Clone, Copy, Debug)]
pub enum Geometry<'a> {
    /// Prefill chunks (and later, mixed steps): exact constant counts. MLA
    /// runs in its expanded form here.
    Segments(&'a [Segment]),
    /// `batch` sequences each decoding one token at a symbolic context. MLA
    /// runs in its weight-absorbed form here.
    Decode { batch: u64 },
}

impl Geometry<'_> {
    fn tokens(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| (x.count * x.new) as f64).sum(),
            Geometry::Decode { batch } => *batch as f64,
        }
    }

    /// Sequences in the step.
    fn sequences(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| x.count as f64).sum(),
            Geometry::Decode { batch } => *batch as f64,
        }
    }

    fn samples(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().filter(|x| x.samples).map(|x| x.count as f64).sum(),
            Geometry::Decode { batch } => *batch as f64,
        }
    }

    /// Scores an unfused attention computes and stores per head, affine in the decode key
    /// count `k`: every query against every key of the cache view (the causal mask is applied
    /// to the full rectangle); in decode, one query per sequence, so the attended pairs.
    fn score_rectangle(&self, window: Option<u64>, chunk: Option<u64>) -> (f64, f64) {
        match self {
            Geometry::Segments(s) => {
                let keys = |x: &Segment| match chunk {
                    Some(c) => chunked_keys(x.new, x.prefix, c),
                    None => distinct_keys(x.new, x.prefix, window),
                };
                let r = s.iter().map(|x| (x.count * x.new) as f64 * keys(x)).sum();
                (r, 0.0)
            }
            Geometry::Decode { .. } => {
                let (p0, p1, _, _) = self.attention(window);
                (p0, p1)
            }
        }
    }

    /// `attention`, for a layer with chunked local attention of `chunk` tokens.
    fn attention_chunked(&self, chunk: u64) -> (f64, f64, f64, f64) {
        self.counted(|x| {
            (
                chunked_pairs(x.new, x.prefix, chunk),
                chunked_keys(x.new, x.prefix, chunk),
            )
        })
    }

    /// (pairs0, pairs1, keys0, keys1): pair and distinct-key counts as affine
    /// functions of the decode key count `k`.
    fn attention(&self, window: Option<u64>) -> (f64, f64, f64, f64) {
        self.counted(|x| {
            (
                causal_pairs(x.new, x.prefix, window),
                distinct_keys(x.new, x.prefix, window),
            )
        })
    }

    /// The (pairs, keys) of every segment by `per_seq` (one sequence's), summed; in decode one
    /// pair and one key per sequence and attended key (the slopes).
    fn counted(&self, per_seq: impl Fn(&Segment) -> (f64, f64)) -> (f64, f64, f64, f64) {
        match self {
            Geometry::Segments(s) => {
                let (mut p, mut k) = (0.0, 0.0);
                for x in s.iter() {
                    let (px, kx) = per_seq(x);
                    p += x.count as f64 * px;
                    k += x.count as f64 * kx;
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
    /// Expert-parallel degree (it divides the MoE group, `tp` x `attention_dp`).
    pub ep: u64,
    /// Attention data-parallel groups: the routed experts serve every group's tokens.
    pub attention_dp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// All sequences hold the same tokens (MoE routing is shared).
    pub identical_sequences: bool,
    /// Zipf exponent of routed-expert popularity (0: uniform routing); see `distinct_experts`.
    pub routing_skew: f64,
    /// Bytes moved per attention score when the runtime materialises the score matrix
    /// (unfused attention); 0 for fused (flash) attention.
    pub attention_score_bytes: f64,
    /// How decode reads the KV cache (`Plan::swa_cache_extra`, `kv_pad`, `kv_skip_masked_tail`);
    /// its window is each layer's own, and the masked-tail skip applies to steps of several
    /// sequences only (`decode_keys`), so one context serves plans of any batch.
    pub kv_read: DecodeKeys,
    /// Bytes per activation element.
    pub act_b: f64,
    pub kv_b: f64,
    /// Tokens per chunk of the chunked linear-attention scan (`Plan::linear_chunk`).
    pub linear_chunk: f64,
    /// Storage format of each weight role (indexed like `Role::ALL`).
    pub formats: [WeightFormat; N_ROLES],
    /// Dense peak (FLOP/s) of the GEMMs on each weight role.
    pub peaks: [f64; N_ROLES],
    /// Dense peak of activation-dtype kernels (attention, elementwise).
    pub peak_act: f64,
    /// The devices' links (None on a single device).
    pub topo: Option<Topology>,
    pub proto: ProtocolTable,
}

impl BuildCtx<'_> {
    /// How the routed experts are split over the MoE group (`tp` x `attention_dp` ranks):
    /// (EP, MoE TP), E/EP whole experts a rank, each sharded over MoE TP = group / EP ranks.
    pub fn expert_split(&self) -> (f64, f64) {
        let ep = self.ep.max(1) as f64;
        (ep, (self.tp * self.attention_dp.max(1)) as f64 / ep)
    }

    fn comm(&self, op: Collective, ranks: u64, msg: f64) -> f64 {
        match self.topo {
            Some(t) if ranks > 1 => t.time(op, ranks, msg, &self.proto).time_s,
            _ => 0.0,
        }
    }

    /// Activation sends between the `pp` stages of one step: TP-major
    /// placement (stage s holds devices s*tp .. (s+1)*tp), so a boundary
    /// crosses nodes when those devices sit on different nodes.
    fn pp_sends(&self, msg: f64) -> f64 {
        let Some(topo) = self.topo else { return 0.0 };
        (1..self.pp)
            .map(|s| {
                let crosses = match topo.devices_per_node {
                    Some(d) => (s * self.tp - 1) / d != (s * self.tp) / d,
                    None => false,
                };
                match (crosses, topo.scaleout) {
                    (true, Some(out)) => crate::collectives::time(Collective::PointToPoint, 2, msg, out, &self.proto),
                    _ => crate::collectives::time(
                        Collective::PointToPoint,
                        2,
                        msg,
                        topo.local(Collective::PointToPoint, 2),
                        &self.proto,
                    ),
                }
            })
            .sum()
    }

    pub fn format(&self, r: Role) -> WeightFormat {
        self.formats[r as usize]
    }

    pub fn peak(&self, r: Role) -> f64 {
        self.peaks[r as usize]
    }

    /// The keys one prefill query is computed against on a layer with attention window
    /// `window`: the window, or with `swa_cache_extra` the whole ring of w + extra cells up to
    /// the query (llama.cpp's CUDA flash attention skips only trailing masked tiles, so the
    /// masked cells before the window are computed too).
    pub fn swa_span(&self, window: Option<u64>) -> Option<u64> {
        DecodeKeys { window, ..self.kv_read }.ring()
    }

    /// The keys a decode step of `batch` sequences reads on a layer with attention window
    /// `window` (`Plan::decode_keys`: the masked-tail skip needs several sequences).
    pub fn decode_keys(&self, window: Option<u64>, batch: u64) -> DecodeKeys {
        DecodeKeys {
            window,
            skip_masked_tail: self.kv_read.skip_masked_tail && batch > 1,
            ..self.kv_read
        }
    }
}

struct Builder<'a, 'b> {
    ctx: &'b BuildCtx<'a>,
    out: &'b mut Vec<Op>,
    group: u16,
    repeat: f64,
}

impl Op {
    /// What the breakdown keeps of an operator besides its cost: quantized, role, grouped, the
    /// fused attention kernel that runs it.
    pub fn flags(&self) -> OpFlags {
        (self.quantized, self.role, self.grouped, self.attention)
    }
}

impl Builder<'_, '_> {
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, kind: OpKind, peak: f64, f: (f64, f64), b: (f64, f64), act: f64, keys: DecodeKeys) {
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
            keys,
            comm_s: 0.0,
            quantized: false,
            role: None,
            grouped: false,
            attention: None,
            items: 0.0,
        });
    }

    /// GEMM [m x k] x [k x n] whose n columns are made of parts stored in
    /// different roles (fused q/k/v): 2mnk FLOPs; bytes = `weight_sets` copies
    /// of the weights (bias in the activation dtype) + input + output.
    fn gemm_parts(&mut self, kind: OpKind, m: f64, k: f64, parts: &[(f64, Role)], weight_sets: f64, bias: bool) {
        let c = self.ctx;
        let n: f64 = parts.iter().map(|p| p.0).sum();
        let act = (m * k + m * n) * c.act_b;
        let mut w: f64 = parts.iter().map(|(np, r)| c.format(*r).bytes(k, *np)).sum();
        if bias {
            w += n * c.act_b;
        }
        let peak = c.peak(parts[0].1);
        self.push(
            kind,
            peak,
            (2.0 * m * n * k, 0.0),
            (weight_sets * w + act, 0.0),
            act,
            NO_KEYS,
        );
        if let Some(op) = self.out.last_mut() {
            op.quantized = c.format(parts[0].1).bits < 16.0;
            op.role = Some(parts[0].1);
        }
        // a GEMM on a quantised compute path (dynamic W8A8 / W4A4) first quantises its input
        // in a kernel of its own: the m x k activations read, and written at `act_bits`
        let f = c.format(parts[0].1);
        if let (Some(bits), Some(_)) = (f.act_bits, f.compute) {
            if peak > c.peak_act {
                let bytes = m * k * (c.act_b + bits / 8.0);
                let quant = if kind.varies_with_segments() {
                    OpKind::KvUpActQuant
                } else {
                    OpKind::ActQuant
                };
                self.push(quant, c.peak_act, (0.0, 0.0), (bytes, 0.0), bytes, NO_KEYS);
            }
        }
    }

    fn gemm(&mut self, kind: OpKind, m: f64, k: f64, n: f64, role: Role, bias: bool) {
        self.gemm_parts(kind, m, k, &[(n, role)], 1.0, bias);
    }

    /// A GEMM whose weights stay in the activation dtype (router, MLA latent norms' neighbours).
    fn gemm_act(&mut self, kind: OpKind, m: f64, k: f64, n: f64, bias: bool) {
        let c = self.ctx;
        let act = (m * k + m * n) * c.act_b;
        let w = (k * n + if bias { n } else { 0.0 }) * c.act_b;
        self.push(kind, c.peak_act, (2.0 * m * n * k, 0.0), (w + act, 0.0), act, NO_KEYS);
    }

    /// Elementwise op over `elems` outputs, reading `read_per` inputs per output.
    fn elementwise(&mut self, kind: OpKind, elems: f64, flops_per: f64, read_per: f64, weight_bytes: f64) {
        let c = self.ctx;
        let act = elems * (read_per + 1.0) * c.act_b;
        self.push(
            kind,
            c.peak_act,
            (elems * flops_per, 0.0),
            (act + weight_bytes, 0.0),
            act,
            NO_KEYS,
        );
    }

    fn comm(&mut self, kind: OpKind, op: Collective, ranks: u64, msg: f64) {
        let s = self.ctx.comm(op, ranks, msg);
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
            keys: NO_KEYS,
            comm_s: s,
            quantized: false,
            role: None,
            grouped: false,
            attention: None,
            items: 0.0,
        });
    }

    /// `count` norms, each over `rows` x `width` elements with its own weights.
    fn norm(&mut self, kind: OpKind, count: f64, rows: f64, width: f64) {
        self.norm_of(self.ctx.model.norm, kind, count, rows, width);
    }

    /// `count` norms of kind `norm` (the model's, or one its family fixes: the indexer's
    /// LayerNorm), each over `rows` x `width` elements with its own weights.
    fn norm_of(&mut self, norm: NormKind, kind: OpKind, count: f64, rows: f64, width: f64) {
        let w = count * width * norm.params(1) as f64 * self.ctx.act_b;
        self.elementwise(kind, count * rows * width, norm.flops_per_element(), 1.0, w);
    }

    /// A recurrent mixer (Gated DeltaNet or Mamba2) on `t` tokens, heads split over the TP
    /// ranks: the input projection, the short convolution (reading and writing each sequence's
    /// conv state), the scan over the recurrent state, the gated norm and the output projection.
    fn recurrent(&mut self, r: &Recurrent, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        self.gemm(OpKind::LinearInProj, t, d, r.in_cols, Role::Q, r.bias);
        // depthwise causal conv: a multiply-add per tap, then SiLU (3); the conv state of each
        // sequence (its last kernel - 1 inputs) read and written
        let state = geo.sequences() * r.conv_ch * (r.kernel - 1.0) * 2.0 * c.act_b;
        let act = t * r.conv_ch * 2.0 * c.act_b + state;
        self.push(
            OpKind::ShortConv,
            c.peak_act,
            (t * r.conv_ch * (2.0 * r.kernel + 3.0), 0.0),
            (act + r.conv_ch * r.kernel * c.act_b, 0.0),
            act,
            NO_KEYS,
        );
        self.linear_kernel(r, geo, t);
        // RMSNorm of the output, times SiLU(z): norm + silu (3) + multiply (1)
        let flops = NormKind::Rms.flops_per_element() + 4.0;
        self.elementwise(OpKind::GatedNorm, t * r.out_in, flops, 2.0, r.out_in * c.act_b);
        self.gemm(OpKind::LinearOutProj, t, r.out_in, d, Role::O, r.bias);
        if c.tp > 1 {
            self.comm(OpKind::AttnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }

    /// The scan of one recurrent layer group (spec 30, linear attention): each sequence's new
    /// tokens in chunks (`Recurrent::chunk`, else the plan's `linear_chunk`; the last one
    /// shorter), every chunk costing `chunked_scan_flops` per head; a decode token is a chunk of
    /// one. Bytes: the scan's inputs and outputs, and each sequence's state read and written
    /// once (in the state dtype).
    fn linear_kernel(&mut self, r: &Recurrent, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let chunk = if r.chunk > 0 { r.chunk as f64 } else { c.linear_chunk };
        let per_seq = |new: u64| chunked_scan_flops(r.scan, new, chunk, r.heads, r.dk, r.dv);
        let flops = match geo {
            Geometry::Segments(s) => s.iter().map(|x| x.count as f64 * per_seq(x.new)).sum(),
            Geometry::Decode { batch } => *batch as f64 * per_seq(1),
        };
        let io = t * r.io * c.act_b;
        let state = geo.sequences() * 2.0 * r.heads * r.dk * r.dv * r.state_bytes.unwrap_or(c.act_b);
        self.push(
            OpKind::LinearAttention,
            c.peak_act,
            (flops, 0.0),
            (io + state, 0.0),
            io,
            NO_KEYS,
        );
    }

    /// A feed-forward block from width `d` (the hidden size, or a latent MoE's width): up
    /// (gate+up when gated) to width `ft` per rank, activation, down; on `m` token rows, reading
    /// `weight_sets` copies of its weights (1 for dense, the expected distinct experts when routed).
    #[allow(clippy::too_many_arguments)]
    fn mlp(
        &mut self,
        kinds: [OpKind; 3],
        roles: [Role; 2],
        m: f64,
        (d, ft): (f64, f64),
        gated: bool,
        act_flops: f64,
        bias: bool,
        weight_sets: f64,
    ) {
        let up = if gated { 2.0 * ft } else { ft };
        self.gemm_parts(kinds[0], m, d, &[(up, roles[0])], weight_sets, bias);
        self.elementwise(kinds[1], m * ft, act_flops, if gated { 2.0 } else { 1.0 }, 0.0);
        self.gemm_parts(kinds[2], m, ft, &[(d, roles[1])], weight_sets, bias);
    }

    /// `t` tokens' cache entries of `values_per_token` values written (read in the activation
    /// dtype, stored in the KV dtype): the KV cache, or the indexer's key cache.
    fn cache_write(&mut self, kind: OpKind, t: f64, values_per_token: f64) {
        let c = self.ctx;
        let elems = t * values_per_token;
        self.push(
            kind,
            c.peak_act,
            (0.0, 0.0),
            (elems * (c.act_b + c.kv_b), 0.0),
            elems * c.act_b,
            NO_KEYS,
        );
    }

    fn attention(&mut self, a: &Attention, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let h_t = (a.heads / c.tp) as f64;
        match &a.mla {
            None => self.attention_mha(a, geo, t, h_t),
            Some(m) => self.attention_mla(a, m, geo, t, h_t),
        }
        let o_in = h_t * a.mla.as_ref().map_or(a.v_dim(), |m| m.v_head_dim) as f64;
        if a.output_gate {
            // o * sigmoid(gate): exp, add, divide, multiply per element; reads o and the gate
            self.elementwise(OpKind::AttnGate, t * o_in, 4.0, 2.0, 0.0);
        }
        self.gemm(OpKind::OutProj, t, o_in, d, Role::O, a.o_bias);
        if c.tp > 1 {
            self.comm(OpKind::AttnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }

    fn attention_mha(&mut self, a: &Attention, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let (hd, vd) = (a.head_dim as f64, a.v_dim() as f64);
        let kv_t = a.kv_heads.div_ceil(c.tp) as f64;
        // an output gate on the attention output: q_proj emits it beside the query
        let q_cols = if a.output_gate { h_t * (hd + vd) } else { h_t * hd };
        let parts = [(q_cols, Role::Q), (kv_t * hd, Role::K), (kv_t * vd, Role::V)];
        self.gemm_parts(OpKind::QkvProj, t, d, &parts, 1.0, a.qkv_bias);
        if a.qk_norm {
            self.norm(OpKind::QkNorm, 1.0, t * (h_t + kv_t), hd);
        }
        if a.rotary {
            // x cos + rotate(x) sin: 2 multiplies and 1 add per element.
            self.elementwise(OpKind::Rotary, t * (h_t + kv_t) * hd, 3.0, 1.0, 0.0);
        }
        self.cache_write(OpKind::KvCacheWrite, t, kv_t * (hd + vd));
        self.mha_kernel(a, geo, t, h_t);
    }

    /// The attention kernel of a (GQA/MQA) layer group: the one operator of a prefill step whose
    /// cost depends on where its tokens sit in their sequences, not only on how many there are.
    fn mha_kernel(&mut self, a: &Attention, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (hd, vd) = (a.head_dim as f64, a.v_dim() as f64);
        let kv_t = a.kv_heads.div_ceil(c.tp) as f64;
        // Fused: QK^T and PV over the exact pairs; reads Q, the attended K and V rows
        // (in the KV dtype), writes O; no score matrix in memory. Unfused: both products
        // over the full rectangle, and each score written and read back through memory.
        // A prefill query of a sliding-window layer is computed against its whole cache ring
        // up to itself (`BuildCtx::swa_span`).
        let span = c.swa_span(a.window);
        let (p0, p1, k0, k1) = match a.chunk {
            Some(ch) => geo.attention_chunked(ch),
            None => geo.attention(span),
        };
        // QK^T over the key width and PV over the value width, 2 FLOPs a multiply-add each
        let per_pair = 2.0 * h_t * (hd + vd);
        let per_key = kv_t * (hd + vd) * c.kv_b;
        let qo = t * h_t * (hd + vd) * c.act_b;
        let (flops, scores) = if c.attention_score_bytes > 0.0 {
            let (r0, r1) = geo.score_rectangle(span, a.chunk);
            let per_score = h_t * c.attention_score_bytes;
            ((per_pair * r0, per_pair * r1), (per_score * r0, per_score * r1))
        } else {
            ((per_pair * p0, per_pair * p1), (0.0, 0.0))
        };
        // A decode step reads the cells the runtime's cache layout gives (`DecodeKeys`: a
        // sliding-window ring larger than the window, n_kv padding, a chunk).
        let keys = match geo {
            Geometry::Decode { batch } => c.decode_keys(a.window, *batch).with_chunk(a.chunk),
            Geometry::Segments(_) => DecodeKeys::exact(span).with_chunk(a.chunk),
        };
        self.push(
            OpKind::Attention,
            c.peak_act,
            flops,
            (qo + per_key * k0 + scores.0, per_key * k1 + scores.1),
            qo,
            keys,
        );
        if c.attention_score_bytes == 0.0 {
            if let Some(op) = self.out.last_mut() {
                op.attention = Some(match geo {
                    Geometry::Decode { .. } => AttnPhase::Decode,
                    Geometry::Segments(_) => AttnPhase::Prefill,
                });
                op.items = geo.sequences() * kv_t;
            }
        }
    }

    /// One per-head product between the latent (`kvl` wide) and a `per_head`-wide slice of
    /// kv_b_proj (stored kvl x heads*per_head) for t tokens: MLA's absorbed decode matrices.
    fn latent_head_gemm(&mut self, kind: OpKind, t: f64, h_t: f64, kvl: f64, per_head: f64) {
        let c = self.ctx;
        let w = c.format(Role::V).bytes(kvl, h_t * per_head);
        let act = t * h_t * (per_head + kvl) * c.act_b;
        self.push(
            kind,
            c.peak(Role::V),
            (2.0 * t * h_t * per_head * kvl, 0.0),
            (w + act, 0.0),
            act,
            NO_KEYS,
        );
        if let Some(op) = self.out.last_mut() {
            op.quantized = c.format(Role::V).bits < 16.0;
            op.role = Some(Role::V);
        }
    }

    /// Multi-head latent attention. The cache holds the latent (kv_lora) and
    /// the shared rope key; decode attends over the latent with the up
    /// projections absorbed, prefill expands keys and values per head.
    fn attention_mla(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let (nope, rope, _, kvl) = m.dims();
        let qk = nope + rope;
        match m.q_lora_rank {
            Some(r) => {
                let r = r as f64;
                self.gemm(OpKind::QLoraProj, t, d, r, Role::Q, false);
                self.norm(OpKind::LatentNorm, 1.0, t, r);
                self.gemm(OpKind::QkvProj, t, r, h_t * qk, Role::Q, false);
            }
            None => self.gemm(OpKind::QkvProj, t, d, h_t * qk, Role::Q, false),
        }
        self.gemm(OpKind::KvLoraProj, t, d, kvl + rope, Role::K, false);
        self.norm(OpKind::LatentNorm, 1.0, t, kvl);
        if a.rotary {
            self.elementwise(OpKind::Rotary, t * (h_t + 1.0) * rope, 3.0, 1.0, 0.0);
        }
        self.cache_write(OpKind::KvCacheWrite, t, kvl + rope);
        if let (Some(ix), Some(r)) = (a.indexer.as_ref().filter(|i| !i.shared), m.q_lora_rank) {
            self.indexer(ix, r, t);
            self.indexer_scores(ix, geo, t);
        }
        // DeepSeek sparse attention attends its top-k keys in the absorbed (MQA) form in
        // prefill too (gathered latent rows cannot be expanded per head ahead of the kernel).
        match geo {
            Geometry::Decode { .. } => self.mla_absorbed(a, m, geo, t, h_t),
            Geometry::Segments(_) if a.indexer.is_some() => self.mla_absorbed(a, m, geo, t, h_t),
            Geometry::Segments(_) => self.mla_expanded_kernel(a, m, geo, t, h_t),
        }
    }

    /// MLA with the up-projections absorbed: queries into latent space, MQA over the cached
    /// latent and rope key, values back out of latent space.
    fn mla_absorbed(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let (nope, _, v, kvl) = m.dims();
        // q_nope x W_UK per head -> a query in latent space.
        self.latent_head_gemm(OpKind::QAbsorb, t, h_t, kvl, nope);
        self.mla_absorbed_kernel(a, m, geo, t, h_t);
        // Latent output x W_UV per head -> values.
        self.latent_head_gemm(OpKind::VUnabsorb, t, h_t, kvl, v);
    }

    /// The absorbed MLA kernel: scores over latent + rope key, values over the latent (MQA on
    /// the cache), over the keys each query attends (its window or indexer top-k).
    fn mla_absorbed_kernel(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (_, rope, _, kvl) = m.dims();
        let span = c.swa_span(a.attended());
        let per_pair = 2.0 * h_t * (2.0 * kvl + rope);
        let per_key = (kvl + rope) * c.kv_b;
        let qo = t * h_t * (kvl + rope + kvl) * c.act_b;
        let keys = match geo {
            Geometry::Decode { batch } => c.decode_keys(a.attended(), *batch),
            Geometry::Segments(_) => DecodeKeys::exact(span),
        };
        self.latent_attention(per_pair, per_key, qo, geo.attention(span), keys);
    }

    /// The lightning indexer's projections and key-cache write (replicated on every TP rank:
    /// all ranks select the same keys). `q_lora`: the MLA query latent it reads.
    fn indexer(&mut self, ix: &crate::model::Indexer, q_lora: u64, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let [(qk, qn), (kk, kn), (wk, wn)] = ix.matrices(c.model.hidden_size, q_lora);
        debug_assert_eq!((kk as f64, wk as f64), (d, d));
        // wq_b on the query latent, then wk and weights_proj on the hidden state (one GEMM on d)
        self.gemm(OpKind::IndexerProj, t, qk as f64, qn as f64, Role::Q, false);
        self.gemm_parts(
            OpKind::IndexerProj,
            t,
            d,
            &[(kn as f64, Role::K), (wn as f64, Role::K)],
            1.0,
            false,
        );
        let hd = ix.head_dim as f64;
        self.norm_of(NormKind::Layer, OpKind::LatentNorm, 1.0, t, hd);
        self.cache_write(OpKind::IndexerCacheWrite, t, hd);
    }

    /// The indexer scoring every earlier key for each query: per pair and head, a dot product
    /// over head_dim (2 head_dim FLOPs), its ReLU and weight (2); reads each key (head_dim values
    /// in the KV dtype) once per sequence. Every key, whatever the top-k.
    fn indexer_scores(&mut self, ix: &crate::model::Indexer, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let (h, hd) = (ix.heads as f64, ix.head_dim as f64);
        let (p0, p1, k0, k1) = geo.attention(None);
        let per_pair = h * (2.0 * hd + 2.0);
        let per_key = hd * c.kv_b;
        let q = t * h * hd * c.act_b;
        let keys = match geo {
            Geometry::Decode { batch } => c.decode_keys(None, *batch),
            Geometry::Segments(_) => NO_KEYS,
        };
        self.push(
            OpKind::IndexerScores,
            c.peak_act,
            (per_pair * p0, per_pair * p1),
            (q + per_key * k0, per_key * k1),
            q,
            keys,
        );
    }

    /// MLA's prefill kernels, expanded: every attended key's latent up-projected to per-head
    /// K_nope and V, then attention over them; like `mha_kernel`, their cost depends on where the
    /// step's tokens sit in their sequences.
    fn mla_expanded_kernel(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (nope, rope, v, kvl) = m.dims();
        let qk = nope + rope;
        let span = c.swa_span(a.window);
        let (p0, p1, k0, k1) = geo.attention(span);
        // Up-project every attended key's latent to per-head K_nope and V.
        self.gemm(OpKind::KvUpProj, k0, kvl, h_t * (nope + v), Role::V, false);
        let per_pair = 2.0 * h_t * (qk + v);
        let per_key = h_t * (qk + v) * c.act_b;
        let qo = t * h_t * (qk + v) * c.act_b;
        self.latent_attention(per_pair, per_key, qo, (p0, p1, k0, k1), DecodeKeys::exact(span));
    }

    /// MLA's attention kernel: `per_pair` FLOPs per attended pair, `per_key` bytes per key read
    /// and `qo` bytes of queries and outputs, over the (pairs0, pairs1, keys0, keys1) of
    /// `Geometry::attention`.
    fn latent_attention(&mut self, per_pair: f64, per_key: f64, qo: f64, a: (f64, f64, f64, f64), keys: DecodeKeys) {
        let (p0, p1, k0, k1) = a;
        let peak = self.ctx.peak_act;
        let flops = (per_pair * p0, per_pair * p1);
        self.push(
            OpKind::Attention,
            peak,
            flops,
            (qo + per_key * k0, per_key * k1),
            qo,
            keys,
        );
    }

    fn ffn(&mut self, g: &LayerGroup, t: f64, route_tokens: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let tpf = c.tp as f64;
        match &g.ffn {
            Ffn::None => return,
            Ffn::Dense {
                intermediate_size,
                gated,
                activation,
                bias,
            } => {
                let af = activation.flops_per_element(*gated);
                let ft = *intermediate_size as f64 / tpf;
                self.mlp(
                    [OpKind::FfnUp, OpKind::FfnAct, OpKind::FfnDown],
                    [Role::Up, Role::Down],
                    t,
                    (d, ft),
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
                shared_gate,
                latent,
            } => {
                let e = *num_experts as f64;
                let k = *top_k as f64;
                let af = activation.flops_per_element(*gated);
                // Router: a replicated GEMM to E logits (and the shared expert's gate logit),
                // weights in the activation dtype.
                let gate = if *shared_gate { 1.0 } else { 0.0 };
                self.gemm_act(OpKind::Router, t, d, e + gate, *router_bias);
                let fe = *expert_intermediate_size as f64;
                // Expert parallelism over the MoE group (tp x attention_dp ranks): E/ep whole
                // experts per device, each sharded over the MoE TP (group / ep ranks; ep = 1 is
                // plain TP, ep = group whole experts). Without attention DP every rank holds all
                // t tokens after the attention all-reduce, so each runs its own experts on the
                // tokens routed to them (t k / ep token-rows in expectation) with no all-to-all,
                // and the FFN all-reduce below sums the ranks' outputs: vLLM's FusedMoE
                // all-reduces its output when EP spans the TP group and uses dispatch/combine
                // all-to-all kernels only with data-parallel attention (vllm/model_executor/
                // layers/fused_moe: FusedMoENaivePrepareAndFinalize "for DP+EP without all2all
                // kernels"); TensorRT-LLM likewise (moe_tp_size x moe_ep_size = tp_size x
                // attention_dp_size). With attention DP the experts serve every group's tokens
                // (adp t), and each rank dispatches its t / tp share of its group's tokens to
                // the experts they route to and gets the results back: two all-to-alls of
                // (t / tp) k d elements over the ep ranks.
                let (epf, moe_tp) = c.expert_split();
                let adp = c.attention_dp.max(1) as f64;
                let routed = distinct_experts(*num_experts, *top_k, route_tokens * adp, c.routing_skew);
                // a latent MoE projects its tokens down before the experts (and dispatches them
                // in the latent width) and back up after
                let width = latent.map_or(d, |l| l as f64);
                if latent.is_some() {
                    self.gemm(OpKind::MoeLatentProj, t, d, width, Role::Up, false);
                }
                let first_expert_op = self.out.len();
                let msg = t / tpf * k * width * c.act_b;
                if c.attention_dp > 1 && c.ep > 1 {
                    self.comm(OpKind::ExpertDispatch, Collective::AllToAll, c.ep, msg);
                }
                self.mlp(
                    [OpKind::ExpertUp, OpKind::ExpertAct, OpKind::ExpertDown],
                    [Role::ExpertUp, Role::ExpertDown],
                    adp * t * k / epf,
                    (width, fe / moe_tp),
                    *gated,
                    af,
                    *bias,
                    routed / epf,
                );
                if c.attention_dp > 1 && c.ep > 1 {
                    self.comm(OpKind::ExpertDispatch, Collective::AllToAll, c.ep, msg);
                }
                let grouped = t > 1.0;
                for op in &mut self.out[first_expert_op..] {
                    op.grouped = grouped && op.kind.is_routed_expert();
                }
                if latent.is_some() {
                    self.gemm(OpKind::MoeLatentProj, t, width, d, Role::Down, false);
                }
                if *shared_intermediate_size > 0 {
                    self.mlp(
                        [
                            OpKind::SharedExpertUp,
                            OpKind::SharedExpertAct,
                            OpKind::SharedExpertDown,
                        ],
                        [Role::Up, Role::Down],
                        t,
                        (d, *shared_intermediate_size as f64 / tpf),
                        *gated,
                        af,
                        *bias,
                        1.0,
                    );
                }
            }
        }
        if c.tp > 1 {
            self.comm(OpKind::FfnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }
}

/// FLOPs of a chunked recurrent scan over `new` tokens of one sequence, `heads` heads with a
/// `dk` x `dv` state each, in chunks of `chunk` tokens (the last one shorter; `chunk` 0: one
/// chunk). One chunk of `n` tokens per head:
///
/// - the gated delta rule (the chunkwise form of Yang et al. 2024, "Gated Delta Networks", as
///   the FLA kernels compute it: chunk_scaled_dot_kkt, solve_tril, wy_fast, chunk_delta_h,
///   chunk_o): within the chunk K K^T, the WY products T K and T V, Q K^T and the masked scores
///   times the new values (2 n^2 dk each for the three on keys, 2 n^2 dv each for the two on
///   values); the unit-lower-triangular solve for T, n^3 / 3 multiply-adds; against the state
///   W S, Q S and the update K^T U (2 n dk dv each) and the state's decay (dk dv):
///   `6 n^2 dk + 4 n^2 dv + 2 n^3 / 3 + 6 n dk dv + dk dv`. A decode token (n = 1) is
///   `7 dk dv + 6 dk + 4 dv + 2/3`: the recurrent form's decay, two state reads and the
///   rank-one update (7 dk dv) plus the one-token chunk's products;
/// - Mamba2's SSD scan (Dao and Gu 2024, "Transformers are SSMs", the chunked algorithm of
///   mamba_chunk_scan_combined), dk the state size N, dv the head dim P: C B^T within the chunk
///   (2 n^2 N, shared by the heads of a group: times groups / heads), its decay mask (n^2), the
///   masked scores times X (2 n^2 P), the chunk's state B^T X and the output from the carried
///   state C S (2 n N P each), and passing the state on (decay and add, 2 N P):
///   `2 n^2 N g / h + n^2 + 2 n^2 P + 4 n N P + 2 N P`.
pub fn chunked_scan_flops(scan: Scan, new: u64, chunk: f64, heads: f64, dk: f64, dv: f64) -> f64 {
    let one = |n: f64| match scan {
        Scan::GatedDelta => 6.0 * n * n * dk + 4.0 * n * n * dv + 2.0 * n * n * n / 3.0 + 6.0 * n * dk * dv + dk * dv,
        Scan::Ssd { groups } => {
            2.0 * n * n * dk * groups / heads + n * n + 2.0 * n * n * dv + 4.0 * n * dk * dv + 2.0 * dk * dv
        }
    };
    if new == 0 {
        return 0.0;
    }
    let c = if chunk >= 1.0 { chunk } else { new as f64 };
    let full = (new as f64 / c).floor();
    let rest = new as f64 - full * c;
    heads * (full * one(c) + if rest > 0.0 { one(rest) } else { 0.0 })
}

/// Expected distinct experts `T` tokens touch, each routed to `k` of `E` experts.
///
/// Expert `i` (1-based, by popularity) is chosen by a token with probability
/// `q_i = min(1, c i^-s)`, `c` such that the `q_i` sum to `k` (the experts a
/// token needs); the expected distinct count is `sum_i 1 - (1 - q_i)^T`. At
/// `s = 0` every `q_i = k / E`: uniform routing, `E (1 - (1 - k/E)^T)` (spec 30),
/// the most experts any router can touch on average. As `s` grows the
/// popular experts take the traffic and the count falls towards `k`.
pub fn distinct_experts(num_experts: u64, top_k: u64, tokens: f64, skew: f64) -> f64 {
    Routing::new(num_experts, top_k, skew).distinct(tokens)
}

/// What `distinct_experts` computes of one (E, k, skew) before the token count, so that many
/// token counts (a calibration's rows) share it.
#[derive(Clone, Debug, PartialEq)]
pub enum Routing {
    /// Every expert missed by a token with probability `miss` = 1 - k/E.
    Uniform { experts: f64, miss: f64 },
    /// `capped` experts chosen by every token; each other one missed by a token with its own
    /// probability, held as its logarithm (`miss^T = exp(T ln miss)`: one exponential a count).
    Skewed { capped: f64, ln_miss: Vec<f64> },
}

impl Routing {
    pub fn new(num_experts: u64, top_k: u64, skew: f64) -> Routing {
        let (e, k) = (num_experts as f64, top_k as f64);
        if skew == 0.0 || top_k >= num_experts {
            return Routing::Uniform {
                experts: e,
                miss: 1.0 - k / e,
            };
        }
        let w: Vec<f64> = (1..=num_experts).map(|i| (i as f64).powf(-skew)).collect();
        // Water-filling: the `capped` most popular experts are chosen by every token (their
        // share c w_i would exceed one); the rest share the remaining k - capped choices.
        let mut tail: f64 = w.iter().sum();
        let mut capped = 0usize;
        while (capped as f64) < k && (tail <= 0.0 || (k - capped as f64) * w[capped] > tail) {
            tail -= w[capped];
            capped += 1;
        }
        let c = if tail > 0.0 { (k - capped as f64) / tail } else { 0.0 };
        Routing::Skewed {
            capped: capped as f64,
            ln_miss: w[capped..].iter().map(|wi| (1.0 - (c * wi).min(1.0)).ln()).collect(),
        }
    }

    /// Expected distinct experts `tokens` tokens touch.
    pub fn distinct(&self, tokens: f64) -> f64 {
        match self {
            Routing::Uniform { experts, miss } => experts * (1.0 - miss.powf(tokens)),
            Routing::Skewed { capped, ln_miss } => {
                let rest: f64 = ln_miss.iter().map(|l| 1.0 - (tokens * l).exp()).sum();
                capped + rest
            }
        }
    }
}

/// The operators of a prefill step that vary with where its tokens sit
/// (`OpKind::varies_with_segments`), built exactly as `build_step` builds them and in its
/// order, into `out` (cleared first): a schedule of steps that hold the same tokens prices the
/// rest of the graph once.
pub fn build_kernels(ctx: &BuildCtx, segs: &[Segment], out: &mut Vec<Op>) {
    out.clear();
    let geo = Geometry::Segments(segs);
    let t = geo.tokens();
    let mut b = Builder {
        ctx,
        out,
        group: MODEL_LEVEL,
        repeat: 1.0,
    };
    for (gi, g) in ctx.model.layer_groups.iter().enumerate() {
        b.group = gi as u16;
        b.repeat = g.count as f64;
        if let Some(r) = g.recurrent(ctx.tp) {
            b.linear_kernel(&r, &geo, t);
        }
        let Some(a) = &g.attention else { continue };
        let h_t = (a.heads / ctx.tp) as f64;
        match &a.mla {
            None => b.mha_kernel(a, &geo, t, h_t),
            Some(m) => {
                if let Some(ix) = &a.indexer {
                    if !ix.shared {
                        b.indexer_scores(ix, &geo, t);
                    }
                    b.mla_absorbed_kernel(a, m, &geo, t, h_t);
                } else {
                    b.mla_expanded_kernel(a, m, &geo, t, h_t);
                }
            }
        }
    }
}

/// Tokens, sampling sequences and sequences of a prefill step: what every operator of it but
/// the `varies_with_segments` kernels depends on.
pub type StepShape = (u64, u64, u64);

/// The `StepShape` of a prefill step's segments.
pub fn step_shape(segs: &[Segment]) -> StepShape {
    segs.iter().fold((0, 0, 0), |(t, s, q), x| {
        (
            t + x.count * x.new,
            s + if x.samples { x.count } else { 0 },
            q + x.count,
        )
    })
}

/// Appends the operators of one step to `out` (cleared first).
pub fn build_step(ctx: &BuildCtx, geo: &Geometry, out: &mut Vec<Op>) {
    out.clear();
    let m = ctx.model;
    let d = m.hidden_size as f64;
    let t = geo.tokens();
    let samples = geo.samples();
    let tpf = ctx.tp as f64;
    // Tokens whose routing is independent: one sequence's worth when all sequences are the same.
    let route_tokens = if ctx.identical_sequences {
        t / geo.sequences().max(1.0)
    } else {
        t
    };

    let mut b = Builder {
        ctx,
        out,
        group: MODEL_LEVEL,
        repeat: 1.0,
    };
    // Embedding lookup (vocab-parallel under TP): read T rows, write T x d.
    let act = t * d * ctx.act_b;
    let rows = ctx.format(Role::Embedding).bytes(d, t) / tpf;
    b.push(
        OpKind::Embedding,
        ctx.peak_act,
        (0.0, 0.0),
        (rows + act, 0.0),
        act,
        NO_KEYS,
    );
    if m.position_embeddings > 0 {
        // Learned absolute positions: read T rows, add to the hidden state.
        let act = 2.0 * t * d * ctx.act_b;
        let rows = ctx.format(Role::Embedding).bytes(d, t);
        b.push(
            OpKind::PositionEmbedding,
            ctx.peak_act,
            (t * d, 0.0),
            (rows + act, 0.0),
            act,
            NO_KEYS,
        );
    }
    if ctx.tp > 1 {
        b.comm(
            OpKind::EmbeddingAllReduce,
            Collective::AllReduce,
            ctx.tp,
            t * d * ctx.act_b,
        );
    }
    for (gi, g) in m.layer_groups.iter().enumerate() {
        b.group = gi as u16;
        b.repeat = g.count as f64;
        b.norm(OpKind::Norm, g.norms as f64, t, d);
        if let Some(a) = &g.attention {
            b.attention(a, geo, t);
        }
        if let Some(r) = g.recurrent(ctx.tp) {
            b.recurrent(&r, geo, t);
        }
        b.ffn(g, t, route_tokens);
    }
    b.group = MODEL_LEVEL;
    b.repeat = 1.0;
    if ctx.pp > 1 {
        let s = ctx.pp_sends(t * d * ctx.act_b);
        b.out.push(Op {
            kind: OpKind::PpSend,
            group: MODEL_LEVEL,
            repeat: 1.0,
            launches: (ctx.pp - 1) as f64,
            peak: ctx.peak_act,
            f0: 0.0,
            f1: 0.0,
            b0: 0.0,
            b1: 0.0,
            act_bytes: t * d * ctx.act_b,
            keys: NO_KEYS,
            comm_s: s,
            quantized: false,
            role: None,
            grouped: false,
            attention: None,
            items: 0.0,
        });
    }
    b.norm(OpKind::FinalNorm, 1.0, t, d);
    if samples > 0.0 {
        let v = m.vocab_size as f64 / tpf;
        b.gemm(OpKind::LmHead, samples, d, v, Role::LmHead, m.lm_head_bias);
        if ctx.tp > 1 {
            b.comm(
                OpKind::LogitsAllGather,
                Collective::AllGather,
                ctx.tp,
                samples * m.vocab_size as f64 * ctx.act_b,
            );
        }
    }
}
