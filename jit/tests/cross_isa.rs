#![allow(clippy::unwrap_used)]
//! The same lowering for another ISA: a fused chain of standard elements compiled for
//! aarch64-unknown-linux-gnu (BlueField DPU cores) through cranelift-object, every function
//! checked by Cranelift's verifier, yields a relocatable ELF object for AArch64 that exports
//! the segment functions and imports the host functions by their stable symbols.

use std::path::PathBuf;
use std::sync::Arc;

use weft_ir::config::Config;
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_jit::{Fusion, compile_object};

fn chain() -> Vec<Arc<Element>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = include_str!("cross_isa.yaml");
    let config = Config::parse("x.yaml", &dir, yaml).unwrap();
    let edge = load_edge(&config, "a->b").unwrap();
    let m = edge.methods[0].full_name.clone();
    edge.elements.iter().map(|e| e.ir[&m].clone()).collect()
}

#[test]
fn aarch64_object_is_produced_and_verified() {
    let elements = chain();
    for fusion in [Fusion::Fused, Fusion::Unfused] {
        let (bytes, _tables) =
            compile_object(&elements, "aarch64-unknown-linux-gnu", fusion).unwrap();
        // ELF, 64-bit, little-endian, relocatable (ET_REL = 1), machine AArch64 (183).
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(bytes[4], 2, "ELFCLASS64");
        assert_eq!(bytes[5], 1, "little-endian");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 1, "ET_REL");
        assert_eq!(
            u16::from_le_bytes([bytes[18], bytes[19]]),
            183,
            "EM_AARCH64"
        );
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("weft_seg0_req") && text.contains("weft_seg0_resp"));
        assert!(
            text.contains("weft_hc_"),
            "host functions are imported by symbol"
        );
    }
}

#[test]
fn an_unknown_target_is_an_error_not_a_panic() {
    assert!(compile_object(&chain(), "no-such-target", Fusion::Fused).is_err());
}
