#![allow(clippy::unwrap_used)]
//! Every standard element parses and checks on its own (parameters symbolic, no schema).

use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, render_all};
use weft_ir::parser::parse;

#[test]
fn every_standard_element_checks_without_errors_or_warnings() {
    let mut names: Vec<&str> = weft_ir::stdlib::names().collect();
    names.sort();
    assert!(names.len() >= 17, "{names:?}");
    for name in names {
        let src = SourceFile::new(
            format!("elements/{name}.weft"),
            weft_ir::stdlib::source(name).unwrap(),
        );
        let (ast, mut diags) = parse(&src);
        let (element, d) = check(
            &ast,
            &CheckEnv {
                name: name.into(),
                ..Default::default()
            },
        );
        diags.extend(d);
        assert!(diags.is_empty(), "{name}:\n{}", render_all(&src, &diags));
        assert!(element.is_some(), "{name}");
    }
}
