//! Many plans in one call: a grid's numeric axes cross the boundary once,
//! are expanded here and evaluated across threads in blocks of consecutive
//! plans. A block prices its plans in grid order and reuses what consecutive
//! plans share (the layout of a TP/PP/EP combination, the prefill of a batch
//! and prompt, the decode step's operators of a batch): the same computation on
//! the same inputs, so every plan equals `engine::estimate` bit for bit and the
//! results do not depend on the thread count.

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::{decode, decode_ops, micro_batch, numbers, prefill, Layout, Numbers, PhaseRun};
use crate::error::{Error, Result};
use crate::graph::Op;
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use rayon::prelude::*;
use std::collections::HashMap;

/// The scalar results of one plan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub ttft_s: f64,
    pub tpot_s: f64,
    pub e2e_s: f64,
    pub throughput_tok_s: f64,
    pub prefill_tok_s: f64,
    pub memory_bytes: f64,
    pub fits: bool,
    pub mfu_prefill: f64,
    pub mbu_decode: f64,
    /// Watts per device over prefill and decode, and joules per output token (NaN: power missing).
    pub power_prefill_w: f64,
    pub power_decode_w: f64,
    pub energy_per_token_j: f64,
    pub devices: u64,
}

impl Summary {
    fn of(n: &Numbers) -> Summary {
        Summary {
            ttft_s: n.ttft_s,
            tpot_s: n.tpot_s.unwrap_or(f64::NAN),
            e2e_s: n.e2e_s,
            throughput_tok_s: n.throughput_tok_s,
            prefill_tok_s: n.prefill_tok_s,
            memory_bytes: n.memory.total_bytes,
            fits: n.memory.fits,
            mfu_prefill: n.prefill.mfu,
            mbu_decode: n.decode.mbu,
            power_prefill_w: n.power.map_or(f64::NAN, |p| p.prefill.watts),
            power_decode_w: n.power.map_or(f64::NAN, |p| p.decode.watts),
            energy_per_token_j: n.power.map_or(f64::NAN, |p| p.energy_per_output_token_j),
            devices: n.parallel.devices,
        }
    }
}

/// The summary of one plan, priced as `engine::estimate` prices it.
pub fn summarize(m: &Model, dev: &Device, plan: &Plan, eff: &Efficiency, proto: ProtocolTable) -> Result<Summary> {
    dev.validate()?;
    eff.validate()?;
    Pricer::new(m, dev, eff, proto).summary(plan)
}

/// A two-entry cache (most recent first): a plan with PP prices its full batch and one
/// micro-batch, so both stay.
struct Two<K, V>([Option<(K, V)>; 2]);

impl<K: PartialEq + Copy, V> Two<K, V> {
    fn new() -> Self {
        Two([None, None])
    }

    fn get(&mut self, key: K, make: impl FnOnce() -> V) -> &V {
        let s = &mut self.0;
        if !matches!(&s[0], Some((k, _)) if *k == key) {
            if matches!(&s[1], Some((k, _)) if *k == key) {
                s.swap(0, 1);
            } else {
                s[1] = s[0].take();
                s[0] = Some((key, make()));
            }
        }
        match &s[0] {
            Some((_, v)) => v,
            None => unreachable!("the slot was just filled"),
        }
    }
}

/// (TP, PP, EP, the sliding-window ring's extra cells): what a layout varies with inside one
/// grid, whose other plan fields are shared.
type LayoutKey = [u64; 4];

/// Prices plans of one model and device in order, reusing the parts consecutive plans share.
/// Keys hold every plan field a part reads that a grid varies; the fields a grid shares come
/// from one base plan, which is what `summary`'s callers pass (a grid's plans, or one plan).
struct Pricer<'a> {
    m: &'a Model,
    dev: &'a Device,
    eff: &'a Efficiency,
    proto: ProtocolTable,
    bw: f64,
    layout: Option<(LayoutKey, Layout<'a>)>,
    /// (layout, chunk, batch, prompt, prefix) -> the priced prefill.
    prefill: Two<(LayoutKey, Option<u64>, u64, u64, u64), PhaseRun>,
    /// (layout, batch) -> one decode step's operators.
    ops: Two<(LayoutKey, u64), Vec<Op>>,
}

