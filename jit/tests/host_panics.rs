#![allow(clippy::unwrap_used)]
//! A host call into the embedder's code (the clock) that panics fails the RPC: compiled code
//! calls host functions through `extern "C"`, where an unwinding panic aborts the process.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use weft_hostcalls::clock::Clock;
use weft_hostcalls::state::{LocalStore, StateStore, VarSpec};
use weft_hostcalls::{Code, Message, SeededRng};
use weft_ir::config::Config;
use weft_ir::interp::{Host, Instance, RpcInfo, Verdict};
use weft_ir::load::load_edge;
use weft_jit::{Buffers, Fusion, block_store, compile};

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
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = "protos: [echo.proto]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:\n      - ratelimit\n";
    let config = Config::parse("x.yaml", &dir, yaml).unwrap();
    let edge = load_edge(&config, "a->b").unwrap();
    let method = edge.methods[0].clone();
    let e = edge.elements[0].ir[&method.full_name].clone();
    let specs: Vec<VarSpec> = e
        .state
        .iter()
        .map(|v| VarSpec::new(v.name.clone(), v.kind, v.value_type().zero_value()))
        .collect();
    let store: Box<dyn StateStore + Send> = Box::new(LocalStore::new(&specs));
    let mut inst = Instance::new("rl", block_store(&e, store), Box::new(SeededRng::new(1)));
    let clock = FailingClock(AtomicBool::new(false));
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    weft_ir::interp::run_init(&mut inst, &e, &mut host).unwrap();
    clock.0.store(true, Ordering::Relaxed);
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let rpc = RpcInfo {
        id: 1,
        method: String::new(),
        src: "a".into(),
        service: "b".into(),
        routed: None,
    };
    let out = compiled.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        Message::request(vec![]),
        &rpc,
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
