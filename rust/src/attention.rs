//! Exact causal attention geometry (closed forms, no approximation).
//!
//! A query at absolute position `i` (0-based) attends to the keys at
//! positions `max(0, i - w + 1) ..= i`: `min(i + 1, w)` keys, with `w = inf`
//! for full causal attention.

/// `sum_{j=a}^{b} min(j, w)` for 1 <= a, exact in integers.
fn sum_min(a: u64, b: u64, window: Option<u64>) -> u128 {
    if b < a {
        return 0;
    }
    let (a, b) = (a as u128, b as u128);
    let tri = |lo: u128, hi: u128| -> u128 {
        if hi < lo {
            0
        } else {
            (lo + hi) * (hi - lo + 1) / 2
        }
    };
    match window {
        None => tri(a, b),
        Some(w) => {
            let w = w as u128;
            // j in [a, min(b, w)] contributes j; j in [max(a, w+1), b] contributes w.
            let below = tri(a, b.min(w));
            let lo = a.max(w + 1);
            let above = if b >= lo { (b - lo + 1) * w } else { 0 };
            below + above
        }
    }
}

/// Query-key pairs of `new` tokens appended to `prefix` cached tokens.
/// Full causal, no prefix: S(S+1)/2; chunk on a prefix: c P + c(c+1)/2.
pub fn causal_pairs(new: u64, prefix: u64, window: Option<u64>) -> f64 {
    if new == 0 {
        return 0.0;
    }
    sum_min(prefix + 1, prefix + new, window) as f64
}

/// Distinct keys the `new` queries read (each K/V row read once).
pub fn distinct_keys(new: u64, prefix: u64, window: Option<u64>) -> f64 {
    if new == 0 {
        return 0.0;
    }
    let reach = match window {
        None => prefix,
        Some(w) => prefix.min(w.saturating_sub(1)),
    };
    (new + reach) as f64
}

/// `sum_{p=1}^{n} ((p - 1) mod c + 1)`: the keys the first `n` queries attend under chunked
/// local attention of chunk `c` (each full chunk a triangle), exact in integers.
fn chunked_prefix_sum(n: u64, c: u64) -> u128 {
    let (q, r, c) = ((n / c) as u128, (n % c) as u128, c as u128);
    q * c * (c + 1) / 2 + r * (r + 1) / 2
}

/// Query-key pairs of `new` tokens appended to `prefix` cached ones under chunked local
/// attention (Llama-4): a query at position p (1-based) attends the keys of its own chunk of
/// `chunk` tokens up to itself, `(p - 1) mod chunk + 1`.
pub fn chunked_pairs(new: u64, prefix: u64, chunk: u64) -> f64 {
    if new == 0 {
        return 0.0;
    }
    let c = chunk.max(1);
    (chunked_prefix_sum(prefix + new, c) - chunked_prefix_sum(prefix, c)) as f64
}

/// Distinct keys `new` queries after `prefix` read under chunked local attention: their own and
/// the earlier keys of the first query's chunk.
pub fn chunked_keys(new: u64, prefix: u64, chunk: u64) -> f64 {
    if new == 0 {
        return 0.0;
    }
    (new + prefix % chunk.max(1)) as f64
}

/// Keys attended by one decode query at context `l` (`l` tokens including itself).
pub fn decode_keys(l: u64, window: Option<u64>) -> u64 {
    match window {
        None => l,
        Some(w) => l.min(w),
    }
}

/// How many KV cells one decode step reads at context `L` (`L` tokens including its own),
/// as the runtime lays out and reads its cache (spec 30, "what decode reads"):
///
/// - full attention: `pad_up(L)`;
/// - a sliding window `w` whose cache holds `s = w + cache_extra` cells per sequence, filled
///   as a ring from position 0 (llama.cpp: n_swa + n_ubatch): `n_kv = min(s, pad_up(L))`;
/// - with `skip_masked_tail` (CUDA flash attention over several streams: a pre-pass finds each
///   stream's last `pad`-cell tile holding an unmasked cell and stops there) and a ring that
///   has wrapped (`L > s`, `n_kv` a multiple of `pad`): the newest token sits at cell
///   `c = (L - 1) mod s`; the read stops at `pad_up(c + 1)` unless the window's cells wrap
///   past the ring's end (`c + 1 < w`), when all `n_kv` are read.
///
/// `pad_up(x)` rounds up to a multiple of `pad` (llama.cpp pads n_kv to 256); `pad = 1` and no
/// extra is the ideal `min(L, w)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeKeys {
    pub window: Option<u64>,
    pub cache_extra: u64,
    pub pad: u64,
    pub skip_masked_tail: bool,
    /// Chunked local attention (Llama-4): the query reads its own chunk's keys up to itself,
    /// `(L - 1) mod chunk + 1` (padded); the window and ring do not apply.
    pub chunk: Option<u64>,
}

