//! The JIT's benchmarks (docs/benchmarks.md): `make bench`, or
//! `cargo bench -p weft-bench --bench chain`.
//!
//! * `five/{interp,jit_fused,jit_unfused,hand_written}` — one RPC (request down, response
//!   up) through [ratelimit, firewall, logging, metrics, fault], with what the rig does
//!   around it (copying both messages, draining the last RPC's records); `five/messages_only`
//!   is the copying alone;
//! * `five_chain/…` — the same RPCs with only the chain timed: each batch's message copies
//!   are made before it, and its records and the messages it handed on are dropped after
//!   it, as the transport and the channel reader do in a service;
//! * `five_system_clock/…` — `five_chain` with the elements reading the system clock, as
//!   in a service, instead of the virtual one;
//! * `per_element/{1,11}` — a fused chain of 1 and 11 `count` elements (the difference / 10 is
//!   the cost of one simple element);
//! * `compile/ten` — compiling a fused 10-element chain (both directions);
//! * `message_json/{direct,reflect}` — a request message written as JSON for a channel
//!   record, straight from its wire bytes and through prost-reflect.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use weft_bench::{FIVE, HandRig, counters, load_chain, request, response, ten};
use weft_jit::rig::{Rig, RunOutcome, time_batches};
use weft_jit::{Fusion, compile};

fn five(c: &mut Criterion) {
    let (elements, method) = load_chain(FIVE).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    let executors = [
        ("interp", None),
        ("jit_fused", Some(Fusion::Fused)),
        ("jit_unfused", Some(Fusion::Unfused)),
    ];
    let mut rigs: Vec<(&str, Rig)> = executors
        .into_iter()
        .map(|(name, fusion)| {
            let mut rig = Rig::new(&elements, fusion, req.clone(), resp.clone()).unwrap();
            assert_eq!(rig.run(), RunOutcome::Forwarded, "{name}");
            (name, rig)
        })
        .collect();
    let mut hand = HandRig::new(&method).unwrap();
    assert!(hand.run());

    let mut g = c.benchmark_group("five");
    for (name, rig) in &mut rigs {
        g.bench_function(*name, |b| b.iter(|| black_box(rig.run())));
    }
    g.bench_function("hand_written", |b| b.iter(|| black_box(hand.run())));
    // What every executor pays per RPC before any element runs.
    g.bench_function("messages_only", |b| b.iter(|| black_box(hand.input())));
    g.finish();

    let mut g = c.benchmark_group("five_chain");
    for (name, rig) in &mut rigs {
        g.bench_function(*name, |b| b.iter_custom(|n| time_batches(rig, n, |_| {})));
    }
    g.bench_function("hand_written", |b| {
        b.iter_custom(|n| time_batches(&mut hand, n, |_| {}))
    });
    g.finish();

    // As `five_chain`, with the elements reading the system clock as a service's do: each
    // reading is a vDSO call, and the executors read once per pass where the hand-written
    // elements, each on its own, read five times an RPC.
    let mut g = c.benchmark_group("five_system_clock");
    for (name, rig) in &mut rigs {
        rig.use_system_clock();
        g.bench_function(*name, |b| b.iter_custom(|n| time_batches(rig, n, |_| {})));
    }
    hand.use_system_clock();
    g.bench_function("hand_written", |b| {
        b.iter_custom(|n| time_batches(&mut hand, n, |_| {}))
    });
    g.finish();
}

fn per_element(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_element");
    for n in [1usize, 11] {
        let (elements, method) = load_chain(&counters(n)).unwrap();
        let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
        let mut rig = Rig::new(&elements, Some(Fusion::Fused), req, resp).unwrap();
        g.bench_function(n.to_string(), |b| b.iter(|| black_box(rig.run())));
    }
    g.finish();
}

fn compile_time(c: &mut Criterion) {
    let (elements, _) = load_chain(&ten()).unwrap();
    assert_eq!(elements.len(), 10);
    let mut g = c.benchmark_group("compile");
    g.bench_function("ten", |b| {
        b.iter(|| black_box(compile(&elements, Fusion::Fused).unwrap()))
    });
    g.finish();
}

fn message_json(c: &mut Criterion) {
    let (_, method) = load_chain(FIVE).unwrap();
    let req = request(&method).unwrap();
    let mut g = c.benchmark_group("message_json");
    let mut out = Vec::new();
    g.bench_function("direct", |b| {
        b.iter(|| {
            out.clear();
            weft_ir::wire_json::write(&method.request, black_box(&req.bytes), &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.bench_function("reflect", |b| {
        b.iter(|| {
            out.clear();
            weft_ir::wire::write_bytes_json_reflect(
                &method.request,
                black_box(&req.bytes),
                &mut out,
            )
            .unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, five, per_element, compile_time, message_json);
criterion_main!(benches);