impl<'a> Pricer<'a> {
    fn new(m: &'a Model, dev: &'a Device, eff: &'a Efficiency, proto: ProtocolTable) -> Pricer<'a> {
        Pricer {
            m,
            dev,
            eff,
            proto,
            bw: dev.memory_bw(),
            layout: None,
            prefill: Two::new(),
            ops: Two::new(),
        }
    }

    fn summary(&mut self, p: &Plan) -> Result<Summary> {
        p.validate(self.m)?;
        let key = [p.tp, p.pp, p.ep, p.swa_cache_extra];
        if !matches!(&self.layout, Some((k, _)) if *k == key) {
            self.layout = None; // a layout that fails to resolve is not kept
            self.layout = Some((key, Layout::new(self.m, self.dev, p, self.proto)?));
        }
        let Some((_, l)) = &self.layout else {
            unreachable!("the layout was just resolved")
        };
        let (eff, bw) = (self.eff, self.bw);
        let mut phases = |batch: u64| -> (PhaseRun, PhaseRun) {
            let pre = self
                .prefill
                .get((key, p.chunk, batch, p.prompt, p.prefix), || {
                    prefill(l, p, batch, eff, bw, false)
                })
                .clone();
            let ops = self.ops.get((key, batch), || decode_ops(l, p, batch));
            (pre, decode(l, p, batch, ops, eff, bw, false))
        };
        let (pre, dec) = phases(p.batch);
        let micro = micro_batch(p).map(&mut phases);
        let n = numbers(l, self.dev, p, &pre, &dec, micro.as_ref().map(|(a, b)| (a, b)))?;
        Ok(Summary::of(&n))
    }
}

/// The results of many plans as columns: a plan that cannot be priced has NaN numbers, fits
/// false, 0 devices, and the index of its reason in `errors` (each distinct reason once);
/// `error[i]` is -1 where plan i was priced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    pub ttft_s: Vec<f64>,
    pub tpot_s: Vec<f64>,
    pub e2e_s: Vec<f64>,
    pub throughput_tok_s: Vec<f64>,
    pub prefill_tok_s: Vec<f64>,
    pub memory_bytes: Vec<f64>,
    pub mfu_prefill: Vec<f64>,
    pub mbu_decode: Vec<f64>,
    pub power_prefill_w: Vec<f64>,
    pub power_decode_w: Vec<f64>,
    pub energy_per_token_j: Vec<f64>,
    pub fits: Vec<bool>,
    pub devices: Vec<i64>,
    pub error: Vec<i32>,
    pub errors: Vec<String>,
}