/// A run of decode contexts over which the keys read are one closed form.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyRun {
    /// `k` keys at every context of the run.
    Const(u64),
    /// `k = L - shift`.
    Shift(u64),
}

impl DecodeKeys {
    /// Exactly the attended keys: `min(L, w)`.
    pub const fn exact(window: Option<u64>) -> DecodeKeys {
        DecodeKeys {
            window,
            cache_extra: 0,
            pad: 1,
            skip_masked_tail: false,
            chunk: None,
        }
    }

    /// The same reads on a layer with chunked local attention of `chunk` tokens (None: not).
    pub const fn with_chunk(self, chunk: Option<u64>) -> DecodeKeys {
        DecodeKeys { chunk, ..self }
    }

    /// The same reads on a layer with attention window `window`.
    pub const fn with_window(self, window: Option<u64>) -> DecodeKeys {
        DecodeKeys { window, ..self }
    }

    fn pad(&self) -> u64 {
        self.pad.max(1)
    }

    fn pad_up(&self, x: u64) -> u64 {
        x.div_ceil(self.pad()) * self.pad()
    }

    /// The cells a sliding-window layer's cache ring holds per sequence, `w + cache_extra`
    /// (prefill computes each query against them too); `None` for full attention.
    pub fn ring(&self) -> Option<u64> {
        self.window.map(|w| w.saturating_add(self.cache_extra))
    }

    /// Whether a wrapped ring of `s` cells is read only up to its newest cell: the pre-pass
    /// runs over whole `pad`-cell tiles, so `s` must be a multiple of `pad`.
    fn skips_tail(&self, s: u64) -> bool {
        self.skip_masked_tail && s.is_multiple_of(self.pad())
    }

    /// Keys read at context `l` (>= 1).
    pub fn keys(&self, l: u64) -> u64 {
        if let Some(ch) = self.chunk.filter(|c| *c > 0) {
            return self.pad_up((l - 1) % ch + 1);
        }
        let (Some(w), Some(s)) = (self.window, self.ring()) else {
            return self.pad_up(l);
        };
        let n_kv = s.min(self.pad_up(l));
        if l <= s || !self.skips_tail(s) {
            return n_kv;
        }
        let c = (l - 1) % s;
        if c + 1 < w {
            n_kv
        } else {
            self.pad_up(c + 1).min(n_kv)
        }
    }

