//! Loom model of code lifetime (`weft_jit::lifetime`): a compiled version must never be
//! freed while a call that entered it is still running, and must be freed once the last
//! such call has returned and a newer version replaced it.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p weft-jit --release --test loom`. Without
//! `--cfg loom` the same model runs once on real threads.
#![allow(clippy::unwrap_used)]

use weft_jit::lifetime::VersionSlot;
use weft_jit::sync::{Arc, AtomicUsize, Ordering};

/// Stands for a compiled module: counts live calls in it and records a free while in use.
struct Code {
    running: Arc<AtomicUsize>,
    freed: Arc<AtomicUsize>,
    freed_while_running: Arc<AtomicUsize>,
}

impl Drop for Code {
    fn drop(&mut self) {
        if self.running.load(Ordering::SeqCst) != 0 {
            self.freed_while_running.fetch_add(1, Ordering::SeqCst);
        }
        self.freed.fetch_add(1, Ordering::SeqCst);
    }
}

fn code(freed: &Arc<AtomicUsize>, bad: &Arc<AtomicUsize>) -> Code {
    Code {
        running: Arc::new(AtomicUsize::new(0)),
        freed: freed.clone(),
        freed_while_running: bad.clone(),
    }
}

fn call(slot: &VersionSlot<Code>) {
    let v = slot.enter();
    v.running.fetch_add(1, Ordering::SeqCst);
    // The compiled function runs here.
    v.running.fetch_sub(1, Ordering::SeqCst);
    drop(v);
}

fn model() {
    let freed = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let slot = Arc::new(VersionSlot::new(code(&freed, &bad)));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let slot = slot.clone();
            thread::spawn(move || call(&slot))
        })
        .collect();
    slot.publish(code(&freed, &bad));
    for c in callers {
        c.join().unwrap();
    }
    // The first version is gone once every call returned; the second is still current.
    assert_eq!(freed.load(Ordering::SeqCst), 1);
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "code freed while a call ran in it"
    );
    drop(slot);
    assert_eq!(freed.load(Ordering::SeqCst), 2);
}

#[cfg(loom)]
use loom::thread;
#[cfg(not(loom))]
use std::thread;

#[test]
fn versions_are_freed_after_their_last_call_returns() {
    #[cfg(loom)]
    loom::model(model);
    #[cfg(not(loom))]
    model();
}
