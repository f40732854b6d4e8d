//! The calibration's objective (spec 50) in the core: every measured row, decomposed once at
//! efficiency 1 into its operators' compute and memory times, predicted under a population of
//! candidate parameters in one call, the candidates in parallel.
//!
//! Under parameters (eta_mem, eta_compute, t_launch_us, t_step_us, eta_moe, eta_compute_quant,
//! routing_skew, overlap, overlap_moe) and one quantized-GEMM efficiency per weight format, a
//! row's time is
//!
//! ```text
//! T = sum_ops [o max(c, m) + (1 - o)(c + m)] + comm + launches t_launch + steps t_step
//! ```
//!
//! with `c` the operator's compute time over its compute efficiency (eta_compute; a quantized
//! GEMM its format's, else eta_compute_quant), `m` its memory time over eta_mem (grouped
//! routed-expert kernels: eta_moe and overlap_moe), and the expert GEMMs' weight reads
//! following the distinct experts their tokens touch under the candidate's routing skew:
//! `m + W (D(T, s) - D(T, 0))` (`graph::Routing`). A rate row predicts work / T, a time row T in
//! ms; the ratio is observed over predicted speed, so > 1 is faster than predicted.

use crate::error::{Error, Result};
use crate::graph::Routing;
use rayon::prelude::*;

/// The parameters a candidate sets, in this order.
pub const PARAMS: [&str; 9] = [
    "eta_mem",
    "eta_compute",
    "t_launch_us",
    "t_step_us",
    "eta_moe",
    "eta_compute_quant",
    "routing_skew",
    "overlap",
    "overlap_moe",
];

/// One routed-expert weight read whose bytes follow the routing: an operator of MoE group
/// `group`, memory time `w` per distinct expert, the `tokens`-th token count of its group, `d0`
/// distinct experts at skew 0.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ExpertRead {
    group: usize,
    tokens: usize,
    w: f64,
    d0: f64,
}

/// No routed read: an operator whose memory time does not follow the routing skew.
const NO_READ: u32 = u32::MAX;

/// Many decomposed rows, their operators packed row after row (row `i`'s are
/// `start[i]..start[i + 1]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rows {
    n: usize,
    start: Vec<usize>,
    c: Vec<f64>,
    m: Vec<f64>,
    /// The `reads` index of an operator whose bytes follow the routing, `NO_READ` elsewhere.
    read: Vec<u32>,
    /// Which efficiencies price an operator: bit 0 set for a grouped expert kernel (eta_moe,
    /// overlap_moe), the rest the compute efficiency's index (0 eta_compute, 1 eta_compute_quant,
    /// 2 + f weight format f's own).
    class: Vec<u32>,
    reads: Vec<ExpertRead>,
    /// Per MoE group: (experts, top-k) and the distinct token counts its reads route.
    groups: Vec<(u64, u64, Vec<f64>)>,
    fixed: Vec<f64>,
    launches: Vec<f64>,
    steps: Vec<f64>,
    work: Vec<f64>,
    time_ms: Vec<bool>,
    observed: Vec<f64>,
    formats: usize,
}

/// The arrays `Rows::new` takes: per operator (row-major, `n x width`) and per row.
pub struct RowArrays<'a> {
    pub width: usize,
    pub len: &'a [i64],
    pub compute: &'a [f64],
    pub memory: &'a [f64],
    pub expert: &'a [bool],
    pub quant: &'a [bool],
    pub fmt: &'a [i64],
    pub moe_w: &'a [f64],
    pub moe_t: &'a [f64],
    pub moe_d0: &'a [f64],
    /// Index into `moe_ek` of an operator's (experts, top-k), -1 where its reads do not follow
    /// the routing.
    pub moe_group: &'a [i64],
    pub moe_ek: &'a [(u64, u64)],
    pub fixed: &'a [f64],
    pub launches: &'a [f64],
    pub steps: &'a [f64],
    pub work: &'a [f64],
    pub time_ms: &'a [bool],
    pub observed: &'a [f64],
    pub formats: usize,
}

fn input(what: &str, message: impl std::fmt::Display) -> Error {
    Error::Input(format!("calibration rows: {what} {message}"))
}

