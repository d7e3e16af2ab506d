//! Runs the aarch64 object of the fused chain (one function per direction)
//! against the interpreter (see the crate's docs).

weft_jit_aarch64::linked_main!("fused", Fused);
