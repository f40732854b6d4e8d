//! The serving simulator (spec 70): a discrete-event loop of one inference server on the engine.
//! Requests arrive; the scheduler forms a step (continuous batching under a token budget and a
//! sequence limit, paged KV blocks, preemption by recompute); the engine prices exactly that
//! step (`step::StepPricer`); time advances by its price. Metrics are streamed, so memory does
//! not grow with the number of requests unless their records are asked for.

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
use metrics::{LogHist, Stats};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use step::StepPricer;
use workload::{Arrival, Source, Workload};

/// How a runtime's scheduler forms steps (data per runtime: data/calibration/runtime_schedulers.csv).
#[derive(Clone, Debug, Deserialize, PartialEq)]
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
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Completed,
        Status::LengthCapped,
        Status::RejectedPromptTooLong,
        Status::RejectedBudgetTooLong,
        Status::RejectedPromptOverBudget,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::LengthCapped => "length_capped",
            Status::RejectedPromptTooLong => "rejected_prompt_too_long",
            Status::RejectedBudgetTooLong => "rejected_budget_too_long",
            Status::RejectedPromptOverBudget => "rejected_prompt_over_budget",
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
    pub waiting: u64,
    pub running: u64,
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
                + self.waiting
                + self.running
    }

    fn bump(&mut self, s: Status) {
        match s {
            Status::Completed => self.completed += 1,
            Status::LengthCapped => self.length_capped += 1,
            Status::RejectedPromptTooLong => self.rejected_prompt_too_long += 1,
            Status::RejectedBudgetTooLong => self.rejected_budget_too_long += 1,
            Status::RejectedPromptOverBudget => self.rejected_prompt_over_budget += 1,
        }
    }
}

/// A run's results.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub counts: Counts,
    pub ttft: Stats,
    pub tpot: Stats,
    pub itl: Stats,
    pub e2e: Stats,
    /// Seconds from the first arrival to the end of the last step.
    pub duration_s: f64,
    pub output_tokens: u64,
    /// Prompt tokens of the requests that produced a token.
    pub prompt_tokens: u64,
    pub steps: u64,
    pub preemptions: u64,
    /// Finished requests meeting every SLO given (all finished ones without SLOs).
    pub good_requests: u64,
    pub kv_blocks: u64,
    pub block_size: u64,
    pub max_model_len: u64,
    pub max_running: u64,
    /// Distinct step shapes the pricer built (each a pass over the graph).
    pub shapes_built: u64,
    pub requests: Vec<RequestRecord>,
    pub series: Vec<Sample>,
    pub warnings: Vec<String>,
}

/// A request in the server.
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
}

impl Req {
    fn tokens(&self) -> u64 {
        self.prompt + self.generated
    }

    fn pending(&self) -> u64 {
        self.tokens() - self.computed
    }
}

