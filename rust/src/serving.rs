//! The serving simulator (spec 70): a discrete-event loop of inference servers on the engine.
//! Requests arrive and a router sends each to an instance; each instance's scheduler forms a
//! step (continuous batching under a token budget and a sequence limit, paged KV blocks,
//! preemption by recompute); the engine prices exactly that step (`step::StepPricer`); the
//! instance is busy for its price. With prefill/decode disaggregation a request's prompt is
//! computed on a prefill instance and its KV moved to a decode instance over a link. Metrics
//! are streamed, so memory does not grow with the number of requests unless their records are
//! asked for.

pub mod metrics;
pub mod step;
pub mod workload;

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::Layout;
use crate::error::{Error, Result};
use crate::graph::Segment;
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use crate::power;
use metrics::{LogHist, Stats};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use step::{StepCost, StepPricer};
use workload::{Arrival, Source, Workload};

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

fn yes() -> bool {
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

/// How a request left (or has not left) the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Completed,
    /// Stopped on reaching max_model_len.
    LengthCapped,
    /// The prompt is at or above max_model_len.
    RejectedPromptTooLong,
    /// The prompt plus the declared output budget exceeds max_model_len.
    RejectedBudgetTooLong,
    /// Without chunked prefill, the prompt exceeds the step's token budget.
    RejectedPromptOverBudget,
    /// Disaggregated: the decode instance had no KV blocks for the transferred prompt.
    RejectedDecodeKv,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::LengthCapped => "length_capped",
            Status::RejectedPromptTooLong => "rejected_prompt_too_long",
            Status::RejectedBudgetTooLong => "rejected_budget_too_long",
            Status::RejectedPromptOverBudget => "rejected_prompt_over_budget",
            Status::RejectedDecodeKv => "rejected_decode_kv",
        }
    }
}

/// One request's record (kept with `Options::keep_requests`). Times in seconds; a rejected
/// request has no token times (NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestRecord {
    pub id: u64,
    pub arrival_s: f64,
    pub first_token_s: f64,
    pub end_s: f64,
    pub prompt: u64,
    pub output: u64,
    pub preemptions: u32,
    pub status: Status,
    /// The instance that produced its last token (disaggregated: the decode instance's index
    /// after the prefill pool's).
    pub instance: u32,
}

/// One point of the time series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub t_s: f64,
    pub waiting: u64,
    pub running: u64,
    pub kv_used: f64,
}

/// Request counts at the end of a run: `injected` = the rest summed (spec 70's conservation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Counts {
    pub injected: u64,
    pub completed: u64,
    pub length_capped: u64,
    pub rejected_prompt_too_long: u64,
    pub rejected_budget_too_long: u64,
    pub rejected_prompt_over_budget: u64,
    pub rejected_decode_kv: u64,
    pub waiting: u64,
    pub running: u64,
    /// Disaggregated: prompts whose KV is on its way to a decode instance.
    pub transferring: u64,
}

impl Counts {
    /// injected = completed + length-capped + rejected + waiting + running.
    pub fn conserved(&self) -> bool {
        self.injected
            == self.completed
                + self.length_capped
                + self.rejected_prompt_too_long
                + self.rejected_budget_too_long
                + self.rejected_prompt_over_budget
                + self.rejected_decode_kv
                + self.waiting
                + self.running
                + self.transferring
    }

    /// Requests that have left: completed, length-capped or rejected.
    pub fn ended(&self) -> u64 {
        self.injected - self.waiting - self.running - self.transferring
    }

    fn bump(&mut self, s: Status) {
        match s {
            Status::Completed => self.completed += 1,
            Status::LengthCapped => self.length_capped += 1,
            Status::RejectedPromptTooLong => self.rejected_prompt_too_long += 1,
            Status::RejectedBudgetTooLong => self.rejected_budget_too_long += 1,
            Status::RejectedPromptOverBudget => self.rejected_prompt_over_budget += 1,
            Status::RejectedDecodeKv => self.rejected_decode_kv += 1,
        }
    }
}

/// One pool's energy over a run (spec 60): each device draws `P_idle` throughout and, over each
/// step, `u (TDP - P_idle)` more, `u` the step's busy fraction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PoolEnergy {
    pub instances: u64,
    /// Devices of one instance.
    pub devices: u64,
    /// Seconds the pool's instances spent in steps, summed over instances.
    pub busy_s: f64,
    /// The steps' busy fraction, weighted by their seconds.
    pub utilisation: f64,
    pub energy_j: f64,
}

/// A run's energy: every device of every pool from the first arrival to the end of the last step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimEnergy {
    pub energy_j: f64,
    /// Joules over the run's seconds: the fleet's mean draw.
    pub mean_w: f64,
    pub idle_w: f64,
    pub tdp_w: f64,
    pub rho: f64,
    pub pools: Vec<PoolEnergy>,
}

/// A run's results.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub counts: Counts,
    pub ttft: Stats,
    pub tpot: Stats,
    pub itl: Stats,
    pub e2e: Stats,
    /// The inter-token latencies' distribution: (seconds, tokens) per histogram bin.
    pub itl_bins: Vec<(f64, u64)>,
    /// Seconds from the first arrival to the end of the last step.
    pub duration_s: f64,
    pub output_tokens: u64,
    /// Prompt tokens of the requests that produced a token.
    pub prompt_tokens: u64,
    pub steps: u64,
    pub preemptions: u64,
    /// Finished requests meeting every SLO given (all finished ones without SLOs).
    pub good_requests: u64,
    /// KV blocks of one instance of each pool (aggregated: one pool; disaggregated: prefill, decode).
    pub kv_blocks: Vec<u64>,
    pub max_model_len: u64,
    /// Most requests running on one instance at once.
    pub max_running: u64,
    /// Prompt tokens read from a prefix cache instead of computed.
    pub cached_tokens: u64,
    /// Disaggregated: KV transfers, and the seconds they took in all.
    pub transfers: u64,
    pub transfer_s: f64,
    /// Distinct step shapes the pricer built (each a pass over the graph).
    pub shapes_built: u64,
    /// The fleet's energy, or why there is none (`power::missing`).
    pub energy: std::result::Result<SimEnergy, String>,
    pub requests: Vec<RequestRecord>,
    pub series: Vec<Sample>,
    pub warnings: Vec<String>,
}

