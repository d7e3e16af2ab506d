//! Runs a trace through the interpreter and through the JIT (fused and unfused) and asserts
//! the three agree on every outcome, the final state, the counters and the channel records.
#![allow(dead_code)]

use weft_ir::load::LoadedEdge;
use weft_ir::sim::{self, SimError, SimOptions, SimReport, TraceLine};
use weft_jit::difftest::record_key;
use weft_jit::{Fusion, Jit};

/// The interpreter's report, after checking that both JIT modes produce the same one.
pub fn simulate(
    edge: &LoadedEdge,
    trace: &[TraceLine],
    opts: SimOptions,
    sync_interval: f64,
) -> Result<SimReport, SimError> {
    let oracle = sim::simulate(edge, trace, opts, sync_interval);
    for fusion in [Fusion::Fused, Fusion::Unfused] {
        let jit = Jit::new(fusion);
        let got = sim::simulate_with(edge, trace, opts, sync_interval, &jit);
        assert_eq!(jit.failures(), (0, None), "{fusion:?}: compile failures");
        match (&oracle, &got) {
            (Ok(a), Ok(b)) => assert_same(a, b, &format!("{fusion:?}")),
            (a, b) => assert_eq!(
                a.as_ref().err(),
                b.as_ref().err(),
                "{fusion:?}: simulation errors differ"
            ),
        }
    }
    oracle
}

/// Asserts two reports are identical (floats compared bit for bit).
pub fn assert_same(a: &SimReport, b: &SimReport, what: &str) {
    assert_eq!(
        a.results.len(),
        b.results.len(),
        "{what}: number of results"
    );
    for (x, y) in a.results.iter().zip(&b.results) {
        assert_eq!(x, y, "{what}: rpc {} differs", x.id);
    }
    assert_eq!(a.errors, b.errors, "{what}: error counters differ");
    assert_eq!(a.state, b.state, "{what}: final state differs");
    let ra: Vec<_> = a.channels.iter().map(record_key).collect();
    let rb: Vec<_> = b.channels.iter().map(record_key).collect();
    assert_eq!(ra, rb, "{what}: channel records differ");
}
