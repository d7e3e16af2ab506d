//! Arbitrary bytes through the front end: lex, parse, check (against the test schema and on
//! its own), render every diagnostic. Nothing may panic or hang. A file that parses cleanly
//! must also print to text that parses cleanly to the same print.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, has_errors, render_all};
use weft_ir::parser::parse;
use weft_ir::printer::print_element;
use weft_ir::schema::MethodSchema;
use weft_ir::testgen::test_method;

/// Element files are small; larger inputs only slow the fuzzer down.
const MAX_INPUT: usize = 64 * 1024;

fn method() -> &'static MethodSchema {
    static M: OnceLock<MethodSchema> = OnceLock::new();
    M.get_or_init(|| test_method().expect("the test schema compiles"))
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let file = SourceFile::new("fuzz.weft", String::from_utf8_lossy(data).into_owned());
    let (ast, diags) = parse(&file);
    let _ = render_all(&file, &diags);
    for env in [
        CheckEnv {
            name: "fuzz".into(),
            method: Some(method()),
            params: None,
        },
        CheckEnv::default(),
    ] {
        let (_, d) = check(&ast, &env);
        let _ = render_all(&file, &d);
    }
    if !has_errors(&diags) {
        let printed = print_element(&ast);
        let again = SourceFile::new("printed.weft", printed.clone());
        let (ast2, d2) = parse(&again);
        assert!(
            !has_errors(&d2),
            "the print of a clean parse does not parse:\n{}\n--- printed\n{printed}",
            render_all(&again, &d2)
        );
        let reprinted = print_element(&ast2);
        assert_eq!(reprinted, printed, "print → parse → print is not a fixed point");
    }
});
