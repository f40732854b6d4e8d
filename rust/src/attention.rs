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

/// Keys attended by one decode query at context `l` (`l` tokens including itself).
pub fn decode_keys(l: u64, window: Option<u64>) -> u64 {
    match window {
        None => l,
        Some(w) => l.min(w),
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
