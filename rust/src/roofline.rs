//! Pricing one operator (spec 30):
//!
//! ```text
//! compute = F / (P * eta_compute)
//! memory  = B / (BW * eta_mem)
//! time    = max(compute, memory) + t_launch     (per kernel launched)
//! ```
//!
//! with the calibration's `overlap` o in [0, 1] blending the roofline's
//! max(compute, memory) (o = 1, the bound) with the two in series (o = 0):
//! `o max(c, m) + (1 - o)(c + m)`.
//!
//! and the exact sum of that price over a range of decode contexts, in
//! closed form: the keys read, `k(L)` (`DecodeKeys`), are constant or `L - shift` on
//! runs of contexts; where affine, each piece of max(compute, memory) is affine
//! between at most one crossover, and arithmetic series sum it exactly.

use crate::attention::KeyRun;
use crate::graph::Op;
use crate::plan::Efficiency;
use std::ops::AddAssign;

/// Totals of priced operators (all invocations).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Cost {
    pub flops: f64,
    pub bytes: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    pub comm_s: f64,
    pub launch_s: f64,
    pub time_s: f64,
    pub launches: f64,
}

impl AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.flops += o.flops;
        self.bytes += o.bytes;
        self.compute_s += o.compute_s;
        self.memory_s += o.memory_s;
        self.comm_s += o.comm_s;
        self.launch_s += o.launch_s;
        self.time_s += o.time_s;
        self.launches += o.launches;
    }
}

impl Cost {
    /// The names of `values`, in its order (the breakdown's columns).
    pub const FIELDS: [&'static str; 8] = [
        "launches",
        "flops",
        "bytes",
        "compute_s",
        "memory_s",
        "comm_s",
        "launch_s",
        "time_s",
    ];

    /// Every number of the cost, in the order of `FIELDS`.
    pub fn values(&self) -> [f64; 8] {
        [
            self.launches,
            self.flops,
            self.bytes,
            self.compute_s,
            self.memory_s,
            self.comm_s,
            self.launch_s,
            self.time_s,
        ]
    }

    pub fn scaled(self, s: f64) -> Cost {
        Cost {
            flops: self.flops * s,
            bytes: self.bytes * s,
            compute_s: self.compute_s * s,
            memory_s: self.memory_s * s,
            comm_s: self.comm_s * s,
            launch_s: self.launch_s * s,
            time_s: self.time_s * s,
            launches: self.launches * s,
        }
    }

    /// Pure overhead time (calibrated per-layer and per-step terms).
    pub fn overhead(seconds: f64) -> Cost {
        Cost {
            time_s: seconds,
            ..Default::default()
        }
    }
}

/// Rates of one op: seconds per FLOP and per byte at the given efficiencies, compute seconds
/// that do not scale with FLOPs (a fitted attention kernel's work items), and the launch time.
#[derive(Clone, Copy)]
struct Rates {
    per_flop: f64,
    per_byte: f64,
    compute_extra: f64,
    launch: f64,
    overlap: f64,
}

impl Rates {
    /// Body time from the roofline max and the serial sum.
    fn blend(&self, max: f64, sum: f64) -> f64 {
        self.overlap * max + (1.0 - self.overlap) * sum
    }
}

fn rates(op: &Op, bw: f64, eff: &Efficiency) -> Rates {
    if let Some(h) = op.host {
        // the host's memory and compute (or the host link), at their own efficiencies: the
        // roofline max, no kernel launched from the device's queue
        return Rates {
            per_flop: h.per_flop,
            per_byte: h.per_byte,
            compute_extra: 0.0,
            launch: 0.0,
            overlap: 1.0,
        };
    }
    if let Some(a) = op.attention.and_then(|p| eff.attention(p)) {
        // the runtime's own attention kernel, fitted on its measurements: the roofline max
        return Rates {
            per_flop: 1.0 / (op.peak * a.eta_compute),
            per_byte: 1.0 / (bw * a.eta_mem),
            compute_extra: op.items * a.t_item_s,
            launch: op.launches * a.t_floor_s,
            overlap: 1.0,
        };
    }
    let eta_mem = if op.grouped {
        eff.eta_moe.unwrap_or(eff.eta_mem)
    } else {
        eff.eta_mem
    };
    let eta_compute = if op.quantized {
        op.role
            .and_then(|r| eff.eta_compute_quant_roles[r as usize])
            .or(eff.eta_compute_quant)
            .unwrap_or(eff.eta_compute)
    } else {
        eff.eta_compute
    };
    Rates {
        per_flop: 1.0 / (op.peak * eta_compute),
        per_byte: 1.0 / (bw * eta_mem),
        compute_extra: 0.0,
        launch: op.launches * eff.t_launch_s,
        overlap: if op.grouped {
            eff.overlap_moe.or(eff.overlap).unwrap_or(1.0)
        } else {
            eff.overlap.unwrap_or(1.0)
        },
    }
}

