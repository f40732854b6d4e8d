//! Many plans in one call: the whole grid crosses the boundary once and is
//! evaluated across threads; each plan is independent, so the results are
//! identical whatever the thread count.

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::estimate;
use crate::error::Result;
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
    pub memory_bytes: f64,
    pub fits: bool,
    pub mfu_prefill: f64,
    pub mbu_decode: f64,
}

pub fn summarize(m: &Model, dev: &Device, plan: &Plan, eff: &Efficiency, proto: ProtocolTable) -> Result<Summary> {
    let e = estimate(m, dev, plan, eff, proto, false)?;
    Ok(Summary {
        ttft_s: e.ttft_s,
        tpot_s: e.tpot_s.unwrap_or(f64::NAN),
        e2e_s: e.e2e_s,
        throughput_tok_s: e.throughput_tok_s,
        memory_bytes: e.memory.total_bytes,
        fits: e.memory.fits,
        mfu_prefill: e.prefill.mfu,
        mbu_decode: e.decode.mbu,
    })
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
    let run = || plans.par_iter().map(|p| summarize(m, dev, p, eff, proto)).collect();
    if threads == 1 {
        return plans.iter().map(|p| summarize(m, dev, p, eff, proto)).collect();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    }
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
}
