//! Workloads of the serving simulator (spec 70): arrivals (Poisson, gamma, a closed loop of
//! clients, a replayed trace) and request lengths (fixed, uniform, normal, lognormal, clamped),
//! every draw from one seeded generator so that a seed reproduces a run bit for bit.

use crate::error::{Error, Result};
use serde::Deserialize;

/// xoshiro256** (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2021),
/// seeded through SplitMix64 as its authors recommend. Written out rather than taken from a
/// crate so that a seed's stream cannot change with a dependency's version.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under a logarithm.
    fn open(&mut self) -> f64 {
        1.0 - self.uniform()
    }

    /// Standard normal (Box-Muller, one value a call so that the stream has no hidden state).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.open(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    pub fn exponential(&mut self, rate: f64) -> f64 {
        -self.open().ln() / rate
    }

    /// Gamma(shape, scale): Marsaglia and Tsang (ACM TOMS 26(3), 2000); shape < 1 through
    /// Gamma(shape + 1) U^(1/shape).
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let u = self.open();
            return self.gamma(shape + 1.0, scale) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.open();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

/// A length distribution in tokens; continuous draws are rounded to the nearest token and
/// clamped to `[lo, hi]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Lengths {
    Fixed {
        value: u64,
    },
    Uniform {
        lo: u64,
        hi: u64,
    },
    Normal {
        mean: f64,
        std: f64,
        lo: u64,
        hi: u64,
    },
    /// `mean` of the lengths (not of their logarithm) and `sigma` of their logarithm.
    Lognormal {
        mean: f64,
        sigma: f64,
        lo: u64,
        hi: u64,
    },
}

impl Lengths {
    pub fn validate(&self, field: &str) -> Result<()> {
        let bounds = |lo: u64, hi: u64| -> Result<()> {
            if lo == 0 || lo > hi {
                return Err(Error::plan(
                    field,
                    format!("clamps must satisfy 1 <= lo <= hi, got lo {lo}, hi {hi}"),
                ));
            }
            Ok(())
        };
        match *self {
            Lengths::Fixed { value: 0 } => Err(Error::plan(field, "a fixed length must be >= 1")),
            Lengths::Fixed { .. } => Ok(()),
            Lengths::Uniform { lo, hi } => bounds(lo, hi),
            Lengths::Normal { mean, std, lo, hi } => {
                if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
                    return Err(Error::plan(
                        field,
                        format!("normal needs a finite mean and std >= 0, got {mean}, {std}"),
                    ));
                }
                bounds(lo, hi)
            }
            Lengths::Lognormal { mean, sigma, lo, hi } => {
                if !(mean.is_finite() && mean > 0.0 && sigma.is_finite() && sigma >= 0.0) {
                    return Err(Error::plan(
                        field,
                        format!("lognormal needs mean > 0 and sigma >= 0, got {mean}, {sigma}"),
                    ));
                }
                bounds(lo, hi)
            }
        }
    }

    pub fn draw(&self, rng: &mut Rng) -> u64 {
        let clamp = |x: f64, lo: u64, hi: u64| -> u64 {
            if x.is_nan() {
                return lo;
            }
            (x.round().max(lo as f64).min(hi as f64)) as u64
        };
        match *self {
            Lengths::Fixed { value } => value,
            Lengths::Uniform { lo, hi } => lo + (rng.uniform() * (hi - lo + 1) as f64) as u64,
            Lengths::Normal { mean, std, lo, hi } => clamp(mean + std * rng.normal(), lo, hi),
            Lengths::Lognormal { mean, sigma, lo, hi } => {
                let mu = mean.ln() - 0.5 * sigma * sigma;
                clamp((mu + sigma * rng.normal()).exp(), lo, hi)
            }
        }
    }
}

/// One request of a trace.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceRow {
    pub arrival_s: f64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// The output budget the client declares (`max_tokens`); None: none declared.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Requests with the same id start with the same `prefix_tokens` tokens (a shared system
    /// prompt or conversation history), which a prefix cache may hold.
    #[serde(default)]
    pub prefix_id: Option<u64>,
    #[serde(default)]
    pub prefix_tokens: u64,
}

/// How requests arrive.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps at `rate` requests per second.
    Poisson { rate: f64 },
    /// Gamma gaps of mean 1/`rate` and coefficient of variation `cv` (burstiness; 1 is Poisson).
    Gamma { rate: f64, cv: f64 },
    /// `concurrency` clients, each sending its next request when its last one ends (the form
    /// of the measured production serving runs); the clients start evenly over `ramp_s`
    /// seconds (0: all at once).
    Closed {
        concurrency: u64,
        #[serde(default)]
        ramp_s: f64,
    },
    /// Replayed requests (sorted by arrival on load).
    Trace { rows: Vec<TraceRow> },
}

