//! Power and energy that follow the workload (spec 60): a device draws
//!
//! ```text
//! P = P_idle + u (TDP - P_idle),   u = max(u_c, rho u_m)
//! ```
//!
//! over a phase, with `u_c` and `u_m` the shares of the phase's time its operators spend at the
//! compute and at the memory roof (the engine's own per-operator times, summed), and `rho` the
//! share of the dynamic power range a memory-bound phase draws (a constants row fitted to
//! published measurements). `P_idle` and `TDP` are the catalog's, each sourced; a device
//! without either, or an engine without `rho`, reports power as missing, never a default.

use crate::device::Device;
use crate::engine::PhaseTotals;
use crate::plan::Plan;
use serde::Serialize;

/// One phase's busy fraction and the power one device draws over it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PhasePower {
    /// Compute occupancy: the phase's compute-roof time over its time.
    pub u_compute: f64,
    /// Memory occupancy: the phase's memory-roof time over its time.
    pub u_memory: f64,
    /// `max(u_compute, rho u_memory)`, at most 1.
    pub utilisation: f64,
    /// Watts one device draws over the phase.
    pub watts: f64,
}

/// A plan's power and energy: per device and phase, and over the devices of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Power {
    pub prefill: PhasePower,
    pub decode: PhasePower,
    /// Joules one replica's devices draw over one request round (prefill and decode).
    pub energy_j: f64,
    /// `energy_j` over the round's output tokens (prefill included).
    pub energy_per_output_token_j: f64,
    pub idle_w: f64,
    pub tdp_w: f64,
    pub rho: f64,
}

/// The compute and memory occupancies of `time_s` seconds of which `compute_s` are at the
/// compute roof and `memory_s` at the memory roof, and the busy fraction `max(u_c, rho u_m)`
/// (at most 1); no time is no occupancy.
pub fn occupancy(compute_s: f64, memory_s: f64, time_s: f64, rho: f64) -> (f64, f64, f64) {
    if time_s > 0.0 {
        let (c, m) = (compute_s / time_s, memory_s / time_s);
        (c, m, c.max(rho * m).clamp(0.0, 1.0))
    } else {
        (0.0, 0.0, 0.0)
    }
}

/// The busy fraction and power of one phase (a phase of no time draws idle power).
pub fn phase(t: &PhaseTotals, idle_w: f64, tdp_w: f64, rho: f64) -> PhasePower {
    let (u_compute, u_memory, utilisation) = occupancy(t.compute_s, t.memory_s, t.time_s, rho);
    PhasePower {
        u_compute,
        u_memory,
        utilisation,
        watts: idle_w + utilisation * (tdp_w - idle_w),
    }
}

/// Why a plan has no power figure, or None when it has one.
pub fn missing(dev: &Device, plan: &Plan) -> Option<String> {
    let lacks: Vec<&str> = [("idle_w", dev.idle_w), ("tdp_w", dev.tdp_w)]
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| *k)
        .collect();
    if !lacks.is_empty() {
        return Some(format!(
            "{} has no sourced {} in the catalog",
            dev.name,
            lacks.join(" or ")
        ));
    }
    if plan.power_rho.is_none() {
        return Some("the memory-bound power share (constants: power_memory_rho) is not fitted".into());
    }
    if plan.pp > 1 {
        // the stages idle through the pipeline's fill and drain: not modelled per stage yet
        return Some("power with pipeline parallelism (stages idle through fill and drain) is not modelled".into());
    }
    None
}

