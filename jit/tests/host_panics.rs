#![allow(clippy::unwrap_used)]
//! A host call into the embedder's code (the clock) that panics fails the RPC: compiled code
//! calls host functions through `extern "C"`, where an unwinding panic aborts the process.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{echo_element, jit_instance, rpc};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::{Code, Message};
use weft_ir::interp::{Host, Verdict};
use weft_jit::{Buffers, Fusion, compile};

/// A clock that works until it is told to panic.
struct FailingClock(AtomicBool);

impl Clock for FailingClock {
    fn now(&self) -> f64 {
        assert!(!self.0.load(Ordering::Relaxed), "the clock broke");
        1.0
    }
}

#[test]
fn a_panicking_clock_fails_the_rpc_instead_of_aborting() {
    let (e, _) = echo_element("ratelimit");
    let mut inst = jit_instance(&e, "rl");
    let clock = FailingClock(AtomicBool::new(false));
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    weft_ir::interp::run_init(&mut inst, &e, &mut host).unwrap();
    clock.0.store(true, Ordering::Relaxed);
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let out = compiled.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        Message::request(vec![]),
        &rpc(),
        &mut host,
    );
    match out.verdict {
        Verdict::Reject { code, message } => {
            assert_eq!(code, Code::Internal);
            assert!(message.contains("panicked"), "{message}");
        }
        other => panic!("the RPC went on with a broken clock: {other:?}"),
    }
}
