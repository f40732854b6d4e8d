//! A plan: what is run (batch, lengths, precisions, parallelism) and the
//! efficiencies it is priced with.

use crate::attention::DecodeKeys;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::AttnPhase;
pub use crate::limits::{MAX_EXACT, MAX_SHAPES};
use crate::model::{Ffn, Model};
use crate::weights::{Role, WeightFormats, N_ROLES};
use serde::Deserialize;

fn default_dtype() -> DType {
    DType::Bf16
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub batch: u64,
    pub prompt: u64,
    pub output: u64,
    /// Tokens already in the KV cache before the prompt (llama-bench `-d`, prefix caching).
    #[serde(default)]
    pub prefix: u64,
    /// Every sequence holds the same tokens (n copies of one request), so MoE routing picks
    /// the same experts for each: distinct experts follow the tokens of one sequence, not of
    /// the batch. (llama-batched-bench feeds token 0 to all sequences, yet its MoE step times
    /// grow with the batch: its rows are priced without this, with a fitted `routing_skew`.)
    #[serde(default)]
    pub identical_sequences: bool,
    /// Zipf exponent of routed-expert popularity: 0 is uniform routing (spec 30), larger
    /// values concentrate tokens on fewer experts (`graph::distinct_experts`).
    #[serde(default)]
    pub routing_skew: f64,
    /// Bytes moved per attention score when the runtime does not fuse attention (the score
    /// matrix goes through memory); 0 (default) is fused, flash attention.
    #[serde(default)]
    pub attention_score_bytes: f64,
    /// Cache cells a sliding-window layer holds, and attention computes over, beyond its
    /// window: llama.cpp sizes each sequence's SWA cache n_swa + n_ubatch and its attention
    /// computes every cell of it up to the query (the ones outside the window masked), in
    /// decode and prefill. 0 (default): exactly the window.
    #[serde(default)]
    pub swa_cache_extra: u64,
    /// Decode reads the KV cache in multiples of this many cells (llama.cpp pads n_kv to 256);
    /// 1 (default): exactly the cells used.
    #[serde(default = "one")]
    pub kv_pad: u64,
    /// With several sequences (batch > 1, one KV stream each), decode skips each sequence's
    /// trailing `kv_pad`-cell tiles that hold no attended cell (llama.cpp's CUDA flash attention:
    /// its pre-pass runs over several streams only): a sliding-window ring that has wrapped is
    /// read up to its newest cell (`attention::DecodeKeys`). One sequence reads its whole view.
    #[serde(default)]
    pub kv_skip_masked_tail: bool,
    /// One-token decode steps (batch 1) are replayed from a captured CUDA graph: the host
    /// launches no kernel, so no per-kernel launch overhead (`t_launch_s`) is paid (llama.cpp
    /// CUDA; ggml-cuda disables graphs when a node has batch > 1, so larger batches launch).
    #[serde(default)]
    pub decode_graphs: bool,
    #[serde(default = "one")]
    pub tp: u64,
    /// Activation (compute) dtype.
    #[serde(default = "default_dtype")]
    pub dtype: DType,
    /// Storage format of each weight role (default: all in `dtype`).
    #[serde(default)]
    pub weights: WeightFormats,
    /// Expert-parallel degree: it divides the MoE group (`tp` x `attention_dp` ranks); each
    /// routed expert is sharded over the rest (MoE TP = group / `ep`).
    #[serde(default = "one")]
    pub ep: u64,
    /// Attention data parallelism: groups of `tp` ranks that each run attention (and the dense
    /// layers) on their own `batch` sequences, all of them sharing the routed experts.
    #[serde(default = "one")]
    pub attention_dp: u64,
    /// Pipeline stages.
    #[serde(default = "one")]
    pub pp: u64,
    /// Data-parallel replicas (throughput only).
    #[serde(default = "one")]
    pub dp: u64,
    /// Micro-batches per pipeline round (default: `pp`, at most `batch`).
    #[serde(default)]
    pub microbatches: Option<u64>,
    /// Node layout and scale-out link, resolved by the caller (explicit, else catalog).
    #[serde(default)]
    pub topology: TopologySpec,
    /// KV-cache dtype (default: `dtype`).
    #[serde(default)]
    pub kv_dtype: Option<DType>,
    /// Chunked prefill token budget per step (`max_num_batched_tokens`).
    #[serde(default)]
    pub chunk: Option<u64>,
    /// Share of device memory the runtime may use (constants table).
    pub gpu_memory_utilization: f64,
    /// Tokens per chunk of the chunked linear-attention scan (the runtimes' FLA kernels, the
    /// constants table); needed only by models with Gated DeltaNet layers.
    #[serde(default)]
    pub linear_chunk: u64,
    /// The share of the dynamic power range a memory-bound phase draws (spec 60, the
    /// constants table's fitted `power_memory_rho`); None: power is reported missing.
    #[serde(default)]
    pub power_rho: Option<f64>,
    /// Speculative decoding: each decode step drafts `draft_tokens` tokens and the target
    /// verifies them in one pass; None: one token a step.
    #[serde(default)]
    pub speculation: Option<Speculation>,
    /// Weights kept in host memory; None: every weight on the device.
    #[serde(default)]
    pub offload: Option<Offload>,
}