/// KV blocks one instance holds: the memory left after weights and the step workspace, under
/// the scheduler's memory fraction, in blocks of `block_size` tokens.
fn kv_blocks(pricer: &StepPricer, dev: &Device, s: &Scheduler) -> Result<u64> {
    let l = pricer.layout();
    let workspace = pricer.workspace_bytes(s.max_num_batched_tokens);
    let (budget, free) = if s.fraction_of_free {
        let left = dev.memory_bytes() - l.weight_bytes() - workspace;
        (dev.memory_bytes(), left * s.memory_fraction)
    } else {
        let budget = dev.memory_bytes() * s.memory_fraction;
        (budget, budget - l.weight_bytes() - workspace)
    };
    let per_block = l.kv_bytes_per_token() * s.block_size as f64;
    if free <= 0.0 || per_block <= 0.0 {
        return Err(Error::plan(
            "kv_blocks",
            format!(
                "no memory is left for the KV cache: weights {:.1} GB and workspace {:.1} GB per device \
                 against {:.1} GB; use more TP or a smaller max_num_batched_tokens",
                l.weight_bytes() / 1e9,
                workspace / 1e9,
                budget / 1e9
            ),
        ));
    }
    Ok((free / per_block).floor() as u64)
}

/// Blocks a sequence of `tokens` tokens holds in blocks of `block_size`: its KV blocks and, once
/// it holds any, its linear-attention state's `state_blocks`.
fn seq_blocks(tokens: u64, block_size: u64, state_blocks: u64) -> u64 {
    let kv = tokens.div_ceil(block_size);
    if kv > 0 {
        kv + state_blocks
    } else {
        0
    }
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
    pub scheduler: Scheduler,
}

fn one() -> u64 {
    1
}

/// The link a disaggregated prompt's KV crosses: each rank sends its shard over its own link.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KvLink {
    pub bw_gbs: f64,
    pub latency_us: f64,
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

/// Simulates one instance serving `workload`.
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    m: &Model,
    dev: &Device,
    plan: &Plan,
    eff: &Efficiency,
    proto: ProtocolTable,
    sched: &Scheduler,
    workload: &Workload,
    opts: &Options,
) -> Result<SimResult> {
    let cluster = Cluster {
        pools: vec![Pool {
            instances: 1,
            tp: plan.tp,
            ep: plan.ep,
            scheduler: sched.clone(),
        }],
        router: Router::RoundRobin,
        kv_link: None,
        request_overhead_s: 0.0,
    };
    simulate_cluster(m, dev, plan, eff, proto, &cluster, workload, opts, None)
}

