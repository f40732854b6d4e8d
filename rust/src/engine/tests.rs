use super::*;
use crate::device::tests::h100;
use crate::graph::Segment;
use crate::model::tests::llama31_8b;
use proptest::prelude::*;

pub(crate) use crate::collectives::tests::proto;

fn plan(batch: u64, prompt: u64, output: u64) -> Plan {
    Plan::new(batch, prompt, output, 0.9)
}

fn run(p: &Plan) -> Estimate {
    estimate(&llama31_8b(), &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap()
}

fn row(e: &Estimate, phase: Phase, kind: OpKind) -> Cost {
    let mut c = Cost::default();
    for r in e.breakdown.iter().filter(|r| r.phase == phase && r.kind == kind) {
        c += r.cost;
    }
    c
}

#[test]
fn prefill_attention_flops_are_the_causal_triangle() {
    let m = llama31_8b();
    let a = m.layer_groups[0].attention.as_ref().unwrap();
    for s in [1u64, 2, 128, 4096, 32768] {
        let e = run(&plan(1, s, 1));
        let per_layer = row(&e, Phase::Prefill, OpKind::Attention).flops / 32.0;
        let want = 4.0 * (a.heads * a.head_dim) as f64 * (s * (s + 1) / 2) as f64;
        assert_eq!(per_layer, want, "S={s}");
    }
}

#[test]
fn decode_at_batch_one_moves_weights_plus_kv_plus_listed_activations() {
    let m = llama31_8b();
    let (d, v, f) = (4096.0, 128256.0, 14336.0);
    let (h, kv, hd, n_layers) = (32.0, 8.0, 128.0, 32.0);
    let prompt = 1000u64;
    let e = run(&plan(1, prompt, 2)); // exactly one decode step, at context prompt + 1
    let l = (prompt + 1) as f64;
    let b = 2.0; // bf16
    let p = params::count(&m);
    // Every weight is read once, except the embedding table: one row.
    let weights = (p.total as f64 - v * d + d) * b;
    let kv_ctx = n_layers * l * 2.0 * kv * hd * b;
    // Activation terms, as the graph lists them (reads + writes, bf16).
    let per_layer = 2.0 * 2.0 * d * b          // two norms: read + write
        + (d + (h + 2.0 * kv) * hd) * b         // qkv in/out
        + 2.0 * (h + kv) * hd * b               // rotary read + write
        + 2.0 * kv * hd * (b + b)               // new K,V into the cache
        + 2.0 * h * hd * b                      // attention Q in, O out
        + (h * hd + d) * b                      // o_proj in/out
        + (d + 2.0 * f) * b                     // gate_up in/out
        + 3.0 * f * b                           // silu(gate) * up: 2 reads, 1 write
        + (f + d) * b; // down in/out
    let model_level = d * b      // embedding row written
        + 2.0 * d * b            // final norm
        + (d + v) * b; // lm head in/out
    let want = weights + kv_ctx + n_layers * per_layer + model_level;
    assert!(
        (e.decode.bytes - want).abs() / want < 1e-12,
        "{} vs {want}",
        e.decode.bytes
    );
    // and it is memory-bound: TPOT = bytes / BW exactly at eta 1
    assert!((e.tpot_s.unwrap() - want / 3350e9).abs() / e.tpot_s.unwrap() < 1e-9);
}

#[test]
fn chunking_preserves_attention_work_and_rereads_weights() {
    let whole = run(&plan(1, 4096, 1));
    let mut p = plan(1, 4096, 1);
    p.chunk = Some(512);
    let chunked = run(&p);
    assert_eq!(chunked.prefill.steps, 8);
    let a = row(&whole, Phase::Prefill, OpKind::Attention).flops;
    let b = row(&chunked, Phase::Prefill, OpKind::Attention).flops;
    assert_eq!(a, b);
    let wq = row(&whole, Phase::Prefill, OpKind::QkvProj).bytes;
    let cq = row(&chunked, Phase::Prefill, OpKind::QkvProj).bytes;
    // Activation bytes scale with tokens either way; the weights are re-read by each of the 8 steps.
    let w = 32.0 * 4096.0 * (32.0 + 16.0) * 128.0 * 2.0;
    assert!((cq - wq - 7.0 * w).abs() / w < 1e-12, "{cq} {wq}");
    assert!(chunked.ttft_s >= whole.ttft_s);
}

#[test]
fn decode_sum_matches_step_by_step_evaluation() {
    // The closed form against pricing each decode step as its own one-token step.
    let m = llama31_8b();
    let dev = h100();
    let (prompt, output, batch) = (300u64, 40u64, 3u64);
    let p = plan(batch, prompt, output);
    let eff = Efficiency {
        eta_compute: 0.6,
        eta_mem: 0.7,
        eta_moe: None,
        overlap: Some(0.3),
        t_launch_s: 5e-6,
        ..Efficiency::uncalibrated()
    };
    let e = estimate(&m, &dev, &p, &eff, proto(), false).unwrap();
    let r = resolve(&m, &dev, &p, proto()).unwrap();
    let mut ops = Vec::new();
    let mut total = 0.0;
    for l in prompt + 1..prompt + output {
        let segs = [Segment {
            count: batch,
            new: 1,
            prefix: l - 1,
            sampled: 1,
        }];
        build_step(&r.ctx, &Geometry::Segments(&segs), &mut ops);
        total += ops
            .iter()
            .map(|o| price(o, 0.0, dev.memory_bw(), &eff).time_s)
            .sum::<f64>();
    }
    assert!(
        (e.decode.time_s - total).abs() / total < 1e-12,
        "{} vs {total}",
        e.decode.time_s
    );
}

#[test]
fn tensor_parallel_shards_weights_and_adds_allreduces() {
    let one = run(&plan(1, 1024, 64));
    let mut p = plan(1, 1024, 64);
    p.tp = 2;
    let two = run(&p);
    let ratio = two.memory.weights_bytes / one.memory.weights_bytes;
    assert!(ratio > 0.5 && ratio < 0.51, "{ratio}");
    assert!(row(&two, Phase::Decode, OpKind::AttnAllReduce).comm_s > 0.0);
    assert!(two.warnings.iter().any(|w| w.contains("latency")));
}

#[test]
fn plan_rules_are_enforced() {
    let m = llama31_8b();
    let dev = h100();
    let eff = Efficiency::uncalibrated();
    let check = |p: Plan, field: &str| match estimate(&m, &dev, &p, &eff, proto(), false) {
        Err(Error::Plan { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected a plan error on {field}, got {other:?}"),
    };
    check(plan(0, 10, 10), "batch");
    check(plan(1, 0, 10), "prompt");
    check(plan(1, 10, 0), "output");
    let mut p = plan(1, 10, 10);
    p.tp = 3;
    check(p, "tp");
    check(plan(1, 131000, 1000), "prompt+output");
}

#[test]
fn does_not_fit_is_reported_with_the_shortfall() {
    let e = run(&plan(512, 8192, 1024));
    assert!(!e.memory.fits);
    assert!((e.memory.shortfall_bytes - (e.memory.total_bytes - e.memory.budget_bytes)).abs() < 1.0);
    // KV: layers x 2 x kv heads x head_dim x bytes per token
    let per_token = 32.0 * 2.0 * 8.0 * 128.0 * 2.0;
    assert_eq!(e.memory.kv_bytes, 512.0 * (8192.0 + 1024.0) * per_token);
}

proptest! {
    #[test]
    fn schedule_covers_every_token_once(batch in 1u64..40, prompt in 1u64..300, chunk in 1u64..1000) {
        let steps = prefill_steps(batch, prompt, 0, Some(chunk));
        let mut tokens = 0;
        let mut samples = 0;
        for s in &steps {
            let n: u64 = s.iter().map(|x| x.count * x.new).sum();
            prop_assert!(n <= chunk && n > 0);
            tokens += n;
            samples += s.iter().map(|x| x.count * x.sampled).sum::<u64>();
        }
        prop_assert_eq!(tokens, batch * prompt);
        prop_assert_eq!(samples, batch);
    }

    #[test]
    fn mfu_and_mbu_never_exceed_one(batch in 1u64..256, prompt in 1u64..20000, output in 1u64..600,
                                    tp in prop::sample::select(vec![1u64, 2, 4, 8])) {
        let mut p = plan(batch, prompt, output);
        p.tp = tp;
        let e = estimate(&llama31_8b(), &h100(), &p, &Efficiency::uncalibrated(), proto(), false).unwrap();
        for ph in [e.prefill, e.decode] {
            prop_assert!(ph.mfu <= 1.0 + 1e-12 && ph.mbu <= 1.0 + 1e-12, "{:?}", ph);
        }
    }
}

fn pp_plan(batch: u64, pp: u64) -> Plan {
    let mut p = plan(batch, 1024, 64);
    p.pp = pp;
    p.topology.devices_per_node = Some(8);
    p
}

#[test]
fn pipeline_of_one_stage_is_the_single_device_estimate() {
    let base = run(&plan(4, 1024, 64));
    let mut p = plan(4, 1024, 64);
    p.pp = 1;
    p.dp = 1;
    assert_eq!(run(&p), base);
}

#[test]
fn pipeline_latency_is_the_full_pass_plus_the_sends() {
    let one = run(&pp_plan(4, 1));
    let two = run(&pp_plan(4, 2));
    // one send per step of the batch's hidden states, 4 x 1024 x 4096 x 2 bytes in prefill
    let msg = 4.0 * 1024.0 * 4096.0 * 2.0;
    let send = msg / (450e9 * 0.85);
    assert!(
        (two.ttft_s - (one.ttft_s + send)).abs() < 1e-15,
        "{} {}",
        two.ttft_s,
        one.ttft_s
    );
    let dmsg = 4.0 * 4096.0 * 2.0; // 32 KiB per decode step: LL protocol
    let dsend = dmsg / (450e9 * 0.40);
    assert!((two.tpot_s.unwrap() - (one.tpot_s.unwrap() + dsend)).abs() < 1e-15);
    assert!(two.ttft_s < 1.01 * one.ttft_s, "never inflated by (2 - 1/p)");
    // memory: half the layers, plus the larger of the embedding and the head
    assert!(two.memory.weights_bytes < 0.6 * one.memory.weights_bytes);
    assert_eq!(two.memory.kv_bytes * 2.0, one.memory.kv_bytes);
}

#[test]
fn pipeline_throughput_follows_gpipe() {
    let (b, p, m) = (8u64, 2u64, 2u64);
    let two = run(&pp_plan(b, p));
    assert_eq!(two.parallel.microbatches, m);
    // stage time for one micro-batch of b/m: half the layers' work plus one send
    let full = run(&pp_plan(b / m, 1)).e2e_s;
    let sends = run(&pp_plan(b / m, 2)).e2e_s - full;
    let stage = full * 16.0 / 32.0 + sends;
    let round = (m + p - 1) as f64 * stage;
    let want = (b * 64) as f64 / round;
    assert!(
        (two.throughput_tok_s - want).abs() / want < 1e-12,
        "{} vs {want}",
        two.throughput_tok_s
    );
    let mut dp = pp_plan(b, p);
    dp.dp = 3;
    let three = run(&dp);
    assert!((three.throughput_tok_s - 3.0 * want).abs() / want < 1e-12);
    assert_eq!(three.ttft_s, two.ttft_s);
    assert_eq!(three.parallel.devices, 6);
}

#[test]
fn the_front_end_adds_once_to_ttft_and_never_to_a_pipeline_stage() {
    let t = 2.5e-3;
    let front = Efficiency {
        t_request_s: t,
        ..Efficiency::uncalibrated()
    };
    let with = |p: &Plan| estimate(&llama31_8b(), &h100(), p, &front, proto(), true).unwrap();
    for b in [1u64, 8] {
        let (a, f) = (run(&plan(b, 1024, 64)), with(&plan(b, 1024, 64)));
        assert!((f.ttft_s - (a.ttft_s + t)).abs() < 1e-15 && (f.e2e_s - (a.e2e_s + t)).abs() < 1e-15);
        assert_eq!(f.tpot_s, a.tpot_s);
        assert_eq!(row(&f, Phase::Prefill, OpKind::RequestOverhead).time_s, t);
        assert_eq!(f.prefill.overhead_s, a.prefill.overhead_s + t);
    }
    // GPipe's stage time: the micro-batches' steps, without the front end
    let (a, f) = (run(&pp_plan(8, 2)), with(&pp_plan(8, 2)));
    assert!((f.parallel.stage_s - a.parallel.stage_s).abs() < 1e-15 && f.ttft_s > a.ttft_s);
}

#[test]
fn tp_across_nodes_uses_the_hierarchical_allreduce() {
    let mut p = plan(1, 1024, 2);
    p.tp = 16;
    p.topology.devices_per_node = Some(8);
    p.topology.scaleout_bw_gbs = Some(50.0);
    let hier = run(&p);
    assert_eq!(hier.parallel.nodes_per_replica, 2);
    p.topology.scaleout_bw_gbs = None;
    let flat = run(&p);
    assert!(flat
        .warnings
        .iter()
        .any(|w| w.contains("no scale-out topology is known")));
    let ar = |e: &Estimate| row(e, Phase::Prefill, OpKind::AttnAllReduce).comm_s;
    assert!(
        ar(&hier) > ar(&flat),
        "the 50 GB/s NICs are slower than the flat NVLink ring"
    );
}

#[test]
fn more_stages_than_layers_is_refused() {
    let mut p = plan(1, 10, 10);
    p.pp = 33;
    let e = estimate(&llama31_8b(), &h100(), &p, &Efficiency::uncalibrated(), proto(), false);
    assert!(matches!(e, Err(Error::Plan { ref field, .. }) if field == "pp"));
}

#[test]
fn prefill_on_a_cached_prefix_attends_to_it() {
    let mut p = plan(1, 512, 3);
    p.prefix = 4096;
    let e = run(&p);
    let per_layer = row(&e, Phase::Prefill, OpKind::Attention).flops / 32.0;
    assert_eq!(per_layer, 4.0 * 4096.0 * (512.0 * 4096.0 + 512.0 * 513.0 / 2.0));
    // decode continues from prefix + prompt: two steps at contexts 4609 and 4610
    let keys = row(&e, Phase::Decode, OpKind::Attention).flops / (32.0 * 4.0 * 4096.0);
    assert_eq!(keys, 4609.0 + 4610.0);
}

#[test]
fn identical_sequences_share_their_experts() {
    let m = crate::fixtures::mixtral_8x7b();
    let mut p = plan(32, 512, 2);
    let one = |p: &Plan| {
        let e = estimate(&m, &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap();
        row(&e, Phase::Decode, OpKind::ExpertUp).bytes
    };
    let independent = one(&p);
    p.identical_sequences = true;
    let identical = one(&p);
    let w = 4096.0 * 2.0 * 14336.0 * 2.0; // one expert's gate+up in bf16
    let act = 32.0 * 2.0 * (4096.0 + 2.0 * 14336.0) * 2.0;
    // 32 identical sequences route like one: top-2 of 8 experts per layer
    assert!((identical - 32.0 * (2.0 * w + act)).abs() / identical < 1e-12);
    let distinct = 8.0 * (1.0 - 0.75f64.powi(32));
    assert!((independent - 32.0 * (distinct * w + act)).abs() / independent < 1e-12);
}

#[test]
fn routing_skew_reads_between_k_and_the_uniform_count_of_experts() {
    use crate::graph::distinct_experts;
    for (e, k) in [(8u64, 2u64), (32, 4), (128, 8), (256, 8)] {
        let (ef, kf) = (e as f64, k as f64);
        for t in [1.0, 2.0, 7.0, 32.0, 512.0] {
            let uniform = ef * (1.0 - (1.0 - kf / ef).powf(t));
            assert_eq!(distinct_experts(e, k, t, 0.0), uniform);
            let mut last = uniform;
            for s in [0.25, 0.5, 1.0, 2.0, 4.0, 1e3] {
                let d = distinct_experts(e, k, t, s);
                // one token always needs exactly its k experts, whatever the popularity
                if t == 1.0 {
                    assert!((d - kf).abs() < 1e-9, "T=1, s={s}: {d}");
                }
                assert!(
                    d <= last + 1e-9 && d >= kf - 1e-9,
                    "E={e} k={k} T={t} s={s}: {d} vs {last}"
                );
                last = d;
            }
            // an extreme skew sends every token to the same k experts
            assert!((distinct_experts(e, k, t, 1e3) - kf).abs() < 1e-9);
        }
    }
    // two experts of four, s = 1: weights 1, 1/2, 1/3, 1/4 (sum 25/12), so c = 24/25 and no
    // expert is capped; two tokens touch sum 1 - (1 - c w_i)^2 experts
    let c = 24.0 / 25.0;
    let want: f64 = [1.0, 0.5, 1.0 / 3.0, 0.25]
        .iter()
        .map(|w: &f64| 1.0 - (1.0 - c * w).powi(2))
        .sum();
    assert!((distinct_experts(4, 2, 2.0, 1.0) - want).abs() < 1e-12);
}

#[test]
fn routing_skew_lowers_the_expert_bytes_of_a_batch_only() {
    let m = crate::fixtures::mixtral_8x7b();
    let bytes = |batch: u64, s: f64| {
        let mut p = plan(batch, 512, 2);
        p.routing_skew = s;
        let e = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
        row(&e, Phase::Decode, OpKind::ExpertUp).bytes
    };
    assert_eq!(bytes(1, 0.0), bytes(1, 1.5));
    assert!(bytes(32, 1.5) < bytes(32, 0.0));
    let mut p = plan(1, 512, 2);
    p.routing_skew = -1.0;
    let err = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap_err();
    assert!(err.to_string().contains("routing_skew"), "{err}");
}

#[test]
fn grouped_expert_kernels_take_eta_moe_and_overlap_moe_and_quantized_gemms_their_formats() {
    let m = crate::fixtures::mixtral_8x7b();
    let eff = Efficiency {
        eta_moe: Some(0.5),
        ..Efficiency::uncalibrated()
    };
    let memory = |batch: u64, eff: &Efficiency| {
        let e = estimate(&m, &h100(), &plan(batch, 512, 2), eff, proto(), true).unwrap();
        row(&e, Phase::Decode, OpKind::ExpertUp).memory_s
    };
    let base = Efficiency::uncalibrated();
    // one token per step: the selected experts are read by GEMVs at eta_mem
    assert_eq!(memory(1, &eff), memory(1, &base));
    // more: grouped GEMMs at eta_moe
    assert!((memory(4, &eff) / memory(4, &base) - 2.0).abs() < 1e-12);
    // grouped expert kernels blend compute and memory with overlap_moe, the others with overlap
    let eff = Efficiency {
        overlap: Some(0.0),
        overlap_moe: Some(1.0),
        ..Efficiency::uncalibrated()
    };
    let e = estimate(&m, &h100(), &plan(4, 512, 2), &eff, proto(), true).unwrap();
    let up = row(&e, Phase::Decode, OpKind::ExpertUp);
    assert!((up.time_s - up.launch_s - up.compute_s.max(up.memory_s)).abs() <= 1e-12 * up.time_s);
    let out = row(&e, Phase::Decode, OpKind::OutProj);
    assert!((out.time_s - out.launch_s - (out.compute_s + out.memory_s)).abs() <= 1e-12 * out.time_s);
    let bad = Efficiency {
        overlap_moe: Some(1.5),
        ..eff
    };
    let err = estimate(&m, &h100(), &plan(4, 512, 2), &bad, proto(), false).unwrap_err();
    assert!(err.to_string().contains("overlap_moe"), "{err}");
    // a 4-bit FFN's prefill GEMMs are priced at eta_compute_quant, the rest at eta_compute
    let mut p = plan(1, 4096, 1);
    p.weights.ffn_up = Some(crate::weights::WeightFormat {
        bits: 4.0,
        block_k: 0,
        block_n: 0,
        scale_bits: 0.0,
        compute: None,
        act_bits: None,
    });
    let eff = Efficiency {
        eta_compute_quant: Some(0.25),
        ..Efficiency::uncalibrated()
    };
    let llama = llama31_8b();
    let compute = |eff: &Efficiency, kind: OpKind| {
        let e = estimate(&llama, &h100(), &p, eff, proto(), true).unwrap();
        row(&e, Phase::Prefill, kind).compute_s
    };
    assert!((compute(&eff, OpKind::FfnUp) / compute(&base, OpKind::FfnUp) - 4.0).abs() < 1e-12);
    assert_eq!(compute(&eff, OpKind::FfnDown), compute(&base, OpKind::FfnDown));
    // a format's own efficiency, given for the roles stored in it, wins over eta_compute_quant;
    // roles without one keep eta_compute_quant, and 16-bit GEMMs eta_compute
    let mut p2 = p.clone();
    p2.weights.ffn_down = p.weights.ffn_up;
    let mut by_role = eff;
    by_role.eta_compute_quant_roles[Role::Up as usize] = Some(0.2);
    let compute2 = |eff: &Efficiency, kind: OpKind| {
        let e = estimate(&llama, &h100(), &p2, eff, proto(), true).unwrap();
        row(&e, Phase::Prefill, kind).compute_s
    };
    let ratio = |kind: OpKind| compute2(&by_role, kind) / compute2(&base, kind);
    assert!((ratio(OpKind::FfnUp) - 5.0).abs() < 1e-12);
    assert!((ratio(OpKind::FfnDown) - 4.0).abs() < 1e-12);
    assert_eq!(ratio(OpKind::OutProj), 1.0);
    let mut bad = by_role;
    bad.eta_compute_quant_roles[Role::Down as usize] = Some(1.5);
    let err = estimate(&llama, &h100(), &p2, &bad, proto(), false).unwrap_err();
    assert!(err.to_string().contains("ffn_down must be in (0, 1]"), "{err}");
}

#[test]
fn unfused_attention_computes_the_rectangle_and_moves_every_score() {
    // Llama-3.1-8B: 32 heads of 128, 32 layers.
    let (h, hd, layers) = (32.0, 128.0, 32.0);
    let b = 16.0;
    let attn = |p: &Plan, phase: Phase| {
        let c = row(&run(p), phase, OpKind::Attention);
        (c.flops / layers, c.bytes / layers)
    };
    for (s, prefix) in [(512u64, 0u64), (2048, 4096)] {
        let mut p = plan(2, s, 1);
        p.prefix = prefix;
        let (f_fused, b_fused) = attn(&p, Phase::Prefill);
        p.attention_score_bytes = b;
        let (f, bytes) = attn(&p, Phase::Prefill);
        let rect = 2.0 * s as f64 * (prefix + s) as f64;
        assert_eq!(f, 4.0 * h * hd * rect, "S={s}");
        assert!(f > f_fused);
        assert!((bytes - b_fused - h * rect * b).abs() / bytes < 1e-12, "S={s}");
    }
    // decode: one query per sequence, so the scores are the attended pairs; 3 steps at
    // contexts 101, 102, 103 (prompt 100 + the sampled token)
    let mut p = plan(1, 100, 4);
    let (_, fused) = attn(&p, Phase::Decode);
    p.attention_score_bytes = b;
    let (_, unfused) = attn(&p, Phase::Decode);
    let keys = 101.0 + 102.0 + 103.0;
    assert!((unfused - fused - h * keys * b).abs() / unfused < 1e-12);
}

#[test]
fn fitted_attention_kernels_price_prefill_and_decode_apart_with_their_items() {
    // Llama-3.1-8B (32 layers, 8 KV heads of 128, 32 query heads): the prefill kernel runs one
    // 4096-token sequence (1 x 8 items a layer), the decode kernel 4 sequences (4 x 8 items)
    let p = plan(4, 4096, 3);
    let bound = run(&p);
    let pre = crate::plan::AttnEff {
        eta_compute: 0.5,
        eta_mem: 0.7,
        t_floor_s: 1.3e-5,
        t_item_s: 4e-8,
    };
    let dec = crate::plan::AttnEff {
        eta_compute: 0.2,
        eta_mem: 0.75,
        t_floor_s: 1.1e-5,
        t_item_s: 2.5e-8,
    };
    let eff = Efficiency {
        attention_prefill: Some(pre),
        attention_decode: Some(dec),
        ..Efficiency::uncalibrated()
    };
    let e = estimate(&llama31_8b(), &h100(), &p, &eff, proto(), true).unwrap();
    let (b0, f0) = (
        row(&bound, Phase::Prefill, OpKind::Attention),
        row(&e, Phase::Prefill, OpKind::Attention),
    );
    // prefill: 4 sequences of one prompt each are one step (a batch of 4); 32 layers
    let items = 4.0 * 8.0;
    let compute = b0.flops / (989.4e12 * 0.5) + 32.0 * items * 4e-8;
    let memory = b0.bytes / (3350e9 * 0.7);
    assert!((f0.time_s - (32.0 * 1.3e-5 + compute.max(memory))).abs() < 1e-12 * f0.time_s);
    // decode: two steps (contexts 4097, 4098) of 4 sequences, memory-bound at these contexts
    let (b1, f1) = (
        row(&bound, Phase::Decode, OpKind::Attention),
        row(&e, Phase::Decode, OpKind::Attention),
    );
    let want = 2.0 * 32.0 * 1.1e-5 + b1.bytes / (3350e9 * 0.75);
    assert!((f1.time_s - want).abs() < 1e-12 * want, "{} vs {want}", f1.time_s);
    // every other operator is priced as before
    let other = |x: &Estimate| {
        x.breakdown
            .iter()
            .filter(|r| r.kind != OpKind::Attention)
            .map(|r| r.cost.time_s)
            .sum::<f64>()
    };
    assert_eq!(other(&e), other(&bound));
    // an unfused attention (scores through memory) is not the fused kernel the fit measured
    let mut q = p.clone();
    q.attention_score_bytes = 4.0;
    let u = estimate(&llama31_8b(), &h100(), &q, &eff, proto(), true).unwrap();
    let ub = estimate(&llama31_8b(), &h100(), &q, &Efficiency::uncalibrated(), proto(), true).unwrap();
    assert_eq!(
        row(&u, Phase::Decode, OpKind::Attention).time_s,
        row(&ub, Phase::Decode, OpKind::Attention).time_s
    );
}

#[test]
fn overlap_blends_the_roofline_max_with_the_serial_sum() {
    // one prefill GEMM: o max(c, m) + (1 - o)(c + m), exactly
    let p = plan(1, 512, 1);
    let at = |overlap: Option<f64>| {
        let eff = Efficiency {
            overlap,
            ..Efficiency::uncalibrated()
        };
        let e = estimate(&llama31_8b(), &h100(), &p, &eff, proto(), true).unwrap();
        row(&e, Phase::Prefill, OpKind::FfnUp)
    };
    let full = at(None);
    let (c, m) = (full.compute_s, full.memory_s);
    assert_eq!(full.time_s, c.max(m) + full.launch_s);
    assert!((at(Some(0.0)).time_s - (c + m)).abs() <= 1e-15);
    assert!((at(Some(0.25)).time_s - (0.25 * c.max(m) + 0.75 * (c + m))).abs() <= 1e-15);
    let bad = Efficiency {
        overlap: Some(1.5),
        ..Efficiency::uncalibrated()
    };
    let err = estimate(&llama31_8b(), &h100(), &p, &bad, proto(), true).unwrap_err();
    assert!(err.to_string().contains("overlap"), "{err}");
}

#[test]
fn a_sliding_window_cache_larger_than_the_window_is_read_whole_in_decode() {
    // Llama-3.1-8B with a 256-token window on every layer: 8 kv heads of 128, 32 layers, bf16.
    let mut m = llama31_8b();
    m.layer_groups[0].attention.as_mut().unwrap().window = Some(256);
    let per_key = 32.0 * 2.0 * 8.0 * 128.0 * 2.0;
    let attn = |extra: u64, phase: Phase| {
        let mut p = plan(1, 1000, 2); // one decode step, at context 1001
        p.swa_cache_extra = extra;
        let e = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
        row(&e, phase, OpKind::Attention)
    };
    let base = attn(0, Phase::Decode);
    for (extra, keys) in [(300u64, 300.0), (10_000, 1001.0 - 256.0)] {
        let c = attn(extra, Phase::Decode);
        assert!(
            (c.bytes - base.bytes - per_key * keys).abs() / c.bytes < 1e-12,
            "extra {extra}"
        );
        // a prefill query is computed against the ring up to itself: causal pairs of a window
        // of 256 + extra keys (4 h d FLOPs per pair, 32 heads of 128, 32 layers)
        let pairs = crate::attention::causal_pairs(1000, 0, Some(256 + extra));
        let pre = attn(extra, Phase::Prefill);
        assert!((pre.flops - 32.0 * 4.0 * 32.0 * 128.0 * pairs).abs() / pre.flops < 1e-12);
    }
}

#[test]
fn padded_kv_reads_and_replayed_decode_graphs() {
    // Llama-3.1-8B, 16 decode steps from context 1001: with n_kv padded to 256 every step reads
    // 1024 keys (contexts 1001..=1016) instead of its own count.
    let m = llama31_8b();
    let per_key = 32.0 * 2.0 * 8.0 * 128.0 * 2.0;
    let eff = Efficiency {
        t_launch_s: 5e-6,
        ..Efficiency::uncalibrated()
    };
    let run_at = |batch: u64, pad: u64, graphs: bool, skip: bool| {
        let mut p = plan(batch, 1000, 17);
        p.kv_pad = pad;
        p.decode_graphs = graphs;
        p.kv_skip_masked_tail = skip;
        estimate(&m, &h100(), &p, &eff, proto(), true).unwrap()
    };
    let run = |pad: u64, graphs: bool| run_at(1, pad, graphs, false);
    let exact = row(&run(1, false), Phase::Decode, OpKind::Attention);
    let padded = row(&run(256, false), Phase::Decode, OpKind::Attention);
    let read: f64 = (1001..=1016).map(|l| (1024 - l) as f64).sum();
    assert!((padded.bytes - exact.bytes - per_key * read).abs() / padded.bytes < 1e-12);
    // replayed graphs: no launch time in decode, the same in prefill
    let (host, graph) = (run(1, false), run(1, true));
    // the launch time, and the launches from the host, summed over a phase
    let sum = |e: &Estimate, ph: Phase, of: fn(&Cost) -> f64| -> f64 {
        e.breakdown.iter().filter(|r| r.phase == ph).map(|r| of(&r.cost)).sum()
    };
    let launch = |e: &Estimate, ph: Phase| sum(e, ph, |c| c.launch_s);
    let launches = |e: &Estimate, ph: Phase| sum(e, ph, |c| c.launches);
    assert!(launch(&host, Phase::Decode) > 0.0);
    assert_eq!(launch(&graph, Phase::Decode), 0.0);
    // the kernels are still run, by the graph: none is launched from the host
    assert!(launches(&host, Phase::Decode) > 0.0);
    assert_eq!(launches(&graph, Phase::Decode), 0.0);
    assert_eq!(launches(&graph, Phase::Prefill), launches(&host, Phase::Prefill));
    assert_eq!(launch(&graph, Phase::Prefill), launch(&host, Phase::Prefill));
    assert_eq!(graph.prefill.time_s, host.prefill.time_s);
    let saved = host.decode.time_s - graph.decode.time_s;
    assert!((saved - launch(&host, Phase::Decode)).abs() < 1e-12 * host.decode.time_s);
    // graphs replay one-token steps only: two sequences launch every kernel from the host
    assert_eq!(
        run_at(2, 1, true, false).decode.time_s,
        run_at(2, 1, false, false).decode.time_s
    );
    // the masked-tail pre-pass runs over several streams only: one sequence reads its whole
    // padded view (tests/test_estimate.py checks a wrapped ring over two)
    let one = |skip: bool| row(&run_at(1, 256, false, skip), Phase::Decode, OpKind::Attention).bytes;
    assert_eq!(one(true), one(false));
}

#[test]
fn repeated_prefill_steps_are_priced_once_and_counted() {
    // The prefill of every chunked plan equals the sum of its steps priced one by one: chunks
    // that repeat (8 x 1024 in 512-token steps) and chunks that straddle sequences (1100).
    let m = llama31_8b();
    let eff = Efficiency {
        t_launch_s: 5e-6,
        ..Efficiency::uncalibrated()
    };
    for (batch, prompt, chunk) in [(8, 1024, 512), (8, 1100, 512), (3, 700, 256), (1, 5000, 1000)] {
        let mut p = plan(batch, prompt, 2);
        p.chunk = Some(chunk);
        let e = estimate(&m, &h100(), &p, &eff, proto(), false).unwrap();
        let r = resolve(&m, &h100(), &p, proto()).unwrap();
        let mut ops = Vec::new();
        let (mut time, mut flops, mut bytes) = (0.0, 0.0, 0.0);
        for segs in prefill_steps(batch, prompt, 0, Some(chunk)) {
            build_step(&r.ctx, &Geometry::Segments(&segs), &mut ops);
            for op in &ops {
                let c = price(op, 0.0, h100().memory_bw(), &eff);
                (time, flops, bytes) = (time + c.time_s, flops + c.flops, bytes + c.bytes);
            }
        }
        let rel = |a: f64, b: f64| (a - b).abs() / b;
        assert!(rel(e.prefill.flops, flops) < 1e-12 && rel(e.prefill.bytes, bytes) < 1e-12);
        // the step-by-step time plus the per-step and per-layer overheads (0 here)
        assert!(rel(e.prefill.time_s, time) < 1e-12, "{batch} x {prompt} / {chunk}");
    }
}

/// The step-by-step schedule with identical steps merged in first-seen order: what the closed
/// form must reproduce.
fn merged_reference(batch: u64, prompt: u64, prefix: u64, chunk: Option<u64>) -> Vec<(Vec<Segment>, u64)> {
    let mut out: Vec<(Vec<Segment>, u64)> = Vec::new();
    for s in prefill_steps(batch, prompt, prefix, chunk) {
        match out.iter_mut().find(|(x, _)| *x == s) {
            Some(e) => e.1 += 1,
            None => out.push((s, 1)),
        }
    }
    out
}

proptest! {
    #[test]
    fn the_closed_form_schedule_is_the_step_by_step_one(batch in 1u64..40, prompt in 1u64..300,
                                                        prefix in 0u64..50, chunk in 1u64..1000,
                                                        unchunked in any::<bool>()) {
        let chunk = (!unchunked).then_some(chunk);
        let s = PrefillSchedule::new(batch, prompt, prefix, chunk);
        let mut got = Vec::new();
        s.for_each(|segs, n| got.push((segs.to_vec(), n)));
        let want = merged_reference(batch, prompt, prefix, chunk);
        prop_assert_eq!(s.distinct(), want.len() as u64);
        prop_assert_eq!(s.steps(), want.iter().map(|x| x.1).sum::<u64>());
        prop_assert_eq!(got, want);
    }
}

#[test]
fn a_huge_batch_is_priced_in_closed_form() {
    // 2^40 sequences in 512-token steps: 2^41 steps of two shapes, priced twice (the old
    // schedule listed every step: 52 TB). Exact counts: steps and prompt tokens.
    let mut p = plan(1 << 40, 1024, 256);
    p.chunk = Some(512);
    let e = estimate(&llama31_8b(), &h100(), &p, &Efficiency::uncalibrated(), proto(), false).unwrap();
    assert_eq!(e.prefill.steps, 1 << 41);
    assert!(!e.memory.fits);
    let one = {
        let mut q = plan(1, 1024, 256);
        q.chunk = Some(512);
        estimate(&llama31_8b(), &h100(), &q, &Efficiency::uncalibrated(), proto(), false).unwrap()
    };
    // every sequence's two steps cost what one sequence's do: TTFT scales with the batch exactly
    let rel = (e.ttft_s / one.ttft_s - (1u64 << 40) as f64).abs() / (1u64 << 40) as f64;
    assert!(rel < 1e-9, "{rel}");
}

#[test]
fn counts_past_what_the_engine_holds_exactly_are_refused() {
    let m = llama31_8b();
    let eff = Efficiency::uncalibrated();
    let field = |p: &Plan| match estimate(&m, &h100(), p, &eff, proto(), false) {
        Err(Error::Plan { field, .. }) => field,
        other => panic!("expected a plan error, got {other:?}"),
    };
    // batch x context past 2^53 tokens
    assert_eq!(field(&plan(1 << 50, 1024, 256)), "batch");
    assert_eq!(field(&plan(1 << 62, 1024, 256)), "batch");
    // a sum that wraps u64 is past max_model_len, not a short request
    assert_eq!(field(&plan(1, 1024, u64::MAX)), "prompt+output");
    assert_eq!(field(&plan(1, u64::MAX, 256)), "prompt+output");
    let mut p = plan(1, 1024, 256);
    p.prefix = u64::MAX - 1000;
    assert_eq!(field(&p), "prompt+output");
    // devices past 2^53
    let mut p = plan(1, 1024, 256);
    p.dp = 1 << 62;
    assert_eq!(field(&p), "dp");
    // a KV view padded past the model's context
    let mut p = plan(1, 1024, 256);
    p.kv_pad = u64::MAX - 255;
    assert_eq!(field(&p), "kv_pad");
    let mut p = plan(1, 1024, 256);
    p.swa_cache_extra = u64::MAX;
    assert_eq!(field(&p), "swa_cache_extra");
}

#[test]
fn a_model_whose_counts_pass_u64_is_refused() {
    let mut m = llama31_8b();
    m.vocab_size = 1 << 62;
    assert!(matches!(m.validate(), Err(Error::ModelConfig { .. })));
    let mut m = llama31_8b();
    m.max_model_len = u64::MAX;
    assert!(matches!(m.validate(), Err(Error::ModelConfig { .. })));
    assert!(llama31_8b().validate().is_ok());
}

proptest! {
    /// Every plan at the extremes gives a finite, non-negative result or a typed error: never a
    /// panic, NaN, infinity or a wrapped count.
    #[test]
    fn extremes_give_finite_results_or_errors(
        batch in prop::sample::select(vec![1u64, 2, 255, 1 << 20, 1 << 33, 1 << 43, (1 << 53) / 1280, u64::MAX]),
        prompt in prop::sample::select(vec![1u64, 2, 511, 512, 1000, 131_071, 131_072, u64::MAX]),
        output in prop::sample::select(vec![1u64, 2, 256, 130_000, u64::MAX - 1]),
        chunk in prop::sample::select(vec![None, Some(1u64), Some(7), Some(512), Some(1 << 40), Some(u64::MAX)]),
        tp in prop::sample::select(vec![1u64, 2, 8, 1 << 40, u64::MAX]),
        dp in prop::sample::select(vec![1u64, 3, 1 << 52, u64::MAX]),
        kv_pad in prop::sample::select(vec![1u64, 256, 131_072, u64::MAX]),
    ) {
        let mut p = plan(batch, prompt, output);
        (p.chunk, p.tp, p.dp, p.kv_pad) = (chunk, tp, dp, kv_pad);
        let eff = Efficiency { t_launch_s: 2e-6, t_step_s: 1e-4, ..Efficiency::uncalibrated() };
        match estimate(&llama31_8b(), &h100(), &p, &eff, proto(), false) {
            Ok(e) => {
                let n = p.batch as f64;
                let decode_mbu = if p.output > 1 { e.decode.mbu } else { 1.0 };
                for v in [e.ttft_s, e.e2e_s, e.throughput_tok_s, e.prefill_tok_s, e.memory.total_bytes,
                          e.prefill.mfu, decode_mbu, e.tpot_s.unwrap_or(1.0)] {
                    prop_assert!(v.is_finite() && v > 0.0, "{v} for {p:?}");
                }
                prop_assert!(e.parallel.devices >= p.tp && e.prefill.steps >= 1);
                // each prefill step reads every decoder weight (bf16; the head only where it samples):
                // no count wrapped to zero
                let read = e.memory.weights_bytes - 2.0 * (e.params.embedding + e.params.lm_head) as f64;
                prop_assert!(e.prefill.bytes >= read * e.prefill.steps as f64 * (1.0 - 1e-12));
                prop_assert!(e.prefill_tok_s <= n * p.prompt as f64 / e.ttft_s * (1.0 + 1e-12));
            }
            Err(Error::Plan { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}

/// Every numeric field of a model's JSON, the core's entry point, set to a hostile value.
fn hostile_model_json(field: usize, value: u64) -> String {
    let mut v = serde_json::to_value(llama31_8b()).unwrap();
    let mut slots: Vec<&mut serde_json::Value> = Vec::new();
    fn walk<'a>(v: &'a mut serde_json::Value, out: &mut Vec<&'a mut serde_json::Value>) {
        match v {
            serde_json::Value::Number(_) => out.push(v),
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, out)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&mut v, &mut slots);
    let n = slots.len();
    *slots[field % n] = serde_json::Value::from(value);
    v.to_string()
}

proptest! {
    /// The model JSON entry of the core: any value in any numeric field gives a validated model
    /// whose estimate is finite, or a typed error; never a panic or a wrapped count.
    #[test]
    fn any_model_json_gives_a_model_or_an_error(
        field in 0usize..64,
        value in prop::sample::select(vec![0u64, 1, 2, 3, 7, 4096, 1 << 20, 1 << 32, 1 << 40, 1 << 53,
                                            (1 << 53) + 1, 1 << 62, u64::MAX]),
    ) {
        let json = hostile_model_json(field, value);
        let Ok(m) = Model::from_json(&json) else { return Ok(()) };
        let p = plan(2, 100, 20);
        match estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), false) {
            Ok(e) => {
                prop_assert!(e.ttft_s.is_finite() && e.ttft_s > 0.0 && e.memory.total_bytes.is_finite());
                prop_assert!(e.params.total >= e.params.active && e.params.total > 0);
            }
            Err(Error::Plan { .. } | Error::ModelConfig { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}

#[test]
fn work_bounds_refuse_before_the_work() {
    // a decode over a one-cell ring read up to its newest cell, every context a run of its own
    let mut m = llama31_8b();
    m.max_model_len = 1 << 40;
    m.layer_groups[0].attention.as_mut().unwrap().window = Some(1);
    let mut p = plan(2, 10, 1 << 30);
    p.kv_skip_masked_tail = true;
    let r = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), false);
    assert!(
        matches!(r, Err(Error::Plan { ref field, .. }) if field == "output"),
        "{r:?}"
    );
    // the same decode without the skip reads the ring whole: one run, priced
    p.kv_skip_masked_tail = false;
    assert!(estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), false).is_ok());
    let mut deep = llama31_8b();
    deep.layer_groups[0].count = crate::model::MAX_LAYERS + 1;
    assert!(matches!(deep.validate(), Err(Error::ModelConfig { .. })));
}

#[test]
fn expert_parallel_over_the_tp_group_sends_no_all_to_all() {
    // EP = TP = 8: every rank holds all t tokens after the attention all-reduce and runs its
    // E/8 whole experts on the t k / 8 token-rows routed to them; the FFN all-reduce (the same
    // as TP 8's) sums the outputs: no dispatch or combine all-to-all
    let m = crate::fixtures::mixtral_8x7b();
    let mut p = plan(4, 512, 2);
    (p.tp, p.ep) = (8, 8);
    let ep = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    p.ep = 1;
    let tp = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    for phase in [Phase::Prefill, Phase::Decode] {
        let comm = |e: &Estimate| -> f64 {
            e.breakdown
                .iter()
                .filter(|r| r.phase == phase && r.kind.is_comm())
                .map(|r| r.cost.comm_s)
                .sum()
        };
        assert_eq!(comm(&ep), comm(&tp), "{phase:?}");
    }
    let tokens = 4.0 * 512.0;
    let up = row(&ep, Phase::Prefill, OpKind::ExpertUp);
    // gate and up of 14336 from 4096, top-2 of 8 experts, a 1/8 share of the token-rows
    let want = m.num_layers() as f64 * 2.0 * (tokens * 2.0 / 8.0) * 4096.0 * 2.0 * 14336.0;
    assert!((up.flops - want).abs() <= 1e-9 * want, "{} vs {want}", up.flops);
}

#[test]
fn a_w8a8_gemm_quantises_its_input_in_a_kernel_of_its_own() {
    // fp8 up projection on H100 (an fp8 path): one act_quant kernel per layer reading the
    // m x k bf16 input and writing it at 8 bits: m k (2 + 1) bytes; none where the GEMM is
    // dequantised (no fp8 path), and none for weight-only formats
    let fp8 = crate::weights::WeightFormat {
        bits: 8.0,
        block_k: 0,
        block_n: 0,
        scale_bits: 32.0,
        compute: Some(crate::dtype::DType::Fp8),
        act_bits: Some(8.0),
    };
    let mut p = plan(1, 4096, 1);
    p.weights.ffn_up = Some(fp8);
    let llama = llama31_8b();
    let e = estimate(&llama, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    let q = row(&e, Phase::Prefill, OpKind::ActQuant);
    let want = 32.0 * 4096.0 * 4096.0 * 3.0;
    assert!((q.bytes - want).abs() <= 1e-9 * want, "{} vs {want}", q.bytes);
    assert_eq!(q.flops, 0.0);
    let mut no_fp8 = h100();
    no_fp8.tflops_fp8 = None;
    let e = estimate(&llama, &no_fp8, &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    assert_eq!(row(&e, Phase::Prefill, OpKind::ActQuant).bytes, 0.0);
    p.weights.ffn_up = Some(crate::weights::WeightFormat { act_bits: None, ..fp8 });
    let e = estimate(&llama, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    assert_eq!(row(&e, Phase::Prefill, OpKind::ActQuant).bytes, 0.0);
}

#[test]
fn attention_dp_groups_share_the_experts_through_all_to_alls() {
    // Mixtral, 2 attention-DP groups of TP 2, EP 4 over the 4 ranks: each group prefills its own
    // 4 x 512 tokens; the experts (2 whole ones a rank) see both groups' tokens, t k 2 / 4
    // token-rows; each rank dispatches its t / 2 share (top-2, d 4096, bf16) and gets it back
    let m = crate::fixtures::mixtral_8x7b();
    let mut p = plan(4, 512, 2);
    (p.tp, p.ep, p.attention_dp) = (2, 4, 2);
    let e = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    let r = resolve(&m, &h100(), &p, proto()).unwrap();
    let topo = r.ctx.topo.expect("4 ranks have links");
    let t = 4.0 * 512.0;
    let msg = t / 2.0 * 2.0 * 4096.0 * 2.0;
    let one = topo
        .time(crate::collectives::Collective::AllToAll, 4, msg, &proto())
        .time_s;
    let layers = m.num_layers() as f64;
    let got = row(&e, Phase::Prefill, OpKind::ExpertDispatch).comm_s;
    assert!(
        (got - 2.0 * layers * one).abs() <= 1e-12 * got,
        "{got} vs {}",
        2.0 * layers * one
    );
    // expert_up: gate and up (2 x 14336) from 4096, over t x 2 groups x top-2 / EP 4 token-rows
    let up = row(&e, Phase::Prefill, OpKind::ExpertUp);
    let want = layers * 2.0 * (t * 2.0 * 2.0 / 4.0) * 4096.0 * 2.0 * 14336.0;
    assert!((up.flops - want).abs() <= 1e-9 * want, "{} vs {want}", up.flops);
    // both groups' outputs count, and the plan occupies TP x attention DP devices
    assert_eq!(e.parallel.devices, 4);
    let mut one_group = p.clone();
    one_group.attention_dp = 1;
    one_group.ep = 2;
    let g = estimate(&m, &h100(), &one_group, &Efficiency::uncalibrated(), proto(), true).unwrap();
    assert_eq!(row(&g, Phase::Prefill, OpKind::ExpertDispatch).comm_s, 0.0);
    assert!(e.throughput_tok_s > g.throughput_tok_s);
    // EP must divide the group
    p.ep = 3;
    assert!(estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), true).is_err());
}

fn run_model(m: &Model, p: &Plan) -> Estimate {
    estimate(m, &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap()
}

fn gdn_plan(batch: u64, prompt: u64, output: u64) -> Plan {
    Plan {
        linear_chunk: 64, // FLA_CHUNK_SIZE (data/constants.csv linear_attention_chunk)
        ..plan(batch, prompt, output)
    }
}

#[test]
fn gated_deltanet_state_is_fixed_per_sequence() {
    let m = crate::fixtures::gdn_hybrid();
    // 3 layers x (32 v-heads x 128 x 128 fp32 state + (2 x 16 x 128 + 32 x 128) conv channels
    // x 3 cached inputs in bf16)
    let per_layer = 32.0 * 128.0 * 128.0 * 4.0 + (2.0 * 16.0 * 128.0 + 32.0 * 128.0) * 3.0 * 2.0;
    assert_eq!(per_layer, 2_146_304.0);
    assert_eq!(m.state_bytes(1, 2.0), 3.0 * per_layer);
    assert_eq!(m.state_bytes(2, 2.0), 3.0 * per_layer / 2.0); // heads split over TP
    for ctx in [100u64, 10_000] {
        let e = run_model(&m, &gdn_plan(4, ctx, 2));
        assert_eq!(e.memory.state_bytes, 4.0 * 3.0 * per_layer, "context {ctx}");
    }
}

#[test]
fn gated_deltanet_decode_reads_and_writes_its_state_once_a_step() {
    let m = crate::fixtures::gdn_hybrid();
    for (batch, ctx) in [(1u64, 100u64), (8, 100), (8, 20_000)] {
        let e = run_model(&m, &gdn_plan(batch, ctx, 2)); // one decode step
        let c = row(&e, Phase::Decode, OpKind::LinearAttention);
        let b = batch as f64;
        // q, k (16 x 128 each), v (32 x 128), gate and beta (32 each) read, o (32 x 128) written,
        // in bf16; the fp32 state read and written; three layers
        let io = b * (2.0 * 16.0 * 128.0 + 2.0 * 32.0 * 128.0 + 2.0 * 32.0) * 2.0;
        let state = b * 2.0 * 32.0 * 128.0 * 128.0 * 4.0;
        assert_eq!(c.bytes, 3.0 * (io + state), "batch {batch} context {ctx}");
        // one token: 7 dk dv + 6 dk + 4 dv + 2/3 per v-head (graph::chunked_scan_flops)
        let per_head = 7.0 * 16384.0 + 6.0 * 128.0 + 4.0 * 128.0 + 2.0 / 3.0;
        assert!((c.flops - 3.0 * b * 32.0 * per_head).abs() < 1e-6 * c.flops);
    }
}

/// A prefill of S tokens (one sequence) spends `want` scan FLOPs per layer and head, for each
/// `(S, want)`; `layer_heads`: the recurrent layers times their heads.
fn assert_prefill_scan(m: &Model, plan_of: impl Fn(u64) -> Plan, layer_heads: f64, cases: [(u64, f64); 4]) {
    for (s, want) in cases {
        let e = run_model(m, &plan_of(s));
        let per_layer_head = row(&e, Phase::Prefill, OpKind::LinearAttention).flops / layer_heads;
        assert!(
            (per_layer_head - want).abs() <= 1e-9 * want,
            "S={s}: {per_layer_head} vs {want}"
        );
    }
}

#[test]
fn gated_deltanet_prefill_flops_are_the_chunked_scan() {
    let m = crate::fixtures::gdn_hybrid();
    // one 64-token chunk per v-head, dk = dv = 128:
    // 6 n^2 dk + 4 n^2 dv + 2 n^3 / 3 + 6 n dk dv + dk dv
    let chunk64 = 3_145_728.0 + 2_097_152.0 + 524_288.0 / 3.0 + 6_291_456.0 + 16_384.0;
    let one = 6.0 * 128.0 + 4.0 * 128.0 + 2.0 / 3.0 + 6.0 * 16384.0 + 16384.0;
    let cases = [
        (1u64, one),
        (128, 2.0 * chunk64),
        (4096, 64.0 * chunk64),
        (32768, 512.0 * chunk64),
    ];
    assert_prefill_scan(&m, |s| gdn_plan(1, s, 1), 3.0 * 32.0, cases);
    // linear in S beyond a chunk, where causal attention is quadratic
    let f = |s| {
        row(
            &run_model(&m, &gdn_plan(1, s, 1)),
            Phase::Prefill,
            OpKind::LinearAttention,
        )
        .flops
    };
    assert!((f(32768) / f(4096) - 8.0).abs() < 1e-9);
}

#[test]
fn hybrid_memory_grows_with_context_only_through_full_attention_layers() {
    let m = crate::fixtures::gdn_hybrid();
    let mem = |ctx: u64| run_model(&m, &gdn_plan(2, ctx, 1)).memory;
    let (a, b) = (mem(1000), mem(9000));
    assert_eq!(a.state_bytes, b.state_bytes);
    // one full-attention layer: 2 (K, V) x 2 KV heads x 256 x bf16 a token, two sequences
    assert_eq!(b.kv_bytes - a.kv_bytes, 8000.0 * 2.0 * (2.0 * 2.0 * 256.0 * 2.0));
    assert_eq!(a.weights_bytes, b.weights_bytes);
}

#[test]
fn a_linear_attention_model_needs_the_scan_chunk() {
    let m = crate::fixtures::gdn_hybrid();
    let e = estimate(&m, &h100(), &plan(1, 8, 2), &Efficiency::uncalibrated(), proto(), false);
    assert!(matches!(e, Err(Error::Plan { .. })));
}

#[test]
fn sparse_attention_attends_the_top_k_and_indexes_every_key() {
    let m = crate::fixtures::dsa();
    let (h, kvl, rope) = (64.0, 512.0, 64.0);
    let per_pair = 2.0 * h * (2.0 * kvl + rope); // absorbed MLA
    let index_pair = 32.0 * (2.0 * 128.0 + 2.0);
    for s in [128u64, 4096, 32768] {
        let e = run_model(&m, &plan(1, s, 1));
        let k = 2048u64;
        let attended = if s <= k {
            s * (s + 1) / 2
        } else {
            k * (k + 1) / 2 + (s - k) * k
        } as f64;
        let att = row(&e, Phase::Prefill, OpKind::Attention).flops / 4.0;
        assert!((att - per_pair * attended).abs() <= 1e-9 * att, "S={s}");
        let ix = row(&e, Phase::Prefill, OpKind::IndexerScores).flops / 4.0;
        assert!((ix - index_pair * (s * (s + 1) / 2) as f64).abs() <= 1e-9 * ix, "S={s}");
    }
    // decode: the attention reads min(L, 2048) latent rows, the indexer all L keys
    let step = |ctx: u64| {
        let e = run_model(&m, &plan(1, ctx, 2));
        (
            row(&e, Phase::Decode, OpKind::Attention).bytes,
            row(&e, Phase::Decode, OpKind::IndexerScores).bytes,
        )
    };
    let ((a1, i1), (a2, i2)) = (step(10_000), step(20_000));
    assert_eq!(a1, a2); // past the top-k the attention reads the same keys
    assert_eq!(i2 - i1, 4.0 * 10_000.0 * 128.0 * 2.0); // 4 layers x keys x head_dim x bf16
                                                       // the cache holds every token: latent + rope key + the indexer's key
    let mem = |ctx: u64| run_model(&m, &plan(1, ctx, 1)).memory.kv_bytes;
    assert_eq!(mem(20_000) - mem(10_000), 4.0 * 10_000.0 * (kvl + rope + 128.0) * 2.0);
}

#[test]
fn mamba2_state_decode_and_prefill_closed_forms() {
    let m = crate::fixtures::mamba_hybrid();
    // state: 16 heads x 64 x 128 in bf16, conv (1024 + 2 x 2 x 128 channels) x 3 inputs in bf16
    let per_layer = 16.0 * 64.0 * 128.0 * 2.0 + (1024.0 + 512.0) * 3.0 * 2.0;
    assert_eq!(per_layer, 271_360.0);
    assert_eq!(m.state_bytes(1, 2.0), 3.0 * per_layer);
    // the scan's own chunk (the config's chunk_size) is used: no plan chunk needed
    let e = run_model(&m, &plan(2, 1000, 2));
    assert_eq!(e.memory.state_bytes, 2.0 * 3.0 * per_layer);
    let dec = row(&e, Phase::Decode, OpKind::LinearAttention);
    // x, B, C, dt in and y out (2 x 1024 + 2 x 2 x 128 + 16) in bf16, the state read and written
    let io = 2.0 * (2.0 * 1024.0 + 512.0 + 16.0) * 2.0;
    assert_eq!(dec.bytes, 3.0 * (io + 2.0 * 2.0 * 16.0 * 64.0 * 128.0 * 2.0));
    // SSD chunk of n per head, N = 128, P = 64, groups / heads = 1/8:
    // 2 n^2 N g/h + n^2 + 2 n^2 P + 4 n N P + 2 N P
    let chunk128 = 524_288.0 + 16_384.0 + 2_097_152.0 + 4_194_304.0 + 16_384.0;
    let one = 32.0 + 1.0 + 128.0 + 32_768.0 + 16_384.0;
    let cases = [
        (1u64, one),
        (128, chunk128),
        (4096, 32.0 * chunk128),
        (32768, 256.0 * chunk128),
    ];
    assert_prefill_scan(&m, |s| plan(1, s, 1), 3.0 * 16.0, cases);
    // decode memory grows only through the attention layer
    let mem = |ctx: u64| run_model(&m, &plan(1, ctx, 1)).memory;
    let (a, b) = (mem(1000), mem(5000));
    assert_eq!(a.state_bytes, b.state_bytes);
    assert_eq!(b.kv_bytes - a.kv_bytes, 4000.0 * 2.0 * 2.0 * 256.0 * 2.0);
}

#[test]
fn chunked_local_attention_attends_and_holds_one_chunk() {
    // Llama-3.1-8B's geometry with Llama-4's chunked local attention (8192) on every layer
    let mut m = llama31_8b();
    m.layer_groups[0].attention.as_mut().unwrap().chunk = Some(8192);
    let a = m.layer_groups[0].attention.clone().unwrap();
    let per_pair = 4.0 * (a.heads * a.head_dim) as f64;
    let tri = |n: u64| (n * (n + 1) / 2) as f64;
    for (s, pairs) in [
        (128u64, tri(128)),
        (8192, tri(8192)),
        (20000, 2.0 * tri(8192) + tri(20000 - 16384)),
    ] {
        let e = run_model(&m, &plan(1, s, 1));
        let got = row(&e, Phase::Prefill, OpKind::Attention).flops / 32.0;
        assert_eq!(got, per_pair * pairs, "S={s}");
    }
    // decode at context L reads (L - 1) mod 8192 + 1 keys: 8192 + 100 + 1 -> 101 keys
    let k = |ctx: u64| row(&run_model(&m, &plan(1, ctx, 2)), Phase::Decode, OpKind::Attention).flops;
    assert_eq!(k(8192 + 100) / k(100), 1.0);
    // the cache holds at most one chunk
    let mem = |ctx: u64| run_model(&m, &plan(1, ctx, 1)).memory.kv_bytes;
    assert_eq!(mem(30_000), mem(9000));
}

#[test]
fn latent_moe_runs_its_experts_in_the_latent_width() {
    // Mixtral-8x7B's geometry with Nemotron-3's latent MoE: experts in 1024, two projections
    let mut m = crate::fixtures::mixtral_8x7b();
    if let Ffn::Moe { latent, .. } = &mut m.layer_groups[0].ffn {
        *latent = Some(1024);
    }
    let base = params::count(&crate::fixtures::mixtral_8x7b());
    let p = params::count(&m);
    // each expert's three matrices shrink from 4096 to 1024 rows; 2 x 4096 x 1024 of projections
    let per_layer_expert = 3 * 14336 * (4096 - 1024);
    assert_eq!(base.experts - p.experts, 32 * 8 * per_layer_expert);
    assert_eq!(p.ffn - base.ffn, 32 * 2 * 4096 * 1024);
    let e = run_model(&m, &plan(1, 512, 1));
    let proj = row(&e, Phase::Prefill, OpKind::MoeLatentProj).flops;
    assert_eq!(proj, 32.0 * 2.0 * (2.0 * 512.0 * 4096.0 * 1024.0));
    // 512 tokens x top-2 rows through gate+up of 2 x 14336 columns from 1024
    let up = row(&e, Phase::Prefill, OpKind::ExpertUp).flops;
    assert_eq!(up, 32.0 * 2.0 * (512.0 * 2.0) * (2.0 * 14336.0) * 1024.0);
}

#[test]
fn a_narrower_value_head_shrinks_v_o_and_the_cache() {
    // Llama-3.1-8B with MiMo-V2's 192 / 128 query-key / value heads
    let mut m = llama31_8b();
    let a = m.layer_groups[0].attention.as_mut().unwrap();
    (a.head_dim, a.v_head_dim) = (192, Some(128));
    let p = params::count(&m);
    // q 32 x 192, k 8 x 192, v 8 x 128 from 4096; o 32 x 128 to 4096; 32 layers
    assert_eq!(p.attention, 32 * 4096 * (32 * 192 + 8 * 192 + 8 * 128 + 32 * 128));
    assert_eq!(m.kv_layers(1), vec![(32, 8 * (192 + 128), None)]);
    let e = run_model(&m, &plan(1, 1000, 1));
    let per_layer = row(&e, Phase::Prefill, OpKind::Attention).flops / 32.0;
    assert_eq!(per_layer, 2.0 * 32.0 * (192.0 + 128.0) * (1000.0 * 1001.0 / 2.0));
}

#[test]
fn a_segment_scores_its_sampled_positions_at_the_lm_head() {
    // a mixed step of one prompt's last chunk (100 tokens, one sampled) beside 4 speculating
    // decodes verifying 2 drafts each (3 tokens, all 3 scored): the LM head is 1 + 4 x 3 = 13
    // rows of a d x V GEMM, 2 d V FLOPs each (Llama-3.1-8B: d 4096, V 128,256)
    let m = llama31_8b();
    let r = resolve(&m, &h100(), &plan(1, 100, 2), proto()).unwrap();
    let segs = [
        Segment {
            count: 1,
            new: 100,
            prefix: 0,
            sampled: 1,
        },
        Segment {
            count: 4,
            new: 3,
            prefix: 500,
            sampled: 3,
        },
    ];
    let mut ops = Vec::new();
    build_step(&r.ctx, &Geometry::Segments(&segs), &mut ops);
    let head: Vec<&Op> = ops.iter().filter(|o| o.kind == OpKind::LmHead).collect();
    assert_eq!(head.len(), 1);
    let want = 2.0 * 13.0 * 4096.0 * 128_256.0;
    assert!(
        (head[0].f0 * head[0].repeat / want - 1.0).abs() < 1e-12,
        "{} vs {want}",
        head[0].f0
    );
    // a chunk that is not a prompt's last takes no logits
    let mid = [Segment {
        count: 1,
        new: 100,
        prefix: 0,
        sampled: 0,
    }];
    build_step(&r.ctx, &Geometry::Segments(&mid), &mut ops);
    assert!(ops.iter().all(|o| o.kind != OpKind::LmHead));
}
