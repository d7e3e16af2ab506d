//! Code lifetime: which version of a chain's compiled code new calls enter, and when an old
//! version's machine code may be freed.
//!
//! Each version is reference-counted and every call holds a reference from before it enters
//! the code until after it returns, so the count is the number of calls in flight (plus the
//! slot's own reference while the version is current). Publishing a new version drops the
//! slot's reference; the last call to return drops the version, and only then is its
//! `JITModule` freed. The primitives come from [`crate::sync`], so the loom model in
//! `tests/loom.rs` checks this very code. The runtime keeps its versions its own way
//! (`ArcSwap` and `Weak`s, docs/jit.md), which that model does not cover.

use crate::sync::{Arc, Mutex, lock};

/// The current version of something that calls may be running in.
pub struct VersionSlot<T> {
    current: Mutex<Arc<T>>,
}

impl<T> VersionSlot<T> {
    pub fn new(v: T) -> Self {
        VersionSlot {
            current: Mutex::new(Arc::new(v)),
        }
    }

    /// The version a new call should enter; hold it until the call returns.
    pub fn enter(&self) -> Arc<T> {
        Arc::clone(&lock(&self.current))
    }

    /// Makes `v` the version new calls enter. Calls already running keep theirs; it is freed
    /// when the last of them returns.
    pub fn publish(&self, v: T) {
        let old = std::mem::replace(&mut *lock(&self.current), Arc::new(v));
        // Dropped outside the lock: freeing code must not stall callers entering the new one.
        drop(old);
    }
}
