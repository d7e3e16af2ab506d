//! Time as elements see it.
//!
//! Executors never read the system clock themselves: they ask a [`Clock`], so tests and the
//! simulator can drive time explicitly and every executor observes the same instants.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of monotonic time in seconds (the language's `Instant`).
pub trait Clock: Send + Sync {
    /// Seconds since an arbitrary, fixed origin.
    fn now(&self) -> f64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> f64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> f64 {
        (**self).now()
    }
}

/// A clock that moves only when told to.
///
/// Clones share one time, so a test can keep a handle and advance the clock an executor holds.
/// The time is an `f64` stored as its bit pattern in an atomic, so reads never block a request
/// path and no lock can be poisoned.
#[derive(Clone, Debug)]
pub struct VirtualClock {
    bits: Arc<AtomicU64>,
}

impl VirtualClock {
    pub fn new(t: f64) -> Self {
        VirtualClock {
            bits: Arc::new(AtomicU64::new(t.to_bits())),
        }
    }

    /// Jumps to `t`, which may be in the past: monotonicity is the test's responsibility.
    pub fn set(&self, t: f64) {
        self.bits.store(t.to_bits(), Ordering::Release);
    }

    /// Moves time forward by `dt` seconds; concurrent advances all take effect.
    pub fn advance(&self, dt: f64) {
        // A compare-exchange loop rather than load+store, so two threads advancing at once
        // cannot lose one of the advances.
        let mut current = self.bits.load(Ordering::Acquire);
        loop {
            let next = (f64::from_bits(current) + dt).to_bits();
            match self.bits.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::new(0.0)
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Acquire))
    }
}

/// The origin of real time, 2026-01-01 00:00:00 UTC, in seconds since the UNIX epoch.
///
/// Recent rather than 1970 because an `Instant` is an `f64`: around 1.8·10⁹ s a step is
/// 0.24 µs, too coarse for the latency of an in-process RPC; counted from 2026 it is 4 ns
/// for the first year and 30 ns after eight.
pub const WEFT_EPOCH_UNIX_SECS: u64 = 1_767_225_600;

/// Real time: seconds since [`WEFT_EPOCH_UNIX_SECS`], read from the system clock once when
/// the clock is made and advanced by the monotonic clock after. So it never goes backwards
/// within a process, and processes (and restarts) agree to within their system clocks'
/// skew: an `Instant` one process keeps in shared or persistent state means the same to
/// every other. (Counted from each clock's creation, as it once was, 5 s written by one
/// replica meant "5 s after I started" to every other, whenever it started.)
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
    origin_secs: f64,
}

impl MonotonicClock {
    pub fn new() -> Self {
        let since_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or_else(
            |before| -before.duration().as_secs_f64(),
            |d| d.as_secs_f64(),
        );
        MonotonicClock {
            origin: Instant::now(),
            origin_secs: since_unix - WEFT_EPOCH_UNIX_SECS as f64,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> f64 {
        self.origin_secs + self.origin.elapsed().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_moves_only_when_told() {
        let clock = VirtualClock::new(10.0);
        assert_eq!(clock.now(), 10.0);
        assert_eq!(clock.now(), 10.0);
        clock.advance(0.5);
        assert_eq!(clock.now(), 10.5);
        clock.set(3.0);
        assert_eq!(clock.now(), 3.0);
        assert_eq!(VirtualClock::default().now(), 0.0);
    }

    #[test]
    fn virtual_clock_clones_share_one_time() {
        let clock = VirtualClock::new(0.0);
        let held_by_executor: Box<dyn Clock> = Box::new(clock.clone());
        clock.advance(2.0);
        assert_eq!(held_by_executor.now(), 2.0);
        clock.set(-1.0);
        assert_eq!(held_by_executor.now(), -1.0);
    }

    #[test]
    fn concurrent_advances_are_not_lost() {
        let clock = VirtualClock::new(0.0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = clock.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.advance(1.0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Integers up to 2^53 add exactly, so the total is exact.
        assert_eq!(clock.now(), 4000.0);
    }

    // The one test of real time: two clocks must be made apart, so it waits for real.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn real_clocks_made_apart_agree_and_never_go_back() {
        let first = MonotonicClock::new();
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Another engine (or replica, or a restart) makes its own clock later; an instant
        // either writes to shared state must mean the same to the other.
        let second = MonotonicClock::new();
        let (a, b) = (first.now(), second.now());
        assert!((a - b).abs() < 0.05, "{a} against {b}");
        // Seconds since 2026-01-01 by the system clock.
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let expected = unix.as_secs_f64() - WEFT_EPOCH_UNIX_SECS as f64;
        assert!((b - expected).abs() < 1.0, "{b} against {expected}");
        let later = first.now();
        assert!(later >= a);
    }

    #[test]
    fn clocks_work_through_arc_and_references() {
        let clock = Arc::new(VirtualClock::new(7.0));
        let shared: Arc<dyn Clock> = clock.clone();
        assert_eq!(shared.now(), 7.0);
        fn read(c: impl Clock) -> f64 {
            c.now()
        }
        assert_eq!(read(&*clock), 7.0);
    }
}
