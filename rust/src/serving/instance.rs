//! One inference server: its scheduler (continuous batching under a token budget and a sequence
//! limit, paged KV blocks, preemption by recompute), its requests, and the metrics it streams.

use super::*;
use crate::device::Device;
use crate::error::{Error, Result};
use metrics::LogHist;
use std::collections::{HashMap, VecDeque};
use step::{StepCost, StepPricer};
use workload::Arrival;

/// KV blocks one instance holds: the memory left after weights and the step workspace, under
/// the scheduler's memory fraction, in blocks of `block_size` tokens.
pub(crate) fn kv_blocks(pricer: &StepPricer, dev: &Device, s: &Scheduler, pp: u64) -> Result<u64> {
    let l = pricer.layout();
    let workspace = pricer.workspace_bytes(s.max_num_batched_tokens);
    let weights = l.stage_weight_bytes(pp);
    let (budget, free) = if s.fraction_of_free {
        let left = dev.memory_bytes() - weights - workspace;
        (dev.memory_bytes(), left * s.memory_fraction)
    } else {
        let budget = dev.memory_bytes() * s.memory_fraction;
        (budget, budget - weights - workspace)
    };
    // a stage's rank holds its layers' share of every sequence's KV
    let per_block = l.kv_bytes_per_token() * l.stage_share(pp) * s.block_size as f64;
    if free <= 0.0 || per_block <= 0.0 {
        return Err(Error::plan(
            "kv_blocks",
            format!(
                "no memory is left for the KV cache: weights {:.1} GB and workspace {:.1} GB per device \
                 against {:.1} GB; use more TP or a smaller max_num_batched_tokens",
                weights / 1e9,
                workspace / 1e9,
                budget / 1e9
            ),
        ));
    }
    Ok((free / per_block).floor() as u64)
}

/// Blocks a sequence of `tokens` tokens holds in blocks of `block_size`: its KV blocks and, once
/// it holds any, its linear-attention state's `state_blocks`.
pub(crate) fn seq_blocks(tokens: u64, block_size: u64, state_blocks: u64) -> u64 {
    let kv = tokens.div_ceil(block_size);
    if kv > 0 {
        kv + state_blocks
    } else {
        0
    }
}

/// What an instance does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Both,
    /// Prefill only: a request leaves when its prompt is computed (its first token sampled).
    Prefill,
    /// Decode only: requests arrive with their prompt's KV.
    Decode,
}

/// A request in the cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Req {
    pub(crate) id: u64,
    pub(crate) arrival_s: f64,
    pub(crate) prompt: u64,
    /// Where the model stops by itself: read only when a token is produced (end of sequence).
    pub(crate) eos_at: u64,
    /// The declared output budget (max_tokens), if any.
    pub(crate) max_tokens: Option<u64>,
    pub(crate) computed: u64,
    pub(crate) generated: u64,
    pub(crate) blocks: u64,
    pub(crate) first_s: f64,
    pub(crate) last_s: f64,
    pub(crate) preemptions: u32,
    pub(crate) prefix_id: Option<u64>,
    pub(crate) prefix_tokens: u64,
    /// Blocks the request reads from the prefix cache (held there, not in `blocks`).
    pub(crate) shared: u64,
}

impl Req {
    pub(crate) fn tokens(&self) -> u64 {
        self.prompt + self.generated
    }

    pub(crate) fn pending(&self) -> u64 {
        self.tokens() - self.computed
    }
}

/// Streamed results of a run, shared by every instance.
pub(crate) struct Metrics {
    pub(crate) opts: Options,
    pub(crate) max_model_len: u64,
    pub(crate) counts: Counts,
    pub(crate) ttft: LogHist,
    pub(crate) tpot: LogHist,
    pub(crate) itl: LogHist,
    pub(crate) e2e: LogHist,
    pub(crate) now: f64,
    pub(crate) output_tokens: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) steps: u64,
    pub(crate) preemptions: u64,
    pub(crate) good: u64,
    pub(crate) max_running: u64,
    pub(crate) requests: Vec<RequestRecord>,
    pub(crate) series: Vec<Sample>,
    pub(crate) next_sample: f64,
    pub(crate) next_id: u64,
    pub(crate) first_arrival: Option<f64>,
    pub(crate) cached_tokens: u64,
}

