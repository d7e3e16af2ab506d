//! Time per pass: every `current_time()` and every channel record of one pass through a
//! segment gets one instant, read from the clock once; the next pass reads it again. The
//! clock here moves by a second on every read, as a real clock moves between reads, so a
//! second read within a pass would show. Both executors, and each way compiled code is
//! entered (a direction at a time, as the runtime calls it; a whole round trip, as the
//! benchmark rig does), must see the same instants.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{echo_element, element_from_source, jit_instance, local_store, rpc};
use weft_hostcalls::channel::{ChannelRecord, ChannelSink};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::{Message, SeededRng, Value};
use weft_ir::interp::{Host, Instance, RpcScratch};
use weft_ir::ir::Element;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Compiled, Fusion, compile};

/// Seconds equal to the number of reads so far: each read moves time on by one.
#[derive(Default)]
struct MovingClock {
    reads: AtomicU64,
}

impl Clock for MovingClock {
    fn now(&self) -> f64 {
        (self.reads.fetch_add(1, Ordering::Relaxed) + 1) as f64
    }
}

/// Records the time it sees in each direction on `seen`.
const STAMP: &str = "
state:
    seen: Channel

init():
    pass

req(rpc):
    send(current_time(), seen)
    send(rpc, Down)

resp(rpc):
    send(current_time(), seen)
    send(rpc, Up)
";

/// [stamp, logging, stamp]: three readers of time per direction, and logging's records.
fn chain() -> Vec<Arc<Element>> {
    let (first, _) = element_from_source("first", STAMP);
    let (logging, _) = echo_element("logging");
    let (second, _) = element_from_source("second", STAMP);
    vec![first, logging, second]
}

fn instances(chain: &[Arc<Element>], compiled: bool) -> Vec<Instance> {
    chain
        .iter()
        .map(|e| match compiled {
            true => jit_instance(e, &e.name),
            false => Instance::new(e.name.clone(), local_store(e), Box::new(SeededRng::new(1))),
        })
        .collect()
}

/// How an RPC is run: which executor, entered how.
#[derive(Clone, Copy, Debug)]
enum Way {
    Interpreter,
    /// `Compiled::request_shared` then `Compiled::response_shared`, each with its own call.
    CompiledByDirection,
    /// `Compiled::round_trip`: both directions in one call.
    CompiledRoundTrip,
}

/// One RPC through the chain; its records and the number of clock reads.
fn run(way: Way, chain: &[Arc<Element>], compiled: &Compiled) -> (Vec<ChannelRecord>, u64) {
    let clock = MovingClock::default();
    let mut records = Vec::new();
    let mut insts = instances(chain, !matches!(way, Way::Interpreter));
    let mut insts: Vec<&mut Instance> = insts.iter_mut().collect();
    let mut host = Host::new(&clock, &mut records);
    let mut scratch = RpcScratch::default();
    let mut bufs = Buffers::default();
    let (req, resp) = (Message::request(Vec::new()), Message::response(Vec::new()));
    let n = chain.len();
    match way {
        Way::Interpreter => {
            let out = Interp.request(chain, &mut insts, req, &rpc(), &mut host, &mut scratch);
            assert_eq!(out.decided, n, "the request went through");
            Interp.response(
                chain,
                &mut insts,
                n - 1,
                resp,
                &rpc(),
                &mut host,
                &mut scratch,
            );
        }
        Way::CompiledByDirection => {
            let (req, resp) = (Arc::new(req), Arc::new(resp));
            let out = compiled.request_shared(
                &mut bufs,
                &mut insts,
                req,
                &rpc(),
                &mut host,
                &mut scratch,
            );
            assert_eq!(out.decided, n, "the request went through");
            compiled.response_shared(
                &mut bufs,
                &mut insts,
                n - 1,
                resp,
                &rpc(),
                &mut host,
                &mut scratch,
            );
        }
        Way::CompiledRoundTrip => {
            let (out, back) = compiled.round_trip(
                &mut bufs,
                &mut insts,
                Arc::new(req),
                &rpc(),
                &mut host,
                &mut scratch,
                || Arc::new(resp),
            );
            assert_eq!(out.decided, n, "the request went through");
            assert!(back.is_some(), "the response came back");
        }
    }
    (records, clock.reads.load(Ordering::Relaxed))
}

/// What a record says, comparably.
fn seen(records: &[ChannelRecord]) -> Vec<(&str, &str, u64, f64, &Value)> {
    (records.iter())
        .map(|r| {
            (
                r.element.as_str(),
                r.channel.as_str(),
                r.rpc_id,
                r.time,
                &r.value,
            )
        })
        .collect()
}

#[test]
fn each_pass_reads_the_clock_once_and_every_element_sees_that_instant() {
    let chain = chain();
    let compiled = compile(&chain, Fusion::Fused).unwrap();
    let (oracle, oracle_reads) = run(Way::Interpreter, &chain, &compiled);
    // stamp, logging, stamp down; stamp, logging, stamp up.
    assert_eq!(oracle.len(), 6, "{oracle:?}");
    let (down, up) = oracle.split_at(3);
    for r in down {
        assert_eq!(r.time, 1.0, "request pass: {r:?}");
    }
    for r in up {
        assert_eq!(r.time, 2.0, "response pass: {r:?}");
    }
    // What the stamps sent is the instant their records carry.
    for r in oracle.iter().filter(|r| &*r.channel == "seen") {
        assert_eq!(r.value, Value::Instant(r.time), "{r:?}");
    }
    assert_eq!(oracle_reads, 2, "one read per pass");

    for way in [Way::CompiledByDirection, Way::CompiledRoundTrip] {
        let (got, reads) = run(way, &chain, &compiled);
        assert_eq!(seen(&got), seen(&oracle), "{way:?} against the interpreter");
        assert_eq!(reads, 2, "{way:?}: one read per pass");
    }
}

/// A sink no one reads, as the runtime's is when no channel observer is set.
struct NoReader;

impl ChannelSink for NoReader {
    fn emit(&mut self, _: ChannelRecord) {}
    fn enabled(&self) -> bool {
        false
    }
}

#[test]
fn a_pass_that_needs_no_time_reads_no_clock() {
    // Logging alone, with no one collecting records: nothing asks for the time.
    let (logging, _) = echo_element("logging");
    let chain = vec![logging];
    let compiled = compile(&chain, Fusion::Fused).unwrap();
    for way in [
        Way::Interpreter,
        Way::CompiledByDirection,
        Way::CompiledRoundTrip,
    ] {
        let clock = MovingClock::default();
        let mut sink = NoReader;
        let mut insts = instances(&chain, !matches!(way, Way::Interpreter));
        let mut insts: Vec<&mut Instance> = insts.iter_mut().collect();
        let mut host = Host::new(&clock, &mut sink);
        let req = Message::request(Vec::new());
        match way {
            Way::Interpreter => {
                Interp.request(
                    &chain,
                    &mut insts,
                    req,
                    &rpc(),
                    &mut host,
                    &mut Default::default(),
                );
            }
            _ => {
                compiled.request(
                    &mut Buffers::default(),
                    &mut insts,
                    req,
                    &rpc(),
                    &mut host,
                    &mut Default::default(),
                );
            }
        }
        assert_eq!(clock.reads.load(Ordering::Relaxed), 0, "{way:?}");
    }
}