/// One invocation-set of `op` (all `repeat` invocations) at decode key count `k`.
pub fn price(op: &Op, k: f64, bw: f64, eff: &Efficiency) -> Cost {
    let r = rates(op, bw, eff);
    let flops = op.f0 + op.f1 * k;
    let bytes = op.b0 + op.b1 * k;
    let (compute_s, memory_s, body) = if op.kind.is_comm() {
        (0.0, 0.0, op.comm_s)
    } else {
        let c = flops * r.per_flop + r.compute_extra;
        let m = bytes * r.per_byte;
        (c, m, r.blend(c.max(m), c + m))
    };
    Cost {
        flops,
        bytes,
        compute_s,
        memory_s,
        comm_s: if op.kind.is_comm() { op.comm_s } else { 0.0 },
        launch_s: r.launch,
        time_s: body + r.launch,
        launches: op.launches,
    }
    .scaled(op.repeat)
}

/// Sum over integer L in [a, b] of (x0 + x1 L).
fn series(x0: f64, x1: f64, a: u64, b: u64) -> f64 {
    if b < a {
        return 0.0;
    }
    let n = (b - a + 1) as f64;
    n * x0 + x1 * (a as f64 + b as f64) * n / 2.0
}

/// Exact sum of `price(op, keys(L))` over decode contexts L in [lo, hi] (`op.keys`).
pub fn price_range(op: &Op, lo: u64, hi: u64, bw: f64, eff: &Efficiency) -> Cost {
    if hi < lo {
        return Cost::default();
    }
    if op.f1 == 0.0 && op.b1 == 0.0 {
        return price(op, 0.0, bw, eff).scaled((hi - lo + 1) as f64);
    }
    let mut total = Cost::default();
    for (a, b, run) in op.keys.runs(lo, hi) {
        total += match run {
            KeyRun::Const(k) => price(op, k as f64, bw, eff).scaled((b - a + 1) as f64),
            KeyRun::Shift(d) => affine_sum(op, a - d, b - d, bw, eff),
        };
    }
    total
}

