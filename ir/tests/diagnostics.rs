#![allow(clippy::unwrap_used)]
//! Diagnostic snapshots. Each `tests/diagnostics/NAME.weft` is parsed and checked the way
//! `weft check` does it (the checker runs only when parsing found no error, since a broken tree
//! would only add follow-on noise) against `shop.proto`, and `diag::render_all` must produce
//! `NAME.err` byte for byte. The method is `diag.Shop/Order` unless the first line says
//! `# method: pkg.Svc/Method`. The only normalisation is the path: diagnostics name the file
//! by its bare name, so the snapshots do not depend on where the repository lives.
//!
//! The `.err` files are written by hand; there is deliberately no mode that regenerates them
//! from the program's output.

use std::path::{Path, PathBuf};

use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, has_errors, render_all};
use weft_ir::parser::parse;
use weft_ir::schema::Schema;

const DEFAULT_METHOD: &str = "diag.Shop/Order";

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/diagnostics")
}

fn render_case(schema: &Schema, path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    let method_name = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# method:"))
        .map_or(DEFAULT_METHOD, str::trim);
    let method = schema.method(method_name).unwrap();
    let src = SourceFile::new(name, text);
    let (ast, mut diags) = parse(&src);
    if !has_errors(&diags) {
        let (_, more) = check(
            &ast,
            &CheckEnv {
                name: name.trim_end_matches(".weft").into(),
                method: Some(&method),
                params: None,
            },
        );
        diags.extend(more);
    }
    render_all(&src, &diags)
}

#[test]
fn every_case_renders_exactly_its_expected_diagnostics() {
    let dir = cases_dir();
    let schema = Schema::load(&[dir.join("shop.proto")], &[]).unwrap();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "weft"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let expected_path = case.with_extension("err");
        let Ok(expected) = std::fs::read_to_string(&expected_path) else {
            failures.push(format!("{}: no .err file", case.display()));
            continue;
        };
        let actual = render_case(&schema, case);
        if actual != expected {
            failures.push(format!(
                "{}\n--- expected\n{expected}--- actual\n{actual}---",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} snapshot(s) differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_expectation_has_its_case() {
    // A stray `.err` would be a snapshot nothing checks.
    for entry in std::fs::read_dir(cases_dir()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "err") {
            assert!(p.with_extension("weft").exists(), "{}", p.display());
        }
    }
}

/// Garbled input can make a diagnostic per token, all on one long line: the report stays a
/// screenful (the first `MAX_RENDERED`, each line cut to `MAX_LINE_WIDTH`, and a count of
/// the rest) instead of repeating the whole line for each.
#[test]
fn a_long_garbled_line_renders_a_bounded_report() {
    use weft_ir::diag::{MAX_LINE_WIDTH, MAX_RENDERED};
    // 500 000 tokens on one line: fast when each diagnostic costs its own size, while a
    // pass over the line per diagnostic (as `drop_follow_ons` once made) would not finish.
    let text = format!("req(rpc):\n    x = {}\n", "$ ".repeat(500_000));
    let src = SourceFile::new("garbled.weft", text);
    let (_, diags) = parse(&src);
    assert!(diags.len() > MAX_RENDERED, "{} diagnostics", diags.len());
    let out = render_all(&src, &diags);
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "garbled.weft: {} more not shown ({} errors)",
            diags.len() - MAX_RENDERED,
            diags.len() - MAX_RENDERED
        )
    );
    // Each shown diagnostic: a header, the cut line, the caret, maybe a hint.
    for line in out.lines() {
        assert!(line.chars().count() <= MAX_LINE_WIDTH + 200, "{line}");
    }
    assert!(out.lines().count() <= 4 * MAX_RENDERED + 1, "{out}");
}