impl Columns {
    pub fn len(&self) -> usize {
        self.e2e_s.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn with_capacity(n: usize) -> Columns {
        let f = || Vec::with_capacity(n);
        Columns {
            ttft_s: f(),
            tpot_s: f(),
            e2e_s: f(),
            throughput_tok_s: f(),
            prefill_tok_s: f(),
            memory_bytes: f(),
            mfu_prefill: f(),
            mbu_decode: f(),
            power_prefill_w: f(),
            power_decode_w: f(),
            energy_per_token_j: f(),
            fits: Vec::with_capacity(n),
            devices: Vec::with_capacity(n),
            error: Vec::with_capacity(n),
            errors: Vec::new(),
        }
    }

    /// The summary of plan `i` (None where it could not be priced: see `errors`).
    pub fn get(&self, i: usize) -> Option<Summary> {
        (self.error[i] < 0).then(|| Summary {
            ttft_s: self.ttft_s[i],
            tpot_s: self.tpot_s[i],
            e2e_s: self.e2e_s[i],
            throughput_tok_s: self.throughput_tok_s[i],
            prefill_tok_s: self.prefill_tok_s[i],
            memory_bytes: self.memory_bytes[i],
            fits: self.fits[i],
            mfu_prefill: self.mfu_prefill[i],
            mbu_decode: self.mbu_decode[i],
            power_prefill_w: self.power_prefill_w[i],
            power_decode_w: self.power_decode_w[i],
            energy_per_token_j: self.energy_per_token_j[i],
            devices: self.devices[i] as u64,
        })
    }

    fn push(&mut self, r: Result<Summary>, seen: &mut HashMap<String, i32>) {
        let (s, code) = match r {
            Ok(s) => (s, -1),
            Err(e) => {
                let msg = e.to_string();
                let next = self.errors.len() as i32;
                let code = *seen.entry(msg).or_insert_with_key(|m| {
                    self.errors.push(m.clone());
                    next
                });
                let nan = f64::NAN;
                let s = Summary {
                    ttft_s: nan,
                    tpot_s: nan,
                    e2e_s: nan,
                    throughput_tok_s: nan,
                    prefill_tok_s: nan,
                    memory_bytes: nan,
                    fits: false,
                    mfu_prefill: nan,
                    mbu_decode: nan,
                    power_prefill_w: nan,
                    power_decode_w: nan,
                    energy_per_token_j: nan,
                    devices: 0,
                };
                (s, code)
            }
        };
        self.ttft_s.push(s.ttft_s);
        self.tpot_s.push(s.tpot_s);
        self.e2e_s.push(s.e2e_s);
        self.throughput_tok_s.push(s.throughput_tok_s);
        self.prefill_tok_s.push(s.prefill_tok_s);
        self.memory_bytes.push(s.memory_bytes);
        self.mfu_prefill.push(s.mfu_prefill);
        self.mbu_decode.push(s.mbu_decode);
        self.power_prefill_w.push(s.power_prefill_w);
        self.power_decode_w.push(s.power_decode_w);
        self.energy_per_token_j.push(s.energy_per_token_j);
        self.fits.push(s.fits);
        self.devices.push(s.devices as i64);
        self.error.push(code);
    }

    /// Appends `o`'s rows, its reasons merged into this one's.
    fn append(&mut self, o: Columns, seen: &mut HashMap<String, i32>) {
        let map: Vec<i32> = o
            .errors
            .into_iter()
            .map(|m| {
                let next = self.errors.len() as i32;
                *seen.entry(m).or_insert_with_key(|m| {
                    self.errors.push(m.clone());
                    next
                })
            })
            .collect();
        self.ttft_s.extend(o.ttft_s);
        self.tpot_s.extend(o.tpot_s);
        self.e2e_s.extend(o.e2e_s);
        self.throughput_tok_s.extend(o.throughput_tok_s);
        self.prefill_tok_s.extend(o.prefill_tok_s);
        self.memory_bytes.extend(o.memory_bytes);
        self.mfu_prefill.extend(o.mfu_prefill);
        self.mbu_decode.extend(o.mbu_decode);
        self.power_prefill_w.extend(o.power_prefill_w);
        self.power_decode_w.extend(o.power_decode_w);
        self.energy_per_token_j.extend(o.energy_per_token_j);
        self.fits.extend(o.fits);
        self.devices.extend(o.devices);
        self.error
            .extend(o.error.into_iter().map(|c| if c < 0 { c } else { map[c as usize] }));
    }
}

/// Plans a block prices in order on one thread (the unit of reuse and of parallel work).
const BLOCK: usize = 2048;

/// Runs `f` on all cores (`threads` = 0), or on exactly `threads` threads.
fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    if threads == 0 {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Prices plans `0..n` (`plan(i, &mut p)` writes plan i into `p`, a copy of `base`) in blocks
/// across `threads` threads (0: all cores); the device and efficiencies are checked once.
#[allow(clippy::too_many_arguments)]
fn run(
    m: &Model,
    dev: &Device,
    eff: &Efficiency,
    proto: ProtocolTable,
    base: &Plan,
    n: usize,
    threads: usize,
    plan: impl Fn(usize, &mut Plan) + Sync,
) -> Columns {
    let checked = dev.validate().and_then(|_| eff.validate());
    let block = |b: usize| -> Columns {
        let (lo, hi) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
        let mut out = Columns::with_capacity(hi - lo);
        let mut seen = HashMap::new();
        let mut pricer = Pricer::new(m, dev, eff, proto);
        let mut p = base.clone();
        for i in lo..hi {
            let r = match &checked {
                Ok(()) => {
                    plan(i, &mut p);
                    pricer.summary(&p)
                }
                Err(e) => Err(e.clone()),
            };
            out.push(r, &mut seen);
        }
        out
    };
    let blocks = n.div_ceil(BLOCK);
    let parts: Vec<Columns> = if threads == 1 {
        (0..blocks).map(block).collect()
    } else {
        with_threads(threads, || (0..blocks).into_par_iter().map(block).collect())
    };
    let mut out = Columns::with_capacity(n);
    let mut seen = HashMap::new();
    for part in parts {
        out.append(part, &mut seen);
    }
    out
}

/// Evaluates every plan; `threads` = 0 uses all cores. The plans differ from the first only in
/// a grid's axes (TP, PP, EP, DP, chunk, batch, prompt, output): consecutive plans reuse the
/// parts those leave alone (`Pricer`).
pub fn evaluate(
    m: &Model,
    dev: &Device,
    plans: &[Plan],
    eff: &Efficiency,
    proto: ProtocolTable,
    threads: usize,
) -> Columns {
    let Some(first) = plans.first() else {
        return Columns::default();
    };
    run(m, dev, eff, proto, first, plans.len(), threads, |i, p| {
        p.clone_from(&plans[i])
    })
}

/// The numeric axes of a grid; the plan at index i is their mixed-radix
/// decoding, the last axis (output) fastest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Axes {
    pub tp: Vec<u64>,
    pub pp: Vec<u64>,
    pub ep: Vec<u64>,
    pub dp: Vec<u64>,
    /// Chunked-prefill budgets; 0 means "no chunking".
    pub chunk: Vec<u64>,
    pub batch: Vec<u64>,
    pub prompt: Vec<u64>,
    pub output: Vec<u64>,
    /// The sliding-window ring's extra cells for each chunk value, where the runtime sizes it by
    /// its step (llama.cpp: n_swa + n_ubatch); None: the base plan's `swa_cache_extra`.
    pub chunk_extra: Option<Vec<u64>>,
}

impl Axes {
    fn all(&self) -> [&Vec<u64>; 8] {
        [
            &self.tp,
            &self.pp,
            &self.ep,
            &self.dp,
            &self.chunk,
            &self.batch,
            &self.prompt,
            &self.output,
        ]
    }

