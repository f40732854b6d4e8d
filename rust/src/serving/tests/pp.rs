//! Pipeline parallelism in the simulator: an instance of `pp` virtual engines, each with its own
//! scheduler and share of the KV blocks and one micro-batch in flight, sharing the stages.

use super::*;

fn pp_plan() -> Plan {
    Plan { pp: 2, ..plan() }
}

fn pp_sim(w: &Workload) -> SimResult {
    simulate(&llama31_8b(), &h100(), &pp_plan(), &eff(), proto(), &vllm(), w, &opts()).unwrap()
}

#[test]
fn a_lone_request_takes_the_static_pipeline_estimate() {
    // one client: its micro-batch runs every stage and the send between them, the static
    // estimate's latency with PP 2
    for (prompt, output) in [(1000u64, 100u64), (3000, 20)] {
        let r = pp_sim(&closed(1, 3, fixed(prompt), fixed(output), 0));
        let p = Plan {
            prompt,
            output,
            chunk: Some(8192),
            ..pp_plan()
        };
        let e = estimate(&llama31_8b(), &h100(), &p, &eff(), proto(), false).unwrap();
        assert_eq!(r.counts.completed, 3);
        assert!(close(r.ttft.mean, e.ttft_s, 1e-9), "{} vs {}", r.ttft.mean, e.ttft_s);
        let tpot = e.tpot_s.unwrap();
        assert!(close(r.tpot.mean, tpot, 1e-9), "{} vs {tpot}", r.tpot.mean);
    }
}

#[test]
fn virtual_engines_share_the_stages_and_split_the_blocks() {
    // two clients, one a virtual engine (round robin), decoding long outputs: each engine's
    // micro-batch enters the first stage when the other's has left it, so the two run a stage
    // apart and a token of each comes every max(step, 2 stages); Llama's 32 layers split 16 and
    // 16, so 2 stages = the step's compute (T - s) plus 2 sends s: T + s, slower than a lone
    // client's T, never the 2 T of one engine serving both in turn
    let lone = pp_sim(&closed(1, 1, fixed(16), fixed(2000), 0));
    let two = pp_sim(&closed(2, 2, fixed(16), fixed(2000), 0));
    let (t1, t2) = (lone.tpot.mean, two.tpot.mean);
    assert!(t2 > t1 * 1.0001 && t2 < t1 * 1.2, "{t2} vs {t1}");
    // the send of a decode step of one token: t2 - t1 within the share the prefill steps take
    let p = Plan {
        prompt: 16,
        output: 2000,
        ..pp_plan()
    };
    let e = estimate(&llama31_8b(), &h100(), &p, &eff(), proto(), true).unwrap();
    let sends: f64 = e
        .breakdown
        .iter()
        .filter(|r| r.phase == crate::engine::Phase::Decode && r.kind == crate::graph::OpKind::PpSend)
        .map(|r| r.cost.time_s)
        .sum::<f64>()
        / 1999.0;
    assert!(close(t2 - t1, sends, 0.02), "{} vs {sends}", t2 - t1);
    // each virtual engine holds half an instance's blocks; a stage's device holds half the layers'
    // weights and KV a token, so a virtual engine still holds more blocks than one whole device
    // (16 GB of Llama-3.1-8B's weights on it, 8 on a stage's)
    let one = sim(&vllm(), &closed(1, 1, fixed(16), fixed(16), 0), &opts());
    assert!(
        lone.kv_blocks[0] > one.kv_blocks[0],
        "{:?} vs {:?}",
        lone.kv_blocks,
        one.kv_blocks
    );
    assert!(lone.kv_blocks[0] < 2 * one.kv_blocks[0]);
}

#[test]
fn a_pipelined_prefill_pool_sends_each_stages_share_of_the_kv() {
    // 1P (PP 2) + 1D (PP 2): each stage's rank sends its 16 layers' KV, half of a whole prompt's
    // 128 KiB a token, over the link (50 GB/s + 20 us + the 150 ms hand-off)
    let mut c = super::disagg(1, 1, None);
    for p in &mut c.pools {
        p.pp = 2;
    }
    let r = cluster(&c, &closed(1, 2, fixed(3000), fixed(20), 0), &opts());
    let transfer = 3000.0 * 131072.0 / 2.0 / 50e9 + 20e-6 + 0.15;
    assert_eq!(r.transfers, 2);
    assert!(
        close(r.transfer_s, 2.0 * transfer, 1e-12),
        "{} vs {}",
        r.transfer_s,
        2.0 * transfer
    );
}
