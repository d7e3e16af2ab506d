//! Randomness as elements see it, and the random built-ins.
//!
//! Every executor draws through a [`RandomSource`] and turns the raw words into language
//! values with the free functions here, so a given seed yields the same `random()`,
//! `random_int()` and `random_choices()` results in the interpreter, the JIT and the Wasm host.

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use xxhash_rust::xxh3::xxh3_64;

use crate::builtins::BuiltinError;
use crate::value::Value;

/// A source of uniformly distributed 64-bit words.
pub trait RandomSource: Send {
    fn next_u64(&mut self) -> u64;
}

impl<R: RandomSource + ?Sized> RandomSource for Box<R> {
    fn next_u64(&mut self) -> u64 {
        (**self).next_u64()
    }
}

/// A reproducible ChaCha20 stream.
///
/// The ChaCha20 key is the seed's 8 little-endian bytes followed by 24 zero bytes; the 64-bit
/// ChaCha stream id is 0 for [`SeededRng::new`] and `xxh3_64(name)` for
/// [`SeededRng::for_stream`]. Words are the generator's output in order (`rand_chacha`'s
/// `next_u64`: two little-endian 32-bit keystream words, low word first).
///
/// The key has at most 64 bits of entropy, which is fine for simulation and tests. Where
/// unpredictability matters (AEAD nonces in production), build the generator with
/// [`SeededRng::from_key`] from 32 bytes of OS entropy.
#[derive(Clone, Debug)]
pub struct SeededRng {
    inner: ChaCha20Rng,
}

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        SeededRng::from_key(key)
    }

    /// An independent stream per element instance: two instances given the same seed must not
    /// draw the same numbers, yet each must be reproducible from (seed, name) alone.
    pub fn for_stream(seed: u64, stream: &str) -> Self {
        let mut rng = SeededRng::new(seed);
        rng.inner.set_stream(xxh3_64(stream.as_bytes()));
        rng
    }

    /// A generator keyed with 256 bits, e.g. from the operating system's entropy source.
    pub fn from_key(key: [u8; 32]) -> Self {
        SeededRng {
            inner: ChaCha20Rng::from_seed(key),
        }
    }
}

impl RandomSource for SeededRng {
    fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
}

/// `random(lo, hi)`: `lo + (hi - lo) * u` with `u = (word >> 11) * 2^-53`, so `u` takes every
/// multiple of 2^-53 in [0, 1) with equal probability. The result lies in [lo, hi) (in
/// (hi, lo] when `hi < lo`; `lo` when they are equal).
pub fn random_float(rng: &mut dyn RandomSource, lo: f64, hi: f64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    let u = (rng.next_u64() >> 11) as f64 * SCALE;
    let width = hi - lo;
    let x = if width.is_finite() {
        lo + width * u
    } else {
        // The width overflows (lo = -1e308, hi = 1e308): weigh the ends instead, which
        // stays finite for finite ends.
        lo * (1.0 - u) + hi * u
    };
    // Rounding can land on `hi` when the width is tiny next to `lo` (an epoch time plus a
    // millisecond: about one draw in 10 000), and code like `randomf(a, b) < b` relies on
    // the open end: the closest double inside is used instead.
    if lo < hi && x >= hi {
        hi.next_down()
    } else if hi < lo && x <= hi {
        hi.next_up()
    } else {
        x
    }
}

/// The language's `randomf(lo, hi)`: [`random_float`] for finite bounds. An infinite or NaN
/// bound has no uniform distribution, and the result would be NaN or infinite; it is a
/// run-time error instead, before any draw. `hi < lo` draws from (hi, lo], `lo == hi` gives
/// `lo`: a computed width of zero (no jitter) is not an error.
/// Inlined into the JIT's host call, so its result (an error's width) is not returned
/// through memory.
#[inline]
pub fn randomf(rng: &mut dyn RandomSource, lo: f64, hi: f64) -> Result<f64, BuiltinError> {
    if lo.is_finite() && hi.is_finite() {
        Ok(random_float(rng, lo, hi))
    } else {
        Err(BuiltinError::NonFiniteBound { lo, hi })
    }
}