fn one() -> u64 {
    1
}

/// Speculative decoding as the runtimes run it (vLLM `v1/spec_decode/eagle.py`
/// `EagleProposer.propose`, SGLang's EAGLE worker): each step the drafter proposes k tokens a
/// sequence (a first pass over the step's k + 1 verified positions, then k - 1 passes of one
/// token), and the target scores the k drafts and the bonus token in one pass (k + 1 tokens
/// of GEMM, attention and LM head a sequence, its weights read once); on average
/// `acceptance_length` tokens a step are kept. The rejected drafts' work is paid all the same.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Speculation {
    /// k: tokens drafted a sequence each step (`num_speculative_tokens`).
    pub draft_tokens: u64,
    /// Tokens a verification step emits on average, the bonus token included (1 ..= k + 1):
    /// the acceptance curve's value at depth k.
    pub acceptance_length: f64,
    /// The drafter's forward passes; None: drafts found by a lookup on the host (n-gram), no
    /// device pass.
    #[serde(default)]
    pub drafter: Option<Drafter>,
    /// P(the first i drafts are all kept), i = 1 ..= k, non-increasing: the acceptance curve's
    /// increments (AL(i) - AL(i - 1)), or its per-position rates. The simulator draws each
    /// step's kept drafts from it; empty: the mean alone is known (the static engine needs no
    /// more). 1 + their sum is `acceptance_length`.
    #[serde(default)]
    pub accepted: Vec<f64>,
}

/// A drafter that runs on the device: an MTP module, an EAGLE head or a draft model, at the
/// target's TP.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Drafter {
    /// Its layers, hidden size and vocabulary (its LM head's rows: an EAGLE-3 head's draft vocabulary).
    pub model: Model,
    /// Hidden-size states concatenated into a projection to the hidden size before its layers:
    /// 2 for an MTP module's eh_proj (the token's embedding and the target's hidden state,
    /// DeepSeek-V3 and vLLM `deepseek_mtp.py`), 3 for EAGLE-3's fc (three of the target's
    /// layers' states); 0 for a draft model (none).
    #[serde(default)]
    pub fused_inputs: u64,
    /// The fused projection runs on the first pass of a step only (EAGLE-3 combines the
    /// target's states once, vLLM `combine_hidden_states`; its later passes feed back its own
    /// state); else on every pass (an MTP module's eh_proj takes each new token's embedding).
    #[serde(default)]
    pub fuse_first_pass_only: bool,
    /// Storage format of each of its weight roles (default: all in the plan's dtype).
    #[serde(default)]
    pub weights: WeightFormats,
    /// It reads the target's embedding table (MTP, EAGLE): not held twice.
    #[serde(default)]
    pub shares_embedding: bool,
    /// It reads the target's LM head (MTP): not held twice.
    #[serde(default)]
    pub shares_head: bool,
}

