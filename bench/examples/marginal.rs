//! What each element of the benchmark chain costs in the fused chain, by leaving it out: the
//! chain-only time per RPC (`weft_jit::rig::time_batches`) of the five elements, then of each
//! four, and of one `count` element (the executor's fixed cost).
//!
//! ```text
//! cargo run --release -p weft-bench --example marginal
//! ```
//! Each figure is the best of 15 rounds of 102 400 RPCs; differences under about 5 ns are
//! noise on this machine.
#![allow(clippy::unwrap_used)]

use weft_bench::{FIVE, counters, load_chain, request, response};
use weft_jit::Fusion;
use weft_jit::rig::{Rig, ns_per_rpc, time_batches};

const ROUNDS: usize = 15;
const RPCS: u64 = 102_400;

/// The best chain-only nanoseconds per RPC over the rounds.
fn best_ns(items: &str) -> f64 {
    let (elements, method) = load_chain(items).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    let mut rig = Rig::new(&elements, Some(Fusion::Fused), req, resp).unwrap();
    (0..ROUNDS)
        .map(|_| ns_per_rpc(time_batches(&mut rig, RPCS, |_| {}), RPCS))
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let items: Vec<&str> = FIVE.lines().filter(|l| !l.trim().is_empty()).collect();
    let all = best_ns(FIVE);
    println!("all five              {all:6.1} ns/RPC");
    for (k, left_out) in items.iter().enumerate() {
        let rest: String = (items.iter().enumerate())
            .filter(|(i, _)| *i != k)
            .map(|(_, l)| format!("\n{l}"))
            .collect();
        let name = left_out.trim().trim_start_matches("- ");
        let name = name.split(':').next().unwrap_or(name);
        let without = best_ns(&rest);
        println!(
            "without {name:<13} {without:6.1} ns/RPC  (it costs {:5.1})",
            all - without
        );
    }
    println!("one count element     {:6.1} ns/RPC", best_ns(&counters(1)));
}
