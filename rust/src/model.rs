//! The normalised model structure. The Python normaliser is the only reader
//! of raw config keys; it hands the engine this typed structure (as JSON),
//! and the engine and the parameter counter read nothing else.

use crate::error::{Error, Result};
pub use crate::limits::{MAX_EXPERTS, MAX_LAYERS};

/// The parameter count of a model, by class (a concern of the model, in its own file).
pub mod params;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormKind {
    /// RMSNorm: a weight vector, no bias.
    Rms,
    /// LayerNorm: weight and bias vectors.
    Layer,
}

impl NormKind {
    /// Parameters of one norm over `n` features.
    pub fn params(self, n: u64) -> u64 {
        match self {
            NormKind::Rms => n,
            NormKind::Layer => 2 * n,
        }
    }
    /// FLOPs per normalised element, from the definition of the norm:
    /// RMS: square, accumulate, scale, weight (4); Layer: mean, subtract,
    /// square, accumulate, scale, weight, bias (7).
    pub fn flops_per_element(self) -> f64 {
        match self {
            NormKind::Rms => 4.0,
            NormKind::Layer => 7.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Silu,
    Gelu,
    GeluTanh,
    Relu,
    Relu2,
}

impl Activation {
    /// FLOPs per output element of the activation, from its formula
    /// (silu = x / (1 + exp(-x)): 3; gelu(erf) ~ x/2 (1 + erf(x/sqrt2)): 4;
    /// gelu(tanh) = x/2 (1 + tanh(c (x + 0.044715 x^3))): 8; relu: 1;
    /// relu^2: 2), plus 1 for the gate multiply when gated.
    pub fn flops_per_element(self, gated: bool) -> f64 {
        let base = match self {
            Activation::Silu => 3.0,
            Activation::Gelu => 4.0,
            Activation::GeluTanh => 8.0,
            Activation::Relu => 1.0,
            Activation::Relu2 => 2.0,
        };
        base + if gated { 1.0 } else { 0.0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attention {
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// Sliding-window size in tokens (a query sees at most `window` keys).
    #[serde(default)]
    pub window: Option<u64>,
    #[serde(default)]
    pub qkv_bias: bool,
    #[serde(default)]
    pub o_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3, Gemma-3).
    #[serde(default)]
    pub qk_norm: bool,
    /// Rotary position embedding applied to q and k.
    #[serde(default = "yes")]
    pub rotary: bool,
    /// A learned attention-sink logit per head (gpt-oss).
    #[serde(default)]
    pub sinks: bool,
    /// Multi-head latent attention (DeepSeek-V2/V3): `head_dim` is then
    /// `qk_nope_head_dim + qk_rope_head_dim` and the cache holds the latent.
    #[serde(default)]
    pub mla: Option<Mla>,
    /// A sigmoid output gate per query channel (Qwen3-Next / Qwen3.5 `attn_output_gate`):
    /// q_proj emits the query and the gate, the attention output is multiplied by the gate.
    #[serde(default)]
    pub output_gate: bool,
    /// The q/k norms span every head's channels (MiniMax-M2 `qk_norm_type` per_layer: one
    /// weight of heads x head_dim for q and kv_heads x head_dim for k), not one head's.
    #[serde(default)]
    pub qk_norm_all_heads: bool,
    /// DeepSeek sparse attention (V3.2, GLM-5): a lightning indexer scores every cached key
    /// and the attention reads only the `topk` best.
    #[serde(default)]
    pub indexer: Option<Indexer>,
    /// Width of each value head when it differs from the query/key head (MiMo-V2: 192 / 128);
    /// None: `head_dim`. Not with MLA (its own `v_head_dim`).
    #[serde(default)]
    pub v_head_dim: Option<u64>,
    /// Chunked local attention (Llama-4 `attention_chunk_size` on its rope layers): a query
    /// attends the keys of its own chunk of this many tokens up to itself; the runtime keeps
    /// at most one chunk of the layer's cache.
    #[serde(default)]
    pub chunk: Option<u64>,
    /// Width of the q/k/v projections' input where it is not the hidden size: an EAGLE-3
    /// head's layer takes the token's embedding and the fused hidden state side by side
    /// (`LlamaForCausalLMEagle3`: q/k/v_proj in_features = 2 x hidden_size). Not with MLA.
    #[serde(default)]
    pub input_dim: Option<u64>,
}

impl Attention {
    /// Width of a value head (of a non-MLA attention): `v_head_dim`, else `head_dim`.
    pub fn v_dim(&self) -> u64 {
        self.v_head_dim.unwrap_or(self.head_dim)
    }

    /// Width of the q/k/v projections' input: `input_dim`, else the hidden size `d`.
    pub fn input(&self, d: u64) -> u64 {
        self.input_dim.unwrap_or(d)
    }

    /// The keys one query attends: the sliding window, or the indexer's top-k (the smaller when
    /// both are given); None: every earlier key.
    pub fn attended(&self) -> Option<u64> {
        match (self.window, self.indexer.as_ref().map(|i| i.topk)) {
            (Some(w), Some(k)) => Some(w.min(k)),
            (w, k) => w.or(k),
        }
    }
}

/// The lightning indexer of DeepSeek sparse attention (DeepSeek-V3.2 `Indexer`): queries from
/// the MLA query latent (wq_b: q_lora_rank -> heads x head_dim), one key per token (wk:
/// hidden -> head_dim, LayerNorm), per-head weights (weights_proj: hidden -> heads); its key
/// cache holds head_dim values a token. Replicated on every TP rank (all ranks pick the same keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Indexer {
    pub heads: u64,
    pub head_dim: u64,
    pub topk: u64,
    /// The layer reuses the top-k an earlier layer's indexer picked (GLM-5.2 `indexer_types`
    /// 'shared'): no indexer weights, cache or scoring of its own.
    #[serde(default)]
    pub shared: bool,
}

impl Indexer {
    /// Its matrices (rows, columns) for a model of width `d` with query latent `q_lora`: wq_b,
    /// wk, weights_proj. Its LayerNorm adds 2 x head_dim.
    pub fn matrices(&self, d: u64, q_lora: u64) -> [(u64, u64); 3] {
        [
            (q_lora, self.heads * self.head_dim),
            (d, self.head_dim),
            (d, self.heads),
        ]
    }
}

/// A Gated DeltaNet mixer (Qwen3-Next, Qwen3.5 `linear_attention` layers): linear attention
/// whose per-sequence state is fixed in size (num_v_heads x head_k_dim x head_v_dim, plus the
/// short convolution's last kernel-1 inputs) instead of a KV cache that grows with context.
/// Tensors (HF Qwen3NextGatedDeltaNet): in_proj_qkvz (hidden -> 2 key_dim + 2 value_dim),
/// in_proj_ba (hidden -> 2 num_v_heads), a depthwise conv1d over conv_dim channels without
/// bias, dt_bias and A_log (num_v_heads each), a gated RMSNorm over head_v_dim, out_proj
/// (value_dim -> hidden); no biases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatedDeltaNet {
    pub num_k_heads: u64,
    pub num_v_heads: u64,
    pub head_k_dim: u64,
    pub head_v_dim: u64,
    pub conv_kernel: u64,
    /// Bytes per value of the recurrent state (the config's `mamba_ssm_dtype`); None: the
    /// activation dtype.
    #[serde(default)]
    pub state_bytes: Option<f64>,
}

impl GatedDeltaNet {
    pub fn key_dim(&self) -> u64 {
        self.num_k_heads * self.head_k_dim
    }
    pub fn value_dim(&self) -> u64 {
        self.num_v_heads * self.head_v_dim
    }
    /// Channels of the short convolution: q, k and v.
    pub fn conv_dim(&self) -> u64 {
        2 * self.key_dim() + self.value_dim()
    }
    /// Output columns of the input projections: q, k, v, the output gate z, and b, a per v-head.
    pub fn in_proj_width(&self) -> u64 {
        2 * self.key_dim() + 2 * self.value_dim() + 2 * self.num_v_heads
    }
    /// Parameters besides the two projection matrices: the depthwise conv weights, dt_bias and
    /// A_log per v-head, and the gated norm's weight.
    pub fn vector_params(&self) -> u64 {
        self.conv_dim() * self.conv_kernel + 2 * self.num_v_heads + self.head_v_dim
    }
    /// The mixer on one of `tp` ranks (heads split over the ranks; the gated norm's weight,
    /// head_v_dim, on every rank).
    pub fn rank_shape(&self, tp: u64) -> Recurrent {
        let (kh, vh) = (
            self.num_k_heads.div_ceil(tp) as f64,
            self.num_v_heads.div_ceil(tp) as f64,
        );
        let (dk, dv) = (self.head_k_dim as f64, self.head_v_dim as f64);
        let value = vh * dv;
        let conv = 2.0 * kh * dk + value;
        Recurrent {
            in_cols: conv + value + 2.0 * vh, // q, k, v, then z, b, a
            conv_ch: conv,
            kernel: self.conv_kernel as f64,
            out_in: value,
            vectors: conv * self.conv_kernel as f64 + 2.0 * vh + dv,
            heads: vh,
            dk,
            dv,
            io: 2.0 * kh * dk + 2.0 * value + 2.0 * vh, // q, k, v, gate, beta in; o out
            state_bytes: self.state_bytes,
            scan: Scan::GatedDelta,
            chunk: 0,
            bias: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mla {
    /// Rank of the low-rank query projection (None: a full q_proj).
    #[serde(default)]
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

impl Mla {
    /// Cached values per token per layer: the latent plus the shared rope key.
    pub fn cache_width(&self) -> u64 {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// (qk_nope_head_dim, qk_rope_head_dim, v_head_dim, kv_lora_rank) as the FLOP and byte
    /// counts take them.
    pub fn dims(&self) -> (f64, f64, f64, f64) {
        (
            self.qk_nope_head_dim as f64,
            self.qk_rope_head_dim as f64,
            self.v_head_dim as f64,
            self.kv_lora_rank as f64,
        )
    }
}

/// A Mamba2 mixer (Nemotron-H): in_proj (hidden -> z, x, B, C, dt), a depthwise conv over x, B
/// and C, the SSD scan over a state of num_heads x head_dim x state_size a sequence, a gated
/// RMSNorm and out_proj.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mamba2 {
    pub num_heads: u64,
    pub head_dim: u64,
    pub n_groups: u64,
    pub state_size: u64,
    pub conv_kernel: u64,
    #[serde(default)]
    pub proj_bias: bool,
    #[serde(default)]
    pub conv_bias: bool,
    /// Tokens per chunk of the SSD scan (the config's chunk_size, which the runtimes' Mamba2
    /// kernels take); 0: the plan's linear-attention chunk.
    #[serde(default)]
    pub chunk: u64,
    /// Bytes per value of the SSM state (the config's mamba_ssm_cache_dtype); None: the
    /// activation dtype.
    #[serde(default)]
    pub state_bytes: Option<f64>,
}

impl Mamba2 {
    pub fn inner(&self) -> u64 {
        self.num_heads * self.head_dim
    }
    pub fn conv_dim(&self) -> u64 {
        self.inner() + 2 * self.n_groups * self.state_size
    }

    /// The mixer on one of `tp` ranks (heads and groups split over the ranks).
    pub fn rank_shape(&self, tp: u64) -> Recurrent {
        let (h, g) = (self.num_heads.div_ceil(tp) as f64, self.n_groups.div_ceil(tp) as f64);
        let (p, n) = (self.head_dim as f64, self.state_size as f64);
        let inner = h * p;
        let conv = inner + 2.0 * g * n;
        Recurrent {
            in_cols: inner + conv + h, // z, then x, B, C, then dt
            conv_ch: conv,
            kernel: self.conv_kernel as f64,
            out_in: inner,
            vectors: conv * self.conv_kernel as f64 + if self.conv_bias { conv } else { 0.0 } + 3.0 * h + inner,
            heads: h,
            dk: n,
            dv: p,
            io: 2.0 * inner + 2.0 * g * n + h,
            state_bytes: self.state_bytes,
            scan: Scan::Ssd { groups: g },
            chunk: self.chunk,
            bias: self.proj_bias,
        }
    }
}

/// How a recurrent mixer's state is updated over a chunk of tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scan {
    /// The gated delta rule (Gated DeltaNet).
    GatedDelta,
    /// Mamba2's state-space duality scan, B and C shared by the heads of each of `groups`.
    Ssd { groups: f64 },
}

/// A recurrent (linear-attention) mixer on one rank, as the engine prices and stores it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recurrent {
    /// Output columns of the input projection.
    pub in_cols: f64,
    /// Channels of the short causal convolution.
    pub conv_ch: f64,
    pub kernel: f64,
    /// Rows of the output projection (the gated norm's width).
    pub out_in: f64,
    /// Parameters besides the two projections (conv weights and bias, per-head vectors, norm).
    pub vectors: f64,
    /// Heads of the scan, each holding a dk x dv state.
    pub heads: f64,
    pub dk: f64,
    pub dv: f64,
    /// Values the scan reads and writes per token.
    pub io: f64,
    pub state_bytes: Option<f64>,
    pub scan: Scan,
    /// Tokens per scan chunk (0: the plan's).
    pub chunk: u64,
    /// The projections carry biases.
    pub bias: bool,
}

impl Recurrent {
    /// Per-sequence state: (scan-state values, conv-state values).
    pub fn state_values(&self) -> (f64, f64) {
        (self.heads * self.dk * self.dv, self.conv_ch * (self.kernel - 1.0))
    }
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ffn {
    /// No feed-forward block in this layer (Nemotron-H mixer-only layers).
    None,
    Dense {
        intermediate_size: u64,
        gated: bool,
        activation: Activation,
        #[serde(default)]
        bias: bool,
    },
    Moe {
        num_experts: u64,
        top_k: u64,
        expert_intermediate_size: u64,
        #[serde(default)]
        shared_intermediate_size: u64,
        gated: bool,
        activation: Activation,
        #[serde(default)]
        bias: bool,
        #[serde(default)]
        router_bias: bool,
        /// A sigmoid gate on the shared expert's output (Qwen2-MoE, Qwen3-Next, Qwen3.5
        /// `shared_expert_gate`: hidden -> 1), computed beside the router.
        #[serde(default)]
        shared_gate: bool,
        /// Latent MoE (Nemotron-3 `moe_latent_size`): the routed experts work in this width,
        /// between a projection down from the hidden size (fc1_latent_proj) and back up
        /// (fc2_latent_proj), no biases; the router and the shared expert see the hidden size.
        #[serde(default)]
        latent: Option<u64>,
    },
}

/// `count` consecutive-or-not layers that share one structure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerGroup {
    pub count: u64,
    /// The attention mixer (None in Mamba- or MLP-only layers).
    #[serde(default)]
    pub attention: Option<Attention>,
    #[serde(default)]
    pub mamba: Option<Mamba2>,
    /// The Gated DeltaNet mixer (None in attention layers).
    #[serde(default)]
    pub linear: Option<GatedDeltaNet>,
    pub ffn: Ffn,
    /// Norms per layer (1: parallel attention/MLP blocks; 2: pre-norm; 4: Gemma-2).
    pub norms: u64,
}

impl LayerGroup {
    /// The group's recurrent mixer (Gated DeltaNet or Mamba2) on one of `tp` ranks.
    pub fn recurrent(&self, tp: u64) -> Option<Recurrent> {
        match (&self.linear, &self.mamba) {
            (Some(l), _) => Some(l.rank_shape(tp)),
            (None, Some(m)) => Some(m.rank_shape(tp)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    pub hidden_size: u64,
    pub vocab_size: u64,
    pub layer_groups: Vec<LayerGroup>,
    pub norm: NormKind,
    pub tie_word_embeddings: bool,
    /// Rows of a learned absolute position embedding (0 = none).
    #[serde(default)]
    pub position_embeddings: u64,
    #[serde(default)]
    pub lm_head_bias: bool,
    pub max_model_len: u64,
}

impl Model {
    pub fn from_json(s: &str) -> Result<Model> {
        let m: Model = serde_json::from_str(s).map_err(|e| Error::Input(format!("model: {e}")))?;
        m.validate()?;
        Ok(m)
    }

    pub fn num_layers(&self) -> u64 {
        self.layer_groups.iter().map(|g| g.count).sum()
    }

    /// Decoder layers with routed experts.
    pub fn moe_layers(&self) -> u64 {
        self.layer_groups
            .iter()
            .filter(|g| matches!(g.ffn, Ffn::Moe { .. }))
            .map(|g| g.count)
            .sum()
    }

    pub fn is_moe(&self) -> bool {
        self.layer_groups.iter().any(|g| matches!(g.ffn, Ffn::Moe { .. }))
    }

    /// KV-cache values one token adds to each layer group on one of `tp`
    /// ranks: `(layers, values per token, window)`. K and V per KV head
    /// (replicated when TP exceeds the KV heads), or the MLA latent plus its
    /// rope key (replicated on every rank), plus a sparse-attention indexer's key.
    pub fn kv_layers(&self, tp: u64) -> Vec<(u64, u64, Option<u64>)> {
        self.layer_groups
            .iter()
            .filter_map(|g| {
                g.attention.as_ref().map(|a| {
                    let values = match &a.mla {
                        None => a.kv_heads.div_ceil(tp) * (a.head_dim + a.v_dim()),
                        Some(m) => m.cache_width(),
                    };
                    // a sparse-attention indexer caches one key of head_dim values a token
                    let index = a.indexer.as_ref().filter(|i| !i.shared).map_or(0, |i| i.head_dim);
                    // a chunked-local layer holds at most one chunk (vLLM frees the blocks
                    // behind it), as a windowed layer holds its window
                    (g.count, values + index, a.window.or(a.chunk))
                })
            })
            .collect()
    }

    /// Recurrent-state bytes one sequence holds on one of `tp` ranks, whatever its length: the
    /// Gated DeltaNet layers' state (in its own dtype, `act_b` when the config gives none) and
    /// their convolution state (`act_b`).
    pub fn state_bytes(&self, tp: u64, act_b: f64) -> f64 {
        self.layer_groups
            .iter()
            .filter_map(|g| g.recurrent(tp).map(|r| (g.count, r)))
            .map(|(n, r)| {
                let (state, conv) = r.state_values();
                n as f64 * (state * r.state_bytes.unwrap_or(act_b) + conv * act_b)
            })
            .sum()
    }

    /// Layer types the engine cannot price yet, named for the error (none at present).
    pub fn unpriced_layers(&self) -> Option<&'static str> {
        None
    }

    pub fn validate(&self) -> Result<()> {
        let pos = |key: &str, v: u64| -> Result<()> {
            if v == 0 {
                Err(Error::model(key, "must be a positive integer"))
            } else {
                Ok(())
            }
        };
        pos("hidden_size", self.hidden_size)?;
        pos("vocab_size", self.vocab_size)?;
        pos("max_model_len", self.max_model_len)?;
        if self.max_model_len > crate::limits::MAX_EXACT {
            return Err(Error::model(
                "max_position_embeddings",
                format!(
                    "{} positions is more than the 2^53 the engine counts exactly",
                    self.max_model_len
                ),
            ));
        }
        if self.layer_groups.is_empty() {
            return Err(Error::model("num_hidden_layers", "the model has no layers"));
        }
        let layers = self.layer_groups.iter().fold(0u64, |n, g| n.saturating_add(g.count));
        if layers > MAX_LAYERS {
            return Err(Error::model(
                "num_hidden_layers",
                format!("{layers} layers is more than the {MAX_LAYERS} one estimate builds"),
            ));
        }
        for g in &self.layer_groups {
            pos("num_hidden_layers", g.count)?;
            if let Some(a) = &g.attention {
                pos("num_attention_heads", a.heads)?;
                pos("num_key_value_heads", a.kv_heads)?;
                pos("head_dim", a.head_dim)?;
                if a.heads % a.kv_heads != 0 {
                    return Err(Error::model(
                        "num_key_value_heads",
                        format!("{} query heads are not a multiple of {} kv heads", a.heads, a.kv_heads),
                    ));
                }
                if let Some(w) = a.window {
                    pos("sliding_window", w)?;
                }
                if let Some(w) = a.input_dim {
                    pos("input_dim", w)?;
                    if a.mla.is_some() {
                        return Err(Error::model(
                            "input_dim",
                            "not with MLA (its projections read the hidden state)",
                        ));
                    }
                }
                if let Some(v) = a.v_head_dim {
                    pos("v_head_dim", v)?;
                    if a.mla.is_some() {
                        return Err(Error::model(
                            "v_head_dim",
                            "a separate value head width is not supported with MLA",
                        ));
                    }
                }
                if let Some(c) = a.chunk {
                    pos("attention_chunk_size", c)?;
                    if a.window.is_some() || a.mla.is_some() || a.indexer.is_some() {
                        return Err(Error::model(
                            "attention_chunk_size",
                            "chunked local attention with a window, MLA or an indexer is not supported",
                        ));
                    }
                }
                if let Some(i) = &a.indexer {
                    pos("index_n_heads", i.heads)?;
                    pos("index_head_dim", i.head_dim)?;
                    pos("index_topk", i.topk)?;
                    if a.mla.as_ref().and_then(|m| m.q_lora_rank).is_none() {
                        return Err(Error::model(
                            "index_topk",
                            "the sparse-attention indexer reads the MLA query latent; the config has no q_lora_rank",
                        ));
                    }
                }
                if let Some(m) = &a.mla {
                    pos("kv_lora_rank", m.kv_lora_rank)?;
                    pos("qk_rope_head_dim", m.qk_rope_head_dim)?;
                    pos("v_head_dim", m.v_head_dim)?;
                    if let Some(q) = m.q_lora_rank {
                        pos("q_lora_rank", q)?;
                    }
                    if a.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim {
                        return Err(Error::model(
                            "qk_nope_head_dim",
                            "head_dim must equal qk_nope + qk_rope",
                        ));
                    }
                }
            }
            if let Some(l) = &g.linear {
                for (k, v) in [
                    ("linear_num_key_heads", l.num_k_heads),
                    ("linear_num_value_heads", l.num_v_heads),
                    ("linear_key_head_dim", l.head_k_dim),
                    ("linear_value_head_dim", l.head_v_dim),
                    ("linear_conv_kernel_dim", l.conv_kernel),
                ] {
                    pos(k, v)?;
                }
                if l.num_v_heads % l.num_k_heads != 0 {
                    return Err(Error::model(
                        "linear_num_value_heads",
                        format!(
                            "{} value heads are not a multiple of {} key heads",
                            l.num_v_heads, l.num_k_heads
                        ),
                    ));
                }
                if let Some(b) = l.state_bytes.filter(|b| !(b.is_finite() && *b > 0.0)) {
                    return Err(Error::model(
                        "mamba_ssm_dtype",
                        format!("state bytes must be positive, got {b}"),
                    ));
                }
            }
            if let Some(m) = &g.mamba {
                for (k, v) in [
                    ("mamba_num_heads", m.num_heads),
                    ("mamba_head_dim", m.head_dim),
                    ("n_groups", m.n_groups),
                    ("ssm_state_size", m.state_size),
                    ("conv_kernel", m.conv_kernel),
                ] {
                    pos(k, v)?;
                }
            }
            match &g.ffn {
                Ffn::None => {}
                Ffn::Dense { intermediate_size, .. } => pos("intermediate_size", *intermediate_size)?,
                Ffn::Moe {
                    num_experts,
                    top_k,
                    expert_intermediate_size,
                    latent,
                    ..
                } => {
                    pos("num_experts", *num_experts)?;
                    if *num_experts > MAX_EXPERTS {
                        return Err(Error::model(
                            "num_experts",
                            format!("{num_experts} experts is more than the {MAX_EXPERTS} one estimate routes over"),
                        ));
                    }
                    pos("num_experts_per_tok", *top_k)?;
                    pos("moe_intermediate_size", *expert_intermediate_size)?;
                    if let Some(l) = latent {
                        pos("moe_latent_size", *l)?;
                    }
                    if top_k > num_experts {
                        return Err(Error::model(
                            "num_experts_per_tok",
                            format!("top-k {top_k} exceeds the {num_experts} experts"),
                        ));
                    }
                }
            }
        }
        if !params::fits_u64(self) {
            return Err(Error::model(
                "hidden_size",
                "the model's dimensions give more than 2^63 parameters (check hidden_size, vocab_size, \
                 intermediate_size, the expert and layer counts)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub use crate::fixtures::llama31_8b;

    #[test]
    fn json_roundtrip_and_validation() {
        let m = llama31_8b();
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(Model::from_json(&s).unwrap(), m);
        let mut bad = m.clone();
        bad.layer_groups[0].attention.as_mut().unwrap().kv_heads = 5;
        assert!(matches!(bad.validate(), Err(Error::ModelConfig { .. })));
        let mut moe = m;
        moe.layer_groups[0].ffn = Ffn::Moe {
            num_experts: 8,
            top_k: 9,
            expert_intermediate_size: 10,
            shared_intermediate_size: 0,
            gated: true,
            activation: Activation::Silu,
            bias: false,
            router_bias: false,
            shared_gate: false,
            latent: None,
        };
        assert!(moe.validate().is_err());
    }
}
