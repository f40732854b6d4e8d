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
use crate::model::Model;
use crate::weights::{Role, WeightFormat, N_ROLES};

mod builder;
mod routing;

use builder::Builder;
pub use routing::{chunked_scan_flops, distinct_experts, Routing};

/// The keys of an operator whose cost does not depend on the context.
const NO_KEYS: DecodeKeys = DecodeKeys::exact(None);

/// Group index of operators outside the decoder layers.
pub const MODEL_LEVEL: u16 = u16::MAX;

/// Group index of a speculative drafter's operators (its layers and head alike).
pub const DRAFTER: u16 = u16::MAX - 1;

/// Group index of the operators' shares that the host runs on weights in host memory (offload,
/// `place`), whatever layers they come from.
pub const HOST: u16 = u16::MAX - 2;

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
    /// A drafter's projection of the fused states (embedding and hidden states) to the hidden size.
    DraftInputProj,
    LayerOverhead,
    StepOverhead,
    /// A request's front-end time before its prefill (`Efficiency::t_request_s`).
    RequestOverhead,
    /// Activations to the host and back around the layers or experts it runs (offload): the
    /// link's bytes and a fitted fixed time per round trip.
    HostRoundTrip,
    /// Weights kept in host memory and read over the host link by the device on every forward
    /// pass (vLLM `--cpu-offload-gb`).
    HostWeightStream,
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
            OpKind::DraftInputProj => "draft_input_proj",
            OpKind::LayerOverhead => "layer_overhead",
            OpKind::StepOverhead => "step_overhead",
            OpKind::RequestOverhead => "request_overhead",
            OpKind::HostRoundTrip => "host_round_trip",
            OpKind::HostWeightStream => "host_weight_stream",
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
                | OpKind::HostRoundTrip
                | OpKind::HostWeightStream
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
    /// An operator of the routed experts (their GEMMs, activation and its quantisation): under
    /// attention DP it serves every rank's tokens, not its own rank's alone.
    pub routed: bool,
    /// A fused (flash) attention kernel of a GQA/MQA layer, and which of the runtime's kernels
    /// runs it: a prefill step's (chunks on their prefixes) or a decode step's (one query per
    /// sequence). A runtime with attention kernels of its own fitted prices it with them
    /// (`Efficiency::attention`).
    pub attention: Option<AttnPhase>,
    /// The kernel's work items per invocation: sequences x KV heads on the rank (a fused
    /// attention kernel schedules its thread blocks per sequence and KV head).
    pub items: f64,
    /// Run by the host on weights in host memory (`place`): its rates, in place of the
    /// device's and the runtime's efficiencies.
    pub host: Option<HostRate>,
}

/// Seconds per byte and per FLOP of an operator the host runs (offload).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostRate {
    pub per_byte: f64,
    pub per_flop: f64,
}

/// Where the plan keeps weights off the device and who computes on them (`Plan::offload`),
/// resolved to the shares and rates the build prices them with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placement {
    /// MoE layers whose routed experts the host holds and computes (llama.cpp `--n-cpu-moe`).
    pub expert_layers: f64,
    /// Their share of the model's MoE layers.
    pub expert_share: f64,
    /// Share of the decoder layers the host holds and runs whole (llama.cpp `-ngl`: the first
    /// layers); with any, the host holds the final norm and LM head too.
    pub layer_share: f64,
    /// Seconds per byte of host memory at its efficiency, and per FLOP of the host's peak.
    pub host_per_byte: f64,
    pub host_per_flop: f64,
    /// Seconds per byte over the host link, one direction, at its efficiency.
    pub link_per_byte: f64,
    /// The fixed time of one round trip to the host and back (fitted).
    pub t_round_trip_s: f64,
    /// Weight bytes a forward pass reads over the host link (vLLM `--cpu-offload-gb`).
    pub streamed_bytes: f64,
    /// Steps of at least this many tokens copy host-held weights to the device and compute
    /// there (ggml's op offload); None: the host computes at any size.
    pub device_min_tokens: Option<f64>,
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
/// tokens on top of `prefix` cached ones, of which `sampled` take logits: 1 where they emit a
/// token (a prompt's last chunk, a decode), k + 1 where a speculating decode's target scores its
/// k drafts and the bonus token, 0 for a prompt chunk that is not its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub count: u64,
    pub new: u64,
    pub prefix: u64,
    pub sampled: u64,
}