impl Metrics {
    pub(crate) fn new(opts: Options, max_model_len: u64) -> Metrics {
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

    pub(crate) fn record(&mut self, r: &Req, status: Status, instance: usize) {
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
    pub(crate) fn arrive(&mut self, a: Arrival, entry: &Scheduler) -> Option<Req> {
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

    /// A token of `r` produced now; the status when the request is done. `hand_on`: produced by
    /// a prefill instance, whose first token reaches the client from the decode instance after the
    /// KV transfer and hand-off (`first_token` then), unless the request ends with it.
    pub(crate) fn emit(&mut self, r: &mut Req, hand_on: bool) -> Option<Status> {
        self.produce(r, hand_on, true)
    }

    /// A kept draft token of `r`, produced in the same step as the token before it: it reaches the
    /// client in the same chunk, so it adds no inter-token gap (a benchmark client times chunks).
    pub(crate) fn emit_kept(&mut self, r: &mut Req) -> Option<Status> {
        self.produce(r, false, false)
    }

    fn produce(&mut self, r: &mut Req, hand_on: bool, own_chunk: bool) -> Option<Status> {
        let now = self.now;
        r.generated += 1;
        self.output_tokens += 1;
        // the end of sequence is read only now, as sampling would find it
        let status = if r.generated >= r.eos_at || r.max_tokens.is_some_and(|b| r.generated >= b) {
            Some(Status::Completed)
        } else if r.prompt + r.generated >= self.max_model_len {
            Some(Status::LengthCapped)
        } else {
            None
        };
        if r.generated == 1 {
            self.prompt_tokens += r.prompt;
            if !hand_on || status.is_some() {
                self.first_token(r, now);
            }
        } else if own_chunk {
            self.itl.add(now - r.last_s);
        }
        r.last_s = now;
        status
    }

    /// `r`'s first token reaches its client now: its TTFT.
    pub(crate) fn first_token(&mut self, r: &mut Req, now: f64) {
        r.first_s = now;
        r.last_s = now;
        self.ttft.add(now - r.arrival_s);
    }

    pub(crate) fn finish(&mut self, r: &Req, status: Status, instance: usize) {
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
        // a length-capped request was cut short of what it asked for: never within the objectives
        if status == Status::Completed && ok_ttft && ok_tpot {
            self.good += 1;
        }
        self.record(r, status, instance);
    }
}

/// One server, or one attention-DP rank of one: its queue, running requests and KV blocks.
pub(crate) struct Instance {
    pub(crate) pool: usize,
    /// The first rank of its instance (itself without attention DP, and for a pipeline virtual
    /// engine, which steps on its own): the one that holds the step state (`busy`, `step_cost`).
    pub(crate) leader: usize,
    /// Its instance's number (the rank's own index without attention DP).
    pub(crate) engine: usize,
    /// With PP, the instance's first virtual engine, which holds when the first stage is free
    /// again (`stage_free_s`) and whether a wake-up for it is scheduled (`stage_wake`).
    pub(crate) pipe: usize,
    /// Draft tokens a speculating decode verifies beside its own (k; 0 without speculation): they
    /// take k more of the step's token budget and k more KV slots (vLLM schedules 1 + k tokens
    /// for a running request with draft tokens, and allocates their slots).
    pub(crate) lookahead: u64,
    pub(crate) stage_free_s: f64,
    pub(crate) stage_wake: bool,
    pub(crate) role: Role,
    pub(crate) sched: Scheduler,
    pub(crate) max_model_len: u64,
    pub(crate) total_blocks: u64,
    /// Blocks each sequence's linear-attention state takes (0 without such layers).
    pub(crate) state_blocks: u64,
    pub(crate) free_blocks: u64,
    /// Requests on the instance, by slot (reused when one leaves).
    pub(crate) slots: Vec<Req>,
    pub(crate) free_slots: Vec<usize>,
    pub(crate) waiting: VecDeque<usize>,
    /// In scheduling order: the last is preempted first.
    pub(crate) running: Vec<usize>,
    /// The step in progress: (slot, tokens); on the leader, the instance's price and whether
    /// it is in a step.
    pub(crate) step: Vec<(usize, u64)>,
    pub(crate) step_cost: StepCost,
    pub(crate) busy: bool,
    /// Cached prefixes by id: their blocks (taken from `free_blocks`), the requests reading
    /// them and when they were last used (a counter: least recently used is evicted first).
    pub(crate) cache: HashMap<u64, Cached>,
    pub(crate) uses: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Cached {
    pub(crate) blocks: u64,
    pub(crate) readers: u32,
    pub(crate) last_use: u64,
}

impl Instance {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        pool: usize,
        leader: usize,
        engine: usize,
        role: Role,
        sched: Scheduler,
        max_model_len: u64,
        blocks: u64,
        state_blocks: u64,
    ) -> Instance {
        Instance {
            pool,
            leader,
            engine,
            pipe: leader,
            lookahead: 0,
            stage_free_s: 0.0,
            stage_wake: false,
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

    pub(crate) fn outstanding(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    pub(crate) fn kv_used(&self) -> f64 {
        1.0 - self.free_blocks as f64 / self.total_blocks as f64
    }

    pub(crate) fn blocks_for(&self, tokens: u64) -> u64 {
        seq_blocks(tokens, self.sched.block_size, self.state_blocks)
    }

    pub(crate) fn put(&mut self, r: Req) -> usize {
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
    pub(crate) fn enqueue(&mut self, r: Req, c: &mut Counts) {
        let slot = self.put(r);
        c.waiting += 1;
        self.waiting.push_back(slot);
    }

    /// Tokens of `slot` this step may compute within `budget` (0: it waits).
    pub(crate) fn chunk(&self, slot: usize, budget: u64) -> u64 {
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
    pub(crate) fn need(&self, slot: usize, n: u64) -> u64 {
        let r = &self.slots[slot];
        self.blocks_for(r.computed + n).saturating_sub(r.blocks + r.shared)
    }

    /// Frees the blocks of the least recently used prefix no request reads; whether one was.
    pub(crate) fn evict(&mut self) -> bool {
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
    pub(crate) fn unshare(&mut self, slot: usize) {
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
    pub(crate) fn hit(&mut self, slot: usize) -> u64 {
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
    pub(crate) fn keep_prefix(&mut self, slot: usize) {
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
    pub(crate) fn release(&mut self, slot: usize) -> Req {
        self.unshare(slot);
        let r = self.slots[slot];
        self.free_blocks += r.blocks;
        self.slots[slot].blocks = 0;
        self.free_slots.push(slot);
        r
    }

    pub(crate) fn preempt(&mut self, slot: usize, m: &mut Metrics) {
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
    pub(crate) fn reservation(&self, slot: usize) -> u64 {
        let r = &self.slots[slot];
        let out = r.max_tokens.unwrap_or(self.max_model_len - r.prompt);
        self.blocks_for((r.prompt + out).min(self.max_model_len)).max(r.blocks)
    }

    /// Schedules the running requests in order (`prefilling`: only those still prefilling, or
    /// only those decoding), preempting the newest when blocks run out. Whether any was.
    pub(crate) fn schedule_running(&mut self, budget: &mut u64, prefilling: Option<bool>, m: &mut Metrics) -> bool {
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
            let extra = if is_prefill { 0 } else { self.lookahead };
            let need = self.need(slot, n + extra);
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
            *budget = budget.saturating_sub(n + extra);
            self.step.push((slot, n));
            i += 1;
        }
        preempted
    }

    /// Moves waiting requests in arrival order into the step while budget, sequences and blocks
    /// allow.
    pub(crate) fn schedule_waiting(&mut self, budget: &mut u64, m: &mut Metrics) {
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
    pub(crate) fn form_step(&mut self, m: &mut Metrics) {
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
