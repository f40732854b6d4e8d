use super::workload::{Arrivals, Lengths, TraceRow, Workload};
use super::*;
use crate::device::tests::h100;
use crate::engine::estimate;
use crate::engine::tests::proto;
use crate::model::tests::llama31_8b;

fn plan() -> Plan {
    Plan::new(1, 1, 1, 0.9)
}

fn vllm() -> Scheduler {
    Scheduler {
        max_num_batched_tokens: 8192,
        max_num_seqs: 1024,
        block_size: 16,
        chunked_prefill: true,
        mixed: true,
        reserve_full: false,
        max_model_len: None,
        memory_fraction: 0.9,
        fraction_of_free: false,
        kv_blocks: None,
        prefix_caching: true,
    }
}

fn opts() -> Options {
    Options {
        slo_ttft_s: None,
        slo_tpot_s: None,
        horizon_s: None,
        keep_requests: true,
        sample_s: None,
    }
}

fn fixed(v: u64) -> Lengths {
    Lengths::Fixed { value: v }
}

fn closed(concurrency: u64, requests: u64, prompt: Lengths, output: Lengths, seed: u64) -> Workload {
    Workload {
        arrivals: Arrivals::Closed {
            concurrency,
            ramp_s: 0.0,
        },
        requests: Some(requests),
        prompt,
        output,
        declare_output: true,
        seed,
        prefixes: None,
    }
}

fn poisson(rate: f64, requests: u64, prompt: Lengths, output: Lengths, seed: u64) -> Workload {
    Workload {
        arrivals: Arrivals::Poisson { rate },
        ..closed(1, requests, prompt, output, seed)
    }
}

fn eff() -> Efficiency {
    Efficiency {
        t_launch_s: 4e-6,
        t_step_s: 1e-3,
        eta_mem: 0.8,
        eta_compute: 0.6,
        ..Efficiency::uncalibrated()
    }
}