fn check_scheduler(s: &Scheduler, pool: &str) -> Result<()> {
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

/// Simulates `cluster` serving `workload`: `plan` gives the precisions and runtime execution,
/// each pool its own TP, EP and scheduler. `progress`, when given, is told `(ended, total)` each
/// time another hundredth of the workload's requests has ended (completed, length-capped or
/// rejected).
#[allow(clippy::too_many_arguments)]
pub fn simulate_cluster(
    m: &Model,
    dev: &Device,
    plan: &Plan,
    eff: &Efficiency,
    proto: ProtocolTable,
    cluster: &Cluster,
    workload: &Workload,
    opts: &Options,
    progress: Option<&mut dyn FnMut(u64, u64)>,
) -> Result<SimResult> {
    dev.validate()?;
    eff.validate()?;
    for (name, v) in [("pp", plan.pp), ("dp", plan.dp), ("attention_dp", plan.attention_dp)] {
        if v != 1 {
            return Err(Error::plan(
                name,
                format!("the serving simulator runs instances without {name} (got {v}); serve replicas as instances"),
            ));
        }
    }
    let disagg = match (cluster.pools.len(), cluster.kv_link) {
        (1, _) => false,
        (2, Some(l)) => {
            if !(l.bw_gbs.is_finite() && l.bw_gbs > 0.0 && l.latency_us.is_finite() && l.latency_us >= 0.0) {
                return Err(Error::plan(
                    "kv_link",
                    format!(
                        "needs a bandwidth > 0 GB/s and a latency >= 0 us, got {} GB/s, {} us",
                        l.bw_gbs, l.latency_us
                    ),
                ));
            }
            true
        }
        (2, None) => {
            return Err(Error::plan(
                "kv_link",
                "a disaggregated cluster needs the link its KV crosses",
            ))
        }
        (n, _) => {
            return Err(Error::plan(
                "pools",
                format!("one pool (aggregated) or two (prefill, decode), got {n}"),
            ))
        }
    };
    let front = cluster.request_overhead_s;
    if !(front.is_finite() && front >= 0.0) {
        return Err(Error::plan(
            "request_overhead",
            format!("must be a finite number of seconds >= 0, got {front}"),
        ));
    }
    for (name, v) in [
        ("slo_ttft_s", opts.slo_ttft_s),
        ("slo_tpot_s", opts.slo_tpot_s),
        ("horizon_s", opts.horizon_s),
        ("sample_s", opts.sample_s),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(Error::plan(name, format!("must be a finite number > 0, got {v}")));
        }
    }
    let names = if disagg {
        ["prefill pool", "decode pool"]
    } else {
        ["instance", ""]
    };
    let mut pools = Vec::with_capacity(2);
    let mut instances = Vec::new();
    let mut mml = u64::MAX;
    let mut warnings: Vec<String> = Vec::new();
    for (k, p) in cluster.pools.iter().enumerate() {
        check_scheduler(&p.scheduler, names[k])?;
        if p.instances == 0 {
            return Err(Error::plan("instances", format!("must be >= 1 ({})", names[k])));
        }
        let pp = Plan {
            tp: p.tp,
            ep: p.ep,
            ..plan.clone()
        };
        pp.validate(m)?;
        let layout = Layout::new(m, dev, &pp, proto)?;
        for w in layout.warnings() {
            if !warnings.contains(w) {
                warnings.push(w.clone());
            }
        }
        let pricer = StepPricer::new(layout, &pp, eff, dev.memory_bw());
        let max_model_len = p.scheduler.max_model_len.unwrap_or(m.max_model_len);
        if max_model_len == 0 {
            return Err(Error::plan("max_model_len", "must be >= 1"));
        }
        mml = mml.min(max_model_len);
        let blocks = match p.scheduler.kv_blocks {
            Some(b) => b,
            None => kv_blocks(&pricer, dev, &p.scheduler)?,
        };
        let bs = p.scheduler.block_size;
        // a linear-attention layer's state is held per sequence whatever its length: each
        // sequence takes that many blocks more from the same pool (vLLM's hybrid allocator
        // pages the state in the KV pool)
        let per_block = pricer.layout().kv_bytes_per_token() * bs as f64;
        let state = pricer.layout().state_bytes_per_seq();
        let state_blocks = if state > 0.0 && per_block > 0.0 {
            (state / per_block).ceil() as u64
        } else {
            0
        };
        let need = seq_blocks(max_model_len, bs, state_blocks);
        if need > blocks {
            return Err(Error::plan(
                "max_model_len",
                format!(
                    "{max_model_len} tokens need {need} KV blocks of {bs} but an instance ({}) holds {blocks} \
                     ({} tokens); lower max_model_len or give the KV cache more memory (more TP)",
                    names[k],
                    blocks * bs
                ),
            ));
        }
        let role = match (disagg, k) {
            (false, _) => Role::Both,
            (true, 0) => Role::Prefill,
            _ => Role::Decode,
        };
        for _ in 0..p.instances {
            instances.push(Instance::new(
                k,
                role,
                p.scheduler.clone(),
                max_model_len,
                blocks,
                state_blocks,
            ));
        }
        pools.push(PoolState {
            pricer,
            blocks,
            first: instances.len() - p.instances as usize,
            count: p.instances as usize,
            next_rr: 0,
            devices: pp.moe_group(),
            busy_s: 0.0,
            busy_u_s: 0.0,
        });
    }
    if m.layer_groups
        .iter()
        .any(|g| g.attention.as_ref().is_some_and(|a| a.window.is_some()))
    {
        warnings.push(
            "sliding-window layers hold KV blocks for the whole sequence (their blocks behind the window are \
             not freed): the KV capacity is a lower bound"
                .to_string(),
        );
    }
    let mut src = Source::new(workload)?;
    let mut w = World {
        pools,
        instances,
        metrics: Metrics::new(opts.clone(), mml),
        router: cluster.router,
        link: cluster.kv_link,
        front,
        events: BinaryHeap::new(),
        seq: 0,
        transfers: 0,
        transfer_s: 0.0,
        step: Vec::new(),
        prefill: Vec::new(),
        contexts: Vec::new(),
        segs: Vec::new(),
        done: Vec::new(),
        hold: None,
        progress,
        next_report: 0,
        rho: plan.power_rho.unwrap_or(0.0),
    };
    w.run(&mut src)?;
    let shapes_built = w.pools.iter().map(|p| p.pricer.shapes_built).sum();
    let mt = w.metrics;
    debug_assert!(mt.counts.conserved(), "{:?}", mt.counts);
    let duration_s = (mt.now - mt.first_arrival.unwrap_or(mt.now)).max(0.0);
    Ok(SimResult {
        energy: energy(dev, plan, &w.pools, duration_s),
        counts: mt.counts,
        ttft: mt.ttft.stats(),
        tpot: mt.tpot.stats(),
        itl: mt.itl.stats(),
        e2e: mt.e2e.stats(),
        itl_bins: mt.itl.bins(),
        duration_s,
        output_tokens: mt.output_tokens,
        prompt_tokens: mt.prompt_tokens,
        steps: mt.steps,
        preemptions: mt.preemptions,
        good_requests: mt.good,
        kv_blocks: w.pools.iter().map(|p| p.blocks).collect(),
        max_model_len: mml,
        max_running: mt.max_running,
        cached_tokens: mt.cached_tokens,
        transfers: w.transfers,
        transfer_s: w.transfer_s,
        shapes_built,
        requests: mt.requests,
        series: mt.series,
        warnings,
    })
}

/// The fleet's energy over `duration_s`: each pool's devices at idle power throughout, plus the
/// dynamic range times each step's busy fraction over its seconds.
fn energy(dev: &Device, plan: &Plan, pools: &[PoolState], duration_s: f64) -> std::result::Result<SimEnergy, String> {
    let why = power::missing(dev, plan);
    let (None, Some(idle_w), Some(tdp_w), Some(rho)) = (why.clone(), dev.idle_w, dev.tdp_w, plan.power_rho) else {
        return Err(why.unwrap_or_default());
    };
    let pools: Vec<PoolEnergy> = pools
        .iter()
        .map(|p| {
            let (n, d) = (p.count as f64, p.devices as f64);
            PoolEnergy {
                instances: p.count as u64,
                devices: p.devices,
                busy_s: p.busy_s,
                utilisation: if p.busy_s > 0.0 { p.busy_u_s / p.busy_s } else { 0.0 },
                energy_j: d * (idle_w * n * duration_s + (tdp_w - idle_w) * p.busy_u_s),
            }
        })
        .collect();
    let energy_j: f64 = pools.iter().map(|p| p.energy_j).sum();
    Ok(SimEnergy {
        energy_j,
        mean_w: if duration_s > 0.0 { energy_j / duration_s } else { 0.0 },
        idle_w,
        tdp_w,
        rho,
        pools,
    })
}