impl Speculation {
    /// Checks the speculation against the target model `m`.
    pub fn validate(&self, m: &Model) -> Result<()> {
        if self.draft_tokens == 0 {
            return Err(Error::plan("draft_tokens", "must be a positive integer (>= 1)"));
        }
        if self.draft_tokens > crate::limits::MAX_DRAFT_TOKENS {
            return Err(Error::plan(
                "draft_tokens",
                format!(
                    "{} is more than the {} a step prices",
                    self.draft_tokens,
                    crate::limits::MAX_DRAFT_TOKENS
                ),
            ));
        }
        let top = (self.draft_tokens + 1) as f64;
        if !(self.acceptance_length.is_finite() && (1.0..=top).contains(&self.acceptance_length)) {
            return Err(Error::plan(
                "acceptance_length",
                format!(
                    "must be between 1 (every draft rejected) and draft_tokens + 1 = {top} (every draft kept), got {}",
                    self.acceptance_length
                ),
            ));
        }
        if !self.accepted.is_empty() {
            let ok = self.accepted.len() as u64 == self.draft_tokens
                && self.accepted.iter().all(|p| p.is_finite() && (0.0..=1.0).contains(p))
                && self.accepted.windows(2).all(|w| w[1] <= w[0]);
            if !ok {
                return Err(Error::plan(
                    "accepted",
                    format!(
                        "give {} probabilities in [0, 1], non-increasing (the first i drafts kept), got {:?}",
                        self.draft_tokens, self.accepted
                    ),
                ));
            }
            let al = 1.0 + self.accepted.iter().sum::<f64>();
            if (al - self.acceptance_length).abs() > 1e-9 * self.acceptance_length {
                return Err(Error::plan(
                    "accepted",
                    format!(
                        "1 + their sum is {al}, not the acceptance length {}",
                        self.acceptance_length
                    ),
                ));
            }
        }
        if let Some(d) = &self.drafter {
            d.model.validate()?;
            let reads_target = d.fused_inputs > 0 || d.shares_embedding || d.shares_head;
            if reads_target && d.model.hidden_size != m.hidden_size {
                return Err(Error::plan(
                    "drafter",
                    format!(
                        "a drafter that reads the target's hidden states, embedding or LM head needs its hidden \
                         size ({}), got {}",
                        m.hidden_size, d.model.hidden_size
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Weights kept in host memory, as the runtimes run them: llama.cpp computes the experts of
/// its first `--n-cpu-moe` layers and the layers below `-ngl` on the CPU (activations go to the
/// host and back around them; a step of at least `device_min_tokens` tokens copies those
/// weights to the device and computes there), and vLLM's `--cpu-offload-gb` reads the bytes it
/// keeps on the host over the host link on every forward pass.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    /// MoE layers whose routed experts the host holds and computes.
    #[serde(default)]
    pub expert_layers: u64,
    /// Decoder layers the host holds and runs whole (the first ones, with the final norm and
    /// LM head).
    #[serde(default)]
    pub host_layers: u64,
    /// Weight bytes per device kept on the host and streamed over the host link each pass.
    #[serde(default)]
    pub streamed_bytes: f64,
    pub host: Host,
}

/// The host a plan offloads to: its memory and compute (the catalog's CPU row, or the user's),
/// the device's link to it, and the runtime's fitted efficiencies on them.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Peak host memory bandwidth (GB/s).
    pub memory_bw_gbs: f64,
    /// Peak host compute (TFLOP/s, the vector units' fp32).
    pub tflops: f64,
    /// Host memory (GB).
    pub memory_gb: f64,
    /// The device's host link, one direction (GB/s).
    pub link_gbs: f64,
    /// Share of the memory bandwidth the host's kernels reach (fitted).
    pub eta_mem: f64,
    /// Share of the link's bandwidth a transfer reaches.
    pub eta_link: f64,
    /// Fixed time of one round trip of activations to the host and back (fitted).
    pub t_round_trip_s: f64,
    /// Steps of at least this many tokens compute host-held weights on the device after
    /// copying them over the link; None: the host computes at any size.
    #[serde(default)]
    pub device_min_tokens: Option<u64>,
}

impl Offload {
    /// Checks the offload against the model `m` and the plan's parallelism.
    pub fn validate(&self, m: &Model, plan: &Plan) -> Result<()> {
        let h = &self.host;
        let positive = [
            ("host.memory_bw_gbs", h.memory_bw_gbs),
            ("host.tflops", h.tflops),
            ("host.memory_gb", h.memory_gb),
            ("host.link_gbs", h.link_gbs),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::plan(name, format!("must be a positive number, got {v}")));
            }
        }
        for (name, v) in [("host.eta_mem", h.eta_mem), ("host.eta_link", h.eta_link)] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(Error::plan(name, format!("must be in (0, 1], got {v}")));
            }
        }
        if !(h.t_round_trip_s.is_finite() && h.t_round_trip_s >= 0.0) {
            return Err(Error::plan(
                "host.t_round_trip_s",
                format!("must be a non-negative number of seconds, got {}", h.t_round_trip_s),
            ));
        }
        if !(self.streamed_bytes.is_finite() && self.streamed_bytes >= 0.0) {
            return Err(Error::plan(
                "streamed_bytes",
                format!("must be a non-negative number of bytes, got {}", self.streamed_bytes),
            ));
        }
        if self.expert_layers > m.moe_layers() {
            return Err(Error::plan(
                "expert_layers",
                format!(
                    "the model has {} MoE layers, got {} (dense models offload layers, not experts)",
                    m.moe_layers(),
                    self.expert_layers
                ),
            ));
        }
        if self.host_layers > m.num_layers() {
            return Err(Error::plan(
                "host_layers",
                format!("the model has {} layers, got {}", m.num_layers(), self.host_layers),
            ));
        }
        let computed = self.expert_layers > 0 || self.host_layers > 0;
        if computed && plan.moe_group().saturating_mul(plan.pp).saturating_mul(plan.ep) > 1 {
            return Err(Error::plan(
                "offload",
                "experts or layers computed by the host are priced on one device (tp = ep = pp = \
                 attention_dp = 1), as llama.cpp runs them; stream weights (streamed_bytes) on several",
            ));
        }
        Ok(())
    }

    /// The shares and rates the build prices the offload with, for model `m`.
    pub fn placement(&self, m: &Model) -> crate::graph::Placement {
        let h = &self.host;
        crate::graph::Placement {
            expert_layers: self.expert_layers as f64,
            expert_share: self.expert_layers as f64 / m.moe_layers().max(1) as f64,
            layer_share: self.host_layers as f64 / m.num_layers().max(1) as f64,
            host_per_byte: 1.0 / (h.memory_bw_gbs * 1e9 * h.eta_mem),
            host_per_flop: 1.0 / (h.tflops * 1e12),
            link_per_byte: 1.0 / (h.link_gbs * 1e9 * h.eta_link),
            t_round_trip_s: h.t_round_trip_s,
            streamed_bytes: self.streamed_bytes,
            device_min_tokens: h.device_min_tokens.map(|t| t as f64),
        }
    }
}

/// Devices per node and the per-device scale-out link (NIC line rate per
/// direction), as the caller resolved them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    #[serde(default)]
    pub devices_per_node: Option<u64>,
    #[serde(default)]
    pub scaleout_bw_gbs: Option<f64>,
    #[serde(default)]
    pub scaleout_latency_us: Option<f64>,
    /// Where it came from ("explicit", "catalog"), for the result's notes.
    #[serde(default)]
    pub source: String,
}

