//! The committed C header must be exactly what cbindgen makes of src/ffi.rs today.

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/ffi.rs"))
        .generate()
        .expect("cbindgen could not read src/ffi.rs")
        .write(&mut fresh);
    let fresh = String::from_utf8(fresh).unwrap();
    let path = dir.join("include/weft.h");
    if std::env::var_os("WEFT_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "runtime/include/weft.h is stale: regenerate it with \
         WEFT_UPDATE_HEADER=1 cargo test -p weft-runtime --test header"
    );
}