/// What an instance does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Both,
    /// Prefill only: a request leaves when its prompt is computed (its first token sampled).
    Prefill,
    /// Decode only: requests arrive with their prompt's KV.
    Decode,
}

/// Memory bounds of one run (input bounds, not model constants: a queued request holds its
/// ~120-byte record, a kept one ~64 bytes, a sample 32): a queue past `MAX_WAITING` requests
/// means the arrivals outpace the fleet, and the run stops there rather than hold them all
/// (`--rate 1000 --requests 100000000` grew ~125 bytes a request until the allocator failed);
/// a record of every request (`--out`) and the time series are bounded the same way.
pub const MAX_WAITING: u64 = 1 << 20;
pub const MAX_KEPT: usize = 1 << 21;
pub const MAX_SAMPLES: usize = 1 << 21;

/// A request in the cluster.
#[derive(Clone, Copy, Debug)]
struct Req {
    id: u64,
    arrival_s: f64,
    prompt: u64,
    /// Where the model stops by itself: read only when a token is produced (end of sequence).
    eos_at: u64,
    /// The declared output budget (max_tokens), if any.
    max_tokens: Option<u64>,
    computed: u64,
    generated: u64,
    blocks: u64,
    first_s: f64,
    last_s: f64,
    preemptions: u32,
    prefix_id: Option<u64>,
    prefix_tokens: u64,
    /// Blocks the request reads from the prefix cache (held there, not in `blocks`).
    shared: u64,
}

impl Req {
    fn tokens(&self) -> u64 {
        self.prompt + self.generated
    }

    fn pending(&self) -> u64 {
        self.tokens() - self.computed
    }
}

/// Streamed results of a run, shared by every instance.
struct Metrics {
    opts: Options,
    max_model_len: u64,
    counts: Counts,
    ttft: LogHist,
    tpot: LogHist,
    itl: LogHist,
    e2e: LogHist,
    now: f64,
    output_tokens: u64,
    prompt_tokens: u64,
    steps: u64,
    preemptions: u64,
    good: u64,
    max_running: u64,
    requests: Vec<RequestRecord>,
    series: Vec<Sample>,
    next_sample: f64,
    next_id: u64,
    first_arrival: Option<f64>,
    cached_tokens: u64,
}

impl Metrics {
    fn new(opts: Options, max_model_len: u64) -> Metrics {
        Metrics {
            opts,
            max_model_len,
            counts: Counts::default(),
            ttft: LogHist::new(),
            tpot: LogHist::new(),
            itl: LogHist::new(),
            e2e: LogHist::new(),
            now: 0.0,
            output_tokens: 0,
            prompt_tokens: 0,
            steps: 0,
            preemptions: 0,
            good: 0,
            max_running: 0,
            requests: Vec::new(),
            series: Vec::new(),
            next_sample: 0.0,
            next_id: 0,
            first_arrival: None,
            cached_tokens: 0,
        }
    }

    fn record(&mut self, r: &Req, status: Status, instance: usize) {
        if self.opts.keep_requests {
            self.requests.push(RequestRecord {
                id: r.id,
                arrival_s: r.arrival_s,
                first_token_s: r.first_s,
                end_s: r.last_s,
                prompt: r.prompt,
                output: r.generated,
                preemptions: r.preemptions,
                status,
                instance: instance as u32,
            });
        }
    }

    /// A request arrives: rejected on its lengths (spec 70), or returned to be routed.
    fn arrive(&mut self, a: Arrival, entry: &Scheduler) -> Option<Req> {
        self.counts.injected += 1;
        self.first_arrival.get_or_insert(a.arrival_s);
        let id = self.next_id;
        self.next_id += 1;
        let r = Req {
            id,
            arrival_s: a.arrival_s,
            prompt: a.prompt,
            eos_at: a.output,
            max_tokens: a.max_tokens,
            computed: 0,
            generated: 0,
            blocks: 0,
            first_s: f64::NAN,
            last_s: f64::NAN,
            preemptions: 0,
            prefix_id: a.prefix_id,
            prefix_tokens: a.prefix_tokens,
            shared: 0,
        };
        let status = if a.prompt >= self.max_model_len {
            Some(Status::RejectedPromptTooLong)
        } else if a.max_tokens.is_some_and(|b| a.prompt + b > self.max_model_len) {
            Some(Status::RejectedBudgetTooLong)
        } else if !entry.chunked_prefill && a.prompt > entry.max_num_batched_tokens {
            Some(Status::RejectedPromptOverBudget)
        } else {
            None
        };
        if let Some(s) = status {
            self.counts.bump(s);
            self.record(&r, s, 0);
            return None;
        }
        Some(r)
    }

    /// A token of `r` produced now; the status when the request is done.
    fn emit(&mut self, r: &mut Req) -> Option<Status> {
        let now = self.now;
        r.generated += 1;
        self.output_tokens += 1;
        if r.generated == 1 {
            r.first_s = now;
            self.ttft.add(now - r.arrival_s);
            self.prompt_tokens += r.prompt;
        } else {
            self.itl.add(now - r.last_s);
        }
        r.last_s = now;
        // the end of sequence is read only now, as sampling would find it
        if r.generated >= r.eos_at || r.max_tokens.is_some_and(|b| r.generated >= b) {
            Some(Status::Completed)
        } else if r.prompt + r.generated >= self.max_model_len {
            Some(Status::LengthCapped)
        } else {
            None
        }
    }

