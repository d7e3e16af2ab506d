//! Prints the CLIF of a generated program (WEFT_JIT_DUMP=1) and the comparison result.
fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let method = weft_ir::testgen::test_method().expect("schema");
    let mut e = weft_ir::testgen::Entropy::seeded(seed);
    let g = weft_ir::testgen::generate_with(&mut e, &weft_ir::testgen::GenConfig::default());
    match weft_jit::difftest::compare_program(&g, &method, &mut e, 8) {
        Ok(c) => println!("ok {c:?}"),
        Err(why) => println!("{why}"),
    }
}
