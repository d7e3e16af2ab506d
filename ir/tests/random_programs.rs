#![allow(clippy::unwrap_used)]
//! Random well-typed programs through the whole front end and the reference interpreter.
//!
//! For each seed: generate → print → parse (no diagnostics) → print again (same text) →
//! check against the test schema (no errors: the generator is type-directed, so a rejection
//! is a bug in the generator or the checker) → run `init`, then random requests and responses
//! (random field values, sometimes garbage bytes) on two instances sharing state, with no
//! panic, no internal type error and no store error, every run-time error rejecting with
//! INTERNAL and every malformed message with INVALID_ARGUMENT. See `weft_ir::testgen::exercise`.
//!
//! `WEFT_GEN_CASES=N` runs N cases instead of the default 300.

use std::sync::OnceLock;

use proptest::prelude::*;
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, render_all};
use weft_ir::parser::parse;
use weft_ir::schema::MethodSchema;
use weft_ir::testgen::{Entropy, GenConfig, exercise, generate, generate_with, test_method};

fn method() -> &'static MethodSchema {
    static M: OnceLock<MethodSchema> = OnceLock::new();
    M.get_or_init(|| test_method().expect("the test schema compiles"))
}

fn cases() -> u32 {
    std::env::var("WEFT_GEN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// RPCs per program: enough to carry state from one request to the next.
const RPCS: usize = 8;

fn run(seed: u64) -> Result<(), TestCaseError> {
    let g = generate(seed);
    let mut e = Entropy::seeded(seed ^ 0x5eed);
    match exercise(&g, method(), &mut e, RPCS) {
        Ok(_) => Ok(()),
        Err(why) => Err(TestCaseError::fail(format!("seed {seed}: {why}"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // The seed is the whole input; shrinking it means nothing.
        max_shrink_iters: 0,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_programs_check_and_run(seed in any::<u64>()) {
        run(seed)?;
    }
}

/// A fixed band of seeds, so a plain `cargo test` always covers the same programs as well.
#[test]
fn fixed_seeds() {
    for seed in 0..100 {
        if let Err(e) = run(seed) {
            panic!("{e}");
        }
    }
}

/// Without a schema (`weft check` with no `--proto`) every field is untyped, and a program that
/// checks against the schema should still check. Known gap, hence a rate rather than all:
/// an untyped value that flows into an inferred type (a local or metadata first set from
/// `get(rpc, 'count') + 8 % 0`, say) fixes that type from the other operand, so later uses
/// of the field's real type (uint, float) or `None` are reported. 23 and 26 programs of
/// the first 3 000 (`WEFT_GEN_CASES=3000`, with and without the generator's `-bin` reads),
/// so about 0.8%: the bound of 2% leaves room for the spread of 300 programs (4 of them
/// failed once the generator changed), and a new systematic failure still exceeds it.
#[test]
fn generated_programs_mostly_check_without_a_schema() {
    let n = cases() as u64;
    let mut failures = Vec::new();
    for seed in 0..n {
        let g = generate(seed);
        let file = SourceFile::new("generated.weft", g.source.clone());
        let (ast, _) = parse(&file);
        let env = CheckEnv {
            name: "gen".into(),
            method: None,
            params: Some(&g.params),
        };
        let (_, diags) = check(&ast, &env);
        let errors: Vec<_> = diags.into_iter().filter(|d| d.is_error()).collect();
        if !errors.is_empty() {
            failures.push(format!("seed {seed}:\n{}", render_all(&file, &errors)));
        }
    }
    assert!(
        failures.len() as u64 * 50 <= n,
        "{} of {n} programs fail to check without a schema:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Inputs the `generated` fuzz target found, replayed as it runs them.
#[test]
fn fuzz_findings() {
    // A read-modify-write whose key was a read-modify-write of the same map, 64 levels deep
    // (every choice byte 5): past the parser's nesting limit (2026-11-23).
    let mut rmw_in_key = vec![0x26, 0x03];
    rmw_in_key.extend([0x05; 141]);
    rmw_in_key.push(0x23);
    // A lambda returning `<bytes, Instant>` in `init`, where the only such value is a
    // state variable: the generator built the pair from parts and put an int where the
    // bytes go (2026-11-23).
    let pair_without_bytes: &[u8] = &[
        2, 116, 115, 0, 32, 0, 103, 56, 222, 2, 116, 115, 0, 32, 0, 103, 48, 222, 111, 111, 111,
        111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111,
        111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111, 111,
        33, 111, 36,
    ];
    // A header name inside a string expression, itself a `get_rpc_header` whose name was
    // another, 64 levels deep: each name started a fresh depth budget (2026-11-23).
    let nested_header_names = include_bytes!("fuzz_findings/header_name_nesting.bin");
    let findings: [&[u8]; 3] = [&rmw_in_key, pair_without_bytes, nested_header_names];
    for input in findings {
        let mut e = Entropy::from_bytes(input);
        let g = generate_with(&mut e, &GenConfig::default());
        if let Err(why) = exercise(&g, method(), &mut e, 6) {
            panic!("{input:?}: {why}");
        }
    }
}

/// Bigger programs than the default, fewer of them.
#[test]
fn larger_programs() {
    let cfg = GenConfig {
        max_block_depth: 4,
        max_expr_depth: 4,
        max_block_len: 4,
        max_top_len: 10,
        max_state: 12,
        max_params: 6,
    };
    for seed in 0..30u64 {
        let mut e = Entropy::seeded(seed.wrapping_mul(0x9E37_79B9));
        let g = generate_with(&mut e, &cfg);
        if let Err(why) = exercise(&g, method(), &mut e, RPCS) {
            panic!("seed {seed}: {why}");
        }
    }
}

/// The generator reaches the constructs it claims to cover (a guard against a generator that
/// silently stops producing some of them).
#[test]
fn generated_programs_cover_the_grammar() {
    let mut all = String::new();
    for seed in 0..300 {
        all.push_str(&generate(seed).source);
    }
    for needle in [
        "@consistency(weak)",
        "@consistency(strong)",
        "@combiner(sum)",
        "@combiner(max)",
        "@persistence(true)",
        ": Channel",
        "Map<",
        "Vec<",
        "init(",
        " = ",
        "match ",
        "Some(",
        "None =>",
        "_ =>",
        "if ",
        "elif ",
        "else:",
        "foreach(",
        "lambda(",
        "return ",
        "set(",
        "delete(",
        "set_rpc_header(",
        "get_rpc_header(",
        "set_metadata(",
        "get_metadata(",
        "send(err(",
        ", Down)",
        ", Up)",
        "randomf(",
        "randomi(",
        "hash(",
        "min(",
        "max(",
        "abs(",
        "str(",
        "int(",
        "float(",
        "parse_int(",
        "encrypt(",
        "decrypt(",
        "compress(",
        "quantile(",
        "random_choices(",
        "time_diff(",
        "current_time()",
        "size(",
        "byte_size(",
        "meta_status",
        "meta_code",
        " / ",
        " % ",
        "rpc_id()",
        "dst()",
    ] {
        assert!(
            all.contains(needle),
            "no generated program contains `{needle}`"
        );
    }
}