/// Fitted efficiencies (spec 50); `uncalibrated()` is the physical bound.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    pub eta_compute: f64,
    pub eta_mem: f64,
    /// Memory efficiency of the grouped routed-expert kernels (tokens gathered per expert,
    /// more than one token per step); `eta_mem` when not fitted.
    #[serde(default)]
    pub eta_moe: Option<f64>,
    /// Compute efficiency of GEMMs on quantized weights (llama.cpp's MMQ kernels);
    /// `eta_compute` when not fitted.
    #[serde(default)]
    pub eta_compute_quant: Option<f64>,
    /// Compute efficiency of quantized GEMMs per weight role (indexed like `Role::ALL`): the
    /// fitted efficiency of the role's storage format (llama.cpp's MMQ kernel differs per ggml
    /// type); `eta_compute_quant` where None.
    #[serde(default)]
    pub eta_compute_quant_roles: [Option<f64>; N_ROLES],
    /// How far a kernel overlaps its memory traffic with its math: 1 (None) is the roofline's
    /// max(compute, memory), 0 the two in series.
    #[serde(default)]
    pub overlap: Option<f64>,
    /// Overlap of the grouped routed-expert kernels (`grouped` ops); `overlap` when not fitted.
    #[serde(default)]
    pub overlap_moe: Option<f64>,
    #[serde(default)]
    pub t_launch_s: f64,
    #[serde(default)]
    pub t_layer_s: f64,
    #[serde(default)]
    pub t_step_s: f64,
    /// A request's front-end time before it reaches the scheduler's queue (parsing, tokenising,
    /// routing), added once to its TTFT: the same in the static estimate and the simulator.
    #[serde(default)]
    pub t_request_s: f64,
    /// The runtime's fused attention kernels fitted from their own measurements: a prefill
    /// step's and a decode step's (`graph::AttnPhase`); None prices them as any kernel.
    #[serde(default)]
    pub attention_prefill: Option<AttnEff>,
    #[serde(default)]
    pub attention_decode: Option<AttnEff>,
}