/// `random_int(lo, hi)`: uniform in [lo, hi), for any range up to the full width of `i64`.
pub fn random_int(rng: &mut dyn RandomSource, lo: i64, hi: i64) -> Result<i64, BuiltinError> {
    if hi <= lo {
        return Err(BuiltinError::EmptyRange { lo, hi });
    }
    // hi > lo, so the width is in 1..=2^64-1 and fits a u64 exactly.
    let width = (i128::from(hi) - i128::from(lo)) as u64;
    Ok(lo.wrapping_add(uniform_below(rng, width) as i64))
}

/// `random_choices(items, n)`: `min(n, len)` items at distinct positions, in the order drawn.
///
/// A partial Fisher–Yates shuffle over positions: step `i` swaps position `i` with a position
/// drawn uniformly from `i..len`, so exactly `min(n, len)` words are consumed when every draw
/// is accepted on the first try.
pub fn random_choices(rng: &mut dyn RandomSource, items: &[Value], n: i64) -> Vec<Value> {
    let take = usize::try_from(n).unwrap_or(0).min(items.len());
    let mut positions: Vec<usize> = (0..items.len()).collect();
    let mut chosen = Vec::with_capacity(take);
    for i in 0..take {
        let remaining = (items.len() - i) as u64;
        let j = i + uniform_below(rng, remaining) as usize;
        positions.swap(i, j);
        chosen.push(items[positions[i]].clone());
    }
    chosen
}

