//! Speculative decoding in the static engine: closed forms of the verification step and the
//! drafter's passes, and the invariants a sweep over the batch must hold.

use super::*;
use crate::device::tests::h100;
use crate::graph::DRAFTER;
use crate::model::tests::llama31_8b;
use crate::plan::Speculation;

pub(crate) use crate::collectives::tests::proto;

fn run(p: &Plan) -> Estimate {
    estimate(&llama31_8b(), &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap()
}

/// Cost of the rows of one phase and operator, the drafter's (`drafter`) or the target's.
fn rows(e: &Estimate, phase: Phase, kind: OpKind, drafter: bool) -> Cost {
    let mut c = Cost::default();
    for r in e
        .breakdown
        .iter()
        .filter(|r| r.phase == phase && r.kind == kind && (r.group == DRAFTER) == drafter)
    {
        c += r.cost;
    }
    c
}

/// An MTP-like drafter for Llama-3.1-8B: one of its decoder layers behind a projection of two
/// fused states, sharing its embedding and LM head.
fn one_layer_drafter() -> Drafter {
    let mut m = llama31_8b();
    m.layer_groups[0].count = 1;
    Drafter {
        model: m,
        fused_inputs: 2,
        fuse_first_pass_only: false,
        weights: Default::default(),
        shares_embedding: true,
        shares_head: true,
    }
}

fn spec(batch: u64, k: u64, al: f64, drafter: Option<Drafter>) -> Plan {
    Plan {
        speculation: Some(Speculation {
            draft_tokens: k,
            acceptance_length: al,
            drafter,
            accepted: Vec::new(),
        }),
        ..Plan::new(batch, 1024, 257, 0.9)
    }
}

#[test]
fn a_verification_step_multiplies_the_gemm_flops_by_k_plus_1_and_reads_the_weights_once() {
    let base = run(&Plan::new(4, 1024, 257, 0.9));
    for (k, al) in [(1u64, 1.6), (3, 2.4), (5, 6.0)] {
        let e = run(&spec(4, k, al, None));
        // (output - 1) / AL steps of (k + 1) tokens, against output - 1 steps of one
        let per_step = (k + 1) as f64 / al;
        for kind in [
            OpKind::QkvProj,
            OpKind::OutProj,
            OpKind::FfnUp,
            OpKind::FfnDown,
            OpKind::LmHead,
        ] {
            let (s, b) = (
                rows(&e, Phase::Decode, kind, false),
                rows(&base, Phase::Decode, kind, false),
            );
            assert!((s.flops / b.flops - per_step).abs() < 1e-12, "{kind:?} k={k}");
        }
        // the FFN's weights are read once a step: its bytes per step are the plain step's plus
        // the extra tokens' activations
        let d = 4096.0;
        let (s, b) = (
            rows(&e, Phase::Decode, OpKind::FfnDown, false),
            rows(&base, Phase::Decode, OpKind::FfnDown, false),
        );
        let steps = 256.0 / al;
        let act = |tokens: f64| tokens * (14336.0 + d) * 2.0 * 32.0;
        let want = (b.bytes / 256.0 - act(4.0) + act(4.0 * (k + 1) as f64)) * steps;
        assert!((s.bytes / want - 1.0).abs() < 1e-12, "ffn_down bytes k={k}");
        assert_eq!(e.decode.steps, steps.round() as u64);
    }
}

#[test]
fn a_verification_step_attends_k_plus_1_queries_a_sequence_over_the_causal_offsets() {
    // query i of a step at context c attends c + i keys: per sequence q c + q (q - 1) / 2 pairs
    let (k, al, batch) = (3u64, 2.0, 2u64);
    let e = run(&spec(batch, k, al, None));
    let base = run(&Plan::new(batch, 1024, 257, 0.9));
    let q = (k + 1) as f64;
    let plain = rows(&base, Phase::Decode, OpKind::Attention, false).flops;
    // plain: one pair a sequence per attended key, summed over contexts lo..=hi
    let pairs_plain: f64 = (1025..=1280u64).map(|c| c as f64).sum::<f64>() * batch as f64;
    let per_pair = plain / pairs_plain;
    let pairs_spec = (1025..=1280u64)
        .map(|c| q * c as f64 + q * (q - 1.0) / 2.0)
        .sum::<f64>()
        * batch as f64
        / al;
    let got = rows(&e, Phase::Decode, OpKind::Attention, false).flops;
    assert!((got / (per_pair * pairs_spec) - 1.0).abs() < 1e-12);
}

#[test]
fn the_drafter_runs_one_pass_over_the_verified_positions_then_k_minus_1_of_one_token() {
    // a drafter of one target layer: its q/k/v FLOPs are the target's per layer, over
    // (k + 1) + (k - 1) tokens a step where the target verifies k + 1 in 32 layers
    for k in [1u64, 2, 4] {
        let e = run(&spec(8, k, 1.5, Some(one_layer_drafter())));
        let t = rows(&e, Phase::Decode, OpKind::QkvProj, false).flops;
        let d = rows(&e, Phase::Decode, OpKind::QkvProj, true).flops;
        let want = 2.0 * k as f64 / (32.0 * (k + 1) as f64);
        assert!((d / t / want - 1.0).abs() < 1e-12, "k={k}: {}", d / t);
        // its LM head scores one position a sequence each pass; the target's, k + 1
        let (th, dh) = (
            rows(&e, Phase::Decode, OpKind::LmHead, false).flops,
            rows(&e, Phase::Decode, OpKind::LmHead, true).flops,
        );
        assert!((dh / th - k as f64 / (k + 1) as f64).abs() < 1e-12);
        // the fused projection: 2 d x d a token, replicated
        let fused = rows(&e, Phase::Decode, OpKind::DraftInputProj, true).flops;
        let tokens = 8.0 * (2 * k) as f64 * 256.0 / 1.5;
        assert!((fused / (2.0 * tokens * 2.0 * 4096.0 * 4096.0) - 1.0).abs() < 1e-12);
        // and over the prompt in prefill, once
        let pre = rows(&e, Phase::Prefill, OpKind::QkvProj, true).flops;
        let pre_t = rows(&e, Phase::Prefill, OpKind::QkvProj, false).flops;
        assert!((pre / pre_t - 1.0 / 32.0).abs() < 1e-12);
    }
}

#[test]
fn the_drafter_adds_its_layer_and_projection_to_memory_and_its_own_kv() {
    let base = run(&Plan::new(8, 1024, 257, 0.9));
    let e = run(&spec(8, 2, 2.0, Some(one_layer_drafter())));
    let (d, f) = (4096.0, 14336.0);
    // one layer: q, k, v, o, gate/up, down and two norms in bf16, plus eh_proj 2d x d
    let layer = (d * 4096.0 + 2.0 * d * 1024.0 + 4096.0 * d + 3.0 * d * f + 2.0 * d) * 2.0;
    let want = layer + 2.0 * d * d * 2.0;
    assert!((e.memory.weights_bytes - base.memory.weights_bytes - want).abs() < 1.0);
    // its own layer's KV, and the target's 2 lookahead slots a sequence (1024 + 257 tokens)
    let want = 33.0 / 32.0 * (1281.0 + 2.0) / 1281.0;
    assert!((e.memory.kv_bytes / base.memory.kv_bytes - want).abs() < 1e-12);
}

#[test]
fn the_speed_up_falls_once_the_verification_turns_compute_bound_and_rejected_drafts_only_cost() {
    // the verification's weights are read once whatever k, its compute grows k + 1 fold.
    // While the step is memory-bound the gain stays within 1% (it creeps up as the KV, read
    // once a step, outweighs the drafter's fixed weights); once compute-bound it falls at
    // every larger batch. With every draft rejected (AL 1) speculation is a loss at every batch.
    let gains: Vec<f64> = [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        .iter()
        .map(|&b| {
            let base = run(&Plan::new(b, 1024, 257, 0.9)).tpot_s.unwrap();
            let fast = run(&spec(b, 3, 3.0, Some(one_layer_drafter()))).tpot_s.unwrap();
            let none = run(&spec(b, 3, 1.0, Some(one_layer_drafter()))).tpot_s.unwrap();
            assert!(none > base, "batch {b}");
            base / fast
        })
        .collect();
    let turn = gains
        .windows(2)
        .position(|w| w[1] < w[0] * 0.99)
        .expect("the gain falls");
    assert!(
        gains[..=turn].iter().all(|g| (g / gains[0] - 1.0).abs() < 0.01),
        "{gains:?}"
    );
    assert!(gains[turn..].windows(2).all(|w| w[1] < w[0]), "{gains:?}");
    assert!(gains[gains.len() - 1] < 0.7 * gains[0], "{gains:?}");
}

#[test]
fn a_speculation_out_of_range_is_refused_by_name() {
    for (k, al, field) in [
        (0u64, 1.0, "draft_tokens"),
        (3, 4.5, "acceptance_length"),
        (3, 0.9, "acceptance_length"),
    ] {
        let e = estimate(
            &llama31_8b(),
            &h100(),
            &spec(1, k, al, None),
            &Efficiency::uncalibrated(),
            proto(),
            false,
        );
        match e {
            Err(Error::Plan { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{k} {al}: {other:?}"),
        }
    }
    let pp = Plan {
        pp: 2,
        ..spec(1, 2, 2.0, None)
    };
    assert!(matches!(
        estimate(&llama31_8b(), &h100(), &pp, &Efficiency::uncalibrated(), proto(), false),
        Err(Error::Plan { ref field, .. }) if field == "speculation"
    ));
}

#[test]
fn a_speculating_linear_attention_layer_keeps_and_writes_a_state_per_verified_position() {
    // vLLM's Gated DeltaNet keeps num_spec + 1 state slots a request (spec_state_indices_tensor)
    // and writes the state after each verified token: memory k + 1 states a sequence, and a
    // verification step reads the state once and writes it k + 1 times
    let m = crate::fixtures::gdn_hybrid();
    let base = Plan {
        linear_chunk: 64,
        ..Plan::new(4, 1000, 257, 0.9)
    };
    let (k, al) = (3u64, 2.0);
    let sp = Plan {
        speculation: Some(Speculation {
            draft_tokens: k,
            acceptance_length: al,
            drafter: None,
            accepted: Vec::new(),
        }),
        ..base.clone()
    };
    let run = |p: &Plan| estimate(&m, &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap();
    let (b, s) = (run(&base), run(&sp));
    assert!((s.memory.state_bytes / b.memory.state_bytes - (k + 1) as f64).abs() < 1e-12);
    // the kernel's bytes a step: its inputs and outputs per token, plus (1 + writes) states
    let per_step = |e: &Estimate, steps: f64| rows(e, Phase::Decode, OpKind::LinearAttention, false).bytes / steps;
    let (bb, sb) = (per_step(&b, 256.0), per_step(&s, 256.0 / al));
    // per step: io x tokens (4, or 4 x 4 verified) + states x (1 + writes); io per token is the
    // same in both
    let states = 4.0 * 3.0 * 32.0 * 128.0 * 128.0 * 4.0; // 4 sequences, 3 layers, fp32 state
    let io_per_token = (bb - 2.0 * states) / 4.0;
    assert!(io_per_token > 0.0);
    let want = 16.0 * io_per_token + (1.0 + (k + 1) as f64) * states;
    assert!((sb / want - 1.0).abs() < 1e-12, "{sb} vs {want}");
}
