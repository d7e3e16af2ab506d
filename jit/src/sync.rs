//! The synchronisation primitives the code-lifetime logic uses, from `std` normally and from
//! `loom` under `--cfg loom`, so the loom model checks exactly the code that runs.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::{Arc, Mutex};

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex};

/// Locks a mutex; a poisoned lock still guards consistent data here (the only writes under
/// it are single pointer swaps), so poisoning is ignored.
pub fn lock<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    #[cfg(loom)]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
