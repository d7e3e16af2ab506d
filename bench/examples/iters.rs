//! Runs one benchmark case N times, for counting instructions per RPC with `perf stat`
//! (instruction counts do not move with the load of a shared machine; times do):
//!
//! ```text
//! cargo build --release -p weft-bench --example iters
//! perf stat -e instructions:u target/release/examples/iters jit_fused 1000000
//! ```
//! and divide by N (the set-up is a few million instructions; compare against `... 0`).
//! A third argument `chain` runs the RPCs as the `five_chain` benchmarks do
//! (`weft_jit::rig::time_batches`: the message copies made before each batch, the records and
//! delivered messages dropped after it), so the chain's share of a profile stands apart,
//! and prints the timed part per RPC. A fourth, `system-clock`, has the elements read the
//! system clock, as a service's do, instead of the virtual one.
//!
//! `compile_ten N` compiles the ten-element chain of `compile/ten` N times (no RPCs), for
//! profiling the compiler and counting its instructions per compile.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use weft_bench::{FIVE, HandRig, counters, load_chain, request, response, ten};
use weft_jit::Fusion;
use weft_jit::rig::{Rig, ns_per_rpc, time_batches};

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "jit_fused".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let chain_only = args.next().as_deref() == Some("chain");
    let system_clock = args.next().as_deref() == Some("system-clock");
    let chain = match case.as_str() {
        "one" => counters(1),
        "eleven" => counters(11),
        "compile_ten" => ten(),
        _ => FIVE.to_owned(),
    };
    let (elements, method) = load_chain(&chain).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    let fusion = match case.as_str() {
        "interp" => None,
        "jit_unfused" => Some(Fusion::Unfused),
        _ => Some(Fusion::Fused),
    };
    match case.as_str() {
        "compile_ten" => {
            let start = std::time::Instant::now();
            for _ in 0..n {
                black_box(weft_jit::compile(&elements, Fusion::Fused).unwrap());
            }
            eprintln!(
                "{:.1} µs per compile",
                start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
            );
        }
        "hand_written" | "messages_only" => {
            let mut hand = HandRig::new(&method).unwrap();
            if system_clock {
                hand.use_system_clock();
            }
            if chain_only && case == "hand_written" {
                let timed = time_batches(&mut hand, n, |reached| assert!(reached));
                print_per_rpc(timed, n);
                return;
            }
            for _ in 0..n {
                if case == "messages_only" {
                    black_box(hand.input());
                } else {
                    assert!(hand.run());
                }
            }
        }
        _ => {
            let mut rig = Rig::new(&elements, fusion, req, resp).unwrap();
            if system_clock {
                rig.use_system_clock();
            }
            if chain_only {
                let timed = time_batches(&mut rig, n, |_| {});
                print_per_rpc(timed, n);
                return;
            }
            for _ in 0..n {
                black_box(rig.run());
            }
        }
    }
}

/// Prints the chain's time per RPC (stderr, so `perf stat` output stays apart).
fn print_per_rpc(timed: std::time::Duration, n: u64) {
    if n > 0 {
        eprintln!("{:.1} ns per RPC in the chain", ns_per_rpc(timed, n));
    }
}
