//! Time as elements see it.
//!
//! Executors never read the system clock themselves: they ask a [`Clock`], so tests and the
//! simulator can drive time explicitly and every executor observes the same instants.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

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

/// Real monotonic time: seconds since the clock was created.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
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
        self.origin.elapsed().as_secs_f64()
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

    #[test]
    fn monotonic_clock_starts_near_zero_and_never_goes_back() {
        let clock = MonotonicClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!((0.0..60.0).contains(&a), "{a}");
        assert!(b >= a);
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
