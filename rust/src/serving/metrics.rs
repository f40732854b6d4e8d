//! Streamed latency statistics: exact count, mean, min and max, and quantiles from a
//! logarithmic histogram, so that memory does not grow with the number of requests or tokens.

use serde::Serialize;

/// Smallest and largest value the histogram resolves, seconds (1 ns to about 11.6 days); values
/// outside fall in the end bins, and min and max stay exact. A representation range.
const LO_S: f64 = 1e-9;
const DECADES: f64 = 15.0;
/// Bins per factor of e: a bin spans a ratio of exp(1/4096) = 1.000244, so a quantile read at a
/// bin's geometric centre is within 0.013% of a value in that bin. A representation choice.
const BINS_PER_E: f64 = 4096.0;

/// A streamed distribution of non-negative values (seconds).
#[derive(Clone, Debug)]
pub struct LogHist {
    counts: Vec<u64>,
    zeros: u64,
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Default for LogHist {
    fn default() -> Self {
        LogHist::new()
    }
}

/// Summary of one metric, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl LogHist {
    pub fn new() -> LogHist {
        let bins = (DECADES * std::f64::consts::LN_10 * BINS_PER_E).ceil() as usize + 1;
        LogHist {
            counts: vec![0; bins],
            zeros: 0,
            n: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }

    pub fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        if x <= 0.0 {
            self.zeros += 1;
            return;
        }
        let i = ((x / LO_S).ln() * BINS_PER_E).max(0.0) as usize;
        let last = self.counts.len() - 1;
        self.counts[i.min(last)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// The value below which a share `q` of the values lie (nearest rank), clamped to [min, max].
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        if rank <= self.zeros {
            return 0.0;
        }
        let mut seen = self.zeros;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let centre = LO_S * ((i as f64 + 0.5) / BINS_PER_E).exp();
                return centre.clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// The non-empty bins as (geometric centre, count), in increasing order (zeros first, at 0):
    /// the distribution itself, for a CDF.
    pub fn bins(&self) -> Vec<(f64, u64)> {
        let mut out = Vec::new();
        if self.zeros > 0 {
            out.push((0.0, self.zeros));
        }
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                let centre = LO_S * ((i as f64 + 0.5) / BINS_PER_E).exp();
                out.push((centre.clamp(self.min, self.max), c));
            }
        }
        out
    }

    pub fn stats(&self) -> Stats {
        if self.n == 0 {
            return Stats::default();
        }
        Stats {
            count: self.n,
            mean: self.sum / self.n as f64,
            min: self.min,
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            max: self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bin_width_of_the_exact_ones() {
        let mut h = LogHist::new();
        let xs: Vec<f64> = (1..=10_001).map(|i| 1e-4 * (i as f64).powf(1.7)).collect();
        for &x in &xs {
            h.add(x);
        }
        for q in [0.5, 0.9, 0.99] {
            let exact = xs[((q * xs.len() as f64).ceil() as usize) - 1];
            let got = h.quantile(q);
            assert!((got / exact - 1.0).abs() < 2.5e-4, "q {q}: {got} vs {exact}");
        }
        let s = h.stats();
        assert_eq!(s.count, 10_001);
        assert_eq!(h.bins().iter().map(|b| b.1).sum::<u64>(), 10_001);
        assert_eq!(s.min, xs[0]);
        assert_eq!(s.max, xs[10_000]);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((s.mean / mean - 1.0).abs() < 1e-12);
    }
}