/// What a step holds.
#[derive(Clone, Copy, Debug)]
pub enum Geometry<'a> {
    /// Prefill chunks (and later, mixed steps): exact constant counts. MLA
    /// runs in its expanded form here.
    Segments(&'a [Segment]),
    /// `batch` sequences each decoding `queries` tokens at a symbolic context `k` (the keys
    /// the first query attends; query i attends k + i), `sampled` of them each taking logits:
    /// one and one in a plain decode step; k + 1 and k + 1 in a speculative verification step
    /// (the target scores every draft token and the bonus one); k + 1 and 1 in a drafter's
    /// first pass over a verified step. MLA runs in its weight-absorbed form here.
    Decode { batch: u64, queries: u64, sampled: u64 },
}

impl Geometry<'_> {
    fn tokens(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| (x.count * x.new) as f64).sum(),
            Geometry::Decode { batch, queries, .. } => (*batch * *queries) as f64,
        }
    }

    /// Sequences in the step.
    fn sequences(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| x.count as f64).sum(),
            Geometry::Decode { batch, .. } => *batch as f64,
        }
    }

    fn samples(&self) -> f64 {
        match self {
            Geometry::Segments(s) => s.iter().map(|x| (x.count * x.sampled) as f64).sum(),
            Geometry::Decode { batch, sampled, .. } => (*batch * *sampled) as f64,
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

    /// The (pairs, keys) of every segment by `per_seq` (one sequence's), summed; in decode
    /// each sequence's q queries attend k, k + 1, .. k + q - 1 keys: q pairs and one distinct
    /// key per attended key (the slopes), plus q (q - 1) / 2 pairs and q - 1 keys.
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
            Geometry::Decode { batch, queries, .. } => {
                let (b, q) = (*batch as f64, *queries as f64);
                (b * q * (q - 1.0) / 2.0, b * q, b * (q - 1.0), b)
            }
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
    /// Weights off the device (None: all on it).
    pub offload: Option<Placement>,
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

impl Op {
    /// A compute operator: `repeat` invocations of one launch doing `f` = (f0, f1) FLOPs and
    /// moving `b` = (b0, b1) bytes (`act` of b0 activations), reading `keys` at context `L`; the
    /// kernel flags (quantized, role, grouped, routed, attention, items, host) unset, for the
    /// builder to set.
    #[allow(clippy::too_many_arguments)]
    pub fn compute(
        kind: OpKind,
        group: u16,
        repeat: f64,
        peak: f64,
        f: (f64, f64),
        b: (f64, f64),
        act: f64,
        keys: DecodeKeys,
    ) -> Op {
        Op {
            kind,
            group,
            repeat,
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
            routed: false,
            attention: None,
            items: 0.0,
            host: None,
        }
    }

    /// A communication operator: `repeat` invocations of `launches` transfers, each taking
    /// `comm_s` and moving `msg` bytes; no FLOPs, no device-memory bytes.
    pub fn comm(kind: OpKind, group: u16, repeat: f64, launches: f64, peak: f64, msg: f64, comm_s: f64) -> Op {
        Op {
            launches,
            comm_s,
            ..Op::compute(kind, group, repeat, peak, (0.0, 0.0), (0.0, 0.0), msg, NO_KEYS)
        }
    }

    /// What the breakdown keeps of an operator besides its cost: quantized, role, grouped, the
    /// fused attention kernel that runs it.
    pub fn flags(&self) -> OpFlags {
        (self.quantized, self.role, self.grouped, self.attention)
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
    place(ctx, t, false, out);
}

/// Tokens, sampled positions and sequences of a prefill step: what every operator of it but
/// the `varies_with_segments` kernels depends on.
pub type StepShape = (u64, u64, u64);

/// The `StepShape` of a prefill step's segments.
pub fn step_shape(segs: &[Segment]) -> StepShape {
    segs.iter().fold((0, 0, 0), |(t, s, q), x| {
        (t + x.count * x.new, s + x.count * x.sampled, q + x.count)
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
        let sends = (ctx.pp - 1) as f64;
        b.out.push(Op::comm(
            OpKind::PpSend,
            MODEL_LEVEL,
            1.0,
            sends,
            ctx.peak_act,
            t * d * ctx.act_b,
            s,
        ));
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
    place(ctx, t, true, out);
}

/// Moves the shares of a step's operators that the host runs (`BuildCtx::offload`) into
/// operators of their own under `HOST`, appended in the order of the ones they come from: the
/// routed experts of the offloaded MoE layers, and every operator of the offloaded layers with
/// the final norm and LM head. A step of `tokens` tokens at or above `device_min_tokens` copies
/// those weights over the host link and computes on the device (ggml's op offload); below it
/// the host reads them from its memory and computes. With `transfers`, it appends the round
/// trips: one per offloaded expert layer outside the offloaded layers, one around the block of
/// offloaded layers (unless the host runs them all), each carrying the step's hidden states
/// out and back; and the weights streamed over the link every pass.
pub fn place(ctx: &BuildCtx, tokens: f64, transfers: bool, out: &mut Vec<Op>) {
    let Some(p) = ctx.offload else { return };
    let on_device = p.device_min_tokens.is_some_and(|m| tokens >= m);
    let n = out.len();
    for i in 0..n {
        let op = out[i];
        // copied to the device, an operator without weights (an activation) stays there
        if op.kind.is_comm() || op.group == DRAFTER || (on_device && op.b0 <= op.act_bytes) {
            continue;
        }
        let share = match op.group {
            MODEL_LEVEL => {
                if p.layer_share > 0.0 && matches!(op.kind, OpKind::FinalNorm | OpKind::LmHead) {
                    1.0
                } else {
                    0.0
                }
            }
            _ if op.routed => p.layer_share.max(p.expert_share),
            _ => p.layer_share,
        };
        if share <= 0.0 {
            continue;
        }
        let rate = if on_device {
            HostRate {
                per_byte: p.link_per_byte,
                per_flop: 1.0 / op.peak,
            }
        } else {
            HostRate {
                per_byte: p.host_per_byte,
                per_flop: p.host_per_flop,
            }
        };
        out[i].repeat *= 1.0 - share;
        out.push(Op {
            group: HOST,
            repeat: op.repeat * share,
            launches: 0.0,
            attention: None,
            host: Some(rate),
            ..op
        });
    }
    out.retain(|o| o.repeat > 0.0);
    if !transfers {
        return;
    }
    let layers = ctx.model.num_layers() as f64;
    let host_layers = p.layer_share * layers;
    let moe_layers = ctx.model.moe_layers() as f64;
    let expert_trips = (p.expert_layers - p.layer_share * moe_layers).max(0.0);
    let block_trip = if p.layer_share > 0.0 && host_layers < layers {
        1.0
    } else {
        0.0
    };
    let trips = expert_trips + block_trip;
    let hidden = tokens * ctx.model.hidden_size as f64 * ctx.act_b;
    let link_op = |kind, repeat, comm_s, msg| Op::comm(kind, MODEL_LEVEL, repeat, 0.0, ctx.peak_act, msg, comm_s);
    if trips > 0.0 {
        out.push(link_op(
            OpKind::HostRoundTrip,
            trips,
            p.t_round_trip_s + 2.0 * hidden * p.link_per_byte,
            hidden,
        ));
    }
    if p.streamed_bytes > 0.0 {
        out.push(link_op(
            OpKind::HostWeightStream,
            1.0,
            p.streamed_bytes * p.link_per_byte,
            0.0,
        ));
    }
}

/// Appends the operators of one drafter pass to `out` (cleared first), built on the drafter's
/// context `ctx` (its model, formats and peaks, the target's TP): the projection of its
/// `fused_inputs` hidden-size states to the hidden size (replicated on every rank, as vLLM's
/// `ReplicatedLinear` fc and DeepSeek-MTP's `eh_proj` are), then its layers, final norm and LM
/// head as `build_step` builds a model's. Every operator is grouped under `DRAFTER`.
pub fn build_draft_step(ctx: &BuildCtx, fused_inputs: u64, geo: &Geometry, out: &mut Vec<Op>) {
    build_step(ctx, geo, out);
    if fused_inputs > 0 {
        let d = ctx.model.hidden_size as f64;
        let mut tail = Vec::with_capacity(1);
        let mut b = Builder {
            ctx,
            out: &mut tail,
            group: DRAFTER,
            repeat: 1.0,
        };
        b.gemm(
            OpKind::DraftInputProj,
            geo.tokens(),
            fused_inputs as f64 * d,
            d,
            Role::O,
            false,
        );
        out.extend(tail);
    }
    for op in out.iter_mut() {
        op.group = DRAFTER;
    }
}