/// A fused attention kernel's fitted parameters: `t_floor_s + max(F / (P eta_compute) +
/// items t_item_s, B / (BW eta_mem))` per invocation, `items` its sequences x KV heads.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AttnEff {
    pub eta_compute: f64,
    pub eta_mem: f64,
    /// Fixed time per kernel (replayed from a CUDA graph: no host launch).
    pub t_floor_s: f64,
    /// Time per work item (sequence x KV head), on the compute side.
    pub t_item_s: f64,
}

impl Efficiency {
    pub fn uncalibrated() -> Efficiency {
        Efficiency {
            eta_compute: 1.0,
            eta_mem: 1.0,
            eta_moe: None,
            eta_compute_quant: None,
            eta_compute_quant_roles: [None; N_ROLES],
            overlap: None,
            overlap_moe: None,
            t_launch_s: 0.0,
            t_layer_s: 0.0,
            t_step_s: 0.0,
            t_request_s: 0.0,
            attention_prefill: None,
            attention_decode: None,
        }
    }

    /// The fitted kernel of an attention phase, if any.
    pub fn attention(&self, phase: AttnPhase) -> Option<&AttnEff> {
        match phase {
            AttnPhase::Prefill => self.attention_prefill.as_ref(),
            AttnPhase::Decode => self.attention_decode.as_ref(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("eta_compute", self.eta_compute),
            ("eta_mem", self.eta_mem),
            ("eta_moe", self.eta_moe.unwrap_or(self.eta_mem)),
            ("eta_compute_quant", self.eta_compute_quant.unwrap_or(self.eta_compute)),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(Error::plan(name, format!("must be in (0, 1], got {v}")));
            }
        }
        for (role, v) in Role::ALL.iter().zip(self.eta_compute_quant_roles) {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0 && *v <= 1.0)) {
                return Err(Error::plan(
                    "eta_compute_quant_roles",
                    format!("{} must be in (0, 1], got {v}", role.name()),
                ));
            }
        }
        for (name, o) in [
            ("overlap", self.overlap.unwrap_or(1.0)),
            ("overlap_moe", self.overlap_moe.or(self.overlap).unwrap_or(1.0)),
        ] {
            if !(o.is_finite() && (0.0..=1.0).contains(&o)) {
                return Err(Error::plan(name, format!("must be in [0, 1], got {o}")));
            }
        }
        for (name, v) in [
            ("t_launch_s", self.t_launch_s),
            ("t_layer_s", self.t_layer_s),
            ("t_step_s", self.t_step_s),
            ("t_request_s", self.t_request_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::plan(name, format!("must be >= 0, got {v}")));
            }
        }
        for (phase, a) in [
            ("attention_prefill", self.attention_prefill),
            ("attention_decode", self.attention_decode),
        ] {
            let Some(a) = a else { continue };
            for (name, v) in [("eta_compute", a.eta_compute), ("eta_mem", a.eta_mem)] {
                if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                    return Err(Error::plan(phase, format!("{name} must be in (0, 1], got {v}")));
                }
            }
            for (name, v) in [("t_floor_s", a.t_floor_s), ("t_item_s", a.t_item_s)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(Error::plan(phase, format!("{name} must be >= 0, got {v}")));
                }
            }
        }
        Ok(())
    }
}

