//! Bytes drive the random-program generator; the program (alone or as a fused chain of two
//! instances) runs through the reference interpreter and the Cranelift JIT on random and
//! malformed messages, and the two must agree on every verdict, response, counter, final
//! state and channel record (`weft_jit::difftest::compare_program`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft_ir::schema::MethodSchema;
use weft_ir::testgen::{Entropy, GenConfig, generate_with, test_method};
use weft_jit::difftest::compare_program;

const MAX_INPUT: usize = 8 * 1024;
const RPCS: usize = 8;

fn method() -> &'static MethodSchema {
    static M: OnceLock<MethodSchema> = OnceLock::new();
    M.get_or_init(|| test_method().expect("the test schema compiles"))
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let mut e = Entropy::from_bytes(data);
    let g = generate_with(&mut e, &GenConfig::default());
    if let Err(why) = compare_program(&g, method(), &mut e, RPCS) {
        panic!("the JIT and the interpreter differ: {why}");
    }
});
