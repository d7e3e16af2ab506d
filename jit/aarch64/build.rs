//! For an aarch64 build: compiles the chain (src/chain.rs) with `weft_jit::compile_object`,
//! fused and unfused, on the build machine, and links each object into its binary
//! (src/bin/fused.rs, src/bin/unfused.rs; one each, as both export `weft_seg0_req`).
//! Beside each object it writes `<name>.rs`, the declarations of the object's functions and
//! the object's bytes (from which `Compiled::from_linked` checks the tables it recomputes
//! belong to this code), and `host_trampolines.s`, the host functions' symbols (lib.rs).
//! For any other target it does nothing: the workspace's host build and lints compile the
//! binaries to a note.

#[path = "src/chain.rs"]
mod chain;

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

use weft_jit::Fusion;
use weft_jit::host::ALL;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../..");
    println!("cargo:rerun-if-changed=src/chain.rs");
    println!("cargo:rerun-if-changed=../tests/cross_isa.yaml");
    for dir in ["elements", "examples/echo"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("aarch64") {
        return;
    }
    let target = std::env::var("TARGET").expect("cargo sets it");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));

    let config = chain::config(&root).expect("the chain's config");
    let edge = chain::edge(&config).expect("the chain loads");
    let elements = chain::elements(&edge);
    for (name, fusion, parts) in [
        ("fused", Fusion::Fused, 1),
        ("unfused", Fusion::Unfused, elements.len()),
    ] {
        let (bytes, _tables) =
            weft_jit::compile_object(&elements, &target, fusion).expect("compile_object");
        let object = out.join(format!("{name}.o"));
        fs::write(&object, bytes).expect("write the object");
        println!("cargo:rustc-link-arg-bin={name}={}", object.display());

        // Declared only for their addresses, which `Compiled::from_linked` takes under its
        // own contract; Rust never calls them.
        let mut rs = String::from("#[allow(unsafe_code)]\nunsafe extern \"C\" {\n");
        for i in 0..parts {
            writeln!(rs, "    fn weft_seg{i}_req();\n    fn weft_seg{i}_resp();")
                .expect("writing to a String");
        }
        rs += "}\n\npub const OBJECT: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/";
        rs += &format!("{name}.o\"));\n\n");
        rs += "/// `(weft_seg{i}_req, weft_seg{i}_resp)` by part.\n";
        rs += "pub fn functions() -> Vec<(*const u8, *const u8)> {\n    vec![\n";
        for i in 0..parts {
            writeln!(
                rs,
                "        (weft_seg{i}_req as *const u8, weft_seg{i}_resp as *const u8),"
            )
            .expect("writing to a String");
        }
        rs += "    ]\n}\n";
        fs::write(out.join(format!("{name}.rs")), rs).expect("write the declarations");
    }

    // `{calls}` and `{table}` are the `sym` operands of `host_trampolines!`.
    let mut asm = String::from(".text\n");
    for &f in ALL {
        let symbol = f.symbol();
        let offset = 8 * f as u32;
        write!(
            asm,
            "
.p2align 2
.globl {symbol}
.type {symbol}, %function
{symbol}:
    adrp x16, {{calls}}
    add x16, x16, :lo12:{{calls}}
    ldr x17, [x16]
    add x17, x17, #1
    str x17, [x16]
    adrp x16, {{table}}
    add x16, x16, :lo12:{{table}}
    ldr x16, [x16, #{offset}]
    br x16
.size {symbol}, . - {symbol}
"
        )
        .expect("writing to a String");
    }
    fs::write(out.join("host_trampolines.s"), asm).expect("write the trampolines");
}