    fn finish(&mut self, r: &Req, status: Status, instance: usize) {
        self.counts.running -= 1;
        self.counts.bump(status);
        self.e2e.add(r.last_s - r.arrival_s);
        let ttft = r.first_s - r.arrival_s;
        let tpot = (r.generated > 1).then(|| (r.last_s - r.first_s) / (r.generated - 1) as f64);
        if let Some(t) = tpot {
            self.tpot.add(t);
        }
        let ok_ttft = self.opts.slo_ttft_s.is_none_or(|s| ttft <= s);
        let ok_tpot = self.opts.slo_tpot_s.is_none_or(|s| tpot.is_none_or(|t| t <= s));
        if ok_ttft && ok_tpot {
            self.good += 1;
        }
        self.record(r, status, instance);
    }
}

/// One server: its queue, running requests and KV blocks.
struct Instance {
    pool: usize,
    role: Role,
    sched: Scheduler,
    max_model_len: u64,
    total_blocks: u64,
    /// Blocks each sequence's linear-attention state takes (0 without such layers).
    state_blocks: u64,
    free_blocks: u64,
    /// Requests on the instance, by slot (reused when one leaves).
    slots: Vec<Req>,
    free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    /// In scheduling order: the last is preempted first.
    running: Vec<usize>,
    /// The step in progress: (slot, tokens), and its price.
    step: Vec<(usize, u64)>,
    step_cost: StepCost,
    busy: bool,
    /// Cached prefixes by id: their blocks (taken from `free_blocks`), the requests reading
    /// them and when they were last used (a counter: least recently used is evicted first).
    cache: HashMap<u64, Cached>,
    uses: u64,
}

#[derive(Clone, Copy, Debug)]
struct Cached {
    blocks: u64,
    readers: u32,
    last_use: u64,
}

impl Instance {
    fn new(pool: usize, role: Role, sched: Scheduler, max_model_len: u64, blocks: u64, state_blocks: u64) -> Instance {
        Instance {
            pool,
            role,
            sched,
            max_model_len,
            total_blocks: blocks,
            state_blocks,
            free_blocks: blocks,
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            step: Vec::new(),
            step_cost: StepCost::default(),
            busy: false,
            cache: HashMap::new(),
            uses: 0,
        }
    }