impl Rows {
    pub fn new(a: RowArrays) -> Result<Rows> {
        let n = a.len.len();
        let cells = n * a.width;
        for (what, len) in [
            ("compute", a.compute.len()),
            ("memory", a.memory.len()),
            ("expert", a.expert.len()),
            ("quant", a.quant.len()),
            ("fmt", a.fmt.len()),
            ("moe_w", a.moe_w.len()),
            ("moe_t", a.moe_t.len()),
            ("moe_d0", a.moe_d0.len()),
            ("moe_group", a.moe_group.len()),
        ] {
            if len != cells {
                return Err(input(what, format!("holds {len} values, not rows x width = {cells}")));
            }
        }
        for (what, len) in [
            ("fixed", a.fixed.len()),
            ("launches", a.launches.len()),
            ("steps", a.steps.len()),
            ("work", a.work.len()),
            ("time_ms", a.time_ms.len()),
            ("observed", a.observed.len()),
        ] {
            if len != n {
                return Err(input(what, format!("holds {len} values, not one per row ({n})")));
            }
        }
        let len: Vec<usize> = a
            .len
            .iter()
            .map(|&l| usize::try_from(l).ok().filter(|l| *l <= a.width))
            .collect::<Option<_>>()
            .ok_or_else(|| input("len", format!("must be in 0..={}", a.width)))?;
        if let Some(f) = a.fmt.iter().find(|&&f| f < -1 || f >= a.formats as i64) {
            return Err(input("fmt", format!("{f} is not a format index (-1..{})", a.formats)));
        }
        let mut groups: Vec<(u64, u64, Vec<f64>)> = a.moe_ek.iter().map(|&(e, k)| (e, k, Vec::new())).collect();
        let mut reads = Vec::new();
        let mut read = Vec::new();
        let mut start = Vec::with_capacity(n + 1);
        let mut kept = Vec::new();
        for (i, &l) in len.iter().enumerate() {
            start.push(kept.len());
            kept.extend(i * a.width..i * a.width + l);
        }
        start.push(kept.len());
        for &at in &kept {
            let g = a.moe_group[at];
            if g < 0 {
                read.push(NO_READ);
                continue;
            }
            let (e, k, ts) = groups
                .get_mut(g as usize)
                .ok_or_else(|| input("moe_group", format!("{g} is not an index into moe_ek")))?;
            if *e == 0 || *k == 0 || k > e {
                return Err(input("moe_ek", format!("({e}, {k}) is not (experts, top-k)")));
            }
            let t = a.moe_t[at];
            let tokens = match ts.iter().position(|x| *x == t) {
                Some(i) => i,
                None => {
                    ts.push(t);
                    ts.len() - 1
                }
            };
            read.push(reads.len() as u32);
            reads.push(ExpertRead {
                group: g as usize,
                tokens,
                w: a.moe_w[at],
                d0: a.moe_d0[at],
            });
        }
        Ok(Rows {
            n,
            start,
            c: kept.iter().map(|&at| a.compute[at]).collect(),
            m: kept.iter().map(|&at| a.memory[at]).collect(),
            read,
            class: kept
                .iter()
                .map(|&at| {
                    let compute = match (a.quant[at], a.fmt[at]) {
                        (false, _) => 0,
                        (true, f) if f < 0 => 1,
                        (true, f) => 2 + f as u32,
                    };
                    compute << 1 | u32::from(a.expert[at])
                })
                .collect(),
            reads,
            groups,
            fixed: a.fixed.to_vec(),
            launches: a.launches.to_vec(),
            steps: a.steps.to_vec(),
            work: a.work.to_vec(),
            time_ms: a.time_ms.to_vec(),
            observed: a.observed.to_vec(),
            formats: a.formats,
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn formats(&self) -> usize {
        self.formats
    }

    /// Each row's predicted rate (a time row: ms) under parameters `p` and format efficiencies
    /// `fe` (one per format), into `out`.
    fn predict_into(&self, p: &[f64; 9], fe: &[f64], out: &mut [f64]) {
        let [eta_m, eta_c, tl, ts, eta_moe, eta_cq, skew, overlap, overlap_moe] = *p;
        // the expert weight reads' extra memory time under this skew (none at uniform routing)
        let mut extra: Vec<f64> = Vec::new();
        if skew != 0.0 && !self.reads.is_empty() {
            let distinct: Vec<Vec<f64>> = self
                .groups
                .iter()
                .map(|(e, k, ts)| {
                    let r = Routing::new(*e, *k, skew);
                    ts.iter().map(|t| r.distinct(*t)).collect()
                })
                .collect();
            extra = self
                .reads
                .iter()
                .map(|x| x.w * (distinct[x.group][x.tokens] - x.d0))
                .collect();
        }
        // each class's efficiencies, as reciprocals: compute by `class >> 1`, memory and
        // overlap by `class & 1`
        let compute: Vec<f64> = [eta_c, eta_cq].iter().chain(fe).map(|e| 1.0 / e).collect();
        let (memory, overlaps) = ([1.0 / eta_m, 1.0 / eta_moe], [overlap, overlap_moe]);
        for (i, o) in out.iter_mut().enumerate() {
            let ops = self.start[i]..self.start[i + 1];
            let mut t = 0.0;
            for (((&c, &m), &k), &r) in self.c[ops.clone()]
                .iter()
                .zip(&self.m[ops.clone()])
                .zip(&self.class[ops.clone()])
                .zip(&self.read[ops])
            {
                let k = k as usize;
                let mem = if r == NO_READ || extra.is_empty() {
                    m
                } else {
                    m + extra[r as usize]
                };
                let c = c * compute[k >> 1];
                let m = mem * memory[k & 1];
                let ov = overlaps[k & 1];
                t += ov * c.max(m) + (1.0 - ov) * (c + m);
            }
            let t = t + self.fixed[i] + self.launches[i] * tl * 1e-6 + self.steps[i] * ts * 1e-6;
            // a time row's work is the count it averages over (1 for TTFT, the decode steps for TPOT)
            *o = if self.time_ms[i] {
                t * 1e3 / self.work[i]
            } else {
                self.work[i] / t
            };
        }
    }

    /// Observed over predicted speed of each row (a time row: predicted over observed).
    fn ratios_into(&self, p: &[f64; 9], fe: &[f64], out: &mut [f64]) {
        self.predict_into(p, fe, out);
        for (i, x) in out.iter_mut().enumerate() {
            *x = if self.time_ms[i] {
                *x / self.observed[i]
            } else {
                self.observed[i] / *x
            };
        }
    }

    fn check(&self, params: &[f64], formats: &[f64]) -> Result<usize> {
        if !params.len().is_multiple_of(PARAMS.len()) {
            return Err(input(
                "params",
                format!("must hold {} values a candidate", PARAMS.len()),
            ));
        }
        let s = params.len() / PARAMS.len();
        if formats.len() != s * self.formats {
            return Err(input(
                "formats",
                format!("must hold {} values a candidate (one per weight format)", self.formats),
            ));
        }
        Ok(s)
    }

    /// Runs `f(candidate, its row slice)` for each of the candidates laid out row-major in
    /// `params` (9 a candidate) and `formats` (one per format a candidate), in parallel.
    fn each(
        &self,
        params: &[f64],
        formats: &[f64],
        f: impl Fn(&[f64; 9], &[f64], &mut [f64]) + Sync,
    ) -> Result<Vec<f64>> {
        let s = self.check(params, formats)?;
        let mut out = vec![0.0; s * self.n];
        if self.n == 0 {
            return Ok(out);
        }
        out.par_chunks_mut(self.n).enumerate().for_each(|(j, o)| {
            let p: [f64; 9] = std::array::from_fn(|k| params[j * 9 + k]);
            f(&p, &formats[j * self.formats..(j + 1) * self.formats], o)
        });
        Ok(out)
    }

    /// Predicted rates (time rows: ms), candidates x rows, row-major.
    pub fn predict(&self, params: &[f64], formats: &[f64]) -> Result<Vec<f64>> {
        self.each(params, formats, |p, fe, o| self.predict_into(p, fe, o))
    }

    /// Observed over predicted speed, candidates x rows, row-major.
    pub fn ratios(&self, params: &[f64], formats: &[f64]) -> Result<Vec<f64>> {
        self.each(params, formats, |p, fe, o| self.ratios_into(p, fe, o))
    }

    /// The rms of log(observed / predicted speed) over the rows, per candidate: the fit's objective.
    pub fn rms(&self, params: &[f64], formats: &[f64]) -> Result<Vec<f64>> {
        let r = self.ratios(params, formats)?;
        if self.n == 0 {
            return Ok(vec![f64::NAN; r.len()]);
        }
        Ok(r.chunks(self.n)
            .map(|c| (c.iter().map(|x| x.ln().powi(2)).sum::<f64>() / self.n as f64).sqrt())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::distinct_experts;

    /// Two rows of two operators: a dense rate row and an MoE time row with a quantized GEMM
    /// and a grouped expert read that follows the routing.
    fn rows() -> Rows {
        Rows::new(RowArrays {
            width: 2,
            len: &[2, 2],
            compute: &[1.0, 0.5, 2.0, 0.25],
            memory: &[0.5, 1.0, 1.0, 3.0],
            expert: &[false, false, false, true],
            quant: &[false, false, true, false],
            fmt: &[-1, -1, 0, -1],
            moe_w: &[0.0, 0.0, 0.0, 0.1],
            moe_t: &[0.0, 0.0, 0.0, 16.0],
            moe_d0: &[0.0, 0.0, 0.0, distinct_experts(64, 4, 16.0, 0.0)],
            moe_group: &[-1, -1, -1, 0],
            moe_ek: &[(64, 4)],
            fixed: &[0.1, 0.0],
            launches: &[10.0, 4.0],
            steps: &[1.0, 2.0],
            work: &[100.0, 1.0],
            time_ms: &[false, true],
            observed: &[30.0, 9000.0],
            formats: 1,
        })
        .unwrap()
    }

    #[test]
    fn the_objective_is_the_closed_form_written_out() {
        let r = rows();
        let p = [0.5, 0.8, 2.0, 100.0, 0.4, 0.6, 0.7, 0.9, 0.3];
        let fe = [0.25];
        let got = r.predict(&p, &fe).unwrap();
        let blend = |o: f64, c: f64, m: f64| o * c.max(m) + (1.0 - o) * (c + m);
        let t0 = blend(0.9, 1.0 / 0.8, 0.5 / 0.5) + blend(0.9, 0.5 / 0.8, 1.0 / 0.5) + 0.1 + 10.0 * 2e-6 + 100e-6;
        let d = distinct_experts(64, 4, 16.0, 0.7) - distinct_experts(64, 4, 16.0, 0.0);
        let m_exp = (3.0 + 0.1 * d) / 0.4;
        let t1 = blend(0.9, 2.0 / 0.25, 1.0 / 0.5) + blend(0.3, 0.25 / 0.8, m_exp) + 4.0 * 2e-6 + 2.0 * 100e-6;
        assert!((got[0] - 100.0 / t0).abs() < 1e-12 * got[0]);
        assert!((got[1] - t1 * 1e3).abs() < 1e-12 * got[1]);
        let ratio = r.ratios(&p, &fe).unwrap();
        assert!((ratio[0] - 30.0 / got[0]).abs() < 1e-15 && (ratio[1] - got[1] / 9000.0).abs() < 1e-15);
        let rms = r.rms(&p, &fe).unwrap()[0];
        let want = ((ratio[0].ln().powi(2) + ratio[1].ln().powi(2)) / 2.0).sqrt();
        assert!((rms - want).abs() < 1e-15);
    }

    #[test]
    fn a_population_is_each_candidate_alone_whatever_the_threads() {
        let r = rows();
        let mut params = Vec::new();
        let mut fe = Vec::new();
        for j in 0..50 {
            let x = j as f64 / 50.0;
            params.extend([0.2 + 0.7 * x, 0.9 - 0.5 * x, x, 10.0 * x, 0.3, 0.5, 2.0 * x, x, 1.0 - x]);
            fe.push(0.1 + 0.8 * x);
        }
        let all = r.rms(&params, &fe).unwrap();
        for j in 0..50 {
            let one = r.rms(&params[j * 9..(j + 1) * 9], &fe[j..j + 1]).unwrap();
            assert_eq!(one[0].to_bits(), all[j].to_bits());
        }
    }

    #[test]
    fn malformed_inputs_are_errors_naming_the_array() {
        let r = rows();
        assert!(r.rms(&[1.0; 8], &[]).unwrap_err().to_string().contains("params"));
        assert!(r.rms(&[1.0; 9], &[]).unwrap_err().to_string().contains("formats"));
    }
}
