//! Prepares the interpreter's scenario tests (ir/tests/scenario_*.rs) for the differential
//! test in tests/scenarios.rs, which runs every scenario through both executors.
//!
//! The scenario files are written as their own test crates (`mod common;`, inner
//! attributes); here they become plain module bodies for `include!`, and the shared helper's
//! call to `simulate` is pointed at the differential runner. Each rewrite checks that its
//! pattern is still there, so a change to the scenario files fails the build loudly instead
//! of silently testing nothing.

use std::fs;
use std::path::{Path, PathBuf};

fn module_body(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("#![") && !l.starts_with("//!") && l.trim() != "mod common;")
        .map(|l| {
            if l == "use common::*;" {
                "use crate::common::*;"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn replace(text: &str, from: &str, to: &str, file: &Path) -> String {
    assert!(
        text.contains(from),
        "{}: expected `{from}` (update jit/build.rs)",
        file.display()
    );
    text.replace(from, to)
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let tests = manifest.join("../ir/tests");
    println!("cargo:rerun-if-changed=../ir/tests");

    let common_path = tests.join("common/mod.rs");
    let common = fs::read_to_string(&common_path).expect("ir/tests/common/mod.rs");
    let mut common = module_body(&common);
    common = replace(
        &common,
        "parse_trace, simulate};",
        "parse_trace};",
        &common_path,
    );
    common = replace(
        &common,
        "let report = simulate(",
        "let report = crate::differential::simulate(",
        &common_path,
    );
    common = replace(
        &common,
        "join(\"tests/protos\")",
        "join(\"../ir/tests/protos\")",
        &common_path,
    );
    fs::write(out.join("common.rs"), common).expect("write common.rs");

    let mut names = Vec::new();
    for entry in fs::read_dir(&tests).expect("ir/tests") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("scenario_") && name.ends_with(".rs") {
            let text = fs::read_to_string(&path).expect("scenario file");
            fs::write(out.join(name), module_body(&text)).expect("write scenario");
            names.push(name.trim_end_matches(".rs").to_owned());
        }
    }
    names.sort();
    let mut index = String::new();
    for n in &names {
        index.push_str(&format!(
            "mod {n} {{ include!(concat!(env!(\"OUT_DIR\"), \"/{n}.rs\")); }}\n"
        ));
    }
    fs::write(out.join("scenarios.rs"), index).expect("write index");
}
