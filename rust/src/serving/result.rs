//! What a simulation returns: request counts and statuses, per-request records, the time series,
//! energy per pool and the summaries of TTFT, TPOT, ITL and E2E.

use super::*;
use metrics::Stats;
use serde::Serialize;

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

    pub(crate) fn bump(&mut self, s: Status) {
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
    /// Completed requests meeting every SLO given (all completed ones without SLOs); a
    /// length-capped request is not among them.
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
