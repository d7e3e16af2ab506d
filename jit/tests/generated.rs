#![allow(clippy::unwrap_used)]
//! Generated programs (weft_ir::testgen) on random and malformed messages: the JIT must
//! agree with the interpreter on every verdict, response, counter, state and record. The
//! fuzz target `jit_vs_interp` runs the same comparison on fuzzer-chosen inputs.

use weft_ir::testgen::{Entropy, GenConfig, generate_with, test_method};
use weft_jit::difftest::compare_program;

#[test]
fn generated_programs_agree_with_the_interpreter() {
    let method = test_method().unwrap();
    let seeds: u64 = std::env::var("WEFT_DIFF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let (mut compared, mut limit_hits, mut bounded) = (0, 0, 0);
    for seed in 0..seeds {
        let mut e = Entropy::seeded(seed);
        let g = generate_with(&mut e, &GenConfig::default());
        bounded += usize::from(g.source.contains("@capacity("));
        match compare_program(&g, &method, &mut e, 8) {
            Ok(c) => {
                compared += usize::from(!c.skipped);
                limit_hits += c.limit_hits;
            }
            Err(why) => panic!("seed {seed}: {why}"),
        }
    }
    assert!(
        compared as u64 > seeds / 2,
        "only {compared} of {seeds} programs ran"
    );
    // Small iteration limits now and then make some loops stop part-way.
    assert!(
        seeds < 300 || limit_hits > 0,
        "no request of {compared} programs reached an iteration limit"
    );
    // Maps with a capacity evict by their own order of insertion, which both executors
    // must keep alike.
    assert!(
        seeds < 300 || bounded >= 15,
        "only {bounded} of {seeds} programs declared a map with a capacity"
    );
    println!(
        "{compared} programs; {limit_hits} requests stopped at an iteration limit; {bounded} with a bounded map"
    );
}
