//! The serving simulator (spec 70): a discrete-event loop of inference servers on the engine.
//! Requests arrive and a router sends each to an instance; each instance's scheduler forms a
//! step (continuous batching under a token budget and a sequence limit, paged KV blocks,
//! preemption by recompute); the engine prices exactly that step (`step::StepPricer`); the
//! instance is busy for its price. With prefill/decode disaggregation a request's prompt is
//! computed on a prefill instance and its KV moved to a decode instance over a link. Metrics
//! are streamed, so memory does not grow with the number of requests unless their records are
//! asked for.

mod config;
mod instance;
pub mod metrics;
mod result;
pub mod step;
pub mod workload;
mod world;

pub use self::{config::*, result::*};
use self::{instance::*, world::*};

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::Layout;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use crate::power;
use std::collections::BinaryHeap;
use step::StepPricer;
use workload::{Source, Workload};

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
            attention_dp: plan.attention_dp,
            pp: plan.pp,
            scheduler: sched.clone(),
        }],
        router: Router::RoundRobin,
        kv_link: None,
        request_overhead_s: 0.0,
    };
    let plan = Plan {
        attention_dp: 1,
        pp: 1,
        ..plan.clone()
    };
    simulate_cluster(m, dev, &plan, eff, proto, &cluster, workload, opts, None)
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
    if plan.dp != 1 {
        return Err(Error::plan(
            "dp",
            format!(
                "the serving simulator runs instances without dp (got {}); serve replicas as instances",
                plan.dp
            ),
        ));
    }
    for (name, v) in [("attention_dp", plan.attention_dp), ("pp", plan.pp)] {
        if v != 1 {
            return Err(Error::plan(
                name,
                format!("a cluster's pools give their own {name} (got {v} in the plan); set it on each pool"),
            ));
        }
    }
    let disagg = match (cluster.pools.len(), cluster.kv_link) {
        (1, _) => false,
        (2, Some(l)) => {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            if !(l.bw_gbs.is_finite() && l.bw_gbs > 0.0 && ok(l.latency_us) && ok(l.handoff_us)) {
                return Err(Error::plan(
                    "kv_link",
                    format!(
                        "needs a bandwidth > 0 GB/s, a latency >= 0 us and a hand-off >= 0 us, got {} GB/s, {} us, \
                         {} us",
                        l.bw_gbs, l.latency_us, l.handoff_us
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
    let mut engines = 0;
    let mut warnings: Vec<String> = Vec::new();
    // a speculating step keeps a drawn number of drafts a sequence: their distribution is needed
    let accepted = match &plan.speculation {
        Some(sp) if sp.accepted.len() as u64 != sp.draft_tokens => {
            return Err(Error::plan(
                "accepted",
                format!(
                    "the simulator draws each step's kept drafts: it needs the acceptance at every depth 1..={} \
                     (an acceptance curve with each depth, or per-position rates)",
                    sp.draft_tokens
                ),
            ))
        }
        Some(sp) => sp.accepted.clone(),
        None => Vec::new(),
    };
    for (k, p) in cluster.pools.iter().enumerate() {
        check_scheduler(&p.scheduler, names[k])?;
        if p.instances == 0 {
            return Err(Error::plan("instances", format!("must be >= 1 ({})", names[k])));
        }
        if p.pp > 1 && p.attention_dp > 1 {
            return Err(Error::plan(
                "pp",
                format!("attention DP within pipeline stages is not simulated ({})", names[k]),
            ));
        }
        let pp = Plan {
            tp: p.tp,
            ep: p.ep,
            attention_dp: p.attention_dp,
            pp: p.pp,
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
        // a virtual engine holds 1/pp of the instance's blocks (vLLM v0's scheduler of each
        // virtual engine takes num_gpu_blocks // pipeline_parallel_size: core/scheduler.py)
        let blocks = match p.scheduler.kv_blocks {
            Some(b) => b,
            None => kv_blocks(&pricer, dev, &p.scheduler, p.pp)? / p.pp,
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
        // one Instance per attention-DP rank or pipeline virtual engine; an instance's are
        // consecutive (ranks step together behind their leader; virtual engines each on its own)
        let (first, ranks, pipes) = (instances.len(), p.attention_dp as usize, p.pp as usize);
        for n in 0..p.instances as usize {
            for v in 0..ranks * pipes {
                let leader = if pipes > 1 { v } else { 0 };
                let mut inst = Instance::new(
                    k,
                    first + n * ranks * pipes + leader,
                    engines + n,
                    role,
                    p.scheduler.clone(),
                    max_model_len,
                    blocks,
                    state_blocks,
                );
                inst.pipe = first + n * ranks * pipes;
                inst.lookahead = accepted.len() as u64;
                instances.push(inst);
            }
        }
        engines += p.instances as usize;
        pools.push(PoolState {
            pricer,
            blocks,
            first,
            count: instances.len() - first,
            ranks,
            pipes,
            stage_share: m.num_layers().div_ceil(p.pp) as f64 / m.num_layers() as f64,
            next_rr: 0,
            devices: pp.moe_group() * pp.pp,
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
        accepted,
        // its own stream, so that speculation leaves the workload's draws as they were
        spec_rng: workload::Rng::new(!workload.seed),
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
            let n = (p.count / (p.ranks * p.pipes)) as f64;
            let d = p.devices as f64;
            PoolEnergy {
                instances: n as u64,
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

/// Memory bounds of one run (input bounds, not model constants: a queued request holds its
/// ~120-byte record, a kept one ~64 bytes, a sample 32): a queue past `MAX_WAITING` requests
/// means the arrivals outpace the fleet, and the run stops there rather than hold them all
/// (`--rate 1000 --requests 100000000` grew ~125 bytes a request until the allocator failed);
/// a record of every request (`--out`) and the time series are bounded the same way.
pub const MAX_WAITING: u64 = 1 << 20;

pub const MAX_KEPT: usize = 1 << 21;

pub const MAX_SAMPLES: usize = 1 << 21;

#[cfg(test)]
mod tests;
