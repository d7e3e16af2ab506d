//! Compiles tests/c/drive.c with the system C compiler, links it against the static library
//! cargo built for this test run, and runs it on the examples/echo chain.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// target/<profile>, where cargo puts libweft_runtime.a beside the test binaries' `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

#[test]
fn c_program_drives_the_echo_chain() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = target_dir().join("libweft_runtime.a");
    assert!(
        lib.exists(),
        "{} was not built: `cargo test` builds the runtime only as an rlib; run `cargo build --workspace --all-targets` first (make test does)",
        lib.display()
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("weft-c-drive");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/drive.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .expect("running the C compiler");
    assert!(status.success(), "{cc} failed to build tests/c/drive.c");
    let config = manifest.join("../examples/echo/weft.yaml");
    let run = Command::new(&out)
        .arg(&config)
        .env("WEFT_WATCH_MS", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the C program failed:\n{stderr}{}",
        String::from_utf8_lossy(&run.stdout)
    );
}
