//! The prefill schedule: the segments of each prefill step of a batch of prompts taken in chunks
//! (vLLM's chunked prefill), in closed form (`PrefillSchedule`): what a plan's prefill costs is
//! priced from (engine) and what a plan's shape count is checked against (plan).

use crate::graph::Segment;

/// The segments of one prefill step (at most three), held without allocating.
#[derive(Clone, Copy, Debug)]
pub struct StepSegments {
    segs: [Segment; 3],
    len: usize,
}

impl StepSegments {
    fn push(&mut self, s: Segment) {
        self.segs[self.len] = s;
        self.len += 1;
    }

    pub fn as_slice(&self) -> &[Segment] {
        &self.segs[..self.len]
    }
}

/// The segments of the prefill step that starts `off` tokens into a prompt and takes `budget`
/// tokens, in arrival order (vLLM chunked prefill). At most three segments: the rest of a
/// started prompt, whole prompts, and the start of the next.
fn step_segments(off: u64, budget: u64, prompt: u64, prefix: u64) -> StepSegments {
    let mut budget = budget;
    let none = Segment {
        count: 0,
        new: 0,
        prefix: 0,
        sampled: 0,
    };
    let mut segs = StepSegments {
        segs: [none; 3],
        len: 0,
    };
    if off > 0 {
        let n = budget.min(prompt - off);
        segs.push(Segment {
            count: 1,
            new: n,
            prefix: prefix + off,
            sampled: u64::from(off + n == prompt),
        });
        budget -= n;
    }
    let whole = budget / prompt;
    if whole > 0 {
        segs.push(Segment {
            count: whole,
            new: prompt,
            prefix,
            sampled: 1,
        });
        budget -= whole * prompt;
    }
    if budget > 0 {
        segs.push(Segment {
            count: 1,
            new: budget,
            prefix,
            sampled: u64::from(budget == prompt),
        });
    }
    segs
}

/// The prefill schedule step by step: `batch` prompts of `prompt` tokens, in steps of at most
/// `chunk` tokens taken in arrival order. One entry a step: the reference `PrefillSchedule`
/// is tested against (it is never built for an estimate).
#[cfg(test)]
pub fn prefill_steps(batch: u64, prompt: u64, prefix: u64, chunk: Option<u64>) -> Vec<Vec<Segment>> {
    let total = batch * prompt;
    let c = chunk.unwrap_or(total).max(1);
    (0..total.div_ceil(c))
        .map(|k| {
            step_segments((k * c) % prompt, c.min(total - k * c), prompt, prefix)
                .as_slice()
                .to_vec()
        })
        .collect()
}

/// The prefill schedule in closed form: the distinct steps and how often each occurs, without
/// listing the steps. Step `k` starts `k c` tokens into the batch's `batch x prompt` tokens, so
/// its segments follow from its offset into a prompt, `(k c) mod prompt`, and its budget (`c`
/// but for the last step). The offsets repeat with period `prompt / gcd(c, prompt)`: the steps
/// before the last take at most that many distinct shapes, each priced once and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillSchedule {
    pub batch: u64,
    pub prompt: u64,
    pub prefix: u64,
    /// Tokens per step (the whole batch when unchunked).
    pub chunk: u64,
}

impl PrefillSchedule {
    pub fn new(batch: u64, prompt: u64, prefix: u64, chunk: Option<u64>) -> PrefillSchedule {
        let total = batch.saturating_mul(prompt);
        PrefillSchedule {
            batch,
            prompt,
            prefix,
            chunk: chunk.unwrap_or(total).clamp(1, total.max(1)),
        }
    }

    fn total(&self) -> u64 {
        self.batch * self.prompt
    }

    /// Steps in the schedule.
    pub fn steps(&self) -> u64 {
        self.total().div_ceil(self.chunk)
    }

    /// Distinct shapes among the steps before the last: one per offset of the period.
    fn period(&self) -> u64 {
        if self.prompt == 0 {
            return 1;
        }
        let (mut a, mut b) = (self.chunk % self.prompt, self.prompt);
        while a > 0 {
            (a, b) = (b % a, a);
        }
        self.prompt / b
    }

    /// How many distinct steps `for_each` visits (at most the period + 1).
    pub fn distinct(&self) -> u64 {
        if self.total() == 0 {
            return 0;
        }
        (self.steps() - 1).min(self.period()) + u64::from(self.merged().is_none())
    }

    /// The last step's tokens: `chunk`, or what is left.
    fn last_budget(&self) -> u64 {
        self.total() - (self.steps() - 1) * self.chunk
    }

    /// The earlier shape the last step repeats, if any: it also takes `chunk` tokens at an
    /// offset seen before, and offsets repeat with the period, so it is step (k mod period)'s.
    fn merged(&self) -> Option<u64> {
        let (full, period) = (self.steps() - 1, self.period());
        (self.last_budget() == self.chunk && full >= period).then_some(full % period)
    }

    fn offset(&self, k: u64) -> u64 {
        ((k as u128 * self.chunk as u128) % self.prompt as u128) as u64
    }

    /// Calls `f(segments, count)` once per distinct step, in the order the steps first occur
    /// (the order a step-by-step loop would price them); the counts sum to `steps()`.
    pub fn for_each(&self, mut f: impl FnMut(&[Segment], u64)) {
        if self.total() == 0 {
            return;
        }
        let (c, p) = (self.chunk, self.prompt);
        let full = self.steps() - 1; // every step but the last takes exactly c tokens
        let period = self.period();
        let (laps, rest) = (full / period, full % period);
        let merged = self.merged();
        for j in 0..full.min(period) {
            let n = laps + u64::from(j < rest) + u64::from(merged == Some(j));
            f(step_segments(self.offset(j), c, p, self.prefix).as_slice(), n);
        }
        if merged.is_none() {
            f(
                step_segments(self.offset(full), self.last_budget(), p, self.prefix).as_slice(),
                1,
            );
        }
    }
}
