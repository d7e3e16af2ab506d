#![allow(clippy::unwrap_used)]
//! An RPC's scratch (`set_metadata`) travels with the RPC, not with an instance, and means
//! the same to both executors: an RPC whose request ran in one executor and whose response
//! runs in the other (a fallback to the interpreter for an instance without a state block)
//! reads what its request kept.

mod common;

use common::{echo_element, jit_instance, local_store, rpc};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::interp::{Host, Instance, RpcScratch};
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

/// The latency metrics records for one RPC whose request runs at t = 10 in `request_by` and
/// whose response runs at t = 12.5 in `response_by` (each on the other's instance too: the
/// state is one element's, whoever runs it).
fn latency(request_by: &str, response_by: &str) -> (RpcScratch, Vec<Value>) {
    let (e, _) = echo_element("metrics");
    let elements = std::slice::from_ref(&e);
    let compiled = compile(elements, Fusion::Fused).unwrap();
    let mut inst = if request_by == "jit" || response_by == "jit" {
        jit_instance(&e, "metrics")
    } else {
        Instance::new("metrics", local_store(&e), Box::new(SeededRng::new(1)))
    };
    let clock = VirtualClock::new(10.0);
    let mut records: Vec<ChannelRecord> = Vec::new();
    let mut scratch = RpcScratch::default();
    let mut bufs = Buffers::default();
    {
        let mut host = Host::new(&clock, &mut records);
        let req = Message::request(vec![]);
        let insts = &mut [&mut inst];
        let out = match request_by {
            "jit" => compiled.request(&mut bufs, insts, req, &rpc(), &mut host, &mut scratch),
            _ => Interp.request(elements, insts, req, &rpc(), &mut host, &mut scratch),
        };
        assert_eq!(out.decided, 1, "metrics forwards");
    }
    let kept = scratch.clone();
    clock.set(12.5);
    {
        let mut host = Host::new(&clock, &mut records);
        let resp = Message::response(vec![]);
        let insts = &mut [&mut inst];
        let s = &mut scratch;
        match response_by {
            "jit" => compiled.response(&mut bufs, insts, 0, resp, &rpc(), &mut host, s),
            _ => Interp.response(elements, insts, 0, resp, &rpc(), &mut host, s),
        };
    }
    let latencies = records
        .into_iter()
        .filter(|r| &*r.channel == "latency")
        .map(|r| r.value)
        .collect();
    (kept, latencies)
}

#[test]
fn a_request_kept_by_one_executor_is_read_by_the_others_response() {
    let (by_interp, _) = latency("interp", "interp");
    let (by_jit, _) = latency("jit", "jit");
    assert_eq!(by_interp, by_jit, "both keep the same scratch");
    for (req, resp) in [
        ("interp", "interp"),
        ("jit", "jit"),
        ("interp", "jit"),
        ("jit", "interp"),
    ] {
        let (_, got) = latency(req, resp);
        assert_eq!(
            got,
            [Value::Float(2.5)],
            "request in {req}, response in {resp}"
        );
    }
}