    fn outstanding(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    fn kv_used(&self) -> f64 {
        1.0 - self.free_blocks as f64 / self.total_blocks as f64
    }

    fn blocks_for(&self, tokens: u64) -> u64 {
        seq_blocks(tokens, self.sched.block_size, self.state_blocks)
    }

    fn put(&mut self, r: Req) -> usize {
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = r;
                i
            }
            None => {
                self.slots.push(r);
                self.slots.len() - 1
            }
        }
    }

    /// Queues a routed request (a transferred one arrives holding its prompt's blocks).
    fn enqueue(&mut self, r: Req, c: &mut Counts) {
        let slot = self.put(r);
        c.waiting += 1;
        self.waiting.push_back(slot);
    }

    /// Tokens of `slot` this step may compute within `budget` (0: it waits).
    fn chunk(&self, slot: usize, budget: u64) -> u64 {
        let r = &self.slots[slot];
        let p = r.pending();
        // a recompute after preemption (prompt and output so far) may exceed a whole-prompt
        // budget: it is chunked, or it would never run again
        if p <= budget {
            p
        } else if self.sched.chunked_prefill || r.preemptions > 0 {
            budget
        } else {
            0
        }
    }

    /// Blocks `slot` needs beyond what it holds to compute `n` more tokens.
    fn need(&self, slot: usize, n: u64) -> u64 {
        let r = &self.slots[slot];
        self.blocks_for(r.computed + n).saturating_sub(r.blocks + r.shared)
    }

    /// Frees the blocks of the least recently used prefix no request reads; whether one was.
    fn evict(&mut self) -> bool {
        let victim = self
            .cache
            .iter()
            .filter(|(_, c)| c.readers == 0)
            .min_by_key(|(id, c)| (c.last_use, **id))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.cache.remove(&id)) {
            Some(c) => {
                self.free_blocks += c.blocks;
                true
            }
            None => false,
        }
    }

    /// A request stops reading its cached prefix (it ends, moves on or is preempted).
    fn unshare(&mut self, slot: usize) {
        let r = &mut self.slots[slot];
        if r.shared > 0 {
            if let Some(c) = r.prefix_id.and_then(|id| self.cache.get_mut(&id)) {
                c.readers -= 1;
            }
            r.shared = 0;
        }
    }

    /// A request about to start its prompt reads the cached blocks of its prefix, if any: whole
    /// blocks, leaving at least one prompt token to compute. Returns the tokens it skips.
    fn hit(&mut self, slot: usize) -> u64 {
        let bs = self.sched.block_size;
        let r = self.slots[slot];
        let (true, Some(id), 0) = (self.sched.prefix_caching, r.prefix_id, r.computed) else {
            return 0;
        };
        let Some(c) = self.cache.get_mut(&id) else { return 0 };
        let blocks = c.blocks.min((r.prompt - 1) / bs);
        if blocks == 0 {
            return 0;
        }
        self.uses += 1;
        c.readers += 1;
        c.last_use = self.uses;
        let r = &mut self.slots[slot];
        r.shared = blocks;
        r.computed = blocks * bs;
        blocks * bs
    }

    /// After a step: a request whose prefix is computed and not yet cached leaves its prefix's
    /// whole blocks in the cache (it reads them from there on).
    fn keep_prefix(&mut self, slot: usize) {
        let bs = self.sched.block_size;
        let r = self.slots[slot];
        let (true, Some(id), 0) = (self.sched.prefix_caching, r.prefix_id, r.shared) else {
            return;
        };
        let blocks = r.prefix_tokens / bs;
        if blocks == 0 || r.computed < blocks * bs || self.cache.contains_key(&id) {
            return;
        }
        self.uses += 1;
        self.cache.insert(
            id,
            Cached {
                blocks,
                readers: 1,
                last_use: self.uses,
            },
        );
        let r = &mut self.slots[slot];
        r.blocks -= blocks;
        r.shared = blocks;
    }

    /// A request leaves the instance: its own blocks freed, its cached prefix no longer read.
    fn release(&mut self, slot: usize) -> Req {
        self.unshare(slot);
        let r = self.slots[slot];
        self.free_blocks += r.blocks;
        self.slots[slot].blocks = 0;
        self.free_slots.push(slot);
        r
    }

    fn preempt(&mut self, slot: usize, m: &mut Metrics) {
        self.unshare(slot);
        let r = &mut self.slots[slot];
        self.free_blocks += r.blocks;
        r.blocks = 0;
        r.computed = 0;
        r.preemptions += 1;
        m.preemptions += 1;
        m.counts.running -= 1;
        m.counts.waiting += 1;
        self.waiting.push_front(slot);
    }

    /// Blocks reserved at admission under `reserve_full`: prompt and the whole output budget.
    fn reservation(&self, slot: usize) -> u64 {
        let r = &self.slots[slot];
        let out = r.max_tokens.unwrap_or(self.max_model_len - r.prompt);
        self.blocks_for((r.prompt + out).min(self.max_model_len)).max(r.blocks)
    }

    /// Schedules the running requests in order (`prefilling`: only those still prefilling, or
    /// only those decoding), preempting the newest when blocks run out. Whether any was.
    fn schedule_running(&mut self, budget: &mut u64, prefilling: Option<bool>, m: &mut Metrics) -> bool {
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let slot = self.running[i];
            let r = &self.slots[slot];
            let is_prefill = r.pending() > 1 || r.generated == 0;
            if prefilling.is_some_and(|p| p != is_prefill) {
                i += 1;
                continue;
            }
            let n = self.chunk(slot, *budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let need = self.need(slot, n);
            let mut self_preempted = false;
            while self.free_blocks < need {
                if self.evict() {
                    continue;
                }
                let victim = self.running.pop().expect("running holds slot");
                self.preempt(victim, m);
                preempted = true;
                if victim == slot {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.free_blocks -= need;
            self.slots[slot].blocks += need;
            *budget -= n;
            self.step.push((slot, n));
            i += 1;
        }
        preempted
    }

    /// Moves waiting requests in arrival order into the step while budget, sequences and blocks
    /// allow.
    fn schedule_waiting(&mut self, budget: &mut u64, m: &mut Metrics) {
        while *budget > 0 && (self.running.len() as u64) < self.sched.max_num_seqs {
            let Some(&slot) = self.waiting.front() else { break };
            let hit = self.hit(slot);
            let n = self.chunk(slot, *budget);
            let held = self.slots[slot].blocks + self.slots[slot].shared;
            let need = if self.sched.reserve_full {
                self.reservation(slot).saturating_sub(held)
            } else {
                self.need(slot, n)
            };
            while n > 0 && self.free_blocks < need && self.evict() {}
            if n == 0 || self.free_blocks < need {
                // it waits: the cache is looked up again when it is admitted
                if hit > 0 {
                    self.unshare(slot);
                    self.slots[slot].computed = 0;
                }
                break;
            }
            m.cached_tokens += hit;
            self.waiting.pop_front();
            self.free_blocks -= need;
            self.slots[slot].blocks += need;
            m.counts.waiting -= 1;
            m.counts.running += 1;
            self.running.push(slot);
            *budget -= n;
            self.step.push((slot, n));
        }
    }

    /// Forms the next step into `self.step`.
    fn form_step(&mut self, m: &mut Metrics) {
        self.step.clear();
        let mut budget = self.sched.max_num_batched_tokens;
        if self.sched.mixed {
            // vLLM v1: running requests first (decodes and started prefills, in order), then
            // waiting ones unless this step preempted
            if !self.schedule_running(&mut budget, None, m) {
                self.schedule_waiting(&mut budget, m);
            }
            return;
        }
        // prefill first: started prefills, then new requests; decodes when there is none
        if !self.schedule_running(&mut budget, Some(true), m) {
            self.schedule_waiting(&mut budget, m);
        }
        if self.step.is_empty() {
            let mut budget = self.sched.max_num_batched_tokens;
            self.schedule_running(&mut budget, Some(false), m);
        }
    }
}

/// A scheduled event. Ties in time keep the order they were scheduled in.
#[derive(Clone, Copy, Debug)]
struct Event {
    t: f64,
    seq: u64,
    kind: EventKind,
}

#[derive(Clone, Copy, Debug)]
enum EventKind {
    Arrival(Arrival),
    /// A request through the front end reaches the router.
    Admit(Req),
    StepEnd(usize),
    /// A prompt's KV reaches decode instance `to`.
    Transfer {
        req: Req,
        to: usize,
    },
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // BinaryHeap is a max-heap: the earliest event (then the first scheduled) is the greatest
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

struct PoolState<'a> {
    pricer: StepPricer<'a>,
    blocks: u64,
    first: usize,
    count: usize,
    next_rr: usize,
    /// Devices of one instance.
    devices: u64,
    /// Seconds its instances spent in steps that ended, and those seconds weighted by each
    /// step's busy fraction (`power::occupancy`).
    busy_s: f64,
    busy_u_s: f64,
}

/// Every instance, the event queue and the metrics.
struct World<'a, 'p> {
    pools: Vec<PoolState<'a>>,
    instances: Vec<Instance>,
    metrics: Metrics,
    router: Router,
    link: Option<KvLink>,
    /// The front end's seconds a request takes to reach the router (`Cluster::request_overhead_s`).
    front: f64,
    events: BinaryHeap<Event>,
    seq: u64,
    transfers: u64,
    transfer_s: f64,
    step: Vec<(usize, u64)>,
    prefill: Vec<Segment>,
    contexts: Vec<u64>,
    segs: Vec<Segment>,
    done: Vec<(usize, Status)>,
    /// The instance whose step end is being taken in (its next step waits for all of it).
    hold: Option<usize>,
    progress: Option<&'p mut dyn FnMut(u64, u64)>,
    next_report: u64,
    /// The memory-bound power share (0 when not fitted: the run then reports no energy).
    rho: f64,
}

impl World<'_, '_> {
    /// Tells the progress callback, each hundredth of the requests.
    fn report(&mut self, total: u64) {
        let Some(f) = self.progress.as_mut() else { return };
        let ended = self.metrics.counts.ended();
        if ended >= self.next_report {
            f(ended, total);
            self.next_report = ended + (total / 100).max(1);
        }
    }

    fn push(&mut self, t: f64, kind: EventKind) {
        self.seq += 1;
        self.events.push(Event { t, seq: self.seq, kind });
    }

    /// The instance of pool `p` the router sends a request to.
    fn route(&mut self, p: usize, prefix: Option<u64>) -> usize {
        let pool = &mut self.pools[p];
        let range = pool.first..pool.first + pool.count;
        let least =
            |inst: &[Instance], r: std::ops::Range<usize>| r.min_by_key(|&i| inst[i].outstanding()).unwrap_or(0);
        match self.router {
            Router::RoundRobin => {
                let i = pool.first + pool.next_rr % pool.count;
                pool.next_rr += 1;
                i
            }
            // the first of the least loaded (ties: the lowest index, deterministic)
            Router::LeastOutstanding => least(&self.instances, range),
            Router::PrefixAffinity => {
                let holders = range
                    .clone()
                    .filter(|&i| prefix.is_some_and(|id| self.instances[i].cache.contains_key(&id)))
                    .min_by_key(|&i| self.instances[i].outstanding());
                holders.unwrap_or_else(|| least(&self.instances, range))
            }
            Router::LeastKv => range
                .min_by(|&a, &b| self.instances[a].kv_used().total_cmp(&self.instances[b].kv_used()))
                .unwrap_or(0),
        }
    }

    /// A request arrives; in a closed loop a rejected client sends its next request at once.
    fn arrive(&mut self, a: Arrival, src: &mut Source, closed: bool) {
        let entry = self.instances[self.pools[0].first].sched.clone();
        let mut next = Some(a);
        while let Some(a) = next.take() {
            match self.metrics.arrive(a, &entry) {
                // it waits at the front end, then joins an instance's queue
                Some(r) if self.front > 0.0 => {
                    self.metrics.counts.waiting += 1;
                    self.push(self.metrics.now + self.front, EventKind::Admit(r));
                }
                Some(r) => self.admit(r),
                None if closed => next = src.next_closed(self.metrics.now),
                None => {}
            }
        }
    }

    /// A request joins the queue of the instance the router picks.
    fn admit(&mut self, r: Req) {
        let i = self.route(0, r.prefix_id);
        self.instances[i].enqueue(r, &mut self.metrics.counts);
        self.start(i);
    }

    /// Starts a step on instance `i` if it is idle and has work.
    fn start(&mut self, i: usize) {
        if self.instances[i].busy || self.hold == Some(i) {
            return;
        }
        let inst = &mut self.instances[i];
        inst.form_step(&mut self.metrics);
        if inst.step.is_empty() {
            return;
        }
        self.prefill.clear();
        self.contexts.clear();
        for &(slot, n) in &inst.step {
            let r = &inst.slots[slot];
            if n == 1 && r.generated > 0 && r.pending() == 1 {
                self.contexts.push(r.computed + 1);
            } else {
                self.prefill.push(Segment {
                    count: 1,
                    new: n,
                    prefix: r.computed,
                    samples: r.computed + n == r.tokens(),
                });
            }
        }
        let pricer = &mut self.pools[inst.pool].pricer;
        let cost = if self.prefill.is_empty() {
            pricer.decode_step(&self.contexts)
        } else {
            pricer.mixed_step(&self.prefill, &self.contexts, &mut self.segs)
        };
        inst.busy = true;
        inst.step_cost = cost;
        self.metrics.max_running = self.metrics.max_running.max(inst.running.len() as u64);
        let t = self.metrics.now + cost.time_s;
        self.push(t, EventKind::StepEnd(i));
    }

    /// The step of instance `i` ends now: tokens, completions, hand-offs; then its next step.
    fn end_step(&mut self, i: usize, closed: bool, src: &mut Source) {
        self.metrics.steps += 1;
        // requests that arrive while this step's results are taken in join its next step
        self.hold = Some(i);
        let mut step = std::mem::take(&mut self.step);
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        {
            let inst = &mut self.instances[i];
            inst.busy = false;
            let (c, pool) = (inst.step_cost, &mut self.pools[inst.pool]);
            pool.busy_s += c.time_s;
            pool.busy_u_s += power::occupancy(c.compute_s, c.memory_s, c.time_s, self.rho).2 * c.time_s;
            std::mem::swap(&mut step, &mut inst.step);
            for &(slot, n) in &step {
                inst.slots[slot].computed += n;
                inst.keep_prefix(slot);
                let r = &mut inst.slots[slot];
                if r.computed == r.tokens() {
                    match self.metrics.emit(r) {
                        Some(s) => done.push((slot, s)),
                        // a prefill instance hands the request on after its first token
                        None if inst.role == Role::Prefill => done.push((slot, Status::Completed)),
                        None => {}
                    }
                }
            }
            if !done.is_empty() {
                inst.running.retain(|s| !done.iter().any(|(d, _)| d == s));
            }
        }
        for &(slot, status) in &done {
            let r = self.instances[i].release(slot);
            let finished = r.generated >= r.eos_at || r.max_tokens.is_some_and(|b| r.generated >= b);
            if self.instances[i].role == Role::Prefill && !finished && status == Status::Completed {
                self.hand_off(r);
                continue;
            }
            self.metrics.finish(&r, status, i);
            if closed {
                if let Some(a) = src.next_closed(self.metrics.now) {
                    self.arrive(a, src, true);
                }
            }
        }
        self.step = step;
        self.done = done;
        self.hold = None;
        self.start(i);
    }

    /// A prefilled request's KV leaves for a decode instance.
    fn hand_off(&mut self, mut r: Req) {
        let link = self.link.expect("disaggregated clusters have a link");
        // each rank sends its shard of the prompt's KV over its own link
        let bytes = r.prompt as f64 * self.pools[0].pricer.layout().kv_bytes_per_token();
        let dt = bytes / (link.bw_gbs * 1e9) + link.latency_us * 1e-6;
        self.transfers += 1;
        self.transfer_s += dt;
        self.metrics.counts.running -= 1;
        self.metrics.counts.transferring += 1;
        r.blocks = 0;
        let to = self.route(1, None);
        let t = self.metrics.now + dt;
        self.push(t, EventKind::Transfer { req: r, to });
    }

    /// A prompt's KV reaches decode instance `to`: queued there holding its blocks, or refused.
    fn receive(&mut self, mut r: Req, to: usize, closed: bool, src: &mut Source) {
        self.metrics.counts.transferring -= 1;
        let inst = &mut self.instances[to];
        let need = inst.blocks_for(r.computed);
        if inst.free_blocks < need {
            self.metrics.counts.bump(Status::RejectedDecodeKv);
            self.metrics.record(&r, Status::RejectedDecodeKv, to);
            if closed {
                if let Some(a) = src.next_closed(self.metrics.now) {
                    self.arrive(a, src, true);
                }
            }
            return;
        }
        inst.free_blocks -= need;
        r.blocks = need;
        inst.enqueue(r, &mut self.metrics.counts);
        self.start(to);
    }

    /// Records the time series up to now; false when it would pass `MAX_SAMPLES` points.
    fn sample(&mut self) -> bool {
        let Some(dt) = self.metrics.opts.sample_s else {
            return true;
        };
        while self.metrics.now >= self.metrics.next_sample {
            if self.metrics.series.len() >= MAX_SAMPLES {
                return false;
            }
            let total: u64 = self.instances.iter().map(|x| x.total_blocks).sum();
            let free: u64 = self.instances.iter().map(|x| x.free_blocks).sum();
            let m = &mut self.metrics;
            m.series.push(Sample {
                t_s: m.next_sample,
                waiting: m.counts.waiting,
                running: m.counts.running,
                kv_used: 1.0 - free as f64 / total as f64,
            });
            m.next_sample += dt;
        }
        true
    }

    /// Why the run cannot go on within its memory bounds, if it cannot: a queue past
    /// `MAX_WAITING` requests (the arrivals outpace the fleet, and the queue grows for the rest
    /// of the run) or more kept requests than `MAX_KEPT`.
    fn over_bounds(&self, total: u64) -> Option<Error> {
        let m = &self.metrics;
        let ended = m.counts.ended();
        if m.counts.waiting > MAX_WAITING {
            return Some(Error::plan(
                "rate",
                format!(
                    "the queue grew past {MAX_WAITING} waiting requests at {:.1} s ({ended} of {total} requests ended): \
                     the arrivals outpace what the fleet serves and the queue would grow for the rest of the run; \
                     lower the rate, add instances, or give fewer requests or a horizon",
                    m.now
                ),
            ));
        }
        if m.requests.len() > MAX_KEPT {
            return Some(Error::plan(
                "keep_requests",
                format!("a record of every request (--out, keep_requests=True) holds at most {MAX_KEPT}; give fewer requests"),
            ));
        }
        None
    }

    fn run(&mut self, src: &mut Source) -> Result<()> {
        let closed = src.closed_loop();
        match closed {
            Some((c, ramp)) => {
                for k in 0..c {
                    let at = ramp * k as f64 / c as f64;
                    match src.next_closed(at) {
                        Some(a) => self.push(at, EventKind::Arrival(a)),
                        None => break,
                    }
                }
            }
            None => {
                if let Some(a) = src.next_open() {
                    self.push(a.arrival_s, EventKind::Arrival(a));
                }
            }
        }
        let horizon = self.metrics.opts.horizon_s.unwrap_or(f64::INFINITY);
        while let Some(e) = self.events.pop() {
            if e.t > horizon {
                // what is still queued or in a step stays counted where it is
                break;
            }
            self.metrics.now = e.t;
            if !self.sample() {
                return Err(Error::plan(
                    "sample_s",
                    format!(
                        "the time series (--sample-ms) would pass {MAX_SAMPLES} points at {:.3} s; sample less often",
                        self.metrics.now
                    ),
                ));
            }
            match e.kind {
                EventKind::Arrival(a) => {
                    self.arrive(a, src, closed.is_some());
                    if closed.is_none() {
                        if let Some(n) = src.next_open() {
                            self.push(n.arrival_s, EventKind::Arrival(n));
                        }
                    }
                }
                EventKind::Admit(r) => {
                    self.metrics.counts.waiting -= 1;
                    self.admit(r);
                }
                EventKind::StepEnd(i) => self.end_step(i, closed.is_some(), src),
                EventKind::Transfer { req, to } => self.receive(req, to, closed.is_some(), src),
            }
            if let Some(err) = self.over_bounds(src.total()) {
                return Err(err);
            }
            self.report(src.total());
        }
        // the last hundredth, however it ended
        let ended = self.metrics.counts.ended();
        if self.next_report > ended && self.next_report - ended < (src.total() / 100).max(1) {
            self.next_report = ended;
            self.report(src.total());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