/// The plan's power from its priced phases, or None (see `missing`).
pub fn of(dev: &Device, plan: &Plan, prefill: &PhaseTotals, decode: &PhaseTotals) -> Option<Power> {
    if missing(dev, plan).is_some() {
        return None;
    }
    let (idle_w, tdp_w, rho) = (dev.idle_w?, dev.tdp_w?, plan.power_rho?);
    let (pre, dec) = (phase(prefill, idle_w, tdp_w, rho), phase(decode, idle_w, tdp_w, rho));
    // the devices of one replica, each drawing the phase's power for the phase's time
    let devices = plan.moe_group() as f64;
    let energy_j = devices * (pre.watts * prefill.time_s + dec.watts * decode.time_s);
    let tokens = (plan.batch * plan.attention_dp * plan.output) as f64;
    Some(Power {
        prefill: pre,
        decode: dec,
        energy_j,
        energy_per_output_token_j: energy_j / tokens,
        idle_w,
        tdp_w,
        rho,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::tests::h100;
    use crate::engine::estimate;
    use crate::engine::tests::proto;
    use crate::fixtures::llama31_8b;
    use crate::plan::Efficiency;

    /// Llama-3.1-8B on an H100 with an idle power and a memory-bound share (test values).
    fn priced(batch: u64, prompt: u64, output: u64, rho: f64) -> Power {
        let mut dev = h100();
        dev.idle_w = Some(70.0);
        let plan = Plan {
            power_rho: Some(rho),
            ..Plan::new(batch, prompt, output, 0.9)
        };
        let e = estimate(&llama31_8b(), &dev, &plan, &Efficiency::uncalibrated(), proto(), false).unwrap();
        e.power.expect("idle, TDP and rho given")
    }

    #[test]
    fn spec_60_checks_prefill_heavy_draws_more_and_power_rises_with_batch() {
        // a prefill-heavy request (4096 in, 8 out) draws more than a decode-heavy one (8 in, 512 out)
        let (pre, dec) = (priced(1, 4096, 8, 0.6), priced(1, 8, 512, 0.6));
        assert!(
            pre.prefill.watts > dec.decode.watts,
            "{} vs {}",
            pre.prefill.watts,
            dec.decode.watts
        );
        // decode power rises with batch at a fixed shape; never past TDP
        let mut last = 0.0;
        for b in [1, 4, 16, 64, 256] {
            let w = priced(b, 1024, 256, 0.6).decode.watts;
            assert!(w >= last && w <= 700.0, "batch {b}: {w} W after {last} W");
            last = w;
        }
        // energy per token is the round's energy over its output tokens
        let p = priced(8, 1024, 256, 0.6);
        assert!((p.energy_per_output_token_j - p.energy_j / (8.0 * 256.0)).abs() < 1e-12 * p.energy_j);
    }

    #[test]
    fn a_device_without_idle_power_or_an_unfitted_share_has_none() {
        let plan = Plan {
            power_rho: Some(0.5),
            ..Plan::new(1, 128, 16, 0.9)
        };
        assert!(missing(&h100(), &plan).unwrap().contains("idle_w"));
        let mut dev = h100();
        dev.idle_w = Some(70.0);
        assert!(missing(&dev, &Plan::new(1, 128, 16, 0.9))
            .unwrap()
            .contains("power_memory_rho"));
        assert!(missing(&dev, &plan).is_none());
    }

    fn totals(compute_s: f64, memory_s: f64, time_s: f64) -> PhaseTotals {
        PhaseTotals {
            compute_s,
            memory_s,
            time_s,
            ..Default::default()
        }
    }

    #[test]
    fn power_is_linear_in_the_busier_roof() {
        // compute-bound: u = u_c; memory-bound: u = rho u_m; the linear interpolation between them
        let p = phase(&totals(0.9, 0.2, 1.0), 60.0, 700.0, 0.5);
        assert!((p.utilisation - 0.9).abs() < 1e-12 && (p.watts - (60.0 + 0.9 * 640.0)).abs() < 1e-9);
        let d = phase(&totals(0.05, 0.8, 1.0), 60.0, 700.0, 0.5);
        assert!((d.utilisation - 0.4).abs() < 1e-12 && (d.watts - (60.0 + 0.4 * 640.0)).abs() < 1e-9);
        // an idle phase draws idle power; occupancy never takes power past TDP
        assert_eq!(phase(&totals(0.0, 0.0, 0.0), 60.0, 700.0, 0.5).watts, 60.0);
        assert_eq!(phase(&totals(2.0, 0.0, 1.0), 60.0, 700.0, 0.5).watts, 700.0);
    }
}