/// A workload: arrivals, lengths (unless traced), how many requests, and the seed.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub arrivals: Arrivals,
    /// Requests to send (a trace: its rows, when None).
    #[serde(default)]
    pub requests: Option<u64>,
    #[serde(default = "default_prompt")]
    pub prompt: Lengths,
    #[serde(default = "default_prompt")]
    pub output: Lengths,
    /// The client declares its drawn output length as `max_tokens` (benchmark clients do:
    /// vLLM's `bench serve` sends max_tokens with ignore_eos).
    #[serde(default = "yes")]
    pub declare_output: bool,
    #[serde(default)]
    pub seed: u64,
    /// Synthetic shared prefixes: each request starts with one of `count` prefixes (drawn
    /// uniformly) of `tokens` tokens (at most its prompt but one).
    #[serde(default)]
    pub prefixes: Option<Prefixes>,
}

/// Shared prompt prefixes of a synthetic workload.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prefixes {
    pub count: u64,
    pub tokens: u64,
}

fn default_prompt() -> Lengths {
    Lengths::Fixed { value: 1 }
}

fn yes() -> bool {
    true
}

impl Workload {
    pub fn validate(&self) -> Result<()> {
        let rate = |r: f64| -> Result<()> {
            if r.is_finite() && r > 0.0 {
                Ok(())
            } else {
                Err(Error::plan(
                    "rate",
                    format!("must be a finite number > 0 (requests/s), got {r}"),
                ))
            }
        };
        match &self.arrivals {
            Arrivals::Poisson { rate: r } => rate(*r)?,
            Arrivals::Gamma { rate: r, cv } => {
                rate(*r)?;
                if !(cv.is_finite() && *cv > 0.0) {
                    return Err(Error::plan("cv", format!("must be a finite number > 0, got {cv}")));
                }
            }
            Arrivals::Closed { concurrency, ramp_s } => {
                if *concurrency == 0 {
                    return Err(Error::plan("concurrency", "must be >= 1"));
                }
                if !(ramp_s.is_finite() && *ramp_s >= 0.0) {
                    return Err(Error::plan(
                        "ramp_s",
                        format!("must be a finite number >= 0, got {ramp_s}"),
                    ));
                }
            }
            Arrivals::Trace { rows } => {
                if rows.is_empty() {
                    return Err(Error::plan("trace", "holds no requests"));
                }
                for (i, r) in rows.iter().enumerate() {
                    if !(r.arrival_s.is_finite() && r.arrival_s >= 0.0) {
                        return Err(Error::plan(
                            "trace",
                            format!("row {i}: arrival_s must be finite and >= 0, got {}", r.arrival_s),
                        ));
                    }
                    if r.prompt_tokens == 0 || r.output_tokens == 0 || r.max_tokens == Some(0) {
                        return Err(Error::plan(
                            "trace",
                            format!("row {i}: prompt_tokens, output_tokens and max_tokens must be >= 1"),
                        ));
                    }
                }
            }
        }
        if !matches!(self.arrivals, Arrivals::Trace { .. }) && self.requests.unwrap_or(0) == 0 {
            return Err(Error::plan("requests", "must be >= 1"));
        }
        if let Some(p) = self.prefixes {
            if p.count == 0 || p.tokens == 0 {
                return Err(Error::plan("prefixes", "count and tokens must be >= 1"));
            }
        }
        self.prompt.validate("prompt")?;
        self.output.validate("output")
    }

    /// Requests the workload sends.
    pub fn total(&self) -> u64 {
        match (&self.arrivals, self.requests) {
            (Arrivals::Trace { rows }, n) => n.map_or(rows.len() as u64, |n| n.min(rows.len() as u64)),
            (_, n) => n.unwrap_or(0),
        }
    }
}

/// A request as the simulator receives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    pub arrival_s: f64,
    pub prompt: u64,
    /// Where the model would stop by itself (end of sequence): never read by the scheduler.
    pub output: u64,
    pub max_tokens: Option<u64>,
    pub prefix_id: Option<u64>,
    /// Leading tokens shared with every request of the same `prefix_id` (< prompt).
    pub prefix_tokens: u64,
}

/// Draws the workload's requests in order; a closed loop's next request waits for `release`.
pub struct Source {
    w: Workload,
    rng: Rng,
    sent: u64,
    total: u64,
    /// Open loop: the next arrival time.
    clock: f64,
    /// Trace rows sorted by arrival (stable: ties keep file order).
    order: Vec<usize>,
}

