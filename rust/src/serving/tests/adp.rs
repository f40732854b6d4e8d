//! Attention data parallelism in the simulator: an instance of several ranks, each with its own
//! scheduler and KV cache, stepping together over shared experts.

use super::*;
use crate::engine::{Estimate, Phase};
use crate::fixtures::mixtral_8x7b;

/// Seconds of an estimate's prefill spent in the routed experts (Mixtral in bf16: their GEMMs
/// and activation; no activation quantisation).
fn prefill_experts(e: &Estimate) -> f64 {
    e.breakdown
        .iter()
        .filter(|r| r.phase == Phase::Prefill && r.kind.is_routed_expert())
        .map(|r| r.cost.time_s)
        .sum()
}

/// Mixtral on 4 H100s: 2 attention-DP ranks of TP 2, the experts over EP 4.
fn adp_plan() -> Plan {
    Plan {
        tp: 2,
        ep: 4,
        attention_dp: 2,
        ..plan()
    }
}

fn adp_sim(w: &Workload, o: &Options) -> SimResult {
    simulate(&mixtral_8x7b(), &h100(), &adp_plan(), &eff(), proto(), &vllm(), w, o).unwrap()
}

fn static_estimate(batch: u64, prompt: u64, output: u64) -> crate::engine::Estimate {
    let p = Plan {
        batch,
        prompt,
        output,
        chunk: Some(8192),
        ..adp_plan()
    };
    estimate(&mixtral_8x7b(), &h100(), &p, &eff(), proto(), true).unwrap()
}

#[test]
fn a_lone_request_takes_the_static_attention_dp_estimate_but_its_own_tokens_at_the_experts() {
    // one client, one rank working: its decode steps are padded (the idle rank runs a dummy batch
    // of as many tokens, under CUDA graphs), so TPOT is the static estimate's at batch 1 a rank;
    // its prompt runs unpadded, so the experts serve its own tokens, not 2 ranks' worth: TTFT is
    // the estimate's with its experts' time at 2 x prompt tokens replaced by theirs at prompt
    // tokens (the static prefill of prompt / 2 tokens a rank)
    for (prompt, output) in [(1500u64, 120u64), (4000, 30)] {
        let e = static_estimate(1, prompt, output);
        let half = static_estimate(1, prompt / 2, output);
        let r = adp_sim(&closed(1, 4, fixed(prompt), fixed(output), 0), &opts());
        assert_eq!(r.counts.completed, 4);
        let ttft = e.ttft_s - prefill_experts(&e) + prefill_experts(&half);
        assert!(ttft < e.ttft_s);
        assert!(close(r.ttft.mean, ttft, 1e-9), "{} vs {ttft}", r.ttft.mean);
        let tpot = e.tpot_s.unwrap();
        assert!(close(r.tpot.mean, tpot, 1e-9), "{} vs {tpot}", r.tpot.mean);
        assert_eq!(r.max_running, 1);
    }
}

#[test]
fn saturated_ranks_serve_the_static_attention_dp_throughput() {
    // 2 x 32 clients of short prompts and long outputs: each rank settles at a decode batch of
    // 32, and the instance's output rate is the static estimate's at batch 32 a rank, 2 ranks
    let (c, prompt, output) = (32u64, 16u64, 2000u64);
    let r = adp_sim(&closed(2 * c, 8 * c, fixed(prompt), fixed(output), 0), &opts());
    let e = static_estimate(c, prompt, output);
    let got = r.output_tokens as f64 / r.duration_s;
    assert!(close(got, e.throughput_tok_s, 0.01), "{got} vs {}", e.throughput_tok_s);
    assert_eq!(r.max_running, 2 * c);
}

#[test]
fn ranks_wait_for_the_slowest_and_count_as_one_instance() {
    // round robin: X (100 tokens, decoding on) takes rank 0 and starts a step alone; L (6000
    // tokens) and S (200) wait, on ranks 1 and 0. The next step holds L's prefill on rank 1 and
    // S's with X's decode on rank 0: S's first token waits for L's (every layer's all-to-all
    // waits for the slowest rank), and that step takes what L's prefill takes alone but for the
    // experts, which serve 6201 tokens (both ranks') where L alone gave them 6000
    let row = |prompt: u64, output: u64| TraceRow {
        arrival_s: 0.0,
        prompt_tokens: prompt,
        output_tokens: output,
        max_tokens: None,
        prefix_id: None,
        prefix_tokens: 0,
    };
    let r = adp_sim(&trace(vec![row(100, 50), row(6000, 1), row(200, 1)]), &opts());
    let first = |prompt: u64| r.requests.iter().find(|q| q.prompt == prompt).unwrap().first_token_s;
    assert_eq!(first(6000), first(200));
    let long = adp_sim(&trace(vec![row(6000, 1)]), &opts());
    let step = first(6000) - first(100);
    // the static prefill of n tokens a rank gives the experts 2 n tokens
    let experts = |n: u64| prefill_experts(&static_estimate(1, n, 2));
    let want = long.ttft.mean - experts(3000) + experts(3101);
    assert!(close(step, want, 1e-9), "{step} vs {want}");
    // two instances of two ranks each: four clients, one a rank; the records name the
    // instance, and the energy counts 2 instances of 4 devices
    let c = Cluster {
        pools: vec![Pool {
            instances: 2,
            tp: 2,
            ep: 4,
            attention_dp: 2,
            pp: 1,
            scheduler: vllm(),
        }],
        router: Router::RoundRobin,
        kv_link: None,
        request_overhead_s: 0.0,
    };
    let mut dev = h100();
    dev.idle_w = Some(70.0);
    let p = Plan {
        power_rho: Some(0.6),
        tp: 2,
        ep: 4,
        ..plan()
    };
    let w = closed(4, 40, fixed(500), fixed(30), 0);
    let r = simulate_cluster(&mixtral_8x7b(), &dev, &p, &eff(), proto(), &c, &w, &opts(), None).unwrap();
    let per: Vec<usize> = (0..2)
        .map(|i| r.requests.iter().filter(|q| q.instance == i).count())
        .collect();
    assert_eq!(per, vec![20, 20]);
    let pool = &r.energy.as_ref().unwrap().pools[0];
    assert_eq!((pool.instances, pool.devices), (2, 4));
    // the plan's own attention_dp is refused where the pools give theirs
    let bad = Plan { attention_dp: 2, ..p };
    let err = simulate_cluster(&mixtral_8x7b(), &dev, &bad, &eff(), proto(), &c, &w, &opts(), None).unwrap_err();
    assert!(err.to_string().contains("attention_dp"), "{err}");
}
