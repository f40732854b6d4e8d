//! Speculative decoding in the simulator: each decode step verifies k drafts a sequence and keeps
//! a number of them drawn from the acceptance curve; the step is the static engine's
//! verification and drafter passes.

use super::*;
use crate::model::tests::llama31_8b as model;
use crate::plan::{Drafter, Speculation};

fn spec_plan(accepted: Vec<f64>) -> Plan {
    let mut d = model();
    d.layer_groups[0].count = 1;
    Plan {
        speculation: Some(Speculation {
            draft_tokens: accepted.len() as u64,
            acceptance_length: 1.0 + accepted.iter().sum::<f64>(),
            drafter: Some(Drafter {
                model: d,
                fused_inputs: 2,
                fuse_first_pass_only: false,
                weights: Default::default(),
                shares_embedding: true,
                shares_head: true,
            }),
            accepted,
        }),
        ..plan()
    }
}

fn lone(p: &Plan, prompt: u64, output: u64) -> (SimResult, crate::engine::Estimate) {
    let r = simulate(
        &model(),
        &h100(),
        p,
        &eff(),
        proto(),
        &vllm(),
        &closed(1, 3, fixed(prompt), fixed(output), 0),
        &opts(),
    )
    .unwrap();
    let e = estimate(
        &model(),
        &h100(),
        &Plan {
            prompt,
            output,
            chunk: Some(8192),
            ..p.clone()
        },
        &eff(),
        proto(),
        false,
    )
    .unwrap();
    (r, e)
}

#[test]
fn a_lone_request_keeping_every_draft_takes_the_static_estimate() {
    // every draft kept: each step emits k + 1 = 4 tokens, 64 steps for 256 tokens after the
    // first; the estimate sums the same steps over every context and divides by 4, so the two
    // differ only by where the steps' contexts sit (1.5 tokens of context on average)
    let (r, e) = lone(&spec_plan(vec![1.0, 1.0, 1.0]), 1000, 257);
    assert_eq!(r.counts.completed, 3);
    assert!(close(r.ttft.mean, e.ttft_s, 1e-9), "{} vs {}", r.ttft.mean, e.ttft_s);
    let tpot = e.tpot_s.unwrap();
    assert!(close(r.tpot.mean, tpot, 1e-4), "{} vs {tpot}", r.tpot.mean);
    // every draft rejected: one token a step at exactly the estimate's contexts
    let (r, e) = lone(&spec_plan(vec![0.0, 0.0, 0.0]), 1000, 257);
    assert!(close(r.tpot.mean, e.tpot_s.unwrap(), 1e-9));
}

#[test]
fn drawn_acceptance_spreads_tpot_around_the_static_estimate() {
    // kept drafts drawn each step (P(first i kept) 0.8, 0.6, 0.4; AL 2.8): requests differ in
    // TPOT, and their mean is the estimate's to 2% (the last step of a request keeps what fits)
    let (r, e) = lone(&spec_plan(vec![0.8, 0.6, 0.4]), 1000, 257);
    let tpot = e.tpot_s.unwrap();
    assert!(r.tpot.max > r.tpot.min * 1.02, "{:?}", r.tpot);
    assert!(close(r.tpot.mean, tpot, 0.02), "{} vs {tpot}", r.tpot.mean);
    // the kept drafts reach the client with their step's token, one chunk: an inter-token gap a
    // step, never a zero one
    assert!(r.itl.min > 0.0, "{:?}", r.itl);
    // and the same seed draws the same run
    let (again, _) = lone(&spec_plan(vec![0.8, 0.6, 0.4]), 1000, 257);
    assert_eq!(again.tpot.mean, r.tpot.mean);
}

#[test]
fn a_curve_without_every_depth_is_refused_by_the_simulator() {
    let mut p = spec_plan(vec![0.8, 0.6, 0.4]);
    if let Some(s) = p.speculation.as_mut() {
        s.accepted.clear();
    }
    let r = simulate(
        &model(),
        &h100(),
        &p,
        &eff(),
        proto(),
        &vllm(),
        &closed(1, 1, fixed(100), fixed(10), 0),
        &opts(),
    );
    assert!(matches!(r, Err(Error::Plan { ref field, .. }) if field == "accepted"));
}