/// Uniform in [0, bound) without modulo bias: Lemire's multiply-and-reject
/// (<https://arxiv.org/abs/1805.10941>). `bound` must be non-zero.
fn uniform_below(rng: &mut dyn RandomSource, bound: u64) -> u64 {
    debug_assert!(bound > 0);
    let mut product = u128::from(rng.next_u64()) * u128::from(bound);
    let mut low = product as u64;
    if low < bound {
        // The first `2^64 mod bound` low halves map to results that would be over-represented;
        // redraw when we land there.
        let threshold = bound.wrapping_neg() % bound;
        while low < threshold {
            product = u128::from(rng.next_u64()) * u128::from(bound);
            low = product as u64;
        }
    }
    (product >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range wider than the largest double still draws finite numbers inside it.
    #[test]
    fn random_float_over_the_widest_range_stays_finite_and_in_range() {
        let mut rng = SeededRng::new(9);
        for _ in 0..1_000 {
            let x = random_float(&mut rng, -1e308, 1e308);
            assert!(x.is_finite() && (-1e308..=1e308).contains(&x), "{x}");
        }
        let ends = [0, u64::MAX];
        for word in ends {
            let x = random_float(&mut Replay(vec![word]), -f64::MAX, f64::MAX);
            assert!(x.is_finite(), "{x}");
        }
    }

    /// Where rounding would give `hi` (a width tiny next to `lo`), the draw stays below it,
    /// in either direction, and still moves with the word.
    #[test]
    fn random_float_never_returns_the_open_end() {
        let (lo, hi) = (1e10, 1e10 + 1.0);
        assert_eq!(
            random_float(&mut Replay(vec![u64::MAX]), lo, hi),
            hi.next_down()
        );
        assert_eq!(
            random_float(&mut Replay(vec![u64::MAX]), hi, lo),
            lo.next_up()
        );
        assert_eq!(random_float(&mut Replay(vec![0]), lo, hi), lo);
        let mut rng = SeededRng::new(3);
        let (t, dt) = (1_700_000_000.0, 0.001);
        for _ in 0..200_000 {
            let x = random_float(&mut rng, t, t + dt);
            assert!((t..t + dt).contains(&x), "{x}");
            let y = random_float(&mut rng, t + dt, t);
            assert!(y > t && y <= t + dt, "{y}");
        }
    }

    /// Replays fixed words, to pin down exactly how each built-in consumes the stream.
    struct Replay(Vec<u64>);

    impl RandomSource for Replay {
        fn next_u64(&mut self) -> u64 {
            self.0.remove(0)
        }
    }

    #[test]
    fn zero_seed_is_the_chacha20_zero_key_test_vector() {
        // ChaCha20 with an all-zero key and nonce, block 0, begins with the keystream bytes
        // 76 b8 e0 ad a0 f1 3d 90 (RFC 7539 §A.1, test vector #1).
        let mut rng = SeededRng::new(0);
        assert_eq!(
            rng.next_u64(),
            u64::from_le_bytes([0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90])
        );
    }

    #[test]
    fn same_seed_same_words() {
        let mut a = SeededRng::new(42);
        let mut b = SeededRng::new(42);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = SeededRng::new(43);
        assert_ne!(xs[0], c.next_u64());
    }

    #[test]
    fn streams_are_reproducible_and_independent() {
        let draw = |mut r: SeededRng| (0..64).map(|_| r.next_u64()).collect::<Vec<_>>();
        let a = draw(SeededRng::for_stream(7, "ratelimit-1"));
        assert_eq!(a, draw(SeededRng::for_stream(7, "ratelimit-1")));
        let b = draw(SeededRng::for_stream(7, "ratelimit-2"));
        let c = draw(SeededRng::for_stream(8, "ratelimit-1"));
        let plain = draw(SeededRng::new(7));
        for other in [&b, &c, &plain] {
            // Independent 64-bit streams share no word in practice.
            assert!(a.iter().all(|w| !other.contains(w)));
        }
    }

    #[test]
    fn randomf_refuses_infinite_and_nan_bounds_before_drawing() {
        let mut r = Replay(vec![1 << 63]);
        for (lo, hi) in [
            (0.0, f64::INFINITY),
            (f64::NEG_INFINITY, 0.0),
            (f64::NAN, 1.0),
            (0.0, f64::NAN),
        ] {
            let e = randomf(&mut r, lo, hi).expect_err("not finite");
            assert!(matches!(e, BuiltinError::NonFiniteBound { .. }), "{e}");
        }
        // The one word is still there: no refused call drew it.
        assert_eq!(randomf(&mut r, 10.0, 20.0), Ok(15.0));
        let mut r = Replay(vec![1 << 63, 1 << 63]);
        assert_eq!(randomf(&mut r, 3.0, 3.0), Ok(3.0));
        assert_eq!(randomf(&mut r, 20.0, 10.0), Ok(15.0));
    }

    #[test]
    fn random_float_uses_the_top_53_bits() {
        let mut r = Replay(vec![0, u64::MAX, 1 << 63, (1 << 11) - 1]);
        assert_eq!(random_float(&mut r, 0.0, 1.0), 0.0);
        assert_eq!(random_float(&mut r, 0.0, 1.0), 1.0 - 2f64.powi(-53));
        assert_eq!(random_float(&mut r, 10.0, 20.0), 15.0);
        // The low 11 bits are discarded.
        assert_eq!(random_float(&mut r, 0.0, 1.0), 0.0);
    }

    #[test]
    fn random_float_stays_in_range() {
        let mut rng = SeededRng::new(1);
        for _ in 0..10_000 {
            let x = random_float(&mut rng, -3.0, 5.0);
            assert!((-3.0..5.0).contains(&x), "{x}");
        }
    }

    #[test]
    fn random_int_rejects_empty_ranges() {
        let mut rng = SeededRng::new(1);
        assert_eq!(
            random_int(&mut rng, 5, 5),
            Err(BuiltinError::EmptyRange { lo: 5, hi: 5 })
        );
        assert_eq!(
            random_int(&mut rng, 5, 4),
            Err(BuiltinError::EmptyRange { lo: 5, hi: 4 })
        );
    }

    #[test]
    fn random_int_stays_in_range_including_extremes() {
        let mut rng = SeededRng::new(2);
        for _ in 0..10_000 {
            let x = random_int(&mut rng, -7, 3).unwrap();
            assert!((-7..3).contains(&x));
        }
        assert_eq!(random_int(&mut rng, 9, 10).unwrap(), 9);
        // The full i64 range has width 2^64 - 1: it must neither overflow nor panic.
        for _ in 0..100 {
            let x = random_int(&mut rng, i64::MIN, i64::MAX).unwrap();
            assert!(x < i64::MAX);
        }
        let near_top = random_int(&mut rng, i64::MAX - 2, i64::MAX).unwrap();
        assert!(near_top == i64::MAX - 2 || near_top == i64::MAX - 1);
    }

    #[test]
    fn random_int_rejects_biased_words() {
        // Width 3: 2^64 mod 3 == 1, so only a low half of 0 is rejected. Word 0 gives
        // product 0 (low half 0 < 1: rejected); the next word u64::MAX gives 3*(2^64-1), whose
        // high half is 2.
        let mut r = Replay(vec![0, u64::MAX]);
        assert_eq!(random_int(&mut r, 0, 3).unwrap(), 2);
        assert!(r.0.is_empty());
        // Width 1 never rejects and always gives lo.
        let mut r = Replay(vec![0]);
        assert_eq!(random_int(&mut r, -4, -3).unwrap(), -4);
    }

    /// Pearson's chi-square over `buckets` equiprobable buckets; with 9 degrees of freedom the
    /// 99.9th percentile is 27.88, so a fixed seed that passes says the mapping is not skewed.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    #[test]
    fn random_int_is_uniform() {
        let mut rng = SeededRng::new(12345);
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[random_int(&mut rng, 100, 110).unwrap() as usize - 100] += 1;
        }
        let chi = chi_square(&counts);
        assert!(chi < 27.88, "chi-square {chi} for {counts:?}");
    }

    #[test]
    fn random_float_is_uniform() {
        let mut rng = SeededRng::new(54321);
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[(random_float(&mut rng, 0.0, 10.0)) as usize] += 1;
        }
        let chi = chi_square(&counts);
        assert!(chi < 27.88, "chi-square {chi} for {counts:?}");
    }

    fn ints(xs: impl IntoIterator<Item = i64>) -> Vec<Value> {
        xs.into_iter().map(Value::Int).collect()
    }

    #[test]
    fn random_choices_picks_distinct_positions() {
        let items = ints(0..20);
        let mut rng = SeededRng::new(3);
        for n in 0..=25 {
            let picked = random_choices(&mut rng, &items, n);
            assert_eq!(picked.len(), (n as usize).min(20));
            let mut sorted = picked.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), picked.len(), "duplicate in {picked:?}");
        }
        // Equal values at different positions can both be chosen.
        let dupes = ints([1, 1, 1]);
        assert_eq!(random_choices(&mut rng, &dupes, 3), dupes);
    }

    #[test]
    fn random_choices_with_nothing_to_choose() {
        let mut r = Replay(vec![]);
        assert!(random_choices(&mut r, &ints(0..5), 0).is_empty());
        assert!(random_choices(&mut r, &ints(0..5), -3).is_empty());
        assert!(random_choices(&mut r, &[], 4).is_empty());
    }

    #[test]
    fn random_choices_is_a_partial_fisher_yates() {
        // Four items, two draws. Word u64::MAX selects the last remaining position
        // (high half of (2^64-1)*4 is 3), word 1 the first remaining one (word 0 would be
        // rejected as biased).
        let mut r = Replay(vec![u64::MAX, 1]);
        let picked = random_choices(&mut r, &ints([10, 11, 12, 13]), 2);
        // Step 0 swaps positions 0 and 3 -> [13, 11, 12, 10]; step 1 keeps position 1.
        assert_eq!(picked, ints([13, 11]));
        assert!(r.0.is_empty());
    }

    #[test]
    fn random_choices_is_deterministic_and_uniform_in_first_pick() {
        let items = ints(0..10);
        let a = random_choices(&mut SeededRng::new(9), &items, 4);
        let b = random_choices(&mut SeededRng::new(9), &items, 4);
        assert_eq!(a, b);
        let mut rng = SeededRng::new(777);
        let mut counts = [0u64; 10];
        for _ in 0..50_000 {
            let first = random_choices(&mut rng, &items, 3)[0].as_int().unwrap();
            counts[first as usize] += 1;
        }
        let chi = chi_square(&counts);
        assert!(chi < 27.88, "chi-square {chi} for {counts:?}");
    }
}