    pub fn validate(&self) -> Result<()> {
        let names = ["tp", "pp", "ep", "dp", "chunk", "batch", "prompt", "output"];
        for (name, axis) in names.iter().zip(self.all()) {
            if axis.is_empty() {
                return Err(Error::plan(name, "a grid axis needs at least one value"));
            }
        }
        if self.chunk_extra.as_ref().is_some_and(|x| x.len() != self.chunk.len()) {
            return Err(Error::plan("chunk_extra", "needs one value for each chunk"));
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.all().iter().map(|a| a.len()).product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index into each axis of plan `i`.
    fn indices(&self, mut i: usize) -> [usize; 8] {
        let axes = self.all();
        let mut out = [0usize; 8];
        for k in (0..8).rev() {
            let n = axes[k].len();
            out[k] = i % n;
            i /= n;
        }
        out
    }

    /// The axis values of plan `i`: [tp, pp, ep, dp, chunk, batch, prompt, output].
    pub fn values(&self, i: usize) -> [u64; 8] {
        let (axes, at) = (self.all(), self.indices(i));
        std::array::from_fn(|k| axes[k][at[k]])
    }

    /// Writes plan `i`'s axis values into `p` (the rest of `p` is the grid's base).
    pub fn set(&self, i: usize, p: &mut Plan) {
        let at = self.indices(i);
        let [tp, pp, ep, dp, chunk, batch, prompt, output] = std::array::from_fn(|k| self.all()[k][at[k]]);
        (p.tp, p.pp, p.ep, p.dp) = (tp, pp, ep, dp);
        p.chunk = (chunk > 0).then_some(chunk);
        (p.batch, p.prompt, p.output) = (batch, prompt, output);
        if let Some(x) = &self.chunk_extra {
            p.swa_cache_extra = x[at[4]];
        }
    }

    pub fn plan(&self, base: &Plan, i: usize) -> Plan {
        let mut p = base.clone();
        self.set(i, &mut p);
        p
    }
}

/// Evaluates plans `start..stop` of the grid.
#[allow(clippy::too_many_arguments)]
pub fn grid(
    m: &Model,
    dev: &Device,
    axes: &Axes,
    base: &Plan,
    eff: &Efficiency,
    proto: ProtocolTable,
    threads: usize,
    start: usize,
    stop: usize,
) -> Columns {
    let stop = stop.min(axes.len());
    let start = start.min(stop);
    run(m, dev, eff, proto, base, stop - start, threads, |i, p| {
        axes.set(start + i, p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::tests::h100;
    use crate::engine::estimate;
    use crate::engine::tests::proto;
    use crate::fixtures::{llama31_8b, mixtral_8x7b};

    fn same(a: &Columns, b: &Columns) {
        assert_eq!(a.len(), b.len());
        for i in 0..a.len() {
            assert_eq!(a.error[i] < 0, b.error[i] < 0);
            for (x, y) in [(a.e2e_s[i], b.e2e_s[i]), (a.memory_bytes[i], b.memory_bytes[i])] {
                assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
            }
        }
    }

    #[test]
    fn thread_count_does_not_change_results() {
        let plans: Vec<Plan> = (1..5000)
            .map(|i| Plan {
                tp: [1, 2, 4][i as usize % 3],
                ..Plan::new(i % 17 + 1, 64 * (i % 300 + 1), 1 + i % 50, 0.9)
            })
            .collect();
        let eff = Efficiency::uncalibrated();
        let a = evaluate(&llama31_8b(), &h100(), &plans, &eff, proto(), 1);
        let b = evaluate(&llama31_8b(), &h100(), &plans, &eff, proto(), 2);
        same(&a, &b);
    }

    /// Every plan of a grid priced with reuse equals the same plan priced alone, bit for bit,
    /// errors included: PP (a full batch and a micro-batch per plan), chunked prefill, TP that
    /// does not divide, an MoE model, calibrated efficiencies.
    #[test]
    fn reuse_changes_no_bit() {
        let eff = Efficiency {
            eta_compute: 0.6,
            eta_mem: 0.7,
            overlap: Some(0.4),
            t_launch_s: 3e-6,
            t_step_s: 1e-4,
            t_request_s: 2e-3,
            ..Efficiency::uncalibrated()
        };
        let axes = Axes {
            tp: vec![1, 2, 3],
            pp: vec![1, 2],
            ep: vec![1],
            dp: vec![1, 2],
            chunk: vec![0, 512],
            batch: vec![1, 7, 64],
            prompt: vec![100, 1132],
            output: vec![1, 2, 300],
            chunk_extra: None,
        };
        // a device with both powers and a plan with the memory-bound share: power priced too
        let mut dev = h100();
        dev.idle_w = Some(70.0);
        for m in [llama31_8b(), mixtral_8x7b()] {
            let mut base = Plan::new(1, 1, 1, 0.9);
            base.kv_pad = 256;
            base.decode_graphs = true;
            base.power_rho = Some(0.5);
            let got = grid(&m, &dev, &axes, &base, &eff, proto(), 2, 0, axes.len());
            for i in 0..axes.len() {
                let p = axes.plan(&base, i);
                match estimate(&m, &dev, &p, &eff, proto(), false) {
                    Ok(e) => {
                        let s = got.get(i).expect("priced alone, priced in the grid");
                        assert_eq!(s.e2e_s.to_bits(), e.e2e_s.to_bits(), "plan {i}");
                        assert_eq!(s.ttft_s.to_bits(), e.ttft_s.to_bits(), "plan {i}");
                        assert_eq!(s.throughput_tok_s.to_bits(), e.throughput_tok_s.to_bits(), "plan {i}");
                        assert_eq!(s.memory_bytes.to_bits(), e.memory.total_bytes.to_bits(), "plan {i}");
                        assert_eq!(s.mbu_decode.to_bits(), e.decode.mbu.to_bits(), "plan {i}");
                        let ept = e.power.map_or(f64::NAN, |w| w.energy_per_output_token_j);
                        assert_eq!(s.energy_per_token_j.to_bits(), ept.to_bits(), "plan {i}");
                        assert_eq!(p.pp > 1, e.power.is_none(), "plan {i}: power but with PP");
                    }
                    Err(e) => {
                        assert!(got.error[i] >= 0, "plan {i}");
                        assert_eq!(got.errors[got.error[i] as usize], e.to_string());
                    }
                }
            }
        }
    }

    #[test]
    fn grid_expansion_is_mixed_radix_with_output_fastest() {
        let axes = Axes {
            tp: vec![1, 2],
            pp: vec![1],
            ep: vec![1],
            dp: vec![1],
            chunk: vec![0, 512],
            batch: vec![1, 8, 64],
            prompt: vec![128],
            output: vec![16, 256],
            chunk_extra: Some(vec![7, 9]),
        };
        assert_eq!(axes.len(), 2 * 2 * 3 * 2);
        assert_eq!(axes.values(0), [1, 1, 1, 1, 0, 1, 128, 16]);
        assert_eq!(axes.values(1), [1, 1, 1, 1, 0, 1, 128, 256]);
        assert_eq!(axes.values(2), [1, 1, 1, 1, 0, 8, 128, 16]);
        assert_eq!(axes.values(23), [2, 1, 1, 1, 512, 64, 128, 256]);
        let base = Plan::new(1, 1, 1, 0.9);
        let p = axes.plan(&base, 23);
        assert_eq!((p.tp, p.chunk, p.batch, p.output), (2, Some(512), 64, 256));
        assert_eq!((axes.plan(&base, 0).swa_cache_extra, p.swa_cache_extra), (7, 9));
        let r = grid(
            &llama31_8b(),
            &h100(),
            &axes,
            &base,
            &Efficiency::uncalibrated(),
            proto(),
            2,
            0,
            24,
        );
        assert_eq!(r.len(), 24);
        let direct = summarize(&llama31_8b(), &h100(), &p, &Efficiency::uncalibrated(), proto()).unwrap();
        // every field alike, the missing power's NaNs included (NaN != NaN: compared as printed)
        assert_eq!(format!("{:?}", r.get(23).unwrap()), format!("{direct:?}"));
    }
}
