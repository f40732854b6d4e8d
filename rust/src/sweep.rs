//! Many plans in one call: a grid's numeric axes cross the boundary once,
//! are expanded here and evaluated across threads. Each plan is independent,
//! so the results are identical whatever the thread count.

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::estimate;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use rayon::prelude::*;

/// The scalar results of one plan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub ttft_s: f64,
    pub tpot_s: f64,
    pub e2e_s: f64,
    pub throughput_tok_s: f64,
    pub prefill_tok_s: f64,
    pub memory_bytes: f64,
    pub fits: bool,
    pub mfu_prefill: f64,
    pub mbu_decode: f64,
    pub devices: u64,
}

pub fn summarize(m: &Model, dev: &Device, plan: &Plan, eff: &Efficiency, proto: ProtocolTable) -> Result<Summary> {
    let e = estimate(m, dev, plan, eff, proto, false)?;
    Ok(Summary {
        ttft_s: e.ttft_s,
        tpot_s: e.tpot_s.unwrap_or(f64::NAN),
        e2e_s: e.e2e_s,
        throughput_tok_s: e.throughput_tok_s,
        prefill_tok_s: e.prefill_tok_s,
        memory_bytes: e.memory.total_bytes,
        fits: e.memory.fits,
        mfu_prefill: e.prefill.mfu,
        mbu_decode: e.decode.mbu,
        devices: e.parallel.devices,
    })
}

/// Runs `f` on all cores (`threads` = 0), or on exactly `threads` threads.
fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    if threads == 0 {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Evaluates every plan; `threads` = 0 uses all cores.
pub fn evaluate(
    m: &Model,
    dev: &Device,
    plans: &[Plan],
    eff: &Efficiency,
    proto: ProtocolTable,
    threads: usize,
) -> Vec<Result<Summary>> {
    if threads == 1 {
        return plans.iter().map(|p| summarize(m, dev, p, eff, proto)).collect();
    }
    with_threads(threads, || {
        plans.par_iter().map(|p| summarize(m, dev, p, eff, proto)).collect()
    })
}

/// The numeric axes of a grid; the plan at index i is their mixed-radix
/// decoding, the last axis (output) fastest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Axes {
    pub tp: Vec<u64>,
    pub pp: Vec<u64>,
    pub ep: Vec<u64>,
    pub dp: Vec<u64>,
    /// Chunked-prefill budgets; 0 means "no chunking".
    pub chunk: Vec<u64>,
    pub batch: Vec<u64>,
    pub prompt: Vec<u64>,
    pub output: Vec<u64>,
}

impl Axes {
    fn all(&self) -> [&Vec<u64>; 8] {
        [
            &self.tp,
            &self.pp,
            &self.ep,
            &self.dp,
            &self.chunk,
            &self.batch,
            &self.prompt,
            &self.output,
        ]
    }

    pub fn validate(&self) -> Result<()> {
        let names = ["tp", "pp", "ep", "dp", "chunk", "batch", "prompt", "output"];
        for (name, axis) in names.iter().zip(self.all()) {
            if axis.is_empty() {
                return Err(Error::plan(name, "a grid axis needs at least one value"));
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.all().iter().map(|a| a.len()).product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The axis values of plan `i`: [tp, pp, ep, dp, chunk, batch, prompt, output].
    pub fn values(&self, mut i: usize) -> [u64; 8] {
        let axes = self.all();
        let mut out = [0u64; 8];
        for k in (0..8).rev() {
            let n = axes[k].len();
            out[k] = axes[k][i % n];
            i /= n;
        }
        out
    }

    pub fn plan(&self, base: &Plan, i: usize) -> Plan {
        let [tp, pp, ep, dp, chunk, batch, prompt, output] = self.values(i);
        Plan {
            tp,
            pp,
            ep,
            dp,
            chunk: (chunk > 0).then_some(chunk),
            batch,
            prompt,
            output,
            ..base.clone()
        }
    }
}

/// Evaluates plans `start..stop` of the grid.
#[allow(clippy::too_many_arguments)]
pub fn grid(
    m: &Model,
    dev: &Device,
    axes: &Axes,
    base: &Plan,
    eff: &Efficiency,
    proto: ProtocolTable,
    threads: usize,
    start: usize,
    stop: usize,
) -> Vec<Result<Summary>> {
    let stop = stop.min(axes.len());
    let one = |i: usize| summarize(m, dev, &axes.plan(base, i), eff, proto);
    if threads == 1 {
        return (start..stop).map(one).collect();
    }
    with_threads(threads, || (start..stop).into_par_iter().map(one).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::tests::h100;
    use crate::engine::tests::proto;
    use crate::model::tests::llama31_8b;

    #[test]
    fn thread_count_does_not_change_results() {
        let plans: Vec<Plan> = (1..200)
            .map(|i| Plan {
                tp: [1, 2, 4][i as usize % 3],
                ..Plan::new(i % 17 + 1, 64 * i, 1 + i % 50, 0.9)
            })
            .collect();
        let eff = Efficiency::uncalibrated();
        let a = evaluate(&llama31_8b(), &h100(), &plans, &eff, proto(), 1);
        let b = evaluate(&llama31_8b(), &h100(), &plans, &eff, proto(), 2);
        for (x, y) in a.iter().zip(&b) {
            let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
            assert_eq!(x.e2e_s.to_bits(), y.e2e_s.to_bits());
            assert_eq!(x.memory_bytes.to_bits(), y.memory_bytes.to_bits());
        }
    }

    #[test]
    fn grid_expansion_is_mixed_radix_with_output_fastest() {
        let axes = Axes {
            tp: vec![1, 2],
            pp: vec![1],
            ep: vec![1],
            dp: vec![1],
            chunk: vec![0, 512],
            batch: vec![1, 8, 64],
            prompt: vec![128],
            output: vec![16, 256],
        };
        assert_eq!(axes.len(), 2 * 2 * 3 * 2);
        assert_eq!(axes.values(0), [1, 1, 1, 1, 0, 1, 128, 16]);
        assert_eq!(axes.values(1), [1, 1, 1, 1, 0, 1, 128, 256]);
        assert_eq!(axes.values(2), [1, 1, 1, 1, 0, 8, 128, 16]);
        assert_eq!(axes.values(23), [2, 1, 1, 1, 512, 64, 128, 256]);
        let base = Plan::new(1, 1, 1, 0.9);
        let p = axes.plan(&base, 23);
        assert_eq!((p.tp, p.chunk, p.batch, p.output), (2, Some(512), 64, 256));
        let r = grid(
            &llama31_8b(),
            &h100(),
            &axes,
            &base,
            &Efficiency::uncalibrated(),
            proto(),
            2,
            0,
            24,
        );
        assert_eq!(r.len(), 24);
        let direct = summarize(&llama31_8b(), &h100(), &p, &Efficiency::uncalibrated(), proto()).unwrap();
        assert_eq!(r[23].as_ref().unwrap(), &direct);
    }
}