    /// Splits contexts `lo..=hi` (lo >= 1) into runs `(a, b, run)`, in order, covering them
    /// (an iterator: nothing is allocated however many runs there are).
    pub fn runs(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u64, KeyRun)> + '_ {
        let (mut l, mut done) = (lo, lo > hi);
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let (end, run) = self.run_at(l);
            let end = end.min(hi);
            let item = (l, end, run);
            if end == hi {
                done = true;
            } else {
                l = end + 1;
            }
            Some(item)
        })
    }

    /// How many runs `runs(lo, hi)` holds, counted up to `limit + 1` (a work check before pricing).
    pub fn count_runs(&self, lo: u64, hi: u64, limit: u64) -> u64 {
        self.runs(lo, hi).take(limit.saturating_add(1) as usize).count() as u64
    }

    /// The run starting at context `l`: its last context and its closed form.
    fn run_at(&self, l: u64) -> (u64, KeyRun) {
        let pad = self.pad();
        if let Some(ch) = self.chunk.filter(|c| *c > 0) {
            // within a chunk the keys grow one a context, from 1 at its first
            let c = (l - 1) % ch;
            let lap_end = l + (ch - 1 - c);
            return if pad == 1 {
                (lap_end, KeyRun::Shift(l - 1 - c))
            } else {
                (
                    lap_end.min(l + (self.pad_up(c + 1) - (c + 1))),
                    KeyRun::Const(self.keys(l)),
                )
            };
        }
        let (Some(w), Some(s)) = (self.window, self.ring()) else {
            return if pad == 1 {
                (u64::MAX, KeyRun::Shift(0))
            } else {
                (self.pad_up(l), KeyRun::Const(self.pad_up(l)))
            };
        };
        if l <= s {
            return if pad == 1 {
                (s, KeyRun::Shift(0))
            } else {
                (self.pad_up(l).min(s), KeyRun::Const(self.keys(l)))
            };
        }
        if !self.skips_tail(s) {
            return (u64::MAX, KeyRun::Const(s));
        }
        // ring wrapped: c = (l - 1) mod s runs up to s - 1 within this lap
        let c = (l - 1) % s;
        let lap_end = l + (s - 1 - c);
        if c + 1 < w {
            // the window wraps past the ring's end up to c + 1 = w - 1
            return (l + (w - 2 - c), KeyRun::Const(s));
        }
        if pad == 1 {
            (lap_end, KeyRun::Shift(l - 1 - c))
        } else {
            (
                lap_end.min(l + (self.pad_up(c + 1) - (c + 1))),
                KeyRun::Const(self.keys(l)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute_pairs(new: u64, prefix: u64, w: Option<u64>) -> u64 {
        (prefix..prefix + new).map(|i| decode_keys(i + 1, w)).sum()
    }

    fn brute_keys(new: u64, prefix: u64, w: Option<u64>) -> u64 {
        let mut seen = std::collections::BTreeSet::new();
        for i in prefix..prefix + new {
            let lo = match w {
                None => 0,
                Some(w) => (i + 1).saturating_sub(w),
            };
            for k in lo..=i {
                seen.insert(k);
            }
        }
        seen.len() as u64
    }

    #[test]
    fn chunked_local_attention_matches_brute_force() {
        for chunk in [1u64, 3, 7, 16] {
            for prefix in 0..40 {
                for new in 0..40 {
                    let pairs: u64 = (prefix..prefix + new).map(|i| i % chunk + 1).sum();
                    assert_eq!(
                        chunked_pairs(new, prefix, chunk),
                        pairs as f64,
                        "pairs c={chunk} p={prefix} n={new}"
                    );
                    let first = if new == 0 { prefix } else { prefix / chunk * chunk };
                    let keys = (prefix + new).saturating_sub(first);
                    assert_eq!(
                        chunked_keys(new, prefix, chunk),
                        keys as f64,
                        "keys c={chunk} p={prefix} n={new}"
                    );
                }
            }
            for pad in [1u64, 4] {
                let k = DecodeKeys {
                    pad,
                    ..DecodeKeys::exact(None)
                }
                .with_chunk(Some(chunk));
                for l in 1..60 {
                    assert_eq!(k.keys(l), ((l - 1) % chunk + 1).div_ceil(pad) * pad);
                }
                let mut got = Vec::new();
                for (a, b, r) in k.runs(1, 59) {
                    for l in a..=b {
                        got.push(match r {
                            KeyRun::Const(c) => c,
                            KeyRun::Shift(s) => l - s,
                        });
                    }
                }
                assert_eq!(
                    got,
                    (1..60).map(|l| k.keys(l)).collect::<Vec<_>>(),
                    "runs c={chunk} pad={pad}"
                );
            }
        }
    }

    #[test]
    fn prefill_is_the_triangle() {
        for s in [1u64, 2, 128, 4096, 32768] {
            assert_eq!(causal_pairs(s, 0, None), (s * (s + 1) / 2) as f64);
        }
        assert_eq!(causal_pairs(512, 1000, None), (512 * 1000 + 512 * 513 / 2) as f64);
    }

    #[test]
    fn windowed_pairs_match_brute_force() {
        for w in [None, Some(1), Some(3), Some(7), Some(16)] {
            for prefix in 0..20 {
                for new in 0..20 {
                    assert_eq!(
                        causal_pairs(new, prefix, w),
                        brute_pairs(new, prefix, w) as f64,
                        "new={new} prefix={prefix} w={w:?}"
                    );
                    assert_eq!(
                        distinct_keys(new, prefix, w),
                        brute_keys(new, prefix, w) as f64,
                        "keys new={new} prefix={prefix} w={w:?}"
                    );
                }
            }
        }
    }

    fn run_keys(k: &DecodeKeys, lo: u64, hi: u64) -> Vec<u64> {
        let mut v = Vec::new();
        let mut next = lo;
        for (a, b, r) in k.runs(lo, hi) {
            assert_eq!(a, next, "runs cover the range in order");
            assert!(b >= a);
            next = b + 1;
            for l in a..=b {
                v.push(match r {
                    KeyRun::Const(c) => c,
                    KeyRun::Shift(d) => l - d,
                });
            }
        }
        assert_eq!(next, hi + 1);
        v
    }

    #[test]
    fn llama_cpp_ring_reads() {
        // gemma-3 under llama.cpp: window 1024, n_ubatch 2048 -> a 3072-cell ring, n_kv padded
        // to 256, several streams (the masked tail skipped).
        let k = DecodeKeys {
            window: Some(1024),
            cache_extra: 2048,
            pad: 256,
            skip_masked_tail: true,
            chunk: None,
        };
        assert_eq!(k.keys(513), 768); // prompt 512: cells 0..512, padded
        assert_eq!(k.keys(3072), 3072);
        // prompt 4096: the new token at cell 4096 mod 3072 = 1024, the window in cells 1..1024
        assert_eq!(k.keys(4097), 1280);
        // prompt 8192: cell 8192 mod 3072 = 2048
        assert_eq!(k.keys(8193), 2304);
        // the newest cell at 100: the window wraps to the ring's end, all cells read
        assert_eq!(k.keys(3072 * 2 + 101), 3072);
        // one stream: no pre-pass, the whole padded ring
        let one = DecodeKeys {
            skip_masked_tail: false,
            ..k
        };
        assert_eq!(one.keys(4097), 3072);
        // a ring that is not a multiple of the pad is read whole (the pre-pass needs n_kv % 256 == 0)
        let oss = DecodeKeys { window: Some(128), ..k };
        assert_eq!(oss.keys(4097), 2176);
        assert_eq!(oss.keys(513), 768);
        // full attention: padded
        assert_eq!(DecodeKeys { window: None, ..k }.keys(4097), 4352);
        // exact: min(L, w)
        assert_eq!(DecodeKeys::exact(Some(1024)).keys(5000), 1024);
        assert_eq!(DecodeKeys::exact(None).keys(5000), 5000);
    }

    proptest! {
        #[test]
        fn runs_reproduce_keys(
            lo in 1u64..20_000, len in 0u64..5_000, w in proptest::option::of(1u64..3000),
            extra in 0u64..3000, pad in prop_oneof![Just(1u64), Just(32u64), Just(256u64), 1u64..300],
            skip in any::<bool>(),
        ) {
            let k = DecodeKeys { window: w, cache_extra: extra, pad, skip_masked_tail: skip, chunk: None };
            let hi = lo + len;
            let want: Vec<u64> = (lo..=hi).map(|l| k.keys(l)).collect();
            prop_assert_eq!(run_keys(&k, lo, hi), want);
        }

        #[test]
        fn reads_cover_the_attended_keys(l in 1u64..50_000, w in proptest::option::of(1u64..5000),
                                         extra in 0u64..3000, pad in 1u64..300, skip in any::<bool>()) {
            let k = DecodeKeys { window: w, cache_extra: extra, pad, skip_masked_tail: skip, chunk: None };
            prop_assert!(k.keys(l) >= decode_keys(l, w));
        }
    }

    proptest! {
        #[test]
        fn causal_fraction_in_half_open_unit(s in 1u64..200_000) {
            let frac = causal_pairs(s, 0, None) / (s as f64 * s as f64);
            prop_assert!(frac > 0.5 && frac <= 1.0);
            prop_assert!((frac - (s as f64 + 1.0) / (2.0 * s as f64)).abs() < 1e-12);
        }

        #[test]
        fn chunks_sum_to_the_whole(s in 1u64..5000, c in 1u64..700, w in proptest::option::of(1u64..3000)) {
            let mut done = 0;
            let mut total = 0.0;
            while done < s {
                let n = c.min(s - done);
                total += causal_pairs(n, done, w);
                done += n;
            }
            prop_assert_eq!(total, causal_pairs(s, 0, w));
        }
    }
}