fn sim(s: &Scheduler, w: &Workload, o: &Options) -> SimResult {
    simulate(&llama31_8b(), &h100(), &plan(), &eff(), proto(), s, w, o).unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn a_lone_request_takes_the_static_estimate() {
    // one client: each request runs alone, so its TTFT and TPOT are the engine's for batch 1
    // with the scheduler's token budget as the prefill chunk
    for (prompt, output, budget) in [(1000u64, 200u64, 8192u64), (5000, 64, 2048), (300, 2, 512)] {
        let s = Scheduler {
            max_num_batched_tokens: budget,
            ..vllm()
        };
        let r = sim(&s, &closed(1, 3, fixed(prompt), fixed(output), 0), &opts());
        let p = Plan {
            prompt,
            output,
            chunk: Some(budget),
            ..plan()
        };
        let e = estimate(&llama31_8b(), &h100(), &p, &eff(), proto(), false).unwrap();
        assert_eq!(r.counts.completed, 3);
        assert!(close(r.ttft.mean, e.ttft_s, 1e-9), "{} vs {}", r.ttft.mean, e.ttft_s);
        assert!(
            close(r.tpot.mean, e.tpot_s.unwrap(), 1e-9),
            "{} vs {:?}",
            r.tpot.mean,
            e.tpot_s
        );
        assert!(close(r.e2e.mean, e.e2e_s, 1e-9));
        assert_eq!(r.output_tokens, 3 * output);
    }
}

#[test]
fn a_lone_request_draws_the_static_estimates_energy_and_idle_time_draws_idle_power() {
    // one client, requests back to back: the fleet's energy is the static estimate's per
    // request round (each step's busy fraction is its phase's: chunks compute-bound, decodes
    // memory-bound), test values for idle power and rho
    let mut dev = h100();
    dev.idle_w = Some(70.0);
    let base = Plan {
        power_rho: Some(0.6),
        ..plan()
    };
    for (prompt, output, budget) in [(1000u64, 200u64, 8192u64), (5000, 64, 2048)] {
        let s = Scheduler {
            max_num_batched_tokens: budget,
            ..vllm()
        };
        let w = closed(1, 3, fixed(prompt), fixed(output), 0);
        let r = simulate(&llama31_8b(), &dev, &base, &eff(), proto(), &s, &w, &opts()).unwrap();
        let p = Plan {
            prompt,
            output,
            chunk: Some(budget),
            ..base.clone()
        };
        let e = estimate(&llama31_8b(), &dev, &p, &eff(), proto(), false).unwrap();
        let (sim_e, static_e) = (r.energy.clone().unwrap(), e.power.unwrap());
        assert!(
            close(sim_e.energy_j, 3.0 * static_e.energy_j, 1e-9),
            "{} vs 3 x {}",
            sim_e.energy_j,
            static_e.energy_j
        );
        assert!(close(sim_e.pools[0].busy_s, r.duration_s, 1e-12));
    }
    // requests far apart: between them the device idles at idle power
    let w = Workload {
        arrivals: Arrivals::Trace {
            rows: [0.0, 100.0]
                .iter()
                .map(|&t| TraceRow {
                    arrival_s: t,
                    prompt_tokens: 500,
                    output_tokens: 50,
                    max_tokens: None,
                    prefix_id: None,
                    prefix_tokens: 0,
                })
                .collect(),
        },
        ..closed(1, 2, fixed(500), fixed(50), 0)
    };
    let r = simulate(&llama31_8b(), &dev, &base, &eff(), proto(), &vllm(), &w, &opts()).unwrap();
    let en = r.energy.unwrap();
    let pool = en.pools[0];
    let idle_s = r.duration_s - pool.busy_s;
    assert!(idle_s > 99.0 && idle_s < 100.0, "{idle_s}");
    let dynamic = (en.tdp_w - en.idle_w) * pool.utilisation * pool.busy_s;
    assert!(close(en.energy_j, en.idle_w * r.duration_s + dynamic, 1e-12));
    let most = en.idle_w + (en.tdp_w - en.idle_w) * pool.busy_s / r.duration_s;
    assert!(en.mean_w > en.idle_w && en.mean_w < most, "{} W", en.mean_w);
    // a device without a sourced idle power reports why there is no energy
    let r = simulate(&llama31_8b(), &h100(), &base, &eff(), proto(), &vllm(), &w, &opts()).unwrap();
    assert!(r.energy.unwrap_err().contains("idle_w"));
}

#[test]
fn the_front_end_delays_each_request_by_its_overhead_and_conservation_holds() {
    // one client: each request's TTFT and E2E grow by exactly the overhead, its TPOT not at all
    let w = closed(1, 3, fixed(1000), fixed(100), 0);
    let with = |front: f64| {
        let c = Cluster {
            pools: vec![pool(1, 1, &vllm())],
            router: Router::RoundRobin,
            kv_link: None,
            request_overhead_s: front,
        };
        cluster(&c, &w, &opts())
    };
    let (a, b) = (with(0.0), with(0.05));
    assert!(
        close(b.ttft.mean, a.ttft.mean + 0.05, 1e-9),
        "{} vs {}",
        b.ttft.mean,
        a.ttft.mean
    );
    assert!(close(b.e2e.mean, a.e2e.mean + 0.05, 1e-9));
    assert!(close(b.tpot.mean, a.tpot.mean, 1e-12));
    // at a horizon inside a request's front-end wait it is counted as waiting
    let o = Options {
        horizon_s: Some(0.01),
        ..opts()
    };
    let c = Cluster {
        pools: vec![pool(1, 1, &vllm())],
        router: Router::RoundRobin,
        kv_link: None,
        request_overhead_s: 0.05,
    };
    let r = cluster(&c, &closed(2, 5, fixed(100), fixed(10), 1), &o);
    assert!(
        r.counts.conserved() && r.counts.waiting == 2 && r.counts.injected == 2,
        "{:?}",
        r.counts
    );
    // a negative or non-finite overhead is refused by name
    let bad = Cluster {
        request_overhead_s: -1.0,
        ..c
    };
    let e = simulate_cluster(
        &llama31_8b(),
        &h100(),
        &plan(),
        &eff(),
        proto(),
        &bad,
        &w,
        &opts(),
        None,
    );
    assert!(e.unwrap_err().to_string().contains("request_overhead"));
}

#[test]
fn saturation_throughput_is_the_static_throughput_at_the_settled_batch() {
    // 64 clients, short prompts and long outputs: the server settles at a decode batch of 64;
    // its output rate is the static estimate's at batch 64 (within the share of prefill steps)
    let (c, prompt, output) = (64u64, 16u64, 2000u64);
    let r = sim(&vllm(), &closed(c, 4 * c, fixed(prompt), fixed(output), 0), &opts());
    let p = Plan {
        batch: c,
        prompt,
        output,
        chunk: Some(8192),
        ..plan()
    };
    let e = estimate(&llama31_8b(), &h100(), &p, &eff(), proto(), false).unwrap();
    let got = r.output_tokens as f64 / r.duration_s;
    assert!(close(got, e.throughput_tok_s, 0.01), "{got} vs {}", e.throughput_tok_s);
    assert_eq!(r.max_running, c);
}

#[test]
fn conservation_holds_at_every_horizon() {
    let w = Workload {
        arrivals: Arrivals::Poisson { rate: 40.0 },
        requests: Some(400),
        prompt: Lengths::Lognormal {
            mean: 2000.0,
            sigma: 1.0,
            lo: 1,
            hi: 200_000,
        },
        output: Lengths::Lognormal {
            mean: 300.0,
            sigma: 1.0,
            lo: 1,
            hi: 20_000,
        },
        declare_output: false,
        seed: 11,
        prefixes: None,
    };
    // a small cache forces preemptions; max_model_len forces every rejection and the length cap
    let s = Scheduler {
        max_model_len: Some(8192),
        kv_blocks: Some(2048),
        ..vllm()
    };
    let mut seen_preemption = false;
    for (i, h) in [0.5, 1.7, 3.3, 6.1, 12.0, 1e9].iter().enumerate() {
        let o = Options {
            horizon_s: Some(*h),
            ..opts()
        };
        let w = Workload {
            declare_output: i % 2 == 0,
            ..w.clone()
        };
        let r = sim(&s, &w, &o);
        assert!(r.counts.conserved(), "horizon {h}: {:?}", r.counts);
        seen_preemption |= r.preemptions > 0;
        if *h > 1e8 {
            assert_eq!(r.counts.injected, 400);
            assert_eq!(r.counts.waiting + r.counts.running, 0);
            assert!(r.counts.rejected_prompt_too_long > 0, "{:?}", r.counts);
            if w.declare_output {
                assert!(r.counts.rejected_budget_too_long > 0, "{:?}", r.counts);
            } else {
                assert!(r.counts.length_capped > 0, "{:?}", r.counts);
            }
        }
    }
    assert!(seen_preemption);
}

#[test]
fn a_seed_reproduces_a_run_bit_for_bit() {
    let w = Workload {
        arrivals: Arrivals::Gamma { rate: 20.0, cv: 2.0 },
        requests: Some(300),
        prompt: Lengths::Uniform { lo: 10, hi: 3000 },
        output: Lengths::Normal {
            mean: 200.0,
            std: 100.0,
            lo: 1,
            hi: 1000,
        },
        declare_output: true,
        seed: 5,
        prefixes: None,
    };
    let a = sim(&vllm(), &w, &opts());
    let b = sim(&vllm(), &w, &opts());
    assert_eq!(a.requests, b.requests);
    assert_eq!(a.ttft, b.ttft);
    assert_eq!(a.duration_s.to_bits(), b.duration_s.to_bits());
    let c = sim(&vllm(), &Workload { seed: 6, ..w }, &opts());
    assert_ne!(a.requests, c.requests);
}

#[test]
fn max_model_len_rules() {
    // spec 70: prompt >= max_model_len rejected; prompt + declared budget > max_model_len
    // rejected; a request without a budget stops at max_model_len, length-capped
    let rows = vec![
        TraceRow {
            arrival_s: 0.0,
            prompt_tokens: 1000,
            output_tokens: 5,
            max_tokens: None,
            prefix_id: None,
            prefix_tokens: 0,
        },
        TraceRow {
            arrival_s: 0.1,
            prompt_tokens: 999,
            output_tokens: 5,
            max_tokens: Some(2),
            prefix_id: None,
            prefix_tokens: 0,
        },
        TraceRow {
            arrival_s: 0.2,
            prompt_tokens: 990,
            output_tokens: 50,
            max_tokens: None,
            prefix_id: None,
            prefix_tokens: 0,
        },
        TraceRow {
            arrival_s: 0.3,
            prompt_tokens: 990,
            output_tokens: 50,
            max_tokens: Some(10),
            prefix_id: None,
            prefix_tokens: 0,
        },
        TraceRow {
            arrival_s: 0.4,
            prompt_tokens: 998,
            output_tokens: 50,
            max_tokens: Some(2),
            prefix_id: None,
            prefix_tokens: 0,
        },
    ];
    let w = trace(rows);
    let s = Scheduler {
        max_model_len: Some(1000),
        ..vllm()
    };
    let r = sim(&s, &w, &opts());
    let status: Vec<(u64, Status, u64)> = r.requests.iter().map(|q| (q.id, q.status, q.output)).collect();
    let mut status = status;
    status.sort_by_key(|x| x.0);
    assert_eq!(
        status,
        vec![
            (0, Status::RejectedPromptTooLong, 0),
            (1, Status::RejectedBudgetTooLong, 0),
            (2, Status::LengthCapped, 10),
            (3, Status::Completed, 10),
            (4, Status::Completed, 2),
        ]
    );
    // a cache smaller than one max_model_len sequence is refused at start
    let tiny = Scheduler {
        kv_blocks: Some(10),
        ..s
    };
    let e = simulate(&llama31_8b(), &h100(), &plan(), &eff(), proto(), &tiny, &w, &opts()).unwrap_err();
    assert!(e.to_string().contains("max_model_len"), "{e}");
}

#[test]
fn prefill_first_scheduling_stalls_decodes_and_mixed_does_not() {
    // two clients with long prompts: with mixed steps a running request's decodes ride along
    // the other's prefill chunks; prefill-first runs the prefill alone, so ITL peaks higher
    let w = closed(2, 20, fixed(6000), fixed(100), 1);
    let s = Scheduler {
        max_num_batched_tokens: 2048,
        ..vllm()
    };
    let mixed = sim(&s, &w, &opts());
    let split = sim(
        &Scheduler {
            mixed: false,
            ..s.clone()
        },
        &w,
        &opts(),
    );
    assert!(split.itl.max > mixed.itl.max, "{} vs {}", split.itl.max, mixed.itl.max);
    assert_eq!(mixed.counts.completed, 20);
    assert_eq!(split.counts.completed, 20);
}

#[test]
fn reserving_the_whole_budget_never_preempts() {
    let w = closed(200, 600, fixed(1500), fixed(500), 2);
    let s = Scheduler {
        kv_blocks: Some(20_000),
        ..vllm()
    };
    let plain = sim(&s, &w, &opts());
    let reserved = sim(
        &Scheduler {
            reserve_full: true,
            ..s
        },
        &w,
        &opts(),
    );
    assert!(plain.preemptions > 0);
    assert_eq!(reserved.preemptions, 0);
    // 20,000 blocks of 16 hold 160 whole requests of 2000 tokens at once
    assert_eq!(reserved.max_running, 160);
}

#[test]
fn kv_blocks_follow_the_memory_left() {
    // Llama-3.1-8B bf16 on an H100: KV is 32 layers x 2 x 8 heads x 128 x 2 B = 128 KiB a token;
    // vLLM keeps 0.9 x 80 GiB for weights (16.06 GB), workspace and cache
    let r = sim(&vllm(), &closed(1, 1, fixed(10), fixed(2), 0), &opts());
    let per_block = 131072.0 * 16.0;
    let weights = crate::model::params::count(&llama31_8b()).total as f64 * 2.0;
    let gib = 1073741824.0;
    let upper = ((0.9 * 80.0 * gib - weights) / per_block).floor() as u64;
    assert!(
        r.kv_blocks[0] < upper && r.kv_blocks[0] as f64 > 0.97 * upper as f64,
        "{:?} vs {upper}",
        r.kv_blocks
    );
    // a fraction of what weights and workspace leave (TensorRT-LLM) holds 0.9 of the free memory
    let trt = Scheduler {
        fraction_of_free: true,
        ..vllm()
    };
    let t = sim(&trt, &closed(1, 1, fixed(10), fixed(2), 0), &opts());
    assert!(t.kv_blocks[0] > r.kv_blocks[0]);
    assert!(t.kv_blocks[0] as f64 <= 0.9 * (80.0 * gib - weights) / per_block);
}

#[test]
fn without_chunked_prefill_a_prompt_over_the_budget_is_rejected() {
    let s = Scheduler {
        chunked_prefill: false,
        max_num_batched_tokens: 4096,
        ..vllm()
    };
    let rows = [4096u64, 4097]
        .iter()
        .map(|&p| TraceRow {
            arrival_s: 0.0,
            prompt_tokens: p,
            output_tokens: 3,
            max_tokens: None,
            prefix_id: None,
            prefix_tokens: 0,
        })
        .collect();
    let w = trace(rows);
    let r = sim(&s, &w, &opts());
    assert_eq!(r.counts.completed, 1);
    assert_eq!(r.counts.rejected_prompt_over_budget, 1);
}

fn pool(instances: u64, tp: u64, s: &Scheduler) -> Pool {
    Pool {
        instances,
        tp,
        ep: 1,
        attention_dp: 1,
        pp: 1,
        scheduler: s.clone(),
    }
}

fn cluster(c: &Cluster, w: &Workload, o: &Options) -> SimResult {
    simulate_cluster(&llama31_8b(), &h100(), &plan(), &eff(), proto(), c, w, o, None).unwrap()
}

#[test]
fn round_robin_replicas_serve_their_share_as_one_instance_would() {
    // 4 instances and 4 clients of equal requests: round robin gives each instance one client,
    // so every request runs as it would alone on one instance, and the output rate is 4 times
    let one = sim(&vllm(), &closed(1, 20, fixed(700), fixed(90), 0), &opts());
    let c = Cluster {
        pools: vec![pool(4, 1, &vllm())],
        router: Router::RoundRobin,
        kv_link: None,
        request_overhead_s: 0.0,
    };
    let four = cluster(&c, &closed(4, 80, fixed(700), fixed(90), 0), &opts());
    assert!(
        close(four.ttft.mean, one.ttft.mean, 1e-9),
        "{} vs {}",
        four.ttft.mean,
        one.ttft.mean
    );
    assert!(close(four.tpot.mean, one.tpot.mean, 1e-9));
    let rate = |r: &SimResult| r.output_tokens as f64 / r.duration_s;
    assert!(close(rate(&four), 4.0 * rate(&one), 1e-9));
    let per: Vec<usize> = (0..4)
        .map(|i| four.requests.iter().filter(|q| q.instance == i).count())
        .collect();
    assert_eq!(per, vec![20; 4]);
}

#[test]
fn load_aware_routing_cuts_the_ttft_tail() {
    let w = poisson(
        12.0,
        1500,
        Lengths::Lognormal {
            mean: 1500.0,
            sigma: 1.2,
            lo: 1,
            hi: 60_000,
        },
        Lengths::Lognormal {
            mean: 400.0,
            sigma: 1.2,
            lo: 1,
            hi: 8_000,
        },
        9,
    );
    let run = |router| {
        let c = Cluster {
            pools: vec![pool(3, 1, &vllm())],
            router,
            kv_link: None,
            request_overhead_s: 0.0,
        };
        cluster(&c, &w, &opts())
    };
    let (rr, lo, kv) = (
        run(Router::RoundRobin),
        run(Router::LeastOutstanding),
        run(Router::LeastKv),
    );
    for r in [&rr, &lo, &kv] {
        assert!(r.counts.conserved() && r.counts.completed == 1500);
    }
    // a request sent to a busy instance queues behind long prompts: load-aware routing cuts the tail
    assert!(lo.ttft.p99 < rr.ttft.p99, "{} vs {}", lo.ttft.p99, rr.ttft.p99);
    assert!(kv.ttft.p99 < rr.ttft.p99, "{} vs {}", kv.ttft.p99, rr.ttft.p99);
}

fn disagg(prefill: u64, decode: u64, decode_blocks: Option<u64>) -> Cluster {
    Cluster {
        pools: vec![
            pool(
                prefill,
                1,
                &Scheduler {
                    max_model_len: Some(8192),
                    ..vllm()
                },
            ),
            pool(
                decode,
                1,
                &Scheduler {
                    kv_blocks: decode_blocks,
                    max_model_len: Some(8192),
                    ..vllm()
                },
            ),
        ],
        router: Router::LeastOutstanding,
        kv_link: Some(KvLink {
            bw_gbs: 50.0,
            latency_us: 20.0,
            handoff_us: 150_000.0,
        }),
        request_overhead_s: 0.0,
    }
}

#[test]
fn a_lone_disaggregated_request_is_prefill_then_transfer_then_decode() {
    // one client: the first token reaches the client from the decode instance, after the prefill
    // instance's prefill, the KV's transfer (prompt x 128 KiB over 50 GB/s + 20 us) and the
    // hand-off (150 ms); the others are the decode instance's steps, the estimate's TPOT
    let (prompt, output) = (3000u64, 50u64);
    let r = cluster(
        &disagg(1, 1, None),
        &closed(1, 2, fixed(prompt), fixed(output), 0),
        &opts(),
    );
    let p = Plan {
        prompt,
        output,
        chunk: Some(8192),
        ..plan()
    };
    let e = estimate(&llama31_8b(), &h100(), &p, &eff(), proto(), false).unwrap();
    let transfer = prompt as f64 * 131072.0 / 50e9 + 20e-6 + 0.15;
    assert_eq!(r.transfers, 2);
    assert!(close(r.transfer_s, 2.0 * transfer, 1e-12));
    assert!(close(r.ttft.mean, e.ttft_s + transfer, 1e-9));
    assert!(close(r.tpot.mean, e.tpot_s.unwrap(), 1e-9));
    assert!(
        close(r.e2e.mean, e.e2e_s + transfer, 1e-9),
        "{} vs {}",
        r.e2e.mean,
        e.e2e_s + transfer
    );
}

#[test]
fn disaggregated_conservation_and_refused_transfers() {
    let w = poisson(
        25.0,
        300,
        Lengths::Uniform { lo: 500, hi: 6000 },
        Lengths::Uniform { lo: 50, hi: 600 },
        4,
    );
    // a decode pool of 700 blocks (11,200 tokens) cannot take every prompt sent its way
    let c = disagg(2, 1, Some(700));
    let mut refused = 0;
    for h in [0.3, 2.0, 5.5, 1e9] {
        let r = cluster(
            &c,
            &w,
            &Options {
                horizon_s: Some(h),
                ..opts()
            },
        );
        assert!(r.counts.conserved(), "horizon {h}: {:?}", r.counts);
        refused = r.counts.rejected_decode_kv;
    }
    assert!(refused > 0);
    let roomy = cluster(&disagg(2, 2, None), &w, &opts());
    assert_eq!(roomy.counts.rejected_decode_kv, 0);
    assert_eq!(roomy.counts.completed, 300);
    assert_eq!(roomy.transfers, 300);
}

#[test]
fn a_ramp_starts_the_clients_evenly() {
    // 4 clients over 2 s: the first requests arrive at 0, 0.5, 1 and 1.5 s
    let w = Workload {
        arrivals: Arrivals::Closed {
            concurrency: 4,
            ramp_s: 2.0,
        },
        ..closed(4, 4, fixed(100), fixed(5), 0)
    };
    let r = sim(&vllm(), &w, &opts());
    let mut starts: Vec<f64> = r.requests.iter().map(|q| q.arrival_s).collect();
    starts.sort_by(f64::total_cmp);
    assert_eq!(starts, vec![0.0, 0.5, 1.0, 1.5]);
}

fn shared(arrival_s: f64, prompt: u64, prefix: Option<(u64, u64)>) -> TraceRow {
    TraceRow {
        arrival_s,
        prompt_tokens: prompt,
        output_tokens: 20,
        max_tokens: None,
        prefix_id: prefix.map(|p| p.0),
        prefix_tokens: prefix.map_or(0, |p| p.1),
    }
}

fn trace(rows: Vec<TraceRow>) -> Workload {
    Workload {
        arrivals: Arrivals::Trace { rows },
        requests: None,
        prompt: fixed(1),
        output: fixed(1),
        declare_output: false,
        seed: 0,
        prefixes: None,
    }
}

#[test]
fn a_cached_prefix_is_read_not_computed() {
    // three requests far apart sharing a 4,000-token prefix of a 5,000-token prompt: the first
    // computes it, the next two read its 250 cached blocks and prefill 1,000 tokens on it (the
    // static estimate with prefix 4000); without caching every one computes the whole prompt
    let rows = (0..3).map(|k| shared(10.0 * k as f64, 5000, Some((7, 4000)))).collect();
    let on = sim(&vllm(), &trace(rows), &opts());
    assert_eq!(on.cached_tokens, 8000);
    let ttft = |p: &Plan| {
        estimate(&llama31_8b(), &h100(), p, &eff(), proto(), false)
            .unwrap()
            .ttft_s
    };
    let whole = ttft(&Plan {
        prompt: 5000,
        output: 20,
        chunk: Some(8192),
        ..plan()
    });
    let rest = ttft(&Plan {
        prompt: 1000,
        prefix: 4000,
        output: 20,
        chunk: Some(8192),
        ..plan()
    });
    let mut t: Vec<f64> = on.requests.iter().map(|q| q.first_token_s - q.arrival_s).collect();
    t.sort_by(f64::total_cmp);
    assert!(
        close(t[0], rest, 1e-9) && close(t[1], rest, 1e-9) && close(t[2], whole, 1e-9),
        "{t:?}"
    );
    let rows = (0..3).map(|k| shared(10.0 * k as f64, 5000, Some((7, 4000)))).collect();
    let off = sim(
        &Scheduler {
            prefix_caching: false,
            ..vllm()
        },
        &trace(rows),
        &opts(),
    );
    assert_eq!(off.cached_tokens, 0);
    assert!(close(off.ttft.mean, whole, 1e-9));
}

#[test]
fn unread_prefixes_are_evicted_when_blocks_run_out() {
    // 60 prefixes of 2,000 tokens in a cache of 1,000 blocks (16,000 tokens): old prefixes make
    // room for new requests instead of preempting them; every request is accounted for
    let w = Workload {
        prefixes: Some(super::workload::Prefixes {
            count: 60,
            tokens: 2000,
        }),
        ..poisson(
            8.0,
            400,
            Lengths::Uniform { lo: 2100, hi: 3000 },
            Lengths::Uniform { lo: 10, hi: 200 },
            3,
        )
    };
    let s = Scheduler {
        kv_blocks: Some(1000),
        max_model_len: Some(8192),
        ..vllm()
    };
    for h in [1.0, 7.5, 1e9] {
        let r = sim(
            &s,
            &w,
            &Options {
                horizon_s: Some(h),
                ..opts()
            },
        );
        assert!(r.counts.conserved(), "{:?}", r.counts);
    }
    let r = sim(&s, &w, &opts());
    assert_eq!(r.counts.completed, 400);
    assert!(r.cached_tokens > 0);
}

#[test]
fn prefix_affinity_routing_reads_more_from_the_cache() {
    let w = Workload {
        prefixes: Some(super::workload::Prefixes { count: 8, tokens: 3000 }),
        ..poisson(
            6.0,
            300,
            Lengths::Uniform { lo: 3200, hi: 4000 },
            Lengths::Uniform { lo: 10, hi: 100 },
            8,
        )
    };
    let run = |router| {
        let c = Cluster {
            pools: vec![pool(4, 1, &vllm())],
            router,
            kv_link: None,
            request_overhead_s: 0.0,
        };
        cluster(&c, &w, &opts())
    };
    let (rr, pa) = (run(Router::RoundRobin), run(Router::PrefixAffinity));
    assert!(
        pa.cached_tokens > rr.cached_tokens,
        "{} vs {}",
        pa.cached_tokens,
        rr.cached_tokens
    );
    assert!(pa.ttft.mean < rr.ttft.mean);
}

#[test]
fn a_rejected_client_sends_its_next_request() {
    // a closed loop whose prompts are all too long: every request is sent and rejected, none lost
    let s = Scheduler {
        max_model_len: Some(512),
        ..vllm()
    };
    let r = sim(&s, &closed(4, 50, fixed(600), fixed(5), 0), &opts());
    assert_eq!(r.counts.injected, 50);
    assert_eq!(r.counts.rejected_prompt_too_long, 50);
    assert!(r.counts.conserved());
}

/// A queue that outgrows `MAX_WAITING` stops the run with an error naming the rate, in memory
/// bounded by it (issue 42: `--rate 1000 --requests 100000000` grew until the allocator failed).
#[test]
fn an_overloaded_run_stops_at_the_queue_bound() {
    let w = poisson(1e5, 1 << 22, fixed(512), fixed(64), 1);
    let r = simulate(&llama31_8b(), &h100(), &plan(), &eff(), proto(), &vllm(), &w, &opts());
    let Err(e) = r else {
        panic!("the queue passes the bound")
    };
    let e = e.to_string();
    assert!(
        e.starts_with("rate: the queue grew past 1048576 waiting requests"),
        "{e}"
    );
    // a run whose queue stays under the bound is unchanged
    let ok = poisson(10.0, 200, fixed(512), fixed(64), 1);
    assert_eq!(sim(&vllm(), &ok, &opts()).counts.completed, 200);
}

mod adp;
mod pp;
mod spec;