/// KV blocks one instance holds: the memory left after weights and the step workspace under
/// gpu_memory_utilization, in blocks of `block_size` tokens.
fn kv_blocks(pricer: &StepPricer, dev: &Device, s: &Scheduler) -> Result<(u64, f64)> {
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
    Ok(((free / per_block).floor() as u64, per_block))
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
    plan.validate(m)?;
    dev.validate()?;
    eff.validate()?;
    for (name, v) in [("pp", plan.pp), ("dp", plan.dp), ("attention_dp", plan.attention_dp)] {
        if v != 1 {
            return Err(Error::plan(
                name,
                format!(
                    "the serving simulator runs one instance without {name} (got {v}); serve replicas as instances"
                ),
            ));
        }
    }
    for (name, v) in [
        ("max_num_batched_tokens", sched.max_num_batched_tokens),
        ("max_num_seqs", sched.max_num_seqs),
        ("block_size", sched.block_size),
    ] {
        if v == 0 {
            return Err(Error::plan(name, "must be >= 1"));
        }
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
    let max_model_len = sched.max_model_len.unwrap_or(m.max_model_len);
    if max_model_len == 0 {
        return Err(Error::plan("max_model_len", "must be >= 1"));
    }
    if !(sched.memory_fraction.is_finite() && sched.memory_fraction > 0.0 && sched.memory_fraction <= 1.0) {
        return Err(Error::plan(
            "memory_fraction",
            format!("must be in (0, 1], got {}", sched.memory_fraction),
        ));
    }
    let layout = Layout::new(m, dev, plan, proto)?;
    let mut pricer = StepPricer::new(layout, plan, eff, dev.memory_bw());
    let total_blocks = match sched.kv_blocks {
        Some(b) => b,
        None => kv_blocks(&pricer, dev, sched)?.0,
    };
    let bs = sched.block_size;
    if max_model_len.div_ceil(bs) > total_blocks {
        return Err(Error::plan(
            "max_model_len",
            format!(
                "{max_model_len} tokens need {} KV blocks of {bs} but the instance holds {total_blocks} \
                 ({} tokens); lower max_model_len or give the KV cache more memory (more TP)",
                max_model_len.div_ceil(bs),
                total_blocks * bs
            ),
        ));
    }
    let mut warnings: Vec<String> = pricer.layout().warnings().to_vec();
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
    let mut sim = Sim {
        sched: sched.clone(),
        opts: opts.clone(),
        max_model_len,
        total_blocks,
        free_blocks: total_blocks,
        slots: Vec::new(),
        free_slots: Vec::new(),
        waiting: VecDeque::new(),
        running: Vec::new(),
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
    };
    let mut src = Source::new(workload)?;
    sim.run(&mut pricer, &mut src);
    let first = sim.first_arrival.unwrap_or(sim.now);
    let counts = sim.counts;
    debug_assert!(counts.conserved());
    Ok(SimResult {
        counts,
        ttft: sim.ttft.stats(),
        tpot: sim.tpot.stats(),
        itl: sim.itl.stats(),
        e2e: sim.e2e.stats(),
        duration_s: (sim.now - first).max(0.0),
        output_tokens: sim.output_tokens,
        prompt_tokens: sim.prompt_tokens,
        steps: sim.steps,
        preemptions: sim.preemptions,
        good_requests: sim.good,
        kv_blocks: total_blocks,
        block_size: bs,
        max_model_len,
        max_running: sim.max_running,
        shapes_built: pricer.shapes_built,
        requests: sim.requests,
        series: sim.series,
        warnings,
    })
}

struct Sim {
    sched: Scheduler,
    opts: Options,
    max_model_len: u64,
    total_blocks: u64,
    free_blocks: u64,
    /// Requests in the server, by slot (reused when one leaves).
    slots: Vec<Req>,
    free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    /// In scheduling order: the last is preempted first.
    running: Vec<usize>,
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
}

impl Sim {
    fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.sched.block_size)
    }

    /// A request arrives: rejected on its lengths (spec 70) or queued.
    fn admit(&mut self, a: Arrival) {
        self.counts.injected += 1;
        self.first_arrival.get_or_insert(a.arrival_s);
        let id = self.next_id;
        self.next_id += 1;
        let status = if a.prompt >= self.max_model_len {
            Some(Status::RejectedPromptTooLong)
        } else if a.max_tokens.is_some_and(|b| a.prompt + b > self.max_model_len) {
            Some(Status::RejectedBudgetTooLong)
        } else if !self.sched.chunked_prefill && a.prompt > self.sched.max_num_batched_tokens {
            Some(Status::RejectedPromptOverBudget)
        } else {
            None
        };
        if let Some(s) = status {
            self.counts.bump(s);
            if self.opts.keep_requests {
                self.requests.push(RequestRecord {
                    id,
                    arrival_s: a.arrival_s,
                    first_token_s: f64::NAN,
                    end_s: f64::NAN,
                    prompt: a.prompt,
                    output: 0,
                    preemptions: 0,
                    status: s,
                });
            }
            return;
        }
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
        };
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = r;
                i
            }
            None => {
                self.slots.push(r);
                self.slots.len() - 1
            }
        };
        self.counts.waiting += 1;
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
        self.blocks_for(r.computed + n).saturating_sub(r.blocks)
    }

    fn preempt(&mut self, slot: usize) {
        let r = &mut self.slots[slot];
        self.free_blocks += r.blocks;
        r.blocks = 0;
        r.computed = 0;
        r.preemptions += 1;
        self.preemptions += 1;
        self.counts.running -= 1;
        self.counts.waiting += 1;
        self.waiting.push_front(slot);
    }

    /// Blocks reserved at admission under `reserve_full`: prompt and the whole output budget.
    fn reservation(&self, slot: usize) -> u64 {
        let r = &self.slots[slot];
        let out = r.max_tokens.unwrap_or(self.max_model_len - r.prompt);
        self.blocks_for((r.prompt + out).min(self.max_model_len))
    }

    /// Schedules the running requests in order (`prefilling`: only those still prefilling, or
    /// only those decoding), preempting the newest when blocks run out. Returns whether any
    /// request was preempted.
    fn schedule_running(&mut self, budget: &mut u64, out: &mut Vec<(usize, u64)>, prefilling: Option<bool>) -> bool {
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
                let victim = self.running.pop().expect("running holds slot");
                self.preempt(victim);
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
            out.push((slot, n));
            i += 1;
        }
        preempted
    }

    /// Moves waiting requests in arrival order into the step while budget, sequences and blocks
    /// allow.
    fn schedule_waiting(&mut self, budget: &mut u64, out: &mut Vec<(usize, u64)>) {
        while *budget > 0 && (self.running.len() as u64) < self.sched.max_num_seqs {
            let Some(&slot) = self.waiting.front() else { break };
            let n = self.chunk(slot, *budget);
            if n == 0 {
                break;
            }
            let need = if self.sched.reserve_full {
                self.reservation(slot)
            } else {
                self.need(slot, n)
            };
            if self.free_blocks < need {
                break;
            }
            self.waiting.pop_front();
            self.free_blocks -= need;
            self.slots[slot].blocks += need;
            self.counts.waiting -= 1;
            self.counts.running += 1;
            self.running.push(slot);
            *budget -= n;
            out.push((slot, n));
        }
    }

    /// The next step's requests and token counts.
    fn form_step(&mut self, out: &mut Vec<(usize, u64)>) {
        out.clear();
        let mut budget = self.sched.max_num_batched_tokens;
        if self.sched.mixed {
            // vLLM v1: running requests first (decodes and started prefills, in order), then
            // waiting ones unless this step preempted
            if !self.schedule_running(&mut budget, out, None) {
                self.schedule_waiting(&mut budget, out);
            }
            return;
        }
        // prefill first: started prefills, then new requests; decodes when there is none
        let preempted = self.schedule_running(&mut budget, out, Some(true));
        if !preempted {
            self.schedule_waiting(&mut budget, out);
        }
        if out.is_empty() {
            let mut budget = self.sched.max_num_batched_tokens;
            self.schedule_running(&mut budget, out, Some(false));
        }
    }

    /// Records a token of `slot` produced at `self.now`; true when the request is done.
    fn emit(&mut self, slot: usize) -> Option<Status> {
        let now = self.now;
        let r = &mut self.slots[slot];
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

    fn finish(&mut self, slot: usize, status: Status) {
        let r = self.slots[slot];
        self.free_blocks += r.blocks;
        self.counts.running -= 1;
        self.counts.bump(status);
        let e2e = r.last_s - r.arrival_s;
        let ttft = r.first_s - r.arrival_s;
        self.e2e.add(e2e);
        let tpot = (r.generated > 1).then(|| (r.last_s - r.first_s) / (r.generated - 1) as f64);
        if let Some(t) = tpot {
            self.tpot.add(t);
        }
        let ok_ttft = self.opts.slo_ttft_s.is_none_or(|s| ttft <= s);
        let ok_tpot = self.opts.slo_tpot_s.is_none_or(|s| tpot.is_none_or(|t| t <= s));
        if ok_ttft && ok_tpot {
            self.good += 1;
        }
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
            });
        }
        self.free_slots.push(slot);
    }

    fn sample(&mut self) {
        let Some(dt) = self.opts.sample_s else { return };
        while self.now >= self.next_sample {
            self.series.push(Sample {
                t_s: self.next_sample,
                waiting: self.counts.waiting,
                running: self.counts.running,
                kv_used: 1.0 - self.free_blocks as f64 / self.total_blocks as f64,
            });
            self.next_sample += dt;
        }
    }

    fn run(&mut self, pricer: &mut StepPricer, src: &mut Source) {
        let closed = src.closed_loop();
        let mut pending: Option<Arrival> = None;
        if let Some(c) = closed {
            for _ in 0..c {
                match src.next_closed(0.0) {
                    Some(a) => self.admit(a),
                    None => break,
                }
            }
        } else {
            pending = src.next_open();
        }
        let horizon = self.opts.horizon_s.unwrap_or(f64::INFINITY);
        let mut step: Vec<(usize, u64)> = Vec::new();
        let mut prefill: Vec<Segment> = Vec::new();
        let mut contexts: Vec<u64> = Vec::new();
        let mut segs: Vec<Segment> = Vec::new();
        let mut done: Vec<(usize, Status)> = Vec::new();
        loop {
            while let Some(a) = pending.filter(|a| a.arrival_s <= self.now) {
                self.admit(a);
                pending = src.next_open();
            }
            if self.waiting.is_empty() && self.running.is_empty() {
                match pending {
                    Some(a) if a.arrival_s <= horizon => {
                        self.now = a.arrival_s;
                        self.sample();
                        continue;
                    }
                    _ => break,
                }
            }
            if self.now >= horizon {
                break;
            }
            self.form_step(&mut step);
            if step.is_empty() {
                // nothing fits beside what runs: cannot happen with a lone request (every
                // request fits the cache alone, checked at start), so the running ones progress
                debug_assert!(!self.running.is_empty(), "an empty step with nothing running");
                if self.running.is_empty() {
                    break;
                }
                continue;
            }
            prefill.clear();
            contexts.clear();
            for &(slot, n) in &step {
                let r = &self.slots[slot];
                if n == 1 && r.generated > 0 && r.pending() == 1 {
                    contexts.push(r.computed + 1);
                } else {
                    prefill.push(Segment {
                        count: 1,
                        new: n,
                        prefix: r.computed,
                        samples: r.computed + n == r.tokens(),
                    });
                }
            }
            let dt = if prefill.is_empty() {
                pricer.decode_step_s(&contexts)
            } else {
                pricer.mixed_step_s(&prefill, &contexts, &mut segs)
            };
            self.now += dt;
            self.steps += 1;
            done.clear();
            for &(slot, n) in &step {
                let r = &mut self.slots[slot];
                r.computed += n;
                if r.computed == r.tokens() {
                    if let Some(s) = self.emit(slot) {
                        done.push((slot, s));
                    }
                }
            }
            self.max_running = self.max_running.max(self.running.len() as u64);
            if !done.is_empty() {
                self.running.retain(|s| !done.iter().any(|(d, _)| d == s));
                for &(slot, status) in &done {
                    self.finish(slot, status);
                    if closed.is_some() {
                        if let Some(a) = src.next_closed(self.now) {
                            self.admit(a);
                        }
                    }
                }
            }
            self.sample();
        }
    }
}

#[cfg(test)]
mod tests;
