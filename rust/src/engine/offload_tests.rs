//! Offload in the static engine: what the host runs and holds, in closed form, and the invariants
//! a sweep over the placement must hold.

use super::*;
use crate::device::tests::h100;
use crate::fixtures::mixtral_8x7b;
use crate::graph::HOST;
use crate::plan::Host;

pub(crate) use crate::collectives::tests::proto;

fn host(eta: f64, rt_us: f64) -> Host {
    Host {
        memory_bw_gbs: 100.0,
        tflops: 1e6, // never binding: the host's time is its memory's
        memory_gb: 1000.0,
        link_gbs: 50.0,
        eta_mem: eta,
        eta_link: 1.0,
        t_round_trip_s: rt_us * 1e-6,
        device_min_tokens: Some(32),
    }
}

fn offload(expert_layers: u64, host_layers: u64, h: Host) -> Plan {
    Plan {
        offload: Some(Offload {
            expert_layers,
            host_layers,
            streamed_bytes: 0.0,
            host: h,
        }),
        ..Plan::new(1, 8, 65, 0.9)
    }
}

fn run(m: &Model, p: &Plan) -> Estimate {
    estimate(m, &h100(), p, &Efficiency::uncalibrated(), proto(), true).unwrap()
}

fn host_cost(e: &Estimate, phase: Phase) -> Cost {
    let mut c = Cost::default();
    for r in e.breakdown.iter().filter(|r| r.phase == phase && r.group == HOST) {
        c += r.cost;
    }
    c
}

#[test]
fn the_host_reads_the_two_routed_experts_of_each_offloaded_layer_each_token_at_its_bandwidth() {
    let m = mixtral_8x7b();
    let e = run(&m, &offload(8, 0, host(0.5, 0.0)));
    let c = host_cost(&e, Phase::Decode);
    // 64 decode tokens, top-2 of 8 experts on 8 layers, gate/up/down in bf16
    let expert = 3.0 * 4096.0 * 14336.0 * 2.0;
    let acts = c.bytes - 64.0 * 8.0 * 2.0 * expert;
    assert!(acts > 0.0 && acts < 1e-3 * c.bytes, "{acts}");
    assert!((c.time_s - c.bytes / 50e9).abs() < 1e-12 * c.time_s);
}

#[test]
fn a_round_trip_a_token_per_offloaded_layer_carries_the_hidden_state_both_ways() {
    let m = mixtral_8x7b();
    let base = run(&m, &offload(8, 0, host(1.0, 0.0)));
    let e = run(&m, &offload(8, 0, host(1.0, 250.0)));
    let dt = e.decode.time_s - base.decode.time_s;
    assert!((dt - 64.0 * 8.0 * 250e-6).abs() < 1e-9, "{dt}");
    let trip = e
        .breakdown
        .iter()
        .find(|r| r.phase == Phase::Decode && r.kind == OpKind::HostRoundTrip)
        .unwrap();
    let want = 64.0 * 8.0 * (250e-6 + 2.0 * 4096.0 * 2.0 / 50e9);
    assert!((trip.cost.time_s - want).abs() < 1e-12, "{}", trip.cost.time_s);
}

#[test]
fn the_two_tiers_hold_every_weight_once_and_speed_falls_with_each_layer_offloaded() {
    let m = mixtral_8x7b();
    let all = run(&m, &Plan::new(1, 8, 65, 0.9));
    let mut last = 0.0;
    for n in 0..=32u64 {
        let e = run(&m, &offload(n, 0, host(0.6, 50.0)));
        let h = e.memory.host.unwrap();
        let sum = e.memory.weights_bytes + h.weights_bytes;
        assert!((sum - all.memory.weights_bytes).abs() < 1e-9 * sum, "n={n}");
        assert!(e.tpot_s.unwrap() > last, "n={n}");
        last = e.tpot_s.unwrap();
    }
}

#[test]
fn a_prefill_step_of_at_least_32_tokens_copies_the_host_experts_to_the_device() {
    let m = mixtral_8x7b();
    let mut p = offload(8, 0, host(0.5, 0.0));
    p.prompt = 64;
    let e = run(&m, &p);
    let c = host_cost(&e, Phase::Prefill);
    // 64 tokens route to all 8 experts, nearly surely: each offloaded layer's experts cross the link
    let experts = 8.0 * (1.0 - (1.0 - 2.0 / 8.0f64).powi(64));
    let weights = 8.0 * experts * 3.0 * 4096.0 * 14336.0 * 2.0;
    // the operators' activations are priced with them (half a percent here)
    assert!(
        c.bytes > weights && c.bytes / weights - 1.0 < 1e-2,
        "{}",
        c.bytes / weights
    );
    assert!((c.time_s - c.bytes / 50e9).abs() < 1e-9 * c.time_s);
}

#[test]
fn offloaded_layers_take_the_lm_head_and_their_share_of_the_kv_cache() {
    let m = llama31_8b_dense();
    let all = run(&m, &Plan::new(1, 8, 65, 0.9));
    let e = run(&m, &offload(0, 8, host(1.0, 0.0)));
    let h = e.memory.host.unwrap();
    assert!((h.kv_bytes - all.memory.kv_bytes / 4.0).abs() < 1e-9 * h.kv_bytes);
    assert!((e.memory.kv_bytes - all.memory.kv_bytes * 0.75).abs() < 1e-9 * e.memory.kv_bytes);
    // the LM head runs on the host: its row sits under HOST, none on the device
    assert!(e
        .breakdown
        .iter()
        .any(|r| r.kind == OpKind::LmHead && r.group == HOST && r.phase == Phase::Decode));
    assert!(!e
        .breakdown
        .iter()
        .any(|r| r.kind == OpKind::LmHead && r.group != HOST && r.phase == Phase::Decode));
}

fn llama31_8b_dense() -> Model {
    crate::fixtures::llama31_8b()
}

#[test]
fn offload_is_refused_where_it_cannot_run() {
    let m = crate::fixtures::llama31_8b();
    let bad = [
        (offload(1, 0, host(1.0, 0.0)), "expert_layers"),
        (offload(0, 33, host(1.0, 0.0)), "host_layers"),
        (offload(0, 4, host(0.0, 0.0)), "host.eta_mem"),
        (offload(0, 4, host(1.0, -1.0)), "host.t_round_trip_s"),
        (
            Plan {
                tp: 2,
                ..offload(0, 4, host(1.0, 0.0))
            },
            "offload",
        ),
    ];
    for (p, field) in bad {
        let err = estimate(&m, &h100(), &p, &Efficiency::uncalibrated(), proto(), false)
            .err()
            .unwrap();
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
}
