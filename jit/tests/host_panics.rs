#![allow(clippy::unwrap_used)]
//! A host call into the embedder's code (the clock) that panics fails the RPC: compiled code
//! calls host functions through `extern "C"`, where an unwinding panic aborts the process.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{echo_element, element_from_source, jit_instance, rpc};
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
    let mut host = Host::new(&clock, &mut records);
    weft_ir::interp::run_init(&mut inst, &e, &mut host).unwrap();
    clock.0.store(true, Ordering::Relaxed);
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let out = compiled.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        Message::request(vec![]),
        &rpc(),
        &mut host,
        &mut Default::default(),
    );
    match out.verdict {
        Verdict::Reject { code, message } => {
            assert_eq!(code, Code::Internal);
            assert!(message.contains("panicked"), "{message}");
        }
        other => panic!("the RPC went on with a broken clock: {other:?}"),
    }
}

const READS_THE_CLOCK: &str = "\
state:
    last: Instant

init():
    pass

req(rpc):
    last = current_time()
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

const WRITES_A_MAP: &str = "\
state:
    m: Map<string, int>

init():
    pass

req(rpc):
    set(m, 'k', 1)
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// A failed clock read stops the element that read it, at the read: alone, the RPC is not
/// forwarded with a made-up time; fused, the failure is not charged to the next element.
#[test]
fn a_failed_clock_read_fails_the_element_that_read_it() {
    let (a, _) = element_from_source("a", READS_THE_CLOCK);
    let (b, _) = element_from_source("b", WRITES_A_MAP);
    let clock = FailingClock(AtomicBool::new(true));
    let mut records = Vec::new();
    let mut host = Host::new(&clock, &mut records);
    for chain in [vec![a.clone()], vec![a.clone(), b.clone()]] {
        let mut ia = jit_instance(&a, "a");
        let mut ib = jit_instance(&b, "b");
        let mut instances = vec![&mut ia, &mut ib];
        instances.truncate(chain.len());
        let compiled = compile(&chain, Fusion::Fused).unwrap();
        let out = compiled.request(
            &mut Buffers::default(),
            &mut instances,
            Message::request(vec![]),
            &rpc(),
            &mut host,
            &mut Default::default(),
        );
        assert!(
            matches!(&out.verdict, Verdict::Reject { code: Code::Internal, message } if message.starts_with("a: ")),
            "{} elements: {:?}",
            chain.len(),
            out.verdict
        );
        assert_eq!(out.decided, 0);
        assert_eq!((ia.errors, ib.errors), (1, 0), "charged to the reader");
    }
}