impl Source {
    pub fn new(w: &Workload) -> Result<Source> {
        w.validate()?;
        let mut order = Vec::new();
        if let Arrivals::Trace { rows } = &w.arrivals {
            order = (0..rows.len()).collect();
            order.sort_by(|&a, &b| rows[a].arrival_s.total_cmp(&rows[b].arrival_s));
        }
        Ok(Source {
            w: w.clone(),
            rng: Rng::new(w.seed),
            sent: 0,
            total: w.total(),
            clock: 0.0,
            order,
        })
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn exhausted(&self) -> bool {
        self.sent >= self.total
    }

    /// A closed loop's clients and the seconds over which they start.
    pub fn closed_loop(&self) -> Option<(u64, f64)> {
        match self.w.arrivals {
            Arrivals::Closed { concurrency, ramp_s } => Some((concurrency, ramp_s)),
            _ => None,
        }
    }

    fn lengths(&mut self, at: f64) -> Arrival {
        let prompt = self.w.prompt.draw(&mut self.rng);
        let output = self.w.output.draw(&mut self.rng);
        // drawn only when configured, so that a workload without prefixes keeps its stream
        let (prefix_id, prefix_tokens) = match self.w.prefixes {
            Some(p) => (
                Some((self.rng.uniform() * p.count as f64) as u64),
                p.tokens.min(prompt - 1),
            ),
            None => (None, 0),
        };
        Arrival {
            arrival_s: at,
            prompt,
            output,
            max_tokens: self.w.declare_output.then_some(output),
            prefix_id,
            prefix_tokens,
        }
    }

    /// The next request of an open loop or trace (None when all are sent).
    pub fn next_open(&mut self) -> Option<Arrival> {
        if self.exhausted() {
            return None;
        }
        let a = match &self.w.arrivals {
            Arrivals::Poisson { rate } => {
                let r = *rate;
                self.clock += self.rng.exponential(r);
                self.lengths(self.clock)
            }
            Arrivals::Gamma { rate, cv } => {
                let (r, cv) = (*rate, *cv);
                let shape = 1.0 / (cv * cv);
                self.clock += self.rng.gamma(shape, 1.0 / (r * shape));
                self.lengths(self.clock)
            }
            Arrivals::Trace { rows } => {
                let row = rows[self.order[self.sent as usize]];
                Arrival {
                    arrival_s: row.arrival_s,
                    prompt: row.prompt_tokens,
                    output: row.output_tokens,
                    max_tokens: row.max_tokens,
                    prefix_id: row.prefix_id,
                    prefix_tokens: row.prefix_tokens.min(row.prompt_tokens - 1),
                }
            }
            Arrivals::Closed { .. } => return None,
        };
        self.sent += 1;
        Some(a)
    }

    /// A closed loop's next request, sent at `at` (None when all are sent).
    pub fn next_closed(&mut self, at: f64) -> Option<Arrival> {
        if self.exhausted() {
            return None;
        }
        self.sent += 1;
        Some(self.lengths(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_stream_is_reproducible_and_uniform() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<f64> = (0..10_000).map(|_| a.uniform()).collect();
        let ys: Vec<f64> = (0..10_000).map(|_| b.uniform()).collect();
        assert_eq!(xs, ys);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        // U(0,1): mean 1/2, standard error 1/sqrt(12 n) = 0.0029
        assert!((mean - 0.5).abs() < 0.012, "{mean}");
    }

    #[test]
    fn distributions_have_their_moments() {
        let mut r = Rng::new(1);
        let n = 200_000;
        let exp: f64 = (0..n).map(|_| r.exponential(4.0)).sum::<f64>() / n as f64;
        assert!((exp - 0.25).abs() < 0.25 * 0.02, "{exp}");
        // Gamma(k, theta): mean k theta, variance k theta^2
        for &(k, th) in &[(0.25, 2.0), (3.0, 0.5)] {
            let xs: Vec<f64> = (0..n).map(|_| r.gamma(k, th)).collect();
            let m = xs.iter().sum::<f64>() / n as f64;
            let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
            assert!((m - k * th).abs() < 0.03 * k * th, "mean {m} vs {}", k * th);
            assert!((v - k * th * th).abs() < 0.06 * k * th * th, "var {v}");
        }
        let l = Lengths::Lognormal {
            mean: 300.0,
            sigma: 0.5,
            lo: 1,
            hi: u64::MAX >> 12,
        };
        let m = (0..n).map(|_| l.draw(&mut r) as f64).sum::<f64>() / n as f64;
        assert!((m - 300.0).abs() < 3.0, "{m}");
    }

    #[test]
    fn clamps_hold_and_bad_clamps_are_refused() {
        let mut r = Rng::new(3);
        let l = Lengths::Normal {
            mean: 100.0,
            std: 80.0,
            lo: 50,
            hi: 120,
        };
        assert!((0..10_000).map(|_| l.draw(&mut r)).all(|x| (50..=120).contains(&x)));
        let bad = Lengths::Uniform { lo: 9, hi: 3 };
        assert!(bad.validate("prompt").unwrap_err().to_string().contains("lo <= hi"));
    }
}
