//! The discrete-event loop: arrivals, routing, steps and KV transfers in time order over every pool.

use super::*;
use crate::error::{Error, Result};
use crate::graph::Segment;
use crate::power;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use step::{StepCost, StepPricer};
use workload::{Arrival, Source};

/// A scheduled event. Ties in time keep the order they were scheduled in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    pub(crate) t: f64,
    pub(crate) seq: u64,
    pub(crate) kind: EventKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum EventKind {
    Arrival(Arrival),
    /// A request through the front end reaches the router.
    Admit(Req),
    StepEnd(usize),
    /// The first pipeline stage of the instance whose first virtual engine this is is free.
    StageFree(usize),
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

pub(crate) struct PoolState<'a> {
    pub(crate) pricer: StepPricer<'a>,
    pub(crate) blocks: u64,
    /// Its ranks (`Instance`s): `first..first + count`, `ranks` consecutive ones an instance.
    pub(crate) first: usize,
    pub(crate) count: usize,
    pub(crate) ranks: usize,
    /// Pipeline virtual engines of an instance (1 without PP), and the share of the layers a
    /// stage holds.
    pub(crate) pipes: usize,
    pub(crate) stage_share: f64,
    pub(crate) next_rr: usize,
    /// Devices of one instance.
    pub(crate) devices: u64,
    /// Seconds its instances spent in steps that ended, and those seconds weighted by each
    /// step's busy fraction (`power::occupancy`).
    pub(crate) busy_s: f64,
    pub(crate) busy_u_s: f64,
}

/// Every instance, the event queue and the metrics.
pub(crate) struct World<'a, 'p> {
    pub(crate) pools: Vec<PoolState<'a>>,
    pub(crate) instances: Vec<Instance>,
    pub(crate) metrics: Metrics,
    pub(crate) router: Router,
    pub(crate) link: Option<KvLink>,
    /// The front end's seconds a request takes to reach the router (`Cluster::request_overhead_s`).
    pub(crate) front: f64,
    pub(crate) events: BinaryHeap<Event>,
    pub(crate) seq: u64,
    pub(crate) transfers: u64,
    pub(crate) transfer_s: f64,
    pub(crate) step: Vec<(usize, u64)>,
    pub(crate) prefill: Vec<Segment>,
    pub(crate) contexts: Vec<u64>,
    pub(crate) segs: Vec<Segment>,
    pub(crate) done: Vec<(usize, Status)>,
    /// The instance whose step end is being taken in (its next step waits for all of it).
    pub(crate) hold: Option<usize>,
    pub(crate) progress: Option<&'p mut dyn FnMut(u64, u64)>,
    pub(crate) next_report: u64,
    /// The memory-bound power share (0 when not fitted: the run then reports no energy).
    pub(crate) rho: f64,
    /// With speculation, P(the first i drafts are kept), i = 1 ..= k (`plan::Speculation`);
    /// empty without.
    pub(crate) accepted: Vec<f64>,
    /// Draws each speculating decode's kept drafts.
    pub(crate) spec_rng: super::workload::Rng,
}

impl World<'_, '_> {
    /// Tells the progress callback, each hundredth of the requests.
    pub(crate) fn report(&mut self, total: u64) {
        let Some(f) = self.progress.as_mut() else { return };
        let ended = self.metrics.counts.ended();
        if ended >= self.next_report {
            f(ended, total);
            self.next_report = ended + (total / 100).max(1);
        }
    }

    pub(crate) fn push(&mut self, t: f64, kind: EventKind) {
        self.seq += 1;
        self.events.push(Event { t, seq: self.seq, kind });
    }