/// A routing skew is a finite Zipf exponent >= 0 (0: uniform routing).
pub fn check_routing_skew(s: f64) -> Result<()> {
    if s.is_finite() && s >= 0.0 {
        Ok(())
    } else {
        Err(Error::plan(
            "routing_skew",
            format!("must be a finite number >= 0 (0 is uniform routing), got {s}"),
        ))
    }
}

impl Plan {
    /// A single-device bf16 plan; the other fields take their defaults.
    pub fn new(batch: u64, prompt: u64, output: u64, gpu_memory_utilization: f64) -> Plan {
        Plan {
            batch,
            prompt,
            output,
            prefix: 0,
            identical_sequences: false,
            routing_skew: 0.0,
            attention_score_bytes: 0.0,
            swa_cache_extra: 0,
            kv_pad: 1,
            kv_skip_masked_tail: false,
            decode_graphs: false,
            tp: 1,
            dtype: DType::Bf16,
            weights: WeightFormats::default(),
            ep: 1,
            attention_dp: 1,
            pp: 1,
            dp: 1,
            microbatches: None,
            topology: TopologySpec::default(),
            kv_dtype: None,
            chunk: None,
            gpu_memory_utilization,
            linear_chunk: 0,
            power_rho: None,
            speculation: None,
            offload: None,
        }
    }