/// Sum with k = L over [a, b], splitting at the compute/memory crossover.
fn affine_sum(op: &Op, a: u64, b: u64, bw: f64, eff: &Efficiency) -> Cost {
    let r = rates(op, bw, eff);
    let n = (b - a + 1) as f64;
    let (c0, c1) = (op.f0 * r.per_flop + r.compute_extra, op.f1 * r.per_flop);
    let (m0, m1) = (op.b0 * r.per_byte, op.b1 * r.per_byte);
    let compute_s = series(c0, c1, a, b);
    let memory_s = series(m0, m1, a, b);
    // diff(L) = (c0 - m0) + (c1 - m1) L; compute wins where diff >= 0.
    let (d0, d1) = (c0 - m0, c1 - m1);
    let max = if d1 == 0.0 {
        if d0 >= 0.0 {
            compute_s
        } else {
            memory_s
        }
    } else {
        let root = -d0 / d1;
        if d1 > 0.0 {
            // memory-bound below the root, compute-bound from ceil(root) on
            let s = root.ceil().clamp(a as f64, b as f64 + 1.0) as u64;
            let below = if s > a { series(m0, m1, a, s - 1) } else { 0.0 };
            below + series(c0, c1, s, b)
        } else {
            // compute-bound up to floor(root), memory-bound above
            let s = root.floor().clamp(a as f64 - 1.0, b as f64);
            if s < a as f64 {
                memory_s
            } else {
                let s = s as u64;
                series(c0, c1, a, s) + series(m0, m1, s + 1, b)
            }
        }
    };
    let body = r.blend(max, compute_s + memory_s);
    Cost {
        flops: series(op.f0, op.f1, a, b),
        bytes: series(op.b0, op.b1, a, b),
        compute_s,
        memory_s,
        comm_s: 0.0,
        launch_s: r.launch * n,
        time_s: body + r.launch * n,
        launches: op.launches * n,
    }
    .scaled(op.repeat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::DecodeKeys;
    use crate::graph::{OpKind, MODEL_LEVEL};
    use proptest::prelude::*;

    fn op(f0: f64, f1: f64, b0: f64, b1: f64, window: Option<u64>) -> Op {
        keyed(f0, f1, b0, b1, DecodeKeys::exact(window))
    }

    fn keyed(f0: f64, f1: f64, b0: f64, b1: f64, keys: DecodeKeys) -> Op {
        Op::compute(OpKind::Attention, MODEL_LEVEL, 3.0, 1e12, (f0, f1), (b0, b1), 0.0, keys)
    }

    #[test]
    fn a_fitted_attention_kernel_is_its_floor_plus_the_roofline_with_its_items() {
        // t = floor + max(F / (P eta_c) + items t_item, B / (BW eta_m)), compute side here
        let mut a = op(4e9, 0.0, 1e6, 0.0, None);
        a.repeat = 1.0;
        a.attention = Some(crate::graph::AttnPhase::Prefill);
        a.items = 256.0;
        let k = crate::plan::AttnEff {
            eta_compute: 0.5,
            eta_mem: 0.8,
            t_floor_s: 1e-5,
            t_item_s: 2e-8,
        };
        let eff = Efficiency {
            attention_prefill: Some(k),
            ..Efficiency::uncalibrated()
        };
        let c = price(&a, 0.0, 1e12, &eff);
        let compute = 4e9 / (1e12 * 0.5) + 256.0 * 2e-8;
        assert!((c.time_s - (1e-5 + compute)).abs() < 1e-15);
        assert!((c.compute_s - compute).abs() < 1e-15);
        // memory-bound: the items hide under the memory time
        a.b0 = 1e10;
        let m = price(&a, 0.0, 1e12, &eff);
        assert!((m.time_s - (1e-5 + 1e10 / (1e12 * 0.8))).abs() < 1e-15);
        // the decode kernel is not the prefill one's: unfitted, it is any kernel
        a.attention = Some(crate::graph::AttnPhase::Decode);
        let u = price(&a, 0.0, 1e12, &eff);
        assert_eq!(u.time_s, 1e10 / 1e12);
    }

    #[test]
    fn gemm_closed_form() {
        // M=N=K=8192 bf16 on a 989.4 TFLOPS device at eta 1.
        let n = 8192.0_f64;
        let g = Op {
            kind: OpKind::QkvProj,
            peak: 989.4e12,
            repeat: 1.0,
            ..op(2.0 * n * n * n, 0.0, 3.0 * n * n * 2.0, 0.0, None)
        };
        let c = price(&g, 0.0, 3350e9, &Efficiency::uncalibrated());
        assert_eq!(c.time_s, 2.0 * 8192f64.powi(3) / 989.4e12);
        assert_eq!(c.compute_s, c.time_s);
        assert!(c.memory_s < c.compute_s);
    }

    fn brute(o: &Op, lo: u64, hi: u64, eff: &Efficiency) -> Cost {
        let mut t = Cost::default();
        for l in lo..=hi {
            t += price(o, o.keys.keys(l) as f64, 1e9, eff);
        }
        t
    }

    proptest! {
        #[test]
        fn closed_form_sum_equals_the_loop(
            f0 in 0.0f64..1e7, f1 in 0.0f64..1e5, b0 in 0.0f64..1e4, b1 in 0.0f64..1e2,
            lo in 1u64..9000, len in 0u64..3000, w in proptest::option::of(1u64..5000),
            launch in 0.0f64..1e-5, overlap in proptest::option::of(0.0f64..=1.0),
            extra in prop_oneof![Just(0u64), 0u64..3000], pad in prop_oneof![Just(1u64), 1u64..300],
            skip in any::<bool>(), fitted_kernel in any::<bool>(), items in 0.0f64..1e4, t_item in 0.0f64..1e-7,
        ) {
            let mut o = keyed(f0, f1, b0, b1, DecodeKeys { window: w, cache_extra: extra, pad, skip_masked_tail: skip, chunk: None });
            o.attention = Some(crate::graph::AttnPhase::Decode);
            o.items = items;
            // a fitted attention kernel adds compute seconds that do not scale with the keys
            let kernel = fitted_kernel.then_some(crate::plan::AttnEff { eta_compute: 0.4, eta_mem: 0.75, t_floor_s: 1.2e-5, t_item_s: t_item });
            let eff = Efficiency { eta_compute: 0.7, eta_mem: 0.8, eta_moe: None, eta_compute_quant: None, eta_compute_quant_roles: [None; crate::weights::N_ROLES], overlap, overlap_moe: None, t_launch_s: launch, t_layer_s: 0.0, t_step_s: 0.0, t_request_s: 0.0, attention_prefill: None, attention_decode: kernel };
            let hi = lo + len;
            let a = price_range(&o, lo, hi, 1e9, &eff);
            let b = brute(&o, lo, hi, &eff);
            for (x, y) in [(a.time_s, b.time_s), (a.flops, b.flops), (a.bytes, b.bytes),
                           (a.compute_s, b.compute_s), (a.memory_s, b.memory_s), (a.launches, b.launches)] {
                prop_assert!((x - y).abs() <= 1e-9 * y.abs().max(1e-30), "{} vs {}", x, y);
            }
        }
    }
}
