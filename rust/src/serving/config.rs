//! What a simulation is given: the scheduler's settings, the run's options, the pools of instances
//! and the router between them, and the KV link of a disaggregated cluster.

use crate::error::{Error, Result};
use serde::Deserialize;

/// How a runtime's scheduler forms steps (data per runtime: data/calibration/runtime_schedulers.csv).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scheduler {
    /// Token budget of one step (prefill chunks plus decodes).
    pub max_num_batched_tokens: u64,
    /// Requests running at once.
    pub max_num_seqs: u64,
    /// Tokens per KV block.
    pub block_size: u64,
    /// Prompts are split across steps to fit the budget (else a prompt waits for a step whose
    /// budget holds it whole).
    #[serde(default = "yes")]
    pub chunked_prefill: bool,
    /// Prefill chunks ride in the same step as the running decodes (vLLM v1, TensorRT-LLM);
    /// false: a step is prefill or decode, prefill first (SGLang without mixed chunks).
    #[serde(default = "yes")]
    pub mixed: bool,
    /// Admission reserves the blocks of the prompt and the whole output budget, so nothing is
    /// ever preempted (TensorRT-LLM's GUARANTEED_NO_EVICT).
    #[serde(default)]
    pub reserve_full: bool,
    /// Longest sequence (prompt + output); default: the model's.
    #[serde(default)]
    pub max_model_len: Option<u64>,
    /// Whole KV blocks of a shared prompt prefix stay cached after their request and serve the
    /// next request with the same prefix id (vLLM's prefix caching, SGLang's radix cache,
    /// TensorRT-LLM's block reuse); unused ones are evicted, least recently used first.
    #[serde(default)]
    pub prefix_caching: bool,
    /// Share of memory the runtime takes for weights, workspace and KV cache
    /// (`fraction_of_free` false: of the device's memory, vLLM's gpu_memory_utilization), or
    /// for the KV cache (true: of what weights and workspace leave, TensorRT-LLM's
    /// free_gpu_memory_fraction).
    pub memory_fraction: f64,
    #[serde(default)]
    pub fraction_of_free: bool,
    /// KV blocks of the instance; default: from `memory_fraction`.
    #[serde(default)]
    pub kv_blocks: Option<u64>,
}

pub(crate) fn yes() -> bool {
    true
}

/// What a run measures besides the requests.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub slo_ttft_s: Option<f64>,
    #[serde(default)]
    pub slo_tpot_s: Option<f64>,
    /// Stop the clock here (requests still in flight are counted as such).
    #[serde(default)]
    pub horizon_s: Option<f64>,
    /// Keep one record per request (memory grows with the requests).
    #[serde(default)]
    pub keep_requests: bool,
    /// Interval of the queue and KV time series, seconds (None: no series).
    #[serde(default)]
    pub sample_s: Option<f64>,
}

/// How a router picks an instance for a request.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    RoundRobin,
    /// The fewest requests waiting or running.
    LeastOutstanding,
    /// The smallest share of KV blocks in use.
    LeastKv,
    /// An instance that holds the request's prefix in its cache (the least loaded of them),
    /// else the least loaded.
    PrefixAffinity,
}

/// A pool of identical instances: their plan's parallel degrees and scheduler.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub instances: u64,
    pub tp: u64,
    #[serde(default = "one")]
    pub ep: u64,
    /// Attention data-parallel ranks of one instance (each `tp` devices with its own scheduler,
    /// batch and KV cache; the routed experts span all `tp` x `attention_dp` devices). The ranks
    /// step together: every MoE layer's all-to-all waits for all of them.
    #[serde(default = "one")]
    pub attention_dp: u64,
    /// Pipeline stages of one instance, run as vLLM v0 runs them: `pp` virtual engines, each
    /// with its own scheduler and `1/pp` of the KV blocks, each with one micro-batch in flight,
    /// sharing the stages.
    #[serde(default = "one")]
    pub pp: u64,
    pub scheduler: Scheduler,
}

pub(crate) fn one() -> u64 {
    1
}

/// The link a disaggregated prompt's KV crosses: each rank sends its shard over its own link.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KvLink {
    pub bw_gbs: f64,
    pub latency_us: f64,
    /// The transfer engine's hand-off on top of the link (connection, the decode side's
    /// scheduling of the arriving request): once a transfer, fitted on disaggregated runs.
    #[serde(default)]
    pub handoff_us: f64,
}

/// Instances serving one model: one pool (aggregated), or a prefill pool and a decode pool.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub pools: Vec<Pool>,
    pub router: Router,
    /// Disaggregated (two pools): the KV link between them.
    #[serde(default)]
    pub kv_link: Option<KvLink>,
    /// Seconds from a request's arrival to its reaching an instance's queue (the runtime's
    /// front end: parsing, tokenising, routing); it waits meanwhile.
    #[serde(default)]
    pub request_overhead_s: f64,
}

pub(crate) fn check_scheduler(s: &Scheduler, pool: &str) -> Result<()> {
    for (name, v) in [
        ("max_num_batched_tokens", s.max_num_batched_tokens),
        ("max_num_seqs", s.max_num_seqs),
        ("block_size", s.block_size),
    ] {
        if v == 0 {
            return Err(Error::plan(name, format!("must be >= 1 ({pool})")));
        }
    }
    if !(s.memory_fraction.is_finite() && s.memory_fraction > 0.0 && s.memory_fraction <= 1.0) {
        return Err(Error::plan(
            "memory_fraction",
            format!("must be in (0, 1], got {} ({pool})", s.memory_fraction),
        ));
    }
    Ok(())
}