    /// The KV cache's storage format: `kv_dtype`, else the activations' storage format (tf32
    /// is a compute mode on fp32 values, so its activations and cache are stored as fp32).
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype.unwrap_or(match self.dtype {
            DType::Tf32 => DType::Fp32,
            d => d,
        })
    }

    /// Devices the plan occupies: TP x PP x DP (EP spreads experts over the TP group);
    /// `validate` bounds the product.
    pub fn devices(&self) -> u64 {
        self.moe_group().saturating_mul(self.pp).saturating_mul(self.dp)
    }

    /// The ranks one stage's routed experts span: `tp` x `attention_dp`.
    pub fn moe_group(&self) -> u64 {
        self.tp.saturating_mul(self.attention_dp)
    }

    /// How a decode step reads the KV cache of a layer with attention window `window`
    /// (`attention::DecodeKeys`); the masked-tail skip needs several sequences.
    pub fn decode_keys(&self, window: Option<u64>) -> DecodeKeys {
        DecodeKeys {
            skip_masked_tail: self.kv_skip_masked_tail && self.batch > 1,
            ..self.kv_read()
        }
        .with_window(window)
    }

    /// How decode reads the KV cache whatever the batch: `decode_keys` but for the batch's
    /// part in the masked-tail skip (the build context applies it per step).
    pub fn kv_read(&self) -> DecodeKeys {
        DecodeKeys {
            window: None,
            cache_extra: self.swa_cache_extra,
            pad: self.kv_pad,
            skip_masked_tail: self.kv_skip_masked_tail,
            chunk: None,
        }
    }

    /// Tokens one sequence holds at the end of the request: cached prefix + prompt + output
    /// (None past u64).
    pub fn context(&self) -> Option<u64> {
        self.prefix.checked_add(self.prompt)?.checked_add(self.output)
    }

    /// Micro-batches per pipeline round: `microbatches`, else `pp`, never more than `batch`.
    pub fn microbatches(&self) -> u64 {
        self.microbatches.unwrap_or(self.pp).min(self.batch).max(1)
    }

    pub fn validate(&self, m: &Model) -> Result<()> {
        let positive = |field: &str, v: u64| -> Result<()> {
            if v == 0 {
                Err(Error::plan(field, "must be a positive integer (>= 1)"))
            } else {
                Ok(())
            }
        };
        positive("batch", self.batch)?;
        positive("prompt", self.prompt)?;
        positive("output", self.output)?;
        positive("tp", self.tp)?;
        positive("ep", self.ep)?;
        positive("attention_dp", self.attention_dp)?;
        positive("pp", self.pp)?;
        positive("dp", self.dp)?;
        positive("kv_pad", self.kv_pad)?;
        if let Some(sp) = &self.speculation {
            sp.validate(m)?;
            if self.pp > 1 {
                return Err(Error::plan(
                    "speculation",
                    "speculative decoding with pipeline stages is not priced",
                ));
            }
        }
        if let Some(o) = &self.offload {
            o.validate(m, self)?;
        }
        if let Some(mb) = self.microbatches {
            positive("microbatches", mb)?;
        }
        if self.pp > m.num_layers() {
            return Err(Error::plan(
                "pp",
                format!(
                    "{} pipeline stages exceed the model's {} layers",
                    self.pp,
                    m.num_layers()
                ),
            ));
        }
        if let Some(d) = self.topology.devices_per_node {
            positive("devices_per_node", d)?;
        }
        for (name, v) in [
            ("scaleout_bw_gbs", self.topology.scaleout_bw_gbs),
            ("scaleout_latency_us", self.topology.scaleout_latency_us),
        ] {
            if let Some(x) = v {
                if !(x.is_finite() && x >= 0.0) || (name == "scaleout_bw_gbs" && x == 0.0) {
                    return Err(Error::plan(name, format!("must be a positive number, got {x}")));
                }
            }
        }
        if self.ep > 1 && !self.moe_group().is_multiple_of(self.ep) {
            let group = if self.attention_dp > 1 {
                format!("TP {} x attention DP {}", self.tp, self.attention_dp)
            } else {
                format!("TP {}", self.tp)
            };
            return Err(Error::plan(
                "ep",
                format!(
                    "EP {} must divide {group} (experts spread over the group: E/EP whole experts a rank, \
                     each sharded over the group / EP ranks)",
                    self.ep
                ),
            ));
        }
        if let Some(c) = self.chunk {
            positive("chunk", c)?;
        }
        if !self.dtype.is_activation_format() {
            // a storage format is a weight (or KV) dtype; fp16acc16 is a GEMM path, not a format
            let hint = if self.dtype.is_storage_format() {
                format!(
                    "; for {} weights use --weight-dtype {} (weight_dtype=)",
                    self.dtype.name(),
                    self.dtype.name()
                )
            } else {
                String::new()
            };
            return Err(Error::plan(
                "dtype",
                format!(
                    "activations are computed in fp32, tf32, bf16 or fp16, not {}{hint}",
                    self.dtype.name()
                ),
            ));
        }
        if !self.kv_dtype().is_storage_format() {
            return Err(Error::plan(
                "kv_dtype",
                format!(
                    "{} is a compute mode, not a storage format; accepted: fp32, bf16, fp16, fp8, int8",
                    self.kv_dtype().name()
                ),
            ));
        }
        let u = self.gpu_memory_utilization;
        if !(u.is_finite() && u > 0.0 && u <= 1.0) {
            return Err(Error::plan(
                "gpu_memory_utilization",
                format!("must be in (0, 1], got {u}"),
            ));
        }
        if let Some(r) = self.power_rho {
            if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
                return Err(Error::plan("power_rho", format!("must be in [0, 1], got {r}")));
            }
        }
        let b = self.attention_score_bytes;
        if !(b.is_finite() && b >= 0.0) {
            return Err(Error::plan(
                "attention_score_bytes",
                format!("must be a finite number of bytes >= 0 (0 is fused attention), got {b}"),
            ));
        }
        check_routing_skew(self.routing_skew)?;
        let ctx = self.context().filter(|c| *c <= m.max_model_len).ok_or_else(|| {
            let sum = self.prefix as u128 + self.prompt as u128 + self.output as u128;
            Error::plan(
                "prompt+output",
                format!(
                    "{}{} + {} = {sum} tokens exceeds the model's max_model_len {}",
                    if self.prefix > 0 {
                        format!("{} cached + ", self.prefix)
                    } else {
                        String::new()
                    },
                    self.prompt,
                    self.output,
                    m.max_model_len
                ),
            )
        })?;
        // every count the engine forms is exact in f64: the batch's tokens and the devices
        let tokens = self.batch as u128 * ctx as u128;
        if tokens > MAX_EXACT as u128 {
            return Err(Error::plan(
                "batch",
                format!(
                    "{} sequences of {ctx} tokens hold {tokens} tokens, more than the 2^53 the engine counts exactly",
                    self.batch
                ),
            ));
        }
        let devices = self.tp as u128 * self.pp as u128 * self.dp as u128;
        if devices > MAX_EXACT as u128 {
            return Err(Error::plan(
                "dp",
                format!(
                    "TP {} x PP {} x DP {} = {devices} devices, more than the 2^53 the engine counts exactly",
                    self.tp, self.pp, self.dp
                ),
            ));
        }
        // a KV view padded, or a sliding-window ring grown, past the longest context the model
        // takes holds cells no request reaches
        for (name, v) in [("kv_pad", self.kv_pad), ("swa_cache_extra", self.swa_cache_extra)] {
            if v > m.max_model_len {
                return Err(Error::plan(
                    name,
                    format!("must be at most the model's max_model_len {}, got {v}", m.max_model_len),
                ));
            }
        }
        let schedule = crate::schedule::PrefillSchedule::new(self.batch, self.prompt, self.prefix, self.chunk);
        if schedule.distinct() > MAX_SHAPES {
            return Err(Error::plan(
                "chunk",
                format!(
                    "{}-token steps over {}-token prompts take {} distinct prefill shapes, more than the {} one \
                     estimate prices (a larger chunk, or one dividing the prompt, takes fewer)",
                    schedule.chunk,
                    self.prompt,
                    schedule.distinct(),
                    MAX_SHAPES
                ),
            ));
        }
        if self.output > 1 {
            let (lo, hi) = (ctx - self.output + 1, ctx - 1);
            for w in m
                .layer_groups
                .iter()
                .filter_map(|g| g.attention.as_ref().map(|a| a.window))
            {
                let runs = self.decode_keys(w).count_runs(lo, hi, MAX_SHAPES);
                if runs > MAX_SHAPES {
                    return Err(Error::plan(
                        "output",
                        format!(
                            "{} decode steps read the KV cache in more than {MAX_SHAPES} distinct runs (kv_pad {}, \
                             sliding window {w:?}); a larger kv_pad or fewer output tokens take fewer",
                            self.output - 1,
                            self.kv_pad
                        ),
                    ));
                }
            }
        }
        for g in &m.layer_groups {
            if let Some(a) = &g.attention {
                if a.heads % self.tp != 0 {
                    return Err(Error::plan(
                        "tp",
                        format!("TP {} does not divide the {} attention heads", self.tp, a.heads),
                    ));
                }
                if !a.kv_heads.is_multiple_of(self.tp) && !self.tp.is_multiple_of(a.kv_heads) {
                    return Err(Error::plan(
                        "tp",
                        format!(
                            "TP {} neither divides nor is a multiple of the {} KV heads",
                            self.tp, a.kv_heads
                        ),
                    ));
                }
            }
            let widths: Vec<u64> = match &g.ffn {
                Ffn::None => vec![],
                Ffn::Dense { intermediate_size, .. } => vec![*intermediate_size],
                Ffn::Moe {
                    num_experts,
                    expert_intermediate_size,
                    shared_intermediate_size,
                    ..
                } => {
                    if self.ep > 1 && num_experts % self.ep != 0 {
                        return Err(Error::plan(
                            "ep",
                            format!("EP {} does not divide the {num_experts} experts", self.ep),
                        ));
                    }
                    // the shared experts over TP; each routed expert over the MoE TP (group / EP)
                    let moe_tp = self.moe_group() / self.ep.max(1);
                    if moe_tp > 1 && expert_intermediate_size % moe_tp != 0 {
                        return Err(Error::plan(
                            "tp",
                            format!(
                                "MoE TP {moe_tp} (group {} / EP {}) does not divide the expert width {expert_intermediate_size}",
                                self.moe_group(), self.ep
                            ),
                        ));
                    }
                    vec![*shared_intermediate_size]
                }
            };
            for width in widths {
                if width % self.tp != 0 {
                    return Err(Error::plan(
                        "tp",
                        format!("TP {} does not divide the FFN width {width}", self.tp),
                    ));
                }
            }
        }
        Ok(())
    }
}