    /// The instance of pool `p` the router sends a request to.
    pub(crate) fn route(&mut self, p: usize, prefix: Option<u64>) -> usize {
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
    pub(crate) fn arrive(&mut self, a: Arrival, src: &mut Source, closed: bool) {
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
    pub(crate) fn admit(&mut self, r: Req) {
        let i = self.route(0, r.prefix_id);
        self.instances[i].enqueue(r, &mut self.metrics.counts);
        self.start(i);
    }

    /// Starts a step on the instance of rank `i` if it is idle and any of its ranks has work.
    /// Its attention-DP ranks step together (each MoE layer's dispatch and combine wait for every
    /// rank): each forms and prices its own step; the step runs each rank's own operators at the
    /// slowest rank's time, its attention kernels likewise, and the routed experts once for the
    /// ranks' tokens. A decode-only step is padded: every rank runs the most tokens of any rank
    /// (an idle rank a dummy batch), as vLLM does under CUDA graphs (v1/worker/dp_utils.py pads
    /// each DP rank to the largest token count when the synced CUDA-graph mode is on), so the
    /// experts serve `attention_dp` x that many. A step holding a prompt chunk runs past the
    /// CUDA-graph sizes, eagerly and unpadded: the experts serve the ranks' real tokens.
    pub(crate) fn start(&mut self, i: usize) {
        let g = self.instances[i].leader;
        if self.instances[g].busy || self.hold == Some(g) {
            return;
        }
        let (ranks, pipes) = {
            let pool = &self.pools[self.instances[g].pool];
            (pool.ranks, pool.pipes)
        };
        // with PP a virtual engine's micro-batch enters the first stage once it is free
        let pipe = self.instances[g].pipe;
        if pipes > 1 && self.instances[pipe].stage_free_s > self.metrics.now {
            if !self.instances[pipe].stage_wake && self.instances[g].outstanding() > 0 {
                self.instances[pipe].stage_wake = true;
                let t = self.instances[pipe].stage_free_s;
                self.push(t, EventKind::StageFree(pipe));
            }
            return;
        }
        let (mut fixed, mut kernels, mut running) = (StepCost::default(), StepCost::default(), 0);
        let (mut experts, mut sends, mut tokens, mut prefill) = (StepCost::default(), StepCost::default(), 0, false);
        let mut any = false;
        for k in g..g + ranks {
            let inst = &mut self.instances[k];
            inst.form_step(&mut self.metrics);
            running += inst.running.len() as u64;
            if inst.step.is_empty() {
                continue;
            }
            any = true;
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
                        sampled: u64::from(r.computed + n == r.tokens()),
                    });
                }
            }
            let pricer = &mut self.pools[inst.pool].pricer;
            let p = if self.prefill.is_empty() {
                pricer.decode_parts(&self.contexts)
            } else {
                pricer.mixed_parts(&self.prefill, &self.contexts, &mut self.segs)
            };
            if ranks == 1 {
                (fixed, kernels, sends) = (p.fixed, p.kernels, p.sends);
                continue;
            }
            // a rank's own operators, without the experts all the ranks share
            let slower = |a: StepCost, b: StepCost| if b.time_s > a.time_s { b } else { a };
            (fixed, experts, kernels) = (
                slower(fixed, p.fixed - p.experts),
                slower(experts, p.experts),
                slower(kernels, p.kernels),
            );
            tokens += p.tokens;
            prefill |= p.prefill;
        }
        if !any {
            return;
        }
        if pipes > 1 {
            // the requests running on the instance: every virtual engine's
            running = (pipe..pipe + pipes)
                .map(|v| self.instances[v].running.len() as u64)
                .sum();
        }
        if prefill {
            let pricer = &mut self.pools[self.instances[g].pool].pricer;
            experts = pricer.experts_at(tokens.div_ceil(ranks as u64));
        }
        let cost = fixed + experts + kernels;
        if pipes > 1 {
            // the first stage holds the micro-batch for one stage's time (the static engine's):
            // its share of the layers, and one of the p - 1 sends
            let share = self.pools[self.instances[g].pool].stage_share;
            let stage = (cost.time_s - sends.time_s) * share + sends.time_s / (pipes - 1) as f64;
            self.instances[pipe].stage_free_s = self.metrics.now + stage;
        }
        let leader = &mut self.instances[g];
        leader.busy = true;
        leader.step_cost = cost;
        self.metrics.max_running = self.metrics.max_running.max(running);
        let t = self.metrics.now + cost.time_s;
        self.push(t, EventKind::StepEnd(g));
    }

    /// The step of the instance led by rank `g` ends now: each rank's tokens, completions and
    /// hand-offs; then its next step.
    pub(crate) fn end_step(&mut self, g: usize, closed: bool, src: &mut Source) {
        self.metrics.steps += 1;
        // requests that arrive while this step's results are taken in join its next step
        self.hold = Some(g);
        {
            let inst = &mut self.instances[g];
            inst.busy = false;
            let (c, pool) = (inst.step_cost, &mut self.pools[inst.pool]);
            // with PP each stage's devices are busy for their share of the step
            let busy = if pool.pipes > 1 {
                c.time_s * pool.stage_share
            } else {
                c.time_s
            };
            pool.busy_s += busy;
            pool.busy_u_s += power::occupancy(c.compute_s, c.memory_s, c.time_s, self.rho).2 * busy;
        }
        let ranks = self.pools[self.instances[g].pool].ranks;
        for i in g..g + ranks {
            self.take_in(i, closed, src);
        }
        self.hold = None;
        self.start(g);
    }

    /// Rank `i`'s part of a step that ended: tokens, completions, hand-offs.
    fn take_in(&mut self, i: usize, closed: bool, src: &mut Source) {
        let mut step = std::mem::take(&mut self.step);
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        {
            let inst = &mut self.instances[i];
            std::mem::swap(&mut step, &mut inst.step);
            for &(slot, n) in &step {
                let decoding = inst.slots[slot].generated > 0 && inst.slots[slot].pending() == 1;
                inst.slots[slot].computed += n;
                inst.keep_prefix(slot);
                let r = &mut inst.slots[slot];
                if r.computed == r.tokens() {
                    // a speculating decode keeps the drafts drawn, each a token more (their KV
                    // written by the verification), then the bonus token
                    let kept = if decoding && !self.accepted.is_empty() {
                        let u = self.spec_rng.uniform();
                        self.accepted.iter().take_while(|&&p| u < p).count()
                    } else {
                        0
                    };
                    let mut status = self.metrics.emit(r, inst.role == Role::Prefill);
                    for _ in 0..kept {
                        if status.is_some() {
                            break;
                        }
                        r.computed += 1;
                        status = self.metrics.emit_kept(r);
                    }
                    match status {
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
            let engine = self.instances[i].engine;
            self.metrics.finish(&r, status, engine);
            if closed {
                if let Some(a) = src.next_closed(self.metrics.now) {
                    self.arrive(a, src, true);
                }
            }
        }
        step.clear();
        self.step = step;
        self.done = done;
    }

    /// A prefilled request's KV leaves for a decode instance.
    pub(crate) fn hand_off(&mut self, mut r: Req) {
        let link = self.link.expect("disaggregated clusters have a link");
        // each rank sends its shard of the prompt's KV over its own link (with PP, each stage's
        // ranks their layers' share)
        let pool = &self.pools[0];
        let bytes = r.prompt as f64 * pool.pricer.layout().kv_bytes_per_token() * pool.stage_share;
        let dt = bytes / (link.bw_gbs * 1e9) + (link.latency_us + link.handoff_us) * 1e-6;
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
    pub(crate) fn receive(&mut self, mut r: Req, to: usize, closed: bool, src: &mut Source) {
        self.metrics.counts.transferring -= 1;
        let inst = &mut self.instances[to];
        let need = inst.blocks_for(r.computed);
        if inst.free_blocks < need {
            self.metrics.counts.bump(Status::RejectedDecodeKv);
            self.metrics.record(&r, Status::RejectedDecodeKv, inst.engine);
            if closed {
                if let Some(a) = src.next_closed(self.metrics.now) {
                    self.arrive(a, src, true);
                }
            }
            return;
        }
        inst.free_blocks -= need;
        r.blocks = need;
        // the first token reaches the client from the decode instance, with the KV
        let now = self.metrics.now;
        self.metrics.first_token(&mut r, now);
        let inst = &mut self.instances[to];
        inst.enqueue(r, &mut self.metrics.counts);
        self.start(to);
    }

    /// Records the time series up to now; false when it would pass `MAX_SAMPLES` points.
    pub(crate) fn sample(&mut self) -> bool {
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
    pub(crate) fn over_bounds(&self, total: u64) -> Option<Error> {
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

    pub(crate) fn run(&mut self, src: &mut Source) -> Result<()> {
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
                EventKind::StageFree(p) => {
                    self.instances[p].stage_wake = false;
                    let pipes = self.pools[self.instances[p].pool].pipes;
                    for v in p..p + pipes {
                        self.start(v);
                    }
                }
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
