#![allow(clippy::unwrap_used)]
//! Differential test: every scenario test of the standard library (ir/tests/scenario_*.rs)
//! runs here with its simulator calls going through the interpreter, the fused JIT and the
//! unfused JIT, which must agree exactly (outcomes, final state, counters, channel
//! records). The scenario files are included as they are; jit/build.rs adapts them.

mod differential;

mod common {
    #![allow(dead_code)]
    include!(concat!(env!("OUT_DIR"), "/common.rs"));
}

include!(concat!(env!("OUT_DIR"), "/scenarios.rs"));
