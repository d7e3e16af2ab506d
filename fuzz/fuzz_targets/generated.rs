//! Bytes drive the random-program generator (each small choice reads one byte), and the
//! program runs through parse, check and the reference interpreter with messages made from
//! the remaining bytes. Every property of `weft_ir::testgen::exercise` must hold.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft_ir::schema::MethodSchema;
use weft_ir::testgen::{Entropy, GenConfig, exercise, generate_with, test_method};

/// Past this many bytes the input only replaces the fallback random stream.
const MAX_INPUT: usize = 8 * 1024;

/// Requests (each with its response) per program.
const RPCS: usize = 6;

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
    if let Err(why) = exercise(&g, method(), &mut e, RPCS) {
        panic!("{why}");
    }
});
